"""A local `prefect server start` as a child process that memsift owns, and a bounded wait for any server.

The server runs in its own session (process group): a Ctrl-C on the terminal does not reach it half-way
through a run, and stopping it signals the whole group by its process id, so no uvicorn worker or other
child is left behind. Nothing here imports Prefect: the caller sets `PREFECT_API_URL` from `api_url` before
Prefect reads its settings.

A server outlives an `up` killed with `kill -9` (or a terminal closed hard): its own session is not signalled.
Each server started here is recorded in its PREFECT_HOME (pid, port, start time), so the next `up` finds such
a leftover and stops it before it starts its own: two servers on one SQLite database lock each other out and
risk it, and nothing else would ever stop it. It is stopped rather than reused: it runs the code and settings of
the `up` that started it (memsift or Prefect may have been upgraded since), and a server of one's own is the one
Ctrl-C stops. The record names one process for good: a pid the system gave to another process since has
another start time, and its command line must still be that server's.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from core import processes
from core.errors import MemsiftError

HOST = "127.0.0.1"
DEFAULT_PORT = 4200  # Prefect's own default: the UI address stays the same from one start to the next
#: How long a server someone else runs (PREFECT_API_URL) may take to answer /health.
EXTERNAL_SERVER_TIMEOUT = 30.0


class ServerError(MemsiftError, RuntimeError):
    """The Prefect server (or `up`'s REST API) did not start or did not answer in time; the message says why,
    so the CLI prints it as one line like every other MemsiftError."""


def port_is_free(port: int) -> bool:
    """Whether a server could listen on `port` now. With SO_REUSEADDR, as uvicorn binds: connections the last
    server closed linger in TIME_WAIT for a minute, and without it a restarted `up` found its port "in use"
    (`--prefect-port P` failed; the default 4200 silently moved to a random port, and the UI's address)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((HOST, port))
        except OSError:
            return False
        return True


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def wait_healthy(
    api_url: str, timeout: float, process: subprocess.Popen | None = None, log: Path | None = None
) -> float:
    """Poll `<api_url>/health` until it answers 200; the seconds it took. ServerError after `timeout`, or as
    soon as `process` (the server we started) exits, with the tail of its log."""
    start = time.monotonic()
    while True:
        if process is not None and process.poll() is not None:
            tail = log.read_text(errors="replace")[-2000:] if log and log.exists() else ""
            raise ServerError(f"the Prefect server exited with code {process.returncode}:\n{tail}".rstrip())
        if answers(api_url, timeout=2):
            return time.monotonic() - start
        if time.monotonic() - start > timeout:
            raise ServerError(f"the Prefect server at {api_url} did not answer /health within {timeout:g} s")
        time.sleep(0.25)


class PrefectServer:
    """`prefect server start --host 127.0.0.1 --port P` with its own PREFECT_HOME, SQLite, analytics off."""

    def __init__(self, home: Path, port: int, env: Mapping[str, str] | None = None, *, recorded: bool = True) -> None:
        """`recorded`: write the record a later `up` finds a leftover by (`stop_leftover`); only the `up` that
        holds `home` does."""
        self.home = home
        self.port = port
        self.log = home / "server.log"
        home.mkdir(parents=True, exist_ok=True)
        child_env = dict(os.environ if env is None else env)
        # The UI finds the API at PREFECT_API_URL, else at PREFECT_SERVER_API_HOST:PORT (default 4200), never at
        # the --port the server was started with: set them so the UI of a server on another port works.
        child_env.pop("PREFECT_API_URL", None)
        child_env.update(
            PREFECT_HOME=str(home),
            PREFECT_SERVER_ANALYTICS_ENABLED="false",
            PREFECT_SERVER_API_HOST=HOST,
            PREFECT_SERVER_API_PORT=str(port),
        )
        cmd = [sys.executable, "-m", "prefect", "server", "start", "--host", HOST, "--port", str(port)]
        with open(self.log, "ab") as out:
            self.process = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=child_env,
                start_new_session=True,
            )
        if recorded:
            started = processes.start_time(self.process.pid)
            record(home).write_text(json.dumps({"pid": self.process.pid, "port": port, "started": started}))

    @property
    def url(self) -> str:
        """The UI's address."""
        return f"http://{HOST}:{self.port}"

    @property
    def api_url(self) -> str:
        return f"{self.url}/api"

    @property
    def pid(self) -> int:
        return self.process.pid

    def wait_healthy(self, timeout: float) -> float:
        return wait_healthy(self.api_url, timeout, self.process, self.log)

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM to the server's process group, SIGKILL if it is still there after `timeout` seconds."""
        if self.process.poll() is not None:
            return
        try:
            os.killpg(self.process.pid, signal.SIGTERM)
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=timeout)
        except ProcessLookupError:  # it exited between poll() and killpg()
            self.process.wait(timeout=timeout)
        try:  # anything the server started and left behind in its group
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        _forget(self.home, self.process.pid)

    def __enter__(self) -> PrefectServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def record(home: Path) -> Path:
    """Where a server started here is recorded, in its PREFECT_HOME: beside the database it uses."""
    return home / "memsift-server.json"


def _forget(home: Path, pid: int) -> None:
    try:
        if json.loads(record(home).read_text()).get("pid") == pid:
            record(home).unlink()
    except (OSError, ValueError, AttributeError):
        pass


def _is_server(pid: int, port: int) -> bool:
    """Whether `pid` is a `prefect server start ... --port <port>` leading its own process group (as started
    here, so its group can be signalled as a whole)."""
    fields = processes.stat_fields(pid)
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        group = int(fields[2]) if fields else None
    except (OSError, IndexError, ValueError):
        return False
    words = [a.decode(errors="replace") for a in argv]
    try:
        listens = words[words.index("--port") + 1]
    except (ValueError, IndexError):
        return False
    return group == pid and "prefect server start" in " ".join(words) and listens == str(port)


def stop_leftover(home: Path, timeout: float = 20.0) -> str | None:
    """Stop the server recorded in `home` when it still runs (an `up` that was killed left it); what was done,
    for `up` to say, or None when no server of ours was left. The caller holds this PREFECT_HOME for itself (no
    live `up` uses that server)."""
    try:
        data = json.loads(record(home).read_text())
        pid, port, started = int(data["pid"]), int(data["port"]), data["started"]
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError):  # unreadable: nothing it names can be trusted
        record(home).unlink(missing_ok=True)
        return None
    if started is None or processes.start_time(pid) != started or not _is_server(pid, port):
        record(home).unlink(missing_ok=True)  # ended, or its pid now names another process
        return None
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + timeout
        while processes.start_time(pid) == started and time.monotonic() < deadline:
            time.sleep(0.1)  # not our child: no wait() for its end, only its /proc entry
        if processes.start_time(pid) != started:
            break
    record(home).unlink(missing_ok=True)
    return f"stopped the Prefect server a killed memsift up left running (pid {pid}, port {port})"


def advertisement(home: Path) -> Path:
    """Where `memsift up` writes the API address of the server it runs, for `memsift index` to find."""
    return home / "prefect-api-url"


def answers(api_url: str, timeout: float = 0.5) -> bool:
    """True when the Prefect API at `api_url` answers `/health` within `timeout` seconds. With the standard
    library, imported here: `memsift index` may ask this on every run (httpx would cost it ~0.2 s, urllib
    ~0.05 s, and nothing when no server was ever advertised)."""
    import urllib.request

    try:
        with urllib.request.urlopen(f"{api_url.rstrip('/')}/health", timeout=timeout) as answer:
            return answer.status == 200
    except (OSError, ValueError):  # URLError, HTTPError, timeouts; ValueError: not a URL
        return False


def advertised_api_url(home: Path) -> str | None:
    """The API address `memsift up` advertises, if its server answers now (0.5 s at most); else None."""
    try:
        api_url = advertisement(home).read_text().strip()
    except OSError:
        return None
    return api_url if api_url and answers(api_url) else None
