"""`memsift up`: the embedded default, everything in one process tree (SPEC section 3).

The process starts a local Prefect server as a child (unless `PREFECT_API_URL` names one), applies every
agent's deployments, starts an initial sync of each agent through them, the file watcher, the REST API and the
follower of its configuration file, then serves the deployments with a Prefect Runner in the main thread (what
Prefect's `serve` does, with the Runner kept for configuration changes): it runs each flow run in a subprocess
and takes Ctrl-C there. On Ctrl-C or SIGTERM everything stops in the reverse order of starting, the server last
(its process group, by pid), so the Runner can still pause its schedules on the way out. The Prefect server and
the Runner's processes are api/up_prefect.py, the REST API's thread api/up_rest.py, what a configuration change
does api/up_reload.py.

Prefect reads its settings once, when it is first imported: `PREFECT_HOME` and `PREFECT_API_URL` are put
into this process's environment before that, so the watcher's thread and the Runner's subprocesses see them.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from api.up_prefect import cancel, isolate_flow_runs, prefect_server
from api.up_rest import check_rest_api, rest_api, rest_socket
from core import Config, ConfigError, MemsiftError
from core.locking import pid_lock

# Prefect's default runner poll (10 s) would delay every watcher-triggered sync by up to that much; a poll
# of the local server costs one small query. PREFECT_RUNNER_POLL_FREQUENCY still wins when set.
RUNNER_POLL_SECONDS = 2


def run_up(
    configs: Mapping[str, Config],
    prefect_port: int | None,
    load: Callable[[], Mapping[str, Config]] | None = None,
    agent: str = "main",
    ready: Callable[[dict[str, str]], None] | None = None,
) -> int:
    """Run until Ctrl-C or SIGTERM, ending with one line that says which. Once serving, either is a clean
    stop (0, as `serve` and `mcp`: a stop is how a server ends, and SPEC's codes are 0, 1 and 2); a Ctrl-C
    while it still starts is 130, as for any command stopped before it is done. Errors (ConfigError,
    ServerError) propagate after everything started so far has been stopped. With `load` (`configs` read
    again), `up` follows its configuration file and SIGHUP (api.config_reload, api.up_reload). `agent`
    (`memsift --agent ID up`) answers the REST requests that name no agent. `ready` (`--json`) is given the
    addresses once all runs."""
    if agent not in configs:  # before anything starts, as `memsift --agent ID serve` refuses it
        raise ConfigError(f"--agent: unknown agent {agent!r} (known: {', '.join(configs)})")
    main = configs["main"]
    check_rest_api(main)
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
            sock = rest_socket(main)  # bound now: a port in use is one line before a Prefect server starts
            stack.callback(sock.close)
            ui = prefect_server(stack, prefect_port, main.home, stopped.servers, _say)
            _serve(configs, stack, ui, load, sock, agent, ready, stopped)
    except Terminated:
        pass
    except KeyboardInterrupt:
        stopped_by = signal.SIGINT
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    _say(stopped.line(stopped_by))
    return 128 + signal.SIGINT if stopped_by == signal.SIGINT and not stopped.serving else 0


@dataclass
class Stopped:
    """What `up` stopped on its way out, for its last line: the Prefect server it started (its pid), the runs in
    progress it cancelled (their names); and whether it was serving yet, for its exit code."""

    servers: list[int] = field(default_factory=list)
    runs: list[str] = field(default_factory=list)
    serving: bool = False

    def line(self, signum: signal.Signals) -> str:
        server = "".join(f", with its Prefect server (pid {pid})" for pid in self.servers)
        runs = f"; cancelled the run{'s' * (len(self.runs) > 1)} {', '.join(self.runs)}" if self.runs else ""
        return f"stopped by {signum.name}{server}{runs}"


class AlreadyRunning(MemsiftError, RuntimeError):
    """Another `memsift up` runs on this MEMSIFT_HOME; the message names its pid."""


def _only_up(home: Path) -> AbstractContextManager[None]:
    """Hold an exclusive `flock` on `<home>/up.pid` for the life of this `up`, or refuse at once: a second `up`
    would start a second Prefect server on the same database and remove the first one's advertisement."""

    def refusal(holder: str) -> AlreadyRunning:
        return AlreadyRunning(
            f"memsift up is already running on {home} (pid {holder}); stop it first (Ctrl-C in its terminal, "
            f"or kill {holder})"
        )

    return pid_lock(home / "up.pid", 0, refusal)


class Terminated(KeyboardInterrupt):
    """SIGTERM before the Runner takes it over: unwinds as Ctrl-C does, but ends as a clean stop."""


def _interrupt(signum: int, frame: Any) -> None:
    raise Terminated


def _say(line: str) -> None:
    # one write: print() writes the text and its newline apart, and a line from another thread landed between
    sys.stdout.write(f"memsift up: {line}\n")
    sys.stdout.flush()


def _serve(
    configs: Mapping[str, Config],
    stack: ExitStack,
    ui: str,
    load: Callable[[], Mapping[str, Config]] | None,
    sock: socket.socket,
    agent: str,
    ready: Callable[[dict[str, str]], None] | None,
    stopped: Stopped,
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
    unfinished = isolate_flow_runs(stack)
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

    api, agents = rest_api(main, stack, sock, agent, _say)
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
    stopped.serving = True
    try:
        asyncio.run(runner.start())
    except TerminationSignal:
        pass
    finally:  # the Runner has killed the processes of the runs in progress, and reported on none of them
        stopped.runs.extend(cancel(unfinished))


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
