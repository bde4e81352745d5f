"""The Prefect side of `memsift up` (api/up.py): the server it starts (or the one PREFECT_API_URL names), and
the Runner's flow-run processes, each in a session of its own and marked Cancelled when `up` stops them.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any
from uuid import UUID

from api.prefect_server import (
    DEFAULT_PORT,
    EXTERNAL_SERVER_TIMEOUT,
    PrefectServer,
    advertisement,
    free_port,
    port_is_free,
    stop_leftover,
    wait_healthy,
)
from core import ConfigError
from core.locking import pid_lock

SERVER_START_TIMEOUT = 120.0  # a first start migrates a fresh database: ~10 s on 2 cores, more when busy


class _Held(Exception):
    """Another `up` holds the PREFECT_HOME; the message is its pid."""


def prefect_server(
    stack: ExitStack, port: int | None, home: Path, servers: list[int], say: Callable[[str], None]
) -> str:
    """Start (or check) the Prefect server; its UI address. PREFECT_API_URL is set when this returns. The pid
    of a server started here goes to `servers` once it is stopped."""
    external = os.environ.get("PREFECT_API_URL")
    if external:
        wait_healthy(external, EXTERNAL_SERVER_TIMEOUT)
        say(f"using the Prefect server at {external} (PREFECT_API_URL)")
        if port is not None:  # it was ignored without a word
            say(f"--prefect-port {port} is not used: PREFECT_API_URL names the Prefect server, so up starts none")
        return external.rstrip("/").removesuffix("/api")
    prefect_home = Path(os.environ["PREFECT_HOME"])
    # The `up` holding a PREFECT_HOME owns the server recorded there: under that lock, a server a killed `up`
    # left running on it is stopped (api.prefect_server), whatever port it holds. Another MEMSIFT_HOME's `up` on
    # the same PREFECT_HOME (one environment for several) starts a server of its own, unrecorded, as before: its
    # runs never depend on a server the other `up` stops when it ends; it says what it shares.
    try:
        stack.enter_context(pid_lock(prefect_home / "memsift-up.pid", 0, _Held))
        owner = True
    except _Held as holder:
        owner = False
        say(
            f"PREFECT_HOME {prefect_home} is in use by the memsift up with pid {holder}: this up starts a second "
            "Prefect server on its database (set another PREFECT_HOME to keep them apart)"
        )
    if owner and (stopped := stop_leftover(prefect_home)) is not None:
        say(stopped)
    if port is None:
        port = DEFAULT_PORT if port_is_free(DEFAULT_PORT) else free_port()
    elif not port_is_free(port):
        raise ConfigError(f"--prefect-port: port {port} on 127.0.0.1 is in use")
    server = PrefectServer(prefect_home, port, recorded=owner)

    def stop() -> None:
        server.stop()
        servers.append(server.pid)

    stack.callback(stop)
    say(f"starting a Prefect server on {server.url} (pid {server.pid}, log {server.log})")
    seconds = server.wait_healthy(SERVER_START_TIMEOUT)
    say(f"Prefect server ready in {seconds:.1f} s")
    os.environ["PREFECT_API_URL"] = server.api_url
    note = advertisement(home)  # `memsift index` in another terminal runs its flow on this server
    note.parent.mkdir(parents=True, exist_ok=True)
    note.write_text(server.api_url)
    stack.callback(note.unlink, missing_ok=True)
    return server.url


def isolate_flow_runs(stack: ExitStack) -> set[UUID]:
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


def cancel(runs: set[UUID]) -> list[str]:
    """Mark Cancelled the runs whose process the stopping Runner killed (they stayed Running in the UI until
    the next `up` marked them Crashed); their names. A server that does not answer leaves that to the next `up`."""
    from prefect.states import Cancelled

    from flows.orphans import end_interrupted

    why = f"memsift up (pid {os.getpid()}) stopped while it ran; the index is as its last completed step left it"
    try:
        return end_interrupted(runs, Cancelled, why)
    except Exception:  # the server stopped or unreachable: its runs are marked Crashed at the next up's start
        return []
