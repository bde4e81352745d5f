"""End-to-end stage of `.ci/run`: memsift's deployments on a Prefect server backed by PostgreSQL, run by a worker.

Every part is real and local: a throwaway PostgreSQL 15 cluster in a temp folder (as the `postgres` user when
run as root: initdb refuses root), `prefect server start` on it, a process work pool, `prefect deploy` from
infra/prefect.yaml, `prefect worker start`, a sync and a forced rebuild of examples/workspace through
`prefect deployment run`, then `memsift serve` queried over HTTP. Each step prints its elapsed time; each wait
has a deadline; every process started here is stopped by its id on the way out (also on failure, and then
the servers' logs are printed).

    .venv/bin/python infra/e2e.py        # exit status 0 when every check passed
"""

from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run as a script from a clean clone: api/ and core/ are importable either way

from api.prefect_server import HOST, PrefectServer, free_port, wait_healthy  # noqa: E402
from core.config_home import db_path  # noqa: E402

PG_BIN = Path(os.environ.get("MEMSIFT_E2E_PG_BIN", "/usr/lib/postgresql/15/bin"))
BIN = Path(sys.executable).parent  # prefect and memsift of this virtualenv
WORKSPACE = ROOT / "examples" / "workspace"
PREFECT_YAML = ROOT / "infra" / "prefect.yaml"
POOL = "memsift"
STEP_TIMEOUT = 180.0  # any one step; the whole stage takes about a minute and a half on 2 idle cores
# The queries of `make run` and the file that must come first for each.
EXPECTED_HITS = {
    "why did the deploy fail with ERR_SSL_PROTOCOL": "memory/2026-11-24.md",
    "what does Dana drink in the morning": "MEMORY.md",
}


class StageFailed(RuntimeError):
    """A step's check failed; the message says which and why."""


class Child:
    """A long-running process in its own session, stopped by signalling its process group (its pid)."""

    def __init__(self, name: str, cmd: Sequence[str], env: dict[str, str], log: Path) -> None:
        self.name, self.log = name, log
        with open(log, "ab") as out:
            self.process = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )

    def check_alive(self) -> None:
        if self.process.poll() is not None:
            raise StageFailed(f"{self.name} exited with code {self.process.returncode}")

    def stop(self, timeout: float = 20.0) -> None:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(self.process.pid, sig)
            except ProcessLookupError:
                return
            try:
                self.process.wait(timeout=timeout)
                return
            except subprocess.TimeoutExpired:
                continue


class Stage:
    """The run: its temp folder, its environment, the processes it started, and the step clock."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.started = time.monotonic()
        self.children: list[Child | PrefectServer] = []
        self.logs: list[Path] = []
        self.pg_port = 0
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "MEMSIFT_"))}
        self.env.update(
            MEMSIFT_HOME=str(base / "memsift-home"),
            PREFECT_HOME=str(base / "prefect-home"),
            PREFECT_SERVER_ANALYTICS_ENABLED="false",
            PREFECT_CLI_PROMPT="false",
            PREFECT_WORKER_QUERY_SECONDS="1",  # the worker picks a run up within a second, not 10 s
        )

    @contextmanager
    def step(self, title: str) -> Iterator[None]:
        print(f"[e2e] {title} ...", flush=True)
        t0 = time.monotonic()
        outcome = "failed after "
        try:
            yield
            outcome = ""
        finally:
            print(f"[e2e] {title}: {outcome}{time.monotonic() - t0:.1f} s", flush=True)

    def run(self, *cmd: str | Path | int, timeout: float = STEP_TIMEOUT, env: dict[str, str] | None = None) -> str:
        """A short command; its output, or StageFailed with that output."""
        args = [str(c) for c in cmd]
        try:
            done = subprocess.run(
                args, env=env or self.env, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
            )
        except subprocess.TimeoutExpired as exc:
            raise StageFailed(f"{' '.join(args)}: no exit within {timeout:g} s\n{exc.stdout or ''}") from None
        if done.returncode != 0:
            raise StageFailed(f"{' '.join(args)} exited with {done.returncode}:\n{done.stdout}\n{done.stderr}")
        return done.stdout

    def start(self, name: str, *cmd: str | Path, env: dict[str, str] | None = None) -> Child:
        child = Child(name, [str(c) for c in cmd], env or self.env, self.base / f"{name}.log")
        self.children.append(child)
        self.logs.append(child.log)
        return child

    def stop_all(self) -> None:
        for child in reversed(self.children):
            child.stop()

    def dump_logs(self) -> None:
        for log in self.logs:
            if log.exists():
                print(f"----- {log.name} (last 4000 characters) -----\n{log.read_text(errors='replace')[-4000:]}")


def poll(what: str, check: Callable[[], bool], timeout: float, alive: Sequence[Child] = ()) -> None:
    """Call `check` until it is true; StageFailed after `timeout` s or as soon as a process in `alive` died."""
    deadline = time.monotonic() + timeout
    while not check():
        for child in alive:
            child.check_alive()
        if time.monotonic() > deadline:
            raise StageFailed(f"{what}: not within {timeout:g} s")
        time.sleep(0.25)


def as_postgres(cmd: list[str]) -> list[str]:
    """initdb and postgres refuse to run as root: CI runs as root, so they run as the `postgres` user."""
    return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else cmd


def start_postgres(stage: Stage) -> str:
    """A throwaway cluster in the stage's temp folder, on a free loopback port; its asyncpg URL."""
    pg = stage.base / "pg"
    pg.mkdir()
    if os.geteuid() == 0:
        user = pwd.getpwnam("postgres")
        os.chown(pg, user.pw_uid, user.pw_gid)
    stage.run(*as_postgres([str(PG_BIN / "initdb"), "-D", str(pg / "data"), "-U", "postgres", "--auth=trust",
                            "-E", "UTF8", "--no-sync"]))  # fmt: skip
    port = free_port()
    postgres = stage.start(
        "postgres",
        *as_postgres([str(PG_BIN / "postgres"), "-D", str(pg / "data"), "-p", str(port), "-k", str(pg),
                      "-c", f"listen_addresses={HOST}", "-c", "fsync=off"]),
    )  # fmt: skip
    ready = [str(PG_BIN / "pg_isready"), "-h", HOST, "-p", str(port), "-U", "postgres"]
    poll("PostgreSQL accepts connections", lambda: subprocess.run(ready, capture_output=True).returncode == 0,
         60, [postgres])  # fmt: skip
    stage.run(PG_BIN / "createdb", "-h", HOST, "-p", str(port), "-U", "postgres", "prefect")
    stage.pg_port = port
    return f"postgresql+asyncpg://postgres@{HOST}:{port}/prefect"


def flow_run_state(api_url: str, run_id: str) -> str:
    return httpx.get(f"{api_url}/flow_runs/{run_id}", timeout=10).json()["state"]["type"]


def run_deployment(stage: Stage, api_url: str, name: str, worker: Child, *params: str) -> str:
    """`prefect deployment run <name>`, then wait for the run to reach a final state; its id."""
    args = [f"--param={p}" for p in params]
    job_env = json.dumps({"MEMSIFT_HOME": stage.env["MEMSIFT_HOME"]})
    out = stage.run(BIN / "prefect", "deployment", "run", name, *args, f"--job-variable=env={job_env}")
    found = re.search(r"UUID:\s*([0-9a-f-]{36})", out)
    if not found:
        raise StageFailed(f"no flow run id in the output of prefect deployment run:\n{out}")
    run_id = found.group(1)
    final = ("COMPLETED", "FAILED", "CRASHED", "CANCELLED")
    states: list[str] = []

    def finished() -> bool:
        try:
            states.append(flow_run_state(api_url, run_id))
        except httpx.HTTPError:  # a busy server may miss one poll; the deadline still holds
            return False
        return states[-1] in final

    poll(f"flow run {run_id} of {name} finished", finished, STEP_TIMEOUT, [worker])
    if states[-1] != "COMPLETED":  # finished() returned True: the last state read is final
        raise StageFailed(f"flow run {run_id} of {name} ended {states[-1]}")
    return run_id


def search(api: str, query: str) -> list[str]:
    answer = httpx.post(f"{api}/v1/search", json={"query": query, "maxResults": 3}, timeout=30)
    answer.raise_for_status()
    return [hit["path"] for hit in answer.json()["results"]]


def main() -> int:
    # CI may start this as a background job, with SIGINT ignored; the children would inherit that, and the
    # Prefect worker, which answers SIGTERM by interrupting itself, then ignored it for 20 s until SIGKILL. A
    # handled signal is reset to its default in a child at exec.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    base = Path(tempfile.mkdtemp(prefix="memsift-e2e-"))
    base.chmod(0o755)  # the postgres user creates its cluster below it
    stage = Stage(base)
    try:
        with stage.step("PostgreSQL 15: initdb, start, createdb"):
            database_url = start_postgres(stage)
        with stage.step("Prefect server on PostgreSQL: start, migrate, /health"):
            server_env = dict(stage.env, PREFECT_SERVER_DATABASE_CONNECTION_URL=database_url)
            server = PrefectServer(base / "prefect-home", free_port(), env=server_env)
            stage.children.append(server)
            stage.logs.append(server.log)
            wait_healthy(server.api_url, STEP_TIMEOUT, server.process, server.log)
            stage.env["PREFECT_API_URL"] = server.api_url
        with stage.step(f"work pool {POOL!r} (process)"):
            stage.run(BIN / "prefect", "work-pool", "create", POOL, "--type", "process")
        with stage.step("prefect deploy --all --prefect-file infra/prefect.yaml"):
            stage.run(BIN / "prefect", "--no-prompt", "deploy", "--all", "--prefect-file", PREFECT_YAML)
        with stage.step("python -m flows.zombies (runs whose worker died are marked Crashed)"):
            stage.run(sys.executable, "-m", "flows.zombies")
        with stage.step("worker: prefect worker start --pool memsift"):
            worker = stage.start("worker", BIN / "prefect", "worker", "start", "--pool", POOL, "--name", "e2e")
            poll("the worker is online", lambda: _worker_online(server.api_url), 60, [worker])
        params = (f"workspace={json.dumps(str(WORKSPACE))}",)  # a path on this machine instead of /srv/agent/...
        db = db_path(Path(stage.env["MEMSIFT_HOME"]), "main", WORKSPACE.resolve())
        with stage.step("prefect deployment run memsift-sync/main, until Completed"):
            run_deployment(stage, server.api_url, "memsift-sync/main", worker, *params)
            if not db.is_file():
                raise StageFailed(f"the sync completed but wrote no index at {db}")
            first_inode = db.stat().st_ino
        with stage.step("prefect deployment run memsift-rebuild/main (forced rebuild), until Completed"):
            run_deployment(stage, server.api_url, "memsift-rebuild/main", worker, *params)
            if db.stat().st_ino == first_inode:
                raise StageFailed("the rebuild completed but did not swap a new index file in")
        with stage.step("the runs are in PostgreSQL"):
            completed = "SELECT count(*) FROM flow_run WHERE state_type = 'COMPLETED'"
            count = stage.run(PG_BIN / "psql", "-h", HOST, "-p", stage.pg_port, "-U", "postgres", "-d", "prefect",
                              "-tAc", completed)  # fmt: skip
            if int(count.strip()) < 2:
                raise StageFailed(f"PostgreSQL holds {count.strip()} completed flow runs, expected at least 2")
        with stage.step("memsift serve: /readyz, then the expected hits over HTTP"):
            port = free_port()
            api = f"http://{HOST}:{port}"
            serve = stage.start("serve", BIN / "memsift", "--workspace", WORKSPACE, "serve", "--port", str(port))
            poll("memsift serve is ready", lambda: _answers(f"{api}/readyz"), 60, [serve])
            for query, expected in EXPECTED_HITS.items():
                paths = search(api, query)
                if not paths or paths[0] != expected:
                    raise StageFailed(f"search {query!r}: expected {expected} first, got {paths}")
                print(f"[e2e]   {query!r} -> {paths[0]}", flush=True)
    except BaseException as exc:
        print(f"[e2e] FAILED: {exc}", flush=True)
        stage.dump_logs()
        print(f"[e2e] files kept in {base}", flush=True)
        return 1
    finally:
        with stage.step("stop every process by id"):
            stage.stop_all()
    shutil.rmtree(base, ignore_errors=True)
    print(f"[e2e] passed in {time.monotonic() - stage.started:.1f} s", flush=True)
    return 0


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _worker_online(api_url: str) -> bool:
    answer = httpx.post(f"{api_url}/work_pools/{POOL}/workers/filter", json={}, timeout=5)
    return answer.status_code == 200 and any(w.get("status") == "ONLINE" for w in answer.json())


if __name__ == "__main__":
    sys.exit(main())
