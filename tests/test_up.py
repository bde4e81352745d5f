"""`memsift up` end to end: real `prefect server start` processes, a real `memsift up`, the Prefect CLI.

These tests never use the session's `prefect_harness` (it points this process's Prefect at another server):
each runs its own server in a subprocess with a PREFECT_HOME of its own (UI off: it only slows the start),
seeded with an already migrated database (`migrated_prefect`) except in the test of a first start, and reads
it with a Prefect client under `temporary_settings`. Waits are bounded polls on a condition. Every
process a test starts is stopped by its process id, and the test checks that none is left.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Any
from uuid import UUID

import httpx
import pytest
from conftest import MEMSIFT, Up, alive, descendants, kill_all, wait_for, wait_or_dump
from prefect.client.orchestration import SyncPrefectClient, get_client
from prefect.client.schemas.filters import (
    ArtifactFilter,
    ArtifactFilterFlowRunId,
    DeploymentFilter,
    DeploymentFilterName,
    FlowRunFilter,
    FlowRunFilterDeploymentId,
    FlowRunFilterParentFlowRunId,
)
from prefect.client.schemas.objects import FlowRun
from prefect.exceptions import ObjectNotFound
from prefect.settings import PREFECT_API_URL, temporary_settings

from api.prefect_server import PrefectServer, free_port, port_is_free, record, stop_leftover, wait_healthy
from core import MemoryIndex, MemsiftError, load_config
from flows.deployments import agent_deployments, flow_parameters
from flows.ratelimit import LIMIT_NAME
from tests.fake_provider import FakeProvider

PREFECT = MEMSIFT.parent / "prefect"
NOTES = {
    "MEMORY.md": "# Memory\n- Dana starts every morning with a flat white.\n",
    "memory/2026-11-24.md": "# 2026-11-24\n- The deploy failed with ERR_SSL_PROTOCOL on the staging proxy.\n",
    "memory/2026-11-25.md": "# 2026-11-25\n- Priya wants the proposal written down before Friday.\n",
}


# ---------------------------------------------------------------- deployments (no server)


def test_deployments_pin_the_agent_and_schedule_sync_only(workspace, make_config) -> None:
    config = make_config(workspace(NOTES), **{"sync.intervalMinutes": 30})
    sync, rebuild = agent_deployments(config)
    assert (sync.flow_name, sync.name, rebuild.flow_name, rebuild.name) == (
        "memsift-sync",
        "main",
        "memsift-rebuild",
        "main",
    )
    assert (sync.entrypoint, rebuild.entrypoint) == ("flows.sync.sync_flow", "flows.sync.rebuild_flow")
    assert sync.parameters == rebuild.parameters == flow_parameters(config)
    assert flow_parameters(config) == {"agent": "main", "workspace": str(config.workspace), "config_path": None}
    assert [s.schedule.interval for s in sync.schedules] == [timedelta(minutes=30)]
    assert rebuild.schedules == []
    assert agent_deployments(make_config(config.workspace))[0].schedules == []  # intervalMinutes 0: on demand only


def test_deployments_pin_the_config_file_by_its_absolute_path(workspace, monkeypatch: pytest.MonkeyPatch) -> None:
    """`memsift --workspace ws up`: the runs' `config_path` names the file whatever the folder of the process
    that reads it (a `memsift serve` elsewhere starting a run of up's deployment, the UI showing it); it was
    `ws/memsift.toml`. Absolute, not resolved: a ConfigMap's `..data` symlink is swapped on each update."""
    ws = workspace(NOTES | {"memsift.toml": "[sync]\nintervalMinutes = 5\n"})
    monkeypatch.chdir(ws.parent)
    parameters = flow_parameters(load_config(workspace=ws.name))
    assert parameters["config_path"] == str(ws / "memsift.toml")
    assert load_config(parameters["config_path"], workspace=parameters["workspace"]).sync.intervalMinutes == 5


# ---------------------------------------------------------------- helpers for the process tests


def _env(memsift_home: Path, prefect_home: Path | None) -> dict[str, str]:
    """This process's environment without its Prefect server and settings, with a fresh PREFECT_HOME."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "MEMSIFT_"))}
    env.update(MEMSIFT_HOME=str(memsift_home), PREFECT_SERVER_ANALYTICS_ENABLED="false", PREFECT_UI_ENABLED="false")
    if prefect_home is not None:
        env["PREFECT_HOME"] = str(prefect_home)
    return env


@pytest.fixture(scope="module")
def migrated_prefect(tmp_path_factory: pytest.TempPathFactory) -> Callable[[Path], Path]:
    """Seed a PREFECT_HOME with a database one server start has already migrated (and its block types
    registered): `seed(home)` returns `home`. A start on a fresh home spends most of its time migrating
    (115 s against 45 s for the next start on the same home, measured on 2 loaded cores); the servers these
    tests start then start as a user's second `up` does. The first start on a fresh home stays covered by
    `test_up_indexes_watches_and_stops_everything_on_ctrl_c`, which does not seed."""
    template = tmp_path_factory.mktemp("migrated-prefect")
    with PrefectServer(template, free_port(), env=_env(template, None), recorded=False) as server:
        server.wait_healthy(300)  # a deadline for the one migrating start, on a machine busier than CI's
    database = template / "migrated.db"
    with closing(sqlite3.connect(template / "prefect.db")) as live, closing(sqlite3.connect(database)) as copy:
        live.backup(copy)  # one file: the write-ahead log folded in

    def seed(home: Path) -> Path:
        home.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(database, home / "prefect.db")
        shutil.copyfile(template / "memo_store.toml", home / "memo_store.toml")  # block types: registered
        return home

    return seed


# Each poll asks the Prefect server or the REST API: a quarter second apart.
wait_for = partial(wait_for, every=0.25)


def flow_run_processes(pid: int) -> set[int]:
    """The Runner's flow-run subprocesses (`python -m prefect.engine`) below `pid`."""
    found = set()
    for child in descendants(pid):
        try:
            if b"prefect.engine" in Path(f"/proc/{child}/cmdline").read_bytes():
                found.add(child)
        except OSError:
            continue
    return found


@contextmanager
def prefect_client(api_url: str) -> Iterator[SyncPrefectClient]:
    with temporary_settings(updates={PREFECT_API_URL: api_url}), get_client(sync_client=True) as client:
        yield client


FINAL = {"COMPLETED", "FAILED", "CANCELLED", "CRASHED"}  # the states of a REST index run that has ended


def finished(client: SyncPrefectClient, run_id: UUID) -> FlowRun | None:
    run = client.read_flow_run(run_id)
    return run if run.state is not None and run.state.is_final() else None


def report_of(client: SyncPrefectClient, run: FlowRun) -> dict[str, Any]:
    """The `sync-report-main` table of a sync run: on its rebuild subflow when it rebuilt."""
    subflows = client.read_flow_runs(
        flow_run_filter=FlowRunFilter(parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[run.id]))
    )
    worker = subflows[0] if subflows else run
    found = client.read_artifacts(artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[worker.id])))
    (table,) = [a for a in found if a.key == "sync-report-main"]
    assert table.type == "table"
    rows = json.loads(table.data) if isinstance(table.data, str) else table.data
    return {"flow": worker.name.split("-")[0], **{r["metric"]: r["value"] for r in rows}}


def test_a_port_whose_last_server_closed_its_connections_is_free() -> None:
    """The connections a stopped server closed wait in TIME_WAIT; the port is free for the next server all the
    same (a restarted `up` got "--prefect-port: port P is in use", or moved off 4200)."""
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        assert not port_is_free(port)  # listening: in use
        with socket.create_connection(("127.0.0.1", port)) as client:
            accepted, _ = listener.accept()
            accepted.close()  # the server closes first: its side goes to TIME_WAIT
            assert client.recv(1) == b""
    assert port_is_free(port)


# ---------------------------------------------------------------- the process tests


def test_served_deployments_run_from_the_prefect_cli(
    tmp_path: Path, workspace, memsift_home: Path, migrated_prefect: Callable[[Path], Path]
) -> None:
    """`memsift up` against an existing server (PREFECT_API_URL): it starts no server of its own, creates the
    embedding limit, serves the deployments, and a run started with `prefect deployment run` completes and
    reports its figures."""
    toml = f"[sync]\nwatch = false\n[api]\nport = {free_port()}\n[embedding]\nrequestsPerMinute = 6000\n"
    ws = workspace(NOTES | {"memsift.toml": toml})
    env = _env(memsift_home, tmp_path / "client-prefect")
    with PrefectServer(migrated_prefect(tmp_path / "server-prefect"), free_port(), env=env) as server:
        server.wait_healthy(120)
        env["PREFECT_API_URL"] = server.api_url
        argv = ["--workspace", str(ws), "up", "--prefect-port", "4321"]
        with Up(argv, env, tmp_path / "up.log") as up, prefect_client(server.api_url) as c:
            assert (
                "--prefect-port 4321 is not used: PREFECT_API_URL names the Prefect server, so up starts none"
                in wait_for(lambda: "Ctrl-C stops everything" in up.output and up.output, 120, "memsift up to be ready")
            )
            named_main = DeploymentFilter(name=DeploymentFilterName(any_=["main"]))

            def both_deployments() -> list[Any]:
                found = c.read_deployments(deployment_filter=named_main)
                return found if len(found) == 2 else []

            deployments = wait_for(both_deployments, 90, "the two deployments")
            assert {d.entrypoint for d in deployments} == {"flows.sync.sync_flow", "flows.sync.rebuild_flow"}
            assert all(d.parameters == flow_parameters(load_config(workspace=ws)) for d in deployments)
            limit = c.read_global_concurrency_limit_by_name(LIMIT_NAME)  # the shared embedding quota
            assert (limit.limit, limit.slot_decay_per_second) == (100, 100.0)

            def initial_run() -> FlowRun | None:
                runs = c.read_flow_runs(deployment_filter=named_main)
                return next((r for r in runs if r.state and r.state.is_final()), None)

            initial = wait_for(initial_run, 120, "the initial sync run")
            assert initial.state.is_completed(), initial.state
            first = report_of(c, initial)
            # a first index: the sync run's own work, in the live file (no rebuild subflow), from scratch
            assert (first["flow"], first["added"], first["rebuilt"]) == ("sync", 3, True)

            cli = subprocess.run(
                [PREFECT, "deployment", "run", "memsift-sync/main"], capture_output=True, text=True, env=env, timeout=60
            )
            assert cli.returncode == 0, cli.stdout + cli.stderr
            run_id = UUID(re.search(r"UUID: ([0-9a-f-]{36})", cli.stdout).group(1))
            run = wait_for(lambda: finished(c, run_id), 90, "the run started with the Prefect CLI")
            assert run.state.is_completed(), run.state
            assert re.match(r"^sync-main-\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d-[0-9a-f]{4}$", run.name)
            again = report_of(c, run)
            assert (again["flow"], again["unchanged"], again["added"], again["chunksEmbedded"]) == ("sync", 3, 0, 0)

            # The run's process outlives its Completed state by ~1 s (Prefect joins its heartbeat thread); a
            # runner stopped within that window cancels the run anyway and forces Cancelled over Completed.
            wait_for(lambda: not flow_run_processes(up.process.pid), 30, "the flow run's process to exit")
            tree = descendants(up.process.pid)
            assert up.stop(signal.SIGTERM) == 0, up.output
            assert up.output.endswith("memsift up: stopped by SIGTERM\n"), up.output  # a clean stop: one line
            assert c.read_flow_run(run_id).state.is_completed()
        assert "using the Prefect server at" in up.output and "starting a Prefect server" not in up.output
        assert f"Prefect UI: {server.url}\n" in up.output
        assert alive(tree) == set()
    assert server.process.returncode is not None and alive({server.pid}) == set()


def _indexed(ws: Path) -> bool:
    """The first index is finished: its file exists from its first batch on (`status` says dirty until the end)."""
    with MemoryIndex(load_config(workspace=ws)) as memory:
        return not memory.status()["dirty"]


def test_up_indexes_watches_and_stops_everything_on_ctrl_c(tmp_path: Path, workspace, memsift_home: Path) -> None:
    """`memsift up` on its own: its server under $MEMSIFT_HOME/prefect, a searchable index, a new note found
    through the watcher, and after SIGINT no process of its tree is left, though it was started ignoring SIGINT
    as a script's background job is."""
    port, api_port = free_port(), free_port()
    ws = workspace(NOTES | {"memsift.toml": "[sync]\nwatchDebounceMs = 200\n"})
    env = _env(memsift_home, prefect_home=None)
    args = ["--workspace", str(ws), "up", "--port", str(api_port), "--prefect-port", str(port)]  # REST, Prefect
    with Up(args, env, tmp_path / "up.log", sigint_ignored=True) as up:
        index = load_config(workspace=ws).db_path
        wait_for(lambda: (index.exists() and _indexed(ws)) or up.process.poll() is not None, 120, "the first index")
        assert up.process.poll() is None, up.output
        search = subprocess.run(
            [MEMSIFT, "--workspace", str(ws), "search", "ERR_SSL_PROTOCOL", "--json"],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
        assert search.returncode == 0, search.stderr
        assert '"path": "memory/2026-11-24.md"' in search.stdout

        (ws / "memory" / "2026-11-30.md").write_text("# 2026-11-30\n- The zanzibarite sample arrived.\n")
        with MemoryIndex(load_config(workspace=ws)) as memory:
            hits = wait_for(
                lambda: memory.search("zanzibarite", mode="keyword").results, 60, "the watcher's sync of a new note"
            )
        assert hits[0].path == "memory/2026-11-30.md"

        server_pid = int(re.search(r"Prefect server on http://127\.0\.0\.1:\d+ \(pid (\d+)", up.output).group(1))
        assert f"Prefect UI: http://127.0.0.1:{port}\n" in up.output
        ui_settings = httpx.get(f"http://127.0.0.1:{port}/ui-settings", timeout=10).json()
        assert ui_settings["api_url"] == f"http://127.0.0.1:{port}/api"  # the UI talks to this server
        with prefect_client(f"http://127.0.0.1:{port}/api") as c:  # and so did `up` (not a temporary server)
            assert {f"{d.name}/{d.entrypoint}" for d in c.read_deployments()} == {
                "main/flows.sync.sync_flow",
                "main/flows.sync.rebuild_flow",
            }
        assert f"REST API: http://127.0.0.1:{api_port} (docs: http://127.0.0.1:{api_port}/docs)\n" in up.output
        assert httpx.get(f"http://127.0.0.1:{api_port}/healthz", timeout=10).status_code == 200
        # POST /v1/index goes through the deployment up's runner serves: a flow run of it, read back from Prefect
        started = httpx.post(f"http://127.0.0.1:{api_port}/v1/index", json={}, timeout=60).json()
        with prefect_client(f"http://127.0.0.1:{port}/api") as c:
            served = c.read_deployment(c.read_flow_run(UUID(started["runId"])).deployment_id)
        assert served.name == "main" and served.entrypoint == "flows.sync.sync_flow"
        run = f"http://127.0.0.1:{api_port}/v1/index/{started['runId']}"
        done = wait_for(lambda: (r := httpx.get(run, timeout=30).json())["state"] in FINAL and r, 120, "the REST run")
        assert done["state"] == "COMPLETED" and done["summary"]["added"] == 0, done  # the watcher synced it all
        assert (memsift_home / "prefect" / "server.log").is_file()  # PREFECT_HOME defaults under MEMSIFT_HOME

        # `memsift index` in another terminal, without PREFECT_API_URL, runs its flow on up's server.
        assert "PREFECT_API_URL" not in env
        index_run = subprocess.run(
            [MEMSIFT, "--workspace", str(ws), "index", "--json"], capture_output=True, text=True, env=env, timeout=120
        )
        assert index_run.returncode == 0, index_run.stderr
        with prefect_client(f"http://127.0.0.1:{port}/api") as c:
            manual = [r for r in c.read_flow_runs() if r.deployment_id is None and r.name.startswith("sync-main-")]
        assert manual and manual[0].state.is_completed()
        tree = descendants(up.process.pid)
        assert server_pid in tree
        assert up.stop(signal.SIGINT) == 0, up.output
    assert up.output.endswith(f"memsift up: stopped by SIGINT, with its Prefect server (pid {server_pid})\n")
    assert alive(tree) == set(), up.output
    assert not (memsift_home / "prefect-api-url").exists()  # the advertisement goes with the server


def test_up_refuses_before_starting_anything(tmp_path: Path, workspace, memsift_home: Path) -> None:
    """Problems `up` can see at once end it with one line and exit 1, before any server is started."""
    ws = workspace(NOTES)
    env = _env(memsift_home, prefect_home=None)
    exposed = subprocess.run(
        [MEMSIFT, "--workspace", str(ws), "up"],
        capture_output=True,
        text=True,
        env={**env, "MEMSIFT_API_HOST": "0.0.0.0"},
    )
    assert exposed.returncode == 1
    assert exposed.stderr.startswith("memsift: error: api.host 0.0.0.0: refusing to serve beyond this machine")

    free = {**env, "MEMSIFT_API_PORT": str(free_port())}  # the REST API's port when --port is not given
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        port = taken.getsockname()[1]
        rest, prefect = (
            subprocess.run(
                [MEMSIFT, "--workspace", str(ws), "up", flag, str(port)], capture_output=True, text=True, env=free
            )
            for flag in ("--port", "--prefect-port")
        )
    assert rest.returncode == 1 and prefect.returncode == 1
    assert rest.stderr == (  # the REST API's port, as memsift serve says it
        f"memsift: error: --port {port}: 127.0.0.1:{port} is in use by another process (choose another with --port "
        "or api.port)\n"
    )
    assert prefect.stderr == f"memsift: error: --prefect-port: port {port} on 127.0.0.1 is in use\n"
    assert not (memsift_home / "prefect" / "server.log").exists()


def test_a_second_up_on_a_prefect_home_in_use_leaves_the_first_ones_server_alone(
    tmp_path: Path, workspace, memsift_home: Path, migrated_prefect: Callable[[Path], Path]
) -> None:
    """Two `up`s of different MEMSIFT_HOMEs with one PREFECT_HOME (one environment for several): the second
    starts a server of its own and says so, and neither stops the first one's live server as a leftover nor
    overwrites its record. The lock and the record are held here as a running `up` holds them, the record
    naming a live process that reads as that server."""
    prefect_home = migrated_prefect(tmp_path / "shared-prefect")  # the first up's database
    env = {**_env(memsift_home, prefect_home), "MEMSIFT_API_PORT": str(free_port())}
    port = free_port()
    first = subprocess.Popen(  # the first up's server, as `stop_leftover` recognises one
        [sys.executable, "-c", "import time; time.sleep(120)", "prefect server start", "--port", str(port)],
        start_new_session=True,
    )
    held = json.dumps({"pid": first.pid, "port": port, "started": _start_time(first.pid)})
    record(prefect_home).write_text(held)
    fd = os.open(prefect_home / "memsift-up.pid", os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.write(fd, b"4242")
        with Up(["--workspace", str(workspace(NOTES)), "up"], env, tmp_path / "up.log") as up:
            wait_for(lambda: "REST API: " in up.output, 120, "the second up to serve")
            assert up.stop(signal.SIGINT) == 0, up.output
    finally:
        os.close(fd)
        first.kill()
        first.wait()
    assert (
        f"memsift up: PREFECT_HOME {prefect_home} is in use by the memsift up with pid 4242: this up starts a "
        "second Prefect server on its database (set another PREFECT_HOME to keep them apart)\n"
    ) in up.output
    assert "stopped the Prefect server a killed memsift up left running" not in up.output
    assert record(prefect_home).read_text() == held  # still the first one's


def test_a_server_that_dies_at_start_is_one_clear_error(tmp_path: Path) -> None:
    """A Prefect server that exits while `up` waits for it is a MemsiftError (the CLI prints its message as one
    line, not `ServerError: ...`), and the message carries the tail of the server's log."""
    log = tmp_path / "server.log"
    log.write_text("address already in use\n")
    dead = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    dead.wait()
    with pytest.raises(MemsiftError, match=r"exited with code 3:\naddress already in use"):
        wait_healthy(f"http://127.0.0.1:{free_port()}/api", 30, dead, log)


def _start_time(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])


def _running(pid: int) -> bool:
    """Alive and not a zombie (an orphan ended waits a moment for its new parent to reap it)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def _servers_on(port: int) -> set[int]:
    """The running `prefect server start ... --port <port>` processes, from /proc."""
    found = set()
    for entry in Path("/proc").iterdir():
        try:
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        if b"prefect server start" in command and f"--port {port} ".encode() in command and _running(int(entry.name)):
            found.add(int(entry.name))
    return found


def test_only_the_recorded_server_itself_is_stopped(tmp_path: Path) -> None:
    """The record a server leaves in its PREFECT_HOME names one process: a pid the system has given to another
    program, a process started after the recorded one, or a server on another port is left running; the
    recorded process itself is stopped, with SIGTERM to its process group, and `up` is told what was done."""
    sleep = "import time; time.sleep(120)"
    server = subprocess.Popen(
        [sys.executable, "-c", sleep, "prefect server start", "--port", "4321"], start_new_session=True
    )
    other = subprocess.Popen([sys.executable, "-c", sleep], start_new_session=True)
    try:

        def left(pid: int, started: int, port: int = 4321) -> str | None:
            record(tmp_path).write_text(json.dumps({"pid": pid, "port": port, "started": started}))
            return stop_leftover(tmp_path)

        assert left(other.pid, _start_time(other.pid)) is None  # the pid now names another program
        assert left(server.pid, _start_time(server.pid) - 1) is None  # another process than the one recorded
        assert left(server.pid, _start_time(server.pid), port=4322) is None
        assert _running(server.pid) and _running(other.pid) and not record(tmp_path).exists()
        said = left(server.pid, _start_time(server.pid))
        assert said == f"stopped the Prefect server a killed memsift up left running (pid {server.pid}, port 4321)"
        assert server.wait(10) == -signal.SIGTERM and not record(tmp_path).exists()
        assert _running(other.pid)
    finally:
        kill_all({server.pid, other.pid})
        server.wait(10), other.wait(10)


def test_up_after_a_killed_up_stops_the_server_it_left(
    tmp_path: Path, workspace, memsift_home: Path, migrated_prefect: Callable[[Path], Path]
) -> None:
    """`kill -9` of `memsift up` alone (its terminal closed hard) leaves its Prefect server running in its own
    session. The next `up` stopped nothing: it found the port in use (the default 4200 moved to another port, a
    second server on the same SQLite database; `--prefect-port P` refused). It now stops that server, says so,
    and starts its own on the same port: one server, and Ctrl-C stops it."""
    port = free_port()
    ws = workspace(NOTES | {"memsift.toml": "[sync]\nwatch = false\n"})
    env = _env(memsift_home, prefect_home=None)
    migrated_prefect(memsift_home / "prefect")  # up's own PREFECT_HOME
    args = ["--workspace", str(ws), "up", "--port", str(free_port()), "--prefect-port", str(port)]
    started = re.compile(rf"starting a Prefect server on http://127\.0\.0\.1:{port} \(pid (\d+)")
    left: set[int] = set()
    try:
        with Up(args, env, tmp_path / "up.log") as up:
            wait_for(lambda: "Prefect server ready" in up.output or up.process.poll() is not None, 180, "the server")
            old = int(started.search(up.output).group(1))
            left.add(old)
            up.process.kill()  # up alone, not its process group
            up.process.wait(30)
        assert _running(old) and port_is_free(port) is False  # the leftover server

        with Up(args, env, tmp_path / "up2.log") as up:
            wait_for(lambda: "Ctrl-C stops everything" in up.output or up.process.poll() is not None, 180, "up")
            assert up.process.poll() is None, up.output
            said = f"memsift up: stopped the Prefect server a killed memsift up left running (pid {old}, port {port})"
            assert f"{said}\n" in up.output
            assert not _running(old)
            new = int(started.search(up.output).group(1))
            left.add(new)
            assert _servers_on(port) == {new}
            assert up.api_url == f"http://127.0.0.1:{port}/api"
            assert up.stop(signal.SIGINT) == 0, up.output
        assert up.output.endswith(f"memsift up: stopped by SIGINT, with its Prefect server (pid {new})\n")
        assert not _running(new) and not record(memsift_home / "prefect").exists()
    finally:
        kill_all(left)  # a failed test leaves no server behind


# ---------------------------------------------------------------- configuration changes under a running `up`

LONG_NOTE = "# 2026-11-24\n- The deploy failed with ERR_SSL_PROTOCOL on the staging proxy.\n" + "".join(
    f"- Line {i}: the quarterly planning notes mention item number {i} and its owner.\n" for i in range(40)
)
QUERY = "ERR_SSL_PROTOCOL staging proxy deploy failed"


def deployment_runs(client: SyncPrefectClient, name: str) -> list[FlowRun]:
    """The runs of deployment `name` (none while it does not exist)."""
    try:
        deployment = client.read_deployment_by_name(name)
    except ObjectNotFound:
        return []
    return client.read_flow_runs(
        flow_run_filter=FlowRunFilter(deployment_id=FlowRunFilterDeploymentId(any_=[deployment.id]))
    )


def test_up_follows_its_configuration(
    tmp_path: Path, workspace, memsift_home: Path, migrated_prefect: Callable[[Path], Path]
) -> None:
    """Under a running `up`: a weight change is used by the next search; a syntax error leaves the settings in
    force serving, with the error in `status`; a chunking change starts a rebuild run named for it, search
    answers while it runs and its hits have the new spans after; an agent added is searchable after its first
    sync through its new deployment; an agent removed loses its deployments and its API routes."""
    port, api_port = free_port(), free_port()
    # the fused scores' arithmetic (neither reranked nor calibrated); the weights are added to [search]
    base = (
        f"[sync]\nwatchDebounceMs = 200\n[api]\nport = {api_port}\n[rerank]\nenabled = false\n"
        "[search]\ncalibrate = false\n"
    )
    ws = workspace(NOTES | {"memory/2026-11-24.md": LONG_NOTE, "memsift.toml": base})
    other = workspace({"memory/2026-11-30.md": "# 2026-11-30\n- The zanzibarite sample arrived.\n"}, name="ws2")
    api = f"http://127.0.0.1:{api_port}"
    env = _env(memsift_home, prefect_home=None)
    migrated_prefect(memsift_home / "prefect")  # up's own PREFECT_HOME

    def status(agent: str = "main") -> dict[str, Any] | None:
        r = httpx.get(f"{api}/v1/status", params={"agent": agent}, timeout=60)
        return r.json() if r.status_code == 200 else None

    def search(agent: str = "main", query: str = QUERY) -> httpx.Response:
        return httpx.post(f"{api}/v1/search", json={"query": query, "agent": agent}, timeout=60)

    def top() -> dict[str, Any]:
        return search().json()["results"][0]

    with Up(["--workspace", str(ws), "up", "--prefect-port", str(port)], env, tmp_path / "up.log") as up:
        wait_for(lambda: "Ctrl-C stops everything" in up.output or up.process.poll() is not None, 180, "up to start")
        assert up.process.poll() is None and f"following {ws / 'memsift.toml'} (and SIGHUP)" in up.output, up.output
        wait_for(lambda: (s := status()) and sum(s["chunks"].values()) and not s["dirty"], 180, "the first index")
        first = top()
        assert first["score"] == 1.0  # best in both legs: vectorWeight + textWeight (0.35 + 0.65)

        weights = base + "vectorWeight = 0.2\ntextWeight = 0.3\n"
        (ws / "memsift.toml").write_text(weights)
        wait_for(lambda: top()["score"] == 0.5, 60, "the new weights in the next search")

        (ws / "memsift.toml").write_text(weights + "[chunking\n")
        error = wait_for(lambda: httpx.get(f"{api}/readyz", timeout=60).json()["config"]["error"], 60, "the error")
        assert error.startswith(f"{ws / 'memsift.toml'}: not valid TOML")
        assert top()["score"] == 0.5  # the settings in force stay
        cli = subprocess.run(
            [MEMSIFT, "--workspace", str(ws), "status"], capture_output=True, text=True, env=env, timeout=60
        )
        assert cli.returncode == 1 and "not valid TOML" in cli.stderr

        (ws / "memsift.toml").write_text(weights + "[chunking]\ntokens = 48\noverlap = 0\n")
        with prefect_client(f"http://127.0.0.1:{port}/api") as c:
            (run,) = wait_for(lambda: deployment_runs(c, "memsift-rebuild/main"), 60, "the rebuild run")
            answers = []

            def rebuilt() -> FlowRun | None:
                answers.append(search().status_code)
                return finished(c, run.id)

            done = wait_for(rebuilt, 300, "the rebuild run to end")
        assert done.state.is_completed(), done.state
        assert re.match(r"^rebuild-main-config-change-\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d-[0-9a-f]{4}$", done.name)
        assert answers and set(answers) == {200}
        after = top()
        assert after["endLine"] - after["startLine"] < first["endLine"] - first["startLine"]  # the new, smaller chunks
        assert httpx.get(f"{api}/readyz", timeout=60).json()["config"]["error"] is None and not status()["dirty"]

        agents = weights + "[chunking]\ntokens = 48\noverlap = 0\n"
        (ws / "memsift.toml").write_text(agents + f"[agents.second]\nworkspace = '{other}'\n")
        with prefect_client(f"http://127.0.0.1:{port}/api") as c:
            (sync,) = wait_for(lambda: deployment_runs(c, "memsift-sync/second"), 60, "the new agent's first sync")
            assert wait_for(lambda: finished(c, sync.id), 180, "its end").state.is_completed()
        hits = search("second", "zanzibarite").json()["results"]
        assert [h["path"] for h in hits] == ["memory/2026-11-30.md"]

        (ws / "memsift.toml").write_text(agents)
        wait_for(lambda: search("second", "zanzibarite").status_code == 404, 60, "the removed agent's routes to go")
        with prefect_client(f"http://127.0.0.1:{port}/api") as c:
            wait_for(lambda: not any("second" in d.name for d in c.read_deployments()), 60, "its deployments to go")
            assert {d.name for d in c.read_deployments()} == {"main"}

        wait_for(lambda: not flow_run_processes(up.process.pid), 30, "the flow runs' processes to exit")
        tree = descendants(up.process.pid)
        assert up.stop(signal.SIGINT) == 0, up.output
    assert alive(tree) == set(), up.output
    assert up.output.count("not valid TOML") == 1
    assert "agent main: the index identity changed (chunking); rebuild started" in up.output
    assert "agent second removed: deployments deleted" in up.output


@contextmanager
def _two_ups_on_one_server(
    tmp_path: Path, workspace, memsift_home: Path, seed: Callable[[Path], Path]
) -> Iterator[tuple[list[str], dict[str, str], str, FakeProvider, Path]]:
    """(up's arguments, its environment, the Prefect API, the fake provider, the workspace) for `up`s that use
    one server started here (PREFECT_API_URL): an `up` with a server of its own finds the same runs in its
    database again, and a test saves a start-up. The workspace embeds with the fake provider, no watcher."""
    provider = FakeProvider()
    toml = f'[embedding]\nprovider = "openai"\nbaseUrl = "{provider.url}"\nmodel = "fake-model"\nretries = 0\n'
    ws = workspace(NOTES | {"memsift.toml": toml + "[sync]\nwatch = false\n"})
    env = _env(memsift_home, tmp_path / "client-prefect")
    args = ["--workspace", str(ws), "up", "--port", str(free_port())]
    with closing(provider), PrefectServer(seed(tmp_path / "server-prefect"), free_port(), env=env) as server:
        server.wait_healthy(120)
        env["PREFECT_API_URL"] = server.api_url
        yield args, env, server.api_url, provider, ws


def _hold_a_forced_sync(
    c: SyncPrefectClient, up: Up, provider: FakeProvider, new_note: tuple[Path, str] | None = None
) -> FlowRun:
    """After up's initial sync (and `new_note` written), a forced run of its deployment, held by the provider
    at its first embedding request."""
    initial = lambda: (r := deployment_runs(c, "memsift-sync/main")) and all(finished(c, x.id) for x in r)  # noqa: E731
    wait_for(initial, 120, "the initial sync")
    if new_note is not None:
        new_note[0].write_text(new_note[1])
    provider.hold_at = len(provider.requests) + 2  # the run's start-up probe, then an embedding
    deployment = c.read_deployment_by_name("memsift-sync/main")
    run = c.create_flow_run_from_deployment(deployment.id, parameters={"force": True})
    assert provider.held.wait(120), up.output
    return run


def test_a_restarted_up_marks_the_runs_of_a_killed_up_crashed(
    tmp_path: Path, workspace, memsift_home: Path, migrated_prefect: Callable[[Path], Path]
) -> None:
    """`kill -9` of `memsift up` and everything under it (what a machine that stops does) mid-run: no Runner is
    left to report, and the sync run and its rebuild subflow stayed Running in the UI for good. The next `up`
    marks both Crashed, saying their process is gone (each run records it: flows.sync, flows.orphans). One
    server for both `up`s (PREFECT_API_URL), as in the test below."""
    with _two_ups_on_one_server(tmp_path, workspace, memsift_home, migrated_prefect) as (args, env, api, provider, _):
        with Up(args, env, tmp_path / "up.log") as up:
            wait_for(lambda: "REST API: " in up.output or up.process.poll() is not None, 120, "up to start")
            with prefect_client(api) as c:
                run = _hold_a_forced_sync(c, up, provider)
                tree = {up.process.pid, *descendants(up.process.pid)}
                (pid,) = flow_run_processes(up.process.pid)
                kill_all(tree)
                up.process.wait(30)
                subflows = FlowRunFilter(parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[run.id]))
                (rebuild,) = c.read_flow_runs(flow_run_filter=subflows)
                left = [c.read_flow_run(run.id), rebuild]
                assert all(r.state.is_running() and r.infrastructure_pid.endswith(f":{pid}") for r in left), left
        with Up(args, env, tmp_path / "up2.log") as up:
            wait_for(lambda: "REST API: " in up.output or up.process.poll() is not None, 120, "up to start again")
            assert up.process.poll() is None, up.output
            with prefect_client(api) as c:
                marked = [c.read_flow_run(r.id) for r in left]
            for r in marked:
                assert r.state.is_crashed() and f"its process (pid {pid}) ended while it ran" in r.state.message, r
                assert f"marked the orphaned run {r.name} Crashed: its process (pid {pid})" in up.output
            assert up.stop() == 0, up.output


def test_ctrl_c_during_a_run_ends_up_with_one_line_and_0(
    tmp_path: Path, workspace, memsift_home: Path, migrated_prefect: Callable[[Path], Path]
) -> None:
    """Ctrl-C in `up`'s terminal (SIGINT to its whole process group) while a flow run's process waits on the
    provider: `up` stops it all, marks the run Cancelled, and ends with one line, exit 0. The run's process
    used to be in that group: it took the SIGINT itself and printed a KeyboardInterrupt traceback under `up`'s
    last line."""
    with _two_ups_on_one_server(tmp_path, workspace, memsift_home, migrated_prefect) as (args, env, api, provider, _):
        with Up(args, env, tmp_path / "up.log", session=True) as up:
            wait_for(lambda: "REST API: " in up.output or up.process.poll() is not None, 120, "up to start")
            with prefect_client(api) as c:
                run = _hold_a_forced_sync(c, up, provider)
                tree = {up.process.pid, *descendants(up.process.pid)}
                (pid,) = flow_run_processes(up.process.pid)
                assert os.getpgid(pid) != up.process.pid  # out of the terminal's reach: only up takes the SIGINT
                os.killpg(up.process.pid, signal.SIGINT)
                assert wait_or_dump(up.process, 120, up.log) == 0, up.output
                # the run and its rebuild subflow, Running for good before (until the next up marked them)
                subflows = FlowRunFilter(parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[run.id]))
                ended = [c.read_flow_run(run.id), *c.read_flow_runs(flow_run_filter=subflows)]
        assert alive(tree) == set(), up.output
    assert len(ended) == 2 and all(r.state.is_cancelled() for r in ended), ended
    assert "memsift up (pid" in ended[0].state.message and "stopped while it ran" in ended[0].state.message
    assert "Traceback" not in up.output and "KeyboardInterrupt" not in up.output, up.output
    assert up.output.splitlines()[-2:] == [
        "memsift up: Ctrl-C stops everything",
        f"memsift up: stopped by SIGINT; cancelled the run {ended[0].name}",
    ]


def test_a_restarted_up_marks_the_rebuild_subflow_of_a_killed_run_crashed(
    tmp_path: Path, workspace, memsift_home: Path, migrated_prefect: Callable[[Path], Path]
) -> None:
    """A forced sync's `memsift-rebuild` subflow runs in the sync run's process: once that process is SIGKILLed
    the Runner marks the sync run Crashed and nothing reported on the subflow, Running for good. The next `up`
    marks it Crashed before it starts a run (flows/orphans.py). Both `up`s use one server (PREFECT_API_URL): an
    `up` with a server of its own finds the same runs in its database again, and the test saves a start-up."""
    with _two_ups_on_one_server(tmp_path, workspace, memsift_home, migrated_prefect) as (args, env, api, provider, ws):
        with Up(args, env, tmp_path / "up.log") as up:
            wait_for(lambda: "REST API: " in up.output or up.process.poll() is not None, 120, "up to start")
            with prefect_client(api) as c:
                new_note = ws / "memory" / "2026-11-26.md", "# 2026-11-26\n- The heron pipeline shipped.\n"
                run = _hold_a_forced_sync(c, up, provider, new_note)
                (pid,) = flow_run_processes(up.process.pid)
                os.kill(pid, signal.SIGKILL)
                crashed = wait_for(lambda: finished(c, run.id), 60, "the Runner to see its run killed")
                assert crashed.state.is_crashed()
                subflows = FlowRunFilter(parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[run.id]))
                (orphan,) = c.read_flow_runs(flow_run_filter=subflows)
                assert orphan.name.startswith("rebuild-main-") and orphan.state.is_running()
            assert up.stop() == 0, up.output
        with Up(args, env, tmp_path / "up2.log") as up:
            wait_for(lambda: "REST API: " in up.output or up.process.poll() is not None, 120, "up to start again")
            assert up.process.poll() is None, up.output
            with prefect_client(api) as c:
                marked = c.read_flow_run(orphan.id)
            assert marked.state.is_crashed() and f"its parent run {crashed.name} ended Crashed" in marked.state.message
            assert f"marked the orphaned run {orphan.name} Crashed" in up.output
            assert up.stop() == 0, up.output
