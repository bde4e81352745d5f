"""infra/prefect.yaml: it is what `prefect deploy` reads, its entrypoints are memsift's flows, and its parameters
are the flows' own, so a deployment made from it runs the same code with the same arguments as `memsift up`."""

from __future__ import annotations

import importlib
import inspect
import io
import itertools
import os
import shlex
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import yaml
from prefect import Flow
from prefect.cli.deploy._models import PrefectYamlModel

PREFECT_YAML = Path(__file__).resolve().parent.parent / "infra" / "prefect.yaml"


def _flow(entrypoint: str) -> Flow:
    module, _, name = entrypoint.rpartition(".")
    flow = getattr(importlib.import_module(module), name)
    assert isinstance(flow, Flow), entrypoint
    return flow


def test_prefect_yaml_deploys_the_sync_and_rebuild_flows() -> None:
    document = yaml.safe_load(PREFECT_YAML.read_text())
    model = PrefectYamlModel.model_validate(document)  # the model `prefect deploy` validates the file with
    assert model.pull == []  # module-path entrypoints: memsift is installed where the worker runs, nothing to pull

    names = set()
    for deployment in model.deployments:
        flow = _flow(deployment.entrypoint)
        names.add(f"{flow.name}/{deployment.name}")
        signature = inspect.signature(flow.fn)
        assert set(deployment.parameters) <= set(signature.parameters), deployment.entrypoint
        required = {n for n, p in signature.parameters.items() if p.default is inspect.Parameter.empty}
        assert required <= set(deployment.parameters)
        assert deployment.parameters["agent"] == "main"
        assert deployment.work_pool is not None and deployment.work_pool.name == "memsift"
        assert "MEMSIFT_HOME" in deployment.work_pool.job_variables["env"]
        if flow.name == "memsift-sync":
            assert [s.interval for s in deployment.schedules] == [timedelta(minutes=30)]
            # A redeploy keeps the grid: anchored at deploy time, each `prefect deploy` pushed the next run 30 min on.
            assert deployment.schedules[0].anchor_date is not None
        else:
            assert not deployment.schedules
    assert names == {"memsift-sync/main", "memsift-rebuild/main"}


def test_a_run_whose_worker_died_is_crashed_by_the_server() -> None:
    """A worker's machine killed mid-run left its run Running for good (nothing reports on it, a restarted
    worker does not look back), and `memsift serve`'s watcher, waiting for that run to end, started no other
    sync of the agent. Every run of these deployments sends heartbeats often enough for the automation that
    every deploy job creates (flows.zombies) to mark it Crashed once they stop, and not before."""
    from flows.zombies import zombie_automation

    env = yaml.safe_load(PREFECT_YAML.read_text())["definitions"]["work_pool"]["job_variables"]["env"]
    heartbeat = int(env["PREFECT_FLOWS_HEARTBEAT_FREQUENCY"])
    trigger = zombie_automation().trigger
    assert trigger.within.total_seconds() >= 3 * heartbeat  # a late heartbeat or two is not a dead run
    assert trigger.after == {"prefect.flow-run.heartbeat"} and "prefect.flow-run.Completed" in trigger.expect
    deploy_jobs = [argv for _, argv in _command_lines() if argv[:2] == ["prefect", "--no-prompt"]]
    zombie_jobs = [argv for _, argv in _command_lines() if argv == ["python", "-m", "flows.zombies"]]
    assert len(deploy_jobs) == len(zombie_jobs) == 2  # compose's deploy service and the k8s deploy Job


def test_the_zombie_automation_is_created_once(prefect_harness) -> None:
    """Created or updated by name: a deploy job run again (every `docker compose up`) leaves one."""
    from prefect.client.orchestration import get_client

    from flows.zombies import NAME, ensure_zombie_automation

    assert ensure_zombie_automation().startswith("created")
    assert ensure_zombie_automation(120).startswith("updated")
    with get_client(sync_client=True) as client:
        found = client.read_automations_by_name(NAME)
        assert len(found) == 1 and found[0].trigger.within.total_seconds() == 120
        client.delete_automation(found[0].id)


def test_prefect_deploy_in_a_terminal_asks_nothing(monkeypatch) -> None:
    """`prefect deploy --all --prefect-file infra/prefect.yaml` typed in a terminal (infra/README.md): for a
    deployment without a `schedules` key Prefect asks "Would you like to configure schedules for this
    deployment? (y)", and Enter gave the on-demand rebuild a schedule. Prefect's own step, as interactive."""
    from prefect.cli.deploy._schedules import _construct_schedules
    from rich.console import Console

    def asked(*args: object, **kwargs: object) -> str:
        raise AssertionError(f"prefect deploy asks: {args}")

    monkeypatch.setattr("builtins.input", asked)
    for deployment in yaml.safe_load(PREFECT_YAML.read_text())["deployments"]:
        _construct_schedules(deployment, {}, console=Console(file=io.StringIO()), is_interactive=lambda: True)


# ---------------------------------------------------------------- compose.yaml, Dockerfile, k8s/: lint
# Docker and Kubernetes do not run on the machines this is built on: these tests check what can be checked
# without them, that every command parses, every variable is a real setting, and files and ports agree.

INFRA = PREFECT_YAML.parent
ROOT = INFRA.parent
IMAGE = "memsift:0.1.0"
PINNED_IMAGES = {IMAGE, "postgres:15"}
SECRET_KEYS = {"postgres-password", "prefect-database-url", "api-key"}


def _compose() -> dict:
    return yaml.safe_load((INFRA / "compose.yaml").read_text())


def _k8s() -> list[dict]:
    return [d for path in sorted((INFRA / "k8s").glob("*.yaml")) for d in yaml.safe_load_all(path.read_text()) if d]


def _pod_specs() -> dict[str, dict]:
    return {d["metadata"]["name"]: d["spec"]["template"]["spec"] for d in _k8s() if "template" in d.get("spec", {})}


def _containers() -> list[tuple[str, dict]]:
    """(where, {command, env, ...}) for every container of compose and k8s; env as {name: value or None}."""
    found = []
    for name, service in _compose()["services"].items():
        env = {k: str(v) for k, v in (service.get("environment") or {}).items()}
        found.append((f"compose {name}", {**service, "env": env}))
    for pod, spec in _pod_specs().items():
        for c in spec["containers"]:
            env = {e["name"]: e.get("value") for e in c.get("env", [])}
            found.append((f"k8s {pod}/{c['name']}", {**c, "env": env}))
    return found


def _dockerfile() -> list[tuple[str, str]]:
    """(instruction, arguments), continuation lines joined."""
    text = (INFRA / "Dockerfile").read_text().replace("\\\n", " ")
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in lines]


def _command_lines() -> list[tuple[str, list[str]]]:
    """Every command line the files run: container commands (a `sh -c` script split at &&) and Dockerfile RUNs."""
    lines: list[tuple[str, list[str]]] = []
    for where, c in _containers():
        cmd = c.get("command")
        if not cmd:
            continue
        scripts = [cmd[2]] if cmd[:2] == ["sh", "-c"] else [shlex.join(cmd)]
        lines += [(where, shlex.split(part)) for script in scripts for part in script.split("&&")]
    for instruction, args in _dockerfile():
        if instruction == "RUN":
            lines += [("Dockerfile", shlex.split(part.split(">")[0])) for part in args.split("&&")]
    return lines


def test_every_memsift_command_parses() -> None:
    from api import arguments

    seen = set()
    for where, argv in _command_lines():
        if argv[0] != "memsift":
            continue
        try:
            args = arguments.parser().parse_args(argv[1:])
        except SystemExit:
            raise AssertionError(f"{where}: {shlex.join(argv)} is not a memsift command") from None
        seen.add((args.command, getattr(args, "model_command", None)))
    assert {("serve", None), ("model", "build")} <= seen


def test_every_prefect_command_and_option_exists() -> None:
    """`prefect <command> --help` for each command used (in parallel: each takes seconds), and every option
    used must be in its help."""
    used: dict[tuple[str, ...], set[str]] = {}
    for _, argv in _command_lines():
        if argv[0] == "prefect":
            argv = [a for a in argv if a != "--no-prompt"]  # a global option
            words = tuple(itertools.takewhile(lambda a: not a.startswith("-"), argv[1:]))
            words = words[:2] if words[0] in ("server", "worker", "work-pool") else words[:1]
            used.setdefault(words, set()).update(a.split("=")[0] for a in argv if a.startswith("--"))
    assert set(used) == {("server", "start"), ("worker", "start"), ("work-pool", "create"), ("deploy",)}
    prefect = Path(sys.executable).parent / "prefect"
    env = dict(os.environ, COLUMNS="200")
    helps = {w: subprocess.Popen([prefect, *w, "--help"], stdout=subprocess.PIPE, text=True, env=env) for w in used}
    for words, process in helps.items():
        out, _ = process.communicate(timeout=120)
        assert process.returncode == 0, words
        for option in used[words]:
            assert option in out, f"prefect {' '.join(words)} has no option {option}"


def test_every_environment_variable_is_a_setting(tmp_path: Path) -> None:
    from prefect.settings import Settings
    from prefect.settings.legacy import _get_settings_fields

    from core.config import load_config
    from core.config_env import env_overrides

    prefect_settings = set(_get_settings_fields(Settings))
    dockerfile_env = dict(kv.split("=", 1) for i, a in _dockerfile() if i == "ENV" for kv in a.split())
    job_env = yaml.safe_load(PREFECT_YAML.read_text())["definitions"]["work_pool"]["job_variables"]["env"]
    places = [("Dockerfile", dockerfile_env), ("prefect.yaml", job_env)] + [(w, c["env"]) for w, c in _containers()]
    checked = set()
    for where, env in places:
        for name in env:
            if name.startswith("PREFECT_"):
                assert name in prefect_settings, f"{where}: {name} is not a Prefect setting"
                checked.add(name)
        memsift = {k: v for k, v in env.items() if k.startswith("MEMSIFT_") and v and "${" not in v}
        config = load_config(workspace=tmp_path, env=memsift)  # ConfigError names an unknown key or a bad value
        for name, value in memsift.items():
            assert name in ("MEMSIFT_HOME", "MEMSIFT_CONFIG") or env_overrides({name: value}), f"{where}: {name}"
            checked.add(name)
        assert str(config.home) == env.get("MEMSIFT_HOME", str(config.home))
    assert {"PREFECT_API_URL", "PREFECT_SERVER_DATABASE_CONNECTION_URL", "MEMSIFT_HOME"} <= checked
    assert "MEMSIFT_SYNC_TASK_RUNNER" in checked


def test_images_files_and_volumes_exist() -> None:
    compose = _compose()
    for name, service in compose["services"].items():
        assert service["image"] in PINNED_IMAGES, name
        if "build" in service:
            assert service["image"] == IMAGE
            context = (INFRA / service["build"]["context"]).resolve()
            assert context == ROOT and (context / service["build"]["dockerfile"]).is_file()
        for mount in service.get("volumes", []):
            source = mount.split(":")[0]
            assert source in compose["volumes"] or (INFRA / source).is_dir(), f"{name}: {mount}"
    images = {c["image"] for spec in _pod_specs().values() for c in spec["containers"]}
    assert images == PINNED_IMAGES
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert f'version = "{IMAGE.split(":")[1]}"' in pyproject  # the image tag is the package version

    instructions = _dockerfile()
    assert instructions[0] == ("FROM", "python:3.11-slim-bookworm")
    for instruction, args in instructions:
        if instruction == "COPY":
            *sources, _ = args.split()
            assert all((ROOT / s).exists() for s in sources), args
    copied = {a.split()[0] for i, a in instructions if i == "COPY"}
    for where, argv in _command_lines():
        if "--prefect-file" in argv:
            prefect_file = argv[argv.index("--prefect-file") + 1]
            assert prefect_file in copied and (ROOT / prefect_file).is_file(), where


def test_ports_and_paths_agree_across_files() -> None:
    compose = _compose()
    services = compose["services"]
    expose = {int(p) for i, a in _dockerfile() if i == "EXPOSE" for p in a.split()}
    server_port = _option(services["prefect-server"]["command"], "--port")
    api_port = _option(services["api"]["command"], "--port")
    assert f"{server_port}:{server_port}" in services["prefect-server"]["ports"]
    assert f"{api_port}:{api_port}" in services["api"]["ports"]
    assert {server_port, api_port} == expose
    assert (
        services["postgres"]["environment"]["POSTGRES_DB"]
        in services["prefect-server"]["environment"]["PREFECT_SERVER_DATABASE_CONNECTION_URL"]
    )

    parameters = yaml.safe_load(PREFECT_YAML.read_text())["definitions"]["parameters"]
    home = yaml.safe_load(PREFECT_YAML.read_text())["definitions"]["work_pool"]["job_variables"]["env"]["MEMSIFT_HOME"]
    for where, c in _containers():
        url = c["env"].get("PREFECT_API_URL")
        if url:
            assert url == f"http://prefect-server:{server_port}/api", where
        command = c.get("command") or []
        if command[:1] == ["memsift"] or "worker" in command:
            assert c["env"]["MEMSIFT_HOME"] == home, where
            mounts = {_mount_path(m) for m in c.get("volumes", c.get("volumeMounts", []))}
            assert {f"{home}/memory", parameters["workspace"]} <= mounts, where
            if "serve" in command:
                assert _option(command, "--workspace") == parameters["workspace"]
                assert _option(command, "--port") == api_port

    services_k8s = {d["metadata"]["name"]: d for d in _k8s() if d["kind"] == "Service"}
    pods = {d["metadata"]["name"]: d for d in _k8s() if "template" in d.get("spec", {})}
    claims = {d["metadata"]["name"] for d in _k8s() if d["kind"] == "PersistentVolumeClaim"}
    for name, service in services_k8s.items():
        selector = service["spec"]["selector"].items()
        selected = [p for p in pods.values() if selector <= p["spec"]["template"]["metadata"]["labels"].items()]
        assert len(selected) == 1, name
        ports = {p["containerPort"] for c in selected[0]["spec"]["template"]["spec"]["containers"] for p in c["ports"]}
        assert {p["targetPort"] for p in service["spec"]["ports"]} <= ports, name
    assert services_k8s["prefect-server"]["spec"]["ports"][0]["port"] == server_port
    assert services_k8s["memsift-api"]["spec"]["ports"][0]["port"] == api_port
    for name, pod in pods.items():
        spec = pod["spec"]["template"]["spec"]
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        templates = {t["metadata"]["name"] for t in pod["spec"].get("volumeClaimTemplates", [])}
        for c in spec["containers"]:
            for mount in c.get("volumeMounts", []):
                assert mount["name"] in volumes or mount["name"] in templates, f"{name}: {mount['name']}"
            for probe in ("readinessProbe", "livenessProbe"):
                http = c.get(probe, {}).get("httpGet")
                if http:
                    assert http["port"] in {p["containerPort"] for p in c["ports"]}, f"{name} {probe}"
            for e in c.get("env", []):
                ref = e.get("valueFrom", {}).get("secretKeyRef")
                if ref:
                    assert ref["name"] == "memsift" and ref["key"] in SECRET_KEYS, f"{name}: {e['name']}"
        for volume in volumes.values():
            if "persistentVolumeClaim" in volume:
                assert volume["persistentVolumeClaim"]["claimName"] in claims, name
    readme = (INFRA / "README.md").read_text()
    assert all(f"--from-literal={key}=" in readme for key in SECRET_KEYS)  # the secret the manifests read


def _option(command: list[str], option: str) -> int | str:
    value = command[command.index(option) + 1]
    return int(value) if value.isdigit() else value


def _mount_path(mount: str | dict) -> str:
    return mount["mountPath"] if isinstance(mount, dict) else mount.split(":")[1]
