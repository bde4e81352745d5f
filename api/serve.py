"""`memsift serve [--host H] [--port P] [--insecure] [--workers N]`: the REST API under uvicorn.

One server process: the embedder is loaded once and shared by every request, and searches run in the
server's threads; with `--workers N` (`api.workers`) they run in N worker processes instead, so a server uses
more than one core (api/search_pool.py), while everything else stays in the one process. It binds to
`api.host` (127.0.0.1) by default; an address other machines can reach is refused without an API key
(`api.key` or MEMSIFT_API_KEY), unless `--insecure` says that is intended.
"""

from __future__ import annotations

import atexit
import errno
import ipaddress
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any
from uuid import UUID

import uvicorn

from api.agents import DEFAULT_AGENT
from api.app import create_app
from api.docs import DOCS_PATH
from api.first_index import StartupIndexing
from api.watching import Watch
from core import Config, ConfigError


def run_serve(
    config: Config,
    *,
    host: str | None,
    port: int | None,
    insecure: bool,
    workers: int | None = None,
    load: Callable[[], Mapping[str, Config]] | None = None,
    agent: str = DEFAULT_AGENT,
    ready: Callable[[dict[str, str]], None] | None = None,
) -> int:
    """Serve until Ctrl-C or SIGTERM, syncing the agents whose memory files change (api.watching). With `load`
    (every agent's configuration, read again), the server follows its configuration file and SIGHUP
    (api.config_reload): search settings and agents change in place, the watcher follows the agents, and with
    `sync.watch` on an agent whose settings changed is synced at once (a new chunking or model rebuilds, as
    under `memsift up`; on a hosted provider the rebuild waits for a forced run and says so). `agent`
    (`memsift --agent ID serve`) answers the requests that name no agent. `ready` (`--json`) is given the
    addresses once the server answers."""
    if workers is not None:
        config = replace(config, api=replace(config.api, workers=workers))
    named = ("--host" if host else "api.host", "--port" if port else "api.port")  # where each came from, for errors
    host = host or config.api.host
    port = port or config.api.port
    if not config.api.key and not insecure and not is_loopback(host):
        raise ConfigError(
            f"{named[0]} {host}: refusing to serve beyond this machine without an API key; set api.key or "
            "MEMSIFT_API_KEY, or pass --insecure"
        )
    # before announcing anything: every agent's configuration is read here
    app = create_app(config, agent, loopback_only=not config.api.key and is_loopback(host))
    # uvicorn shuts down gracefully on SIGINT or SIGTERM, then raises the signal again with the handler it found
    # installed. With this one, that ends in a normal exit (status 0, atexit handlers run: they stop the temporary
    # Prefect server an in-process index run may have started) rather than in death by signal.
    sock = listen_socket(host, port, named=named)
    agents = app.state.agents
    agents.say = _say  # a search's first index: its start, progress and end (api.progress.FirstIndexLines)
    stop = threading.Event()
    watch: Watch | None = None
    startup: StartupIndexing | None = None
    # SIGINT too: a script's `memsift serve &` (a shell without job control) starts it ignoring SIGINT, and a
    # `kill -INT` before uvicorn took the signal over was lost, the server going on to serve (`up` and `mcp`
    # take SIGINT back the same way).
    previous = {
        signal.SIGTERM: signal.signal(signal.SIGTERM, interrupt),
        signal.SIGINT: signal.signal(signal.SIGINT, signal.default_int_handler),
    }
    try:  # from here a stop is a clean one (status 0), also before uvicorn runs: it was "error: interrupted"
        address = http_address(host, port)
        print(f"memsift serve: REST API on {address}, docs at {address}{DOCS_PATH}; Ctrl-C stops it", flush=True)
        if agent != DEFAULT_AGENT:
            _say(f"a request that names no agent is answered for agent {agent} (--agent)")
        if config.api.workers:
            _say(f"searches run in {config.api.workers} worker processes (api.workers)")
        startup = StartupIndexing(agents, _say)  # before the watcher: its catch-up leaves these agents out
        startup.start()
        watch = Watch(agents.configs, app.state.runs, agents.config, _say, first_indexes=startup.due)
        agents.catch_ups.watching = watch.watching  # a search syncs first only after a change it saw
        if load is not None:
            from api.config_reload import follow_api

            follower = follow_api(agents, load, _say, also=watch.follow)
            follower.start(stop)
            _say(f"following {follower.file} (and SIGHUP)")
        # Access lines would cost more than a search under load; the request metrics count every request.
        settings = uvicorn.Config(app, host=host, port=port, access_log=False, log_level="info")
        announce = None if ready is None else lambda: ready({"restApi": address, "docs": f"{address}{DOCS_PATH}"})
        _Server(settings, announce).run(sockets=[sock])
    except KeyboardInterrupt:
        pass
    finally:
        if watch is not None:
            watch.stop()
        if startup is not None:
            startup.stop()
        sock.close()
        stop.set()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if not (app.state.runs.stopped(STOP_SECONDS) and (startup is None or startup.stopped(STOP_SECONDS))):
        exit_mid_step(app.state.runs.recorded_in_progress(), _say, "memsift serve")
    # The warm-up thread loading the model (api.agents): the interpreter's exit while it is inside onnxruntime
    # aborts the process ("terminate called without an active exception", status 134): let it end first, and
    # if it has not ended by then (a model load takes more than STOP_SECONDS on a loaded machine: the abort came
    # back in CI), end without the interpreter's teardown, after the atexit handlers it would have run.
    if not agents.ready.wait(STOP_SECONDS):
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    return 0


class _Server(uvicorn.Server):
    """uvicorn's server, which says when it answers: the socket is only bound until its startup listens on it,
    so `--json`'s addresses printed before then sent a supervisor's first request to a refused connection."""

    def __init__(self, config: uvicorn.Config, started: Callable[[], None] | None) -> None:
        super().__init__(config)
        self._started = started

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if self.started and self._started is not None:
            self._started()


#: How long a stopping server waits for its index run to reach its next step (an embedding request, a batch)
STOP_SECONDS = 2.0
#: How long it then gives the Prefect server to hear that the run it leaves is Crashed
MARK_SECONDS = 5.0


def exit_mid_step(flow_runs: list[UUID], say: Callable[[str], None], who: str) -> None:
    """Exit now, not once the index run's current step ends: one local embedding request is 96 chunks
    times the cores (measured: SIGTERM during a first index waited 27 s), one hosted request up to its
    timeout (120 s). Nothing is lost: the batch being written rolls back as after a kill, what was embedded
    is in the shared cache, and the next sync deletes a rebuild's temp file and goes on from the last batch.
    The run's flow runs in Prefect, which this exit leaves unfinished, are marked Crashed first (within
    `MARK_SECONDS`: a Prefect server that does not answer leaves them as they are). `say` writes the server's
    lines, `who` names it in the runs' state message."""
    after = "the index is as its last completed batch left it; the next sync completes it"
    say(f"stopped during an index run: {after}")
    if flow_runs:
        from flows.orphans import crash_interrupted

        def mark() -> None:
            try:
                crash_interrupted(flow_runs, f"{who} (pid {os.getpid()}) stopped during this run: {after}")
            except Exception as exc:  # the server went away, or refused: the runs stay as they are
                say(f"could not mark the index run Crashed in Prefect ({type(exc).__name__}: {exc})")
            else:
                say("its flow run is marked Crashed in Prefect")

        marking = threading.Thread(target=mark, daemon=True)
        marking.start()
        marking.join(MARK_SECONDS)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def listen_socket(
    host: str, port: int, choose: str = "--port or api.port", named: tuple[str, str] = ("--host", "--port")
) -> socket.socket:
    """The server's socket, bound before anything is announced or loaded: a port in use is then a one-line
    error naming it (uvicorn would log it after startup and exit with status 3); `choose` says where to set
    another, `named` where the host and the port came from (`api.host` when no --host was given)."""
    bare = host.strip("[]")
    # The family as uvicorn picks it: "localhost" is 127.0.0.1, whatever getaddrinfo would list first.
    sock = socket.socket(socket.AF_INET6 if ":" in bare else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does: restart over TIME_WAIT
    try:
        sock.bind((bare, port))
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise ConfigError(
                f"{named[1]} {port}: {host}:{port} is in use by another process (choose another with {choose})"
            ) from None
        where = f"{named[0]} {host} {named[1]} {port}"
        raise ConfigError(f"{where}: cannot listen there: {exc.strerror or exc}") from None
    return sock


def _say(line: str) -> None:
    # one write: print() writes the text and its newline apart, and a line from another thread landed between
    sys.stderr.write(f"memsift serve: {line}\n")
    sys.stderr.flush()


def interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def http_address(host: str, port: int) -> str:
    """`http://host:port`, an IPv6 address in brackets once (`--host ::1` and `--host [::1]` alike: the second
    was printed `http://[[::1]]:8000`, an address no client takes)."""
    bare = host.strip("[]")
    return f"http://{f'[{bare}]' if ':' in bare else bare}:{port}"


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:  # a host name: it may resolve to anything
        return False
