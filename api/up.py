"""`memsift up`: the embedded default, everything in one process tree (SPEC section 3).

The process starts a local Prefect server as a child (unless `PREFECT_API_URL` names one), applies every
agent's deployments, starts an initial sync of each agent through them, the file watcher and the REST API
(when `api.app` exists) and the follower of its configuration file, then serves the deployments with a Prefect
Runner in the main thread (what Prefect's `serve` does, with the Runner kept for configuration changes): it
runs each flow run in a subprocess and takes Ctrl-C there. On Ctrl-C or SIGTERM everything stops in the
reverse order of starting, the server last (its process group, by pid), so the Runner can still pause its
schedules on the way out.

Prefect reads its settings once, when it is first imported: `PREFECT_HOME` and `PREFECT_API_URL` are put
into this process's environment before that, so the watcher's thread and the Runner's subprocesses see them.
"""

from __future__ import annotations

import asyncio
import fcntl
import importlib.util
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any
from uuid import UUID

from api.prefect_server import (
    DEFAULT_PORT,
    PrefectServer,
    ServerError,
    advertisement,
    free_port,
    port_is_free,
    stop_leftover,
    wait_healthy,
)
from core import Config, ConfigError, MemsiftError, load_config
from core.config import every_agent

if TYPE_CHECKING:
    from api.agents import Agents

SERVER_START_TIMEOUT = 120.0  # a first start migrates a fresh database: ~10 s on 2 cores, more when busy
EXTERNAL_SERVER_TIMEOUT = 30.0
# Prefect's default runner poll (10 s) would delay every watcher-triggered sync by up to that much; a poll
# of the local server costs one small query. PREFECT_RUNNER_POLL_FREQUENCY still wins when set.
RUNNER_POLL_SECONDS = 2
API_START_TIMEOUT = 30.0


def agent_configs(config_path: str | None, workspace: str | None) -> dict[str, Config]:
    """`main` (its workspace from --workspace, the config or the current folder) and every `agents.<id>`,
    all validated before anything starts."""
    return every_agent(load_config(config_path, workspace=workspace))


def with_rest_port(configs: dict[str, Config], port: int | None) -> dict[str, Config]:
    """`--port P`: the REST API's port, as `memsift serve --port` sets it (over api.port). Applied to every
    configuration read, the first and each one a change reloads, so a reload never sees the port move."""
    if port is None:
        return configs
    return {name: replace(c, api=replace(c.api, port=port)) for name, c in configs.items()}


def run_up(
    configs: Mapping[str, Config],
    prefect_port: int | None,
    load: Callable[[], Mapping[str, Config]] | None = None,
    agent: str = "main",
    ready: Callable[[dict[str, str]], None] | None = None,
) -> int:
    """Run until Ctrl-C (then 130, as a shell expects of an interrupted command) or SIGTERM (0: a service
    manager's stop is a clean one), ending with one line that says so. Errors (ConfigError, ServerError) propagate
    after everything started so far has been stopped. With `load` (`configs` read again), `up` follows its
    configuration file and SIGHUP (api.config_reload, api.up_reload). `agent` (`memsift --agent ID up`)
    answers the REST requests that name no agent. `ready` (`--json`) is given the addresses once all runs."""
    if agent not in configs:  # before anything starts, as `memsift --agent ID serve` refuses it
        raise ConfigError(f"--agent: unknown agent {agent!r} (known: {', '.join(configs)})")
    main = configs["main"]
    _check_rest_api(main)
    os.environ.setdefault("PREFECT_HOME", str(main.home / "prefect"))
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    # SIGINT stops `up` even when it was started ignoring it (a script's `memsift up &`: a shell without job
    # control starts background commands with SIGINT ignored, and Python then keeps it ignored). The default
    # handler, not ours: `asyncio.run` replaces only that one with its own graceful stop of the serve loop.
    previous = {
        signal.SIGINT: signal.signal(signal.SIGINT, signal.default_int_handler),
        signal.SIGTERM: signal.signal(signal.SIGTERM, _interrupt),  # until `serve` takes SIGTERM over
    }
    stopped = Stopped()
    stopped_by = signal.SIGTERM  # the Runner returns from its loop on SIGTERM only
    try:
        with _only_up(main.home), ExitStack() as stack:
            sock = _rest_socket(main)  # bound now: a port in use is one line before a Prefect server starts
            if sock is not None:
                stack.callback(sock.close)
            ui = _prefect_server(stack, prefect_port, main.home, stopped.servers)
            _serve(configs, stack, ui, load, sock, agent, ready, stopped.runs)
    except Terminated:
        pass
    except KeyboardInterrupt:
        stopped_by = signal.SIGINT
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    _say(stopped.line(stopped_by))
    return 128 + signal.SIGINT if stopped_by == signal.SIGINT else 0


@dataclass
class Stopped:
    """What `up` stopped on its way out, for its last line: the Prefect server it started (its pid), the runs in
    progress it cancelled (their names)."""

    servers: list[int] = field(default_factory=list)
    runs: list[str] = field(default_factory=list)

    def line(self, signum: signal.Signals) -> str:
        server = "".join(f", with its Prefect server (pid {pid})" for pid in self.servers)
        runs = f"; cancelled the run{'s' * (len(self.runs) > 1)} {', '.join(self.runs)}" if self.runs else ""
        return f"stopped by {signum.name}{server}{runs}"


class AlreadyRunning(MemsiftError, RuntimeError):
    """Another `memsift up` runs on this MEMSIFT_HOME (or holds this PREFECT_HOME); the message names its pid."""


def _only_up(home: Path) -> AbstractContextManager[None]:
    """Hold an exclusive `flock` on `<home>/up.pid` for the life of this `up`, or refuse at once: a second `up`
    would start a second Prefect server on the same database and remove the first one's advertisement."""
    return _holding(
        home / "up.pid",
        lambda holder: (
            f"memsift up is already running on {home} (pid {holder}); stop it first (Ctrl-C in its terminal, "
            f"or kill {holder})"
        ),
    )


@contextmanager
def _holding(path: Path, refusal: Callable[[str], str]) -> Iterator[None]:
    """An exclusive `flock` on `path`, with this process's pid in it, until the block ends; AlreadyRunning
    (`refusal` of the holder's pid) when another process holds it. The kernel drops the lock when its holder
    dies, so a crashed `up` never blocks the next one. The file stays (unlinking a locked file would let a third
    `up` lock a fresh one beside the second)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            raise AlreadyRunning(refusal(holder)) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        yield
    finally:
        os.close(fd)


class Terminated(KeyboardInterrupt):
    """SIGTERM before the Runner takes it over: unwinds as Ctrl-C does, but ends as a clean stop."""


def _interrupt(signum: int, frame: Any) -> None:
    raise Terminated


def _say(line: str) -> None:
    # one write: print() writes the text and its newline apart, and a line from another thread landed between
    sys.stdout.write(f"memsift up: {line}\n")
    sys.stdout.flush()


def _prefect_server(stack: ExitStack, port: int | None, home: Path, servers: list[int]) -> str:
    """Start (or check) the Prefect server; its UI address. PREFECT_API_URL is set when this returns. The pid
    of a server started here goes to `servers` once it is stopped."""
    external = os.environ.get("PREFECT_API_URL")
    if external:
        wait_healthy(external, EXTERNAL_SERVER_TIMEOUT)
        _say(f"using the Prefect server at {external} (PREFECT_API_URL)")
        if port is not None:  # it was ignored without a word
            _say(f"--prefect-port {port} is not used: PREFECT_API_URL names the Prefect server, so up starts none")
        return external.rstrip("/").removesuffix("/api")
    prefect_home = Path(os.environ["PREFECT_HOME"])
    # The `up` holding a PREFECT_HOME owns the server recorded there: under that lock, a server a killed `up`
    # left running on it is stopped (api.prefect_server), whatever port it holds. Another MEMSIFT_HOME's `up` on
    # the same PREFECT_HOME (one environment for several) starts a server of its own, unrecorded, as before: its
    # runs never depend on a server the other `up` stops when it ends; it says what it shares.
    try:
        stack.enter_context(_holding(prefect_home / "memsift-up.pid", lambda pid: pid))  # its message: the pid
        owner = True
    except AlreadyRunning as holder:
        owner = False
        _say(
            f"PREFECT_HOME {prefect_home} is in use by the memsift up with pid {holder}: this up starts a second "
            "Prefect server on its database (set another PREFECT_HOME to keep them apart)"
        )
    if owner and (stopped := stop_leftover(prefect_home)) is not None:
        _say(stopped)
    if port is None:
        port = DEFAULT_PORT if port_is_free(DEFAULT_PORT) else free_port()
    elif not port_is_free(port):
        raise ConfigError(f"--prefect-port: port {port} on 127.0.0.1 is in use")
    server = PrefectServer(prefect_home, port, recorded=owner)

    def stop() -> None:
        server.stop()
        servers.append(server.pid)

    stack.callback(stop)
    _say(f"starting a Prefect server on {server.url} (pid {server.pid}, log {server.log})")
    seconds = server.wait_healthy(SERVER_START_TIMEOUT)
    _say(f"Prefect server ready in {seconds:.1f} s")
    os.environ["PREFECT_API_URL"] = server.api_url
    note = advertisement(home)  # `memsift index` in another terminal runs its flow on this server
    note.parent.mkdir(parents=True, exist_ok=True)
    note.write_text(server.api_url)
    stack.callback(note.unlink, missing_ok=True)
    return server.url


def _serve(
    configs: Mapping[str, Config],
    stack: ExitStack,
    ui: str,
    load: Callable[[], Mapping[str, Config]] | None,
    sock: socket.socket | None,
    agent: str,
    ready: Callable[[dict[str, str]], None] | None,
    cancelled: list[str],
) -> None:
    from prefect.exceptions import TerminationSignal
    from prefect.runner import Runner

    from api.up_reload import UpApply, describe, follow_up
    from core.watching import MemoryWatching
    from flows.deployments import sync_deployment_name
    from flows.orphans import crash_orphans
    from flows.ratelimit import ensure_limit
    from flows.reload import ServedDeployments, config_rebuilds
    from flows.watch import SyncRuns

    main = configs["main"]
    if main.embedding.requestsPerMinute is not None:
        limit = ensure_limit(main.embedding.requestsPerMinute)
        _say(f"embedding rate limit: limit {limit['limit']}, {limit['slotDecayPerSecond']:g} slots freed per second")

    # Prefect's `serve`, with the Runner kept: a configuration change adds or removes deployments while it runs.
    unfinished = _isolate_flow_runs(stack)
    kwargs = {} if os.environ.get("PREFECT_RUNNER_POLL_FREQUENCY") else {"query_seconds": RUNNER_POLL_SECONDS}
    runner = Runner(**kwargs)
    deployments = ServedDeployments(runner)
    for config in configs.values():  # applied now: the initial syncs need them
        deployments.add(config)
        _say(describe(config))

    try:  # before any run of ours starts: what a killed process left Running (flows.orphans)
        crash_orphans(_say)
    except Exception as exc:  # cosmetic in the UI: never a reason not to start
        _say(f"could not look for orphaned runs: {type(exc).__name__}: {exc}")
    runs = SyncRuns()
    _report_runs("initial sync", runs.request, ui)(configs)

    watching = MemoryWatching(
        _report_runs("files changed", runs.request, ui), _report_runs("follow-up", runs.poll, ui), _say
    )
    watching.start(configs)
    stack.callback(watching.stop)

    api, agents = _rest_api(main, stack, sock, agent)
    agents.catch_ups.watching = watching  # a search syncs first only after a change it saw
    if load is not None:
        rebuilds = config_rebuilds()
        apply = UpApply(
            deployments=deployments,
            watching=watching,
            runs=runs,
            rebuilds=rebuilds,
            start_syncs=_report_runs("agent added", runs.request, ui),
            agents=agents,
            ui=ui,
            say=_say,
        )
        follower = follow_up(load, configs, apply, _report_runs("config change", rebuilds.poll, ui, "rebuild"))
        stop = threading.Event()
        stack.callback(follower.start(stop).join, 10)
        stack.callback(stop.set)
        _say(f"following {follower.file} (and SIGHUP)")
    _say(f"Prefect UI: {ui}")
    _say(f"REST API: {api}")
    if ready is not None:  # --json: the addresses, as `memsift serve --json` gives its own
        from api.docs import DOCS_PATH

        address = f"http://{main.api.host}:{main.api.port}"
        ready({"prefectUi": ui, "restApi": address, "docs": f"{address}{DOCS_PATH}"})
    api_url = os.environ["PREFECT_API_URL"]
    _say(f"a sync now: PREFECT_API_URL={api_url} prefect deployment run '{sync_deployment_name('main')}'")
    _say("Ctrl-C stops everything")
    try:
        asyncio.run(runner.start())
    except TerminationSignal:
        pass
    finally:  # the Runner has killed the processes of the runs in progress, and reported on none of them
        cancelled.extend(_cancel(unfinished))


def _cancel(runs: set[UUID]) -> list[str]:
    """Mark Cancelled the runs whose process the stopping Runner killed (they stayed Running in the UI until
    the next `up` marked them Crashed); their names. A server that does not answer leaves that to the next `up`."""
    from prefect.states import Cancelled

    from flows.orphans import end_interrupted

    why = f"memsift up (pid {os.getpid()}) stopped while it ran; the index is as its last completed step left it"
    try:
        return end_interrupted(runs, Cancelled, why)
    except Exception:  # the server stopped or unreachable: its runs are marked Crashed at the next up's start
        return []


def _isolate_flow_runs(stack: ExitStack) -> set[UUID]:
    """Each flow run's process in a session of its own, as Prefect's workspace starter starts its runs. Ctrl-C
    signals the terminal's whole foreground process group: a run's process in it took that SIGINT itself and
    printed a KeyboardInterrupt traceback under `up`'s last line (one that was still importing, every time).
    Prefect 3.9.1's Runner builds its `EngineCommandStarter` without `isolate_process_group` and has no setting
    for it (runner.py, `_resolve_starter`), so `up` gives it one that sets it; the Runner, stopping, then ends
    the run's whole process group (SIGTERM, SIGKILL after its grace) rather than its first process.

    The ids it returns are of the runs whose process has not ended on its own: read once the Runner has stopped,
    the runs it killed on the way out."""
    import anyio
    from prefect.runner import runner as module
    from prefect.runner._starter_engine import EngineCommandStarter

    unfinished: set[UUID] = set()

    class Isolated(EngineCommandStarter):
        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**{**kwargs, "isolate_process_group": True})

        async def start(self, flow_run: Any, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
            unfinished.add(flow_run.id)
            await super().start(flow_run, task_status=task_status)
            unfinished.discard(flow_run.id)  # its process ended on its own, its state reported

    stack.callback(setattr, module, "EngineCommandStarter", module.EngineCommandStarter)
    module.EngineCommandStarter = Isolated
    return unfinished


def _report_runs(why: str, start: Callable[..., list[Any]], ui: str, kind: str = "sync") -> Callable[..., None]:
    """A run-starting call for the watcher thread that prints a link to every run it starts."""
    from core.watching import reported

    return reported(
        why,
        start,
        _say,
        lambda run: f"{kind} of {run.parameters.get('agent')} started, {ui}/runs/flow-run/{run.id}",
        kind,
    )


def _has_rest_api() -> bool:
    return importlib.util.find_spec("api.app") is not None


def _check_rest_api(config: Config) -> None:
    """`memsift serve`'s rule, before anything starts: no address beyond this machine without an API key."""
    if not _has_rest_api():
        return
    from api.serve import is_loopback

    if not config.api.key and not is_loopback(config.api.host):
        raise ConfigError(
            f"api.host {config.api.host}: refusing to serve beyond this machine without an API key; set api.key "
            "or MEMSIFT_API_KEY"
        )


def _rest_socket(config: Config) -> socket.socket | None:
    """The REST API's socket, bound as `memsift serve` binds it (a port in use is a one-line error naming it);
    None when this installation has no REST API."""
    if not _has_rest_api():
        return None
    from api.serve import listen_socket

    return listen_socket(config.api.host, config.api.port)


def _rest_api(config: Config, stack: ExitStack, sock: socket.socket | None, agent: str) -> tuple[str, Agents | None]:
    """Start the REST API in a thread on `sock` when `api.app` exists; its address (or why it is not there)
    and its agents (a configuration change replaces their settings)."""
    if sock is None:
        return "not started: the REST API (api.app) is not part of this installation", None
    import uvicorn

    from api.app import create_app
    from api.docs import DOCS_PATH
    from api.serve import is_loopback

    app = create_app(config, agent, loopback_only=not config.api.key and is_loopback(config.api.host))
    app.state.agents.say = _say  # a first index a search runs says so, as `serve` does
    server = uvicorn.Server(
        uvicorn.Config(app, host=config.api.host, port=config.api.port, access_log=False, log_level="warning")
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="memsift-api", daemon=True)
    thread.start()
    deadline = time.monotonic() + API_START_TIMEOUT
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise ServerError(f"the REST API could not listen on {config.api.host}:{config.api.port} (api.port)")
        time.sleep(0.05)
    stack.callback(thread.join, 10)
    stack.callback(setattr, server, "should_exit", True)
    address = f"http://{config.api.host}:{config.api.port}"
    return f"{address} (docs: {address}{DOCS_PATH})", app.state.agents


def ratelimit(config: Config) -> dict[str, Any] | None:
    """`memsift ratelimit`: create or update the shared embedding limit from `embedding.requestsPerMinute` on
    the server PREFECT_API_URL names; the limit as the server then has it (None: no limit)."""
    api_url = os.environ.get("PREFECT_API_URL")
    if not api_url:
        raise ConfigError("PREFECT_API_URL: not set; the limit lives on a Prefect server (`memsift up` creates it)")
    wait_healthy(api_url, EXTERNAL_SERVER_TIMEOUT)
    from flows.ratelimit import ensure_limit, limit_status

    if config.embedding.requestsPerMinute is not None:
        ensure_limit(config.embedding.requestsPerMinute)
    return limit_status()
