"""Shared fixtures: real SQLite files under a temp MEMSIFT_HOME, the real local model, one Prefect harness.

Prefect's settings are fixed here, before anything imports prefect: a fresh PREFECT_HOME and result
storage for the session, no analytics. The Prefect test harness (a temporary server, several seconds) is
started once per session and only by tests that run flows.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

_session_dir = Path(tempfile.mkdtemp(prefix="memsift-tests-"))
_session_owner = os.getpid()


def _remove_session_dir() -> None:
    """The session folder (Prefect's home, the optimised model graph: ~22 MB) goes when the process that made it
    exits: the test run, each xdist worker (each imports this file and makes its own). The CLI subprocesses the
    tests start use it while they run and import nothing from here; a child forked from a process that made one
    (its copy of this module says another pid) leaves its parent's alone."""
    if os.getpid() == _session_owner:
        shutil.rmtree(_session_dir, ignore_errors=True)


atexit.register(_remove_session_dir)
os.environ["PREFECT_HOME"] = str(_session_dir / "prefect")
os.environ["PREFECT_LOCAL_STORAGE_PATH"] = str(_session_dir / "prefect" / "storage")
os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
os.environ.pop("PREFECT_API_URL", None)
for _name in [n for n in os.environ if n.startswith("MEMSIFT_")]:
    del os.environ[_name]
# One optimised embedder graph for the whole session (and the CLI subprocesses it starts): built once.
os.environ["MEMSIFT_MODEL_CACHE"] = str(_session_dir / "models")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from core import MemoryIndex, load_config  # noqa: E402
from core.config_types import Config  # noqa: E402
from core.embedders.local import LocalEmbedder  # noqa: E402

# `make test` runs the suite with `-n 2 --dist loadfile --no-loadscope-reorder`: a worker running short takes
# the next file in this order. xdist's own order (most tests first) put the few long process tests among the
# last files (test_up.py: 14 tests, ~400 s on one worker), where the other worker can run out of files while
# they run. The longest files go first instead, each to the worker free first (longest-processing-time-first
# scheduling); the rest keep their collection order. From `--durations` of the suite; a file that grows long
# belongs here.
LONGEST_FIRST = (
    "test_up.py",
    "test_cli.py",
    "test_api_server.py",
    "test_mcp.py",
    "test_hostile_input.py",
    "test_api.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: a file's tests keep their order


@pytest.fixture(scope="session")
def prefect_harness():
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


@pytest.fixture(autouse=True)
def _restore_environ():
    """`api.cli.main` sets Prefect's quiet-console variables with os.environ.setdefault; undo that."""
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


@pytest.fixture(autouse=True)
def memsift_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    monkeypatch.setenv("MEMSIFT_HOME", str(home))
    return home


@pytest.fixture
def workspace(tmp_path: Path) -> Callable[..., Path]:
    """Build a workspace from {relative path: text}; returns its folder."""

    def build(files: dict[str, str], name: str = "ws") -> Path:
        root = tmp_path / name
        root.mkdir(exist_ok=True)
        for rel, text in files.items():
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        return root

    return build


@pytest.fixture
def make_config() -> Callable[..., Config]:
    def make(ws: Path, **overrides: Any) -> Config:
        return load_config(workspace=ws, overrides=overrides)

    return make


class CountingEmbedder:
    """The real local model, recording every text it is asked to embed (a spy, not a stub)."""

    def __init__(self) -> None:
        self.inner = LocalEmbedder.shared()
        self.provider, self.model, self.dims = self.inner.provider, self.inner.model, self.inner.dims
        self.fingerprint = self.inner.fingerprint
        self.calls = 0
        self.documents: list[str] = []
        self.queries: list[str] = []

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        self.calls += 1
        self.documents.extend(texts)
        return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> np.ndarray:
        self.queries.append(text)
        return self.inner.embed_query(text)


class FailingEmbedder(CountingEmbedder):
    """The real model, failing from its n-th document request on (a fault switch, not a stub)."""

    def __init__(self, fail_on_call: int, error: Exception) -> None:
        super().__init__()
        self.fail_on_call = fail_on_call
        self.error = error

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        if self.calls + 1 >= self.fail_on_call:
            raise self.error
        return super().embed_documents(texts)


def python_calls(fn: Callable[[], Any]) -> int:
    """How many Python-level function calls (and generator resumptions) `fn()` makes: a count of the work a
    function does on a big input, which a complexity test can bound where a timed one would be noise."""
    count = 0

    def on_event(frame: Any, event: str, arg: Any) -> None:
        nonlocal count
        count += event == "call"

    sys.setprofile(on_event)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return count


def file_digest(path: Path) -> str:
    """SHA-256 of a file's bytes: 'the index file is exactly as it was'."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def counting_embedder() -> CountingEmbedder:
    return CountingEmbedder()


@pytest.fixture
def open_index() -> Callable[..., MemoryIndex]:
    """MemoryIndex(config, embedder=..., use_vec=...), closed after the test."""
    opened: list[MemoryIndex] = []

    def make(config: Config, **kwargs: Any) -> MemoryIndex:
        index = MemoryIndex(config, **kwargs)
        opened.append(index)
        return index

    yield make
    for index in opened:
        index.close()


T = TypeVar("T")


def wait_for(condition: Callable[[], T], timeout: float, what: str, every: float = 0.05) -> T:
    """Poll `condition` until it returns something truthy; fail naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        assert time.monotonic() < deadline, f"timed out after {timeout:g} s waiting for {what}"
        time.sleep(every)  # polling an outside process's state, not synchronising threads
    return value


def descendants(pid: int) -> set[int]:
    """Every live process below `pid`, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(entry.name))
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def alive(pids: set[int]) -> set[int]:
    return {p for p in pids if Path(f"/proc/{p}").exists()}


def kill_all(pids: set[int]) -> None:
    """SIGKILL what is left of `pids` (a test's processes must not outlive it, even when it fails)."""
    for pid in alive(pids):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def wait_or_dump(proc: subprocess.Popen, timeout: float, log: Path) -> int:
    """Wait for `proc` to end; past `timeout`, SIGABRT it and fail with the end of its log. Started with
    PYTHONFAULTHANDLER=1, it then writes every thread's stack to that log: a hang reads as where it hangs.
    What it started (a Prefect server, flow runs) is killed too, or it would outlive the test run."""
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        left = descendants(proc.pid)
        os.kill(proc.pid, signal.SIGABRT)
        proc.wait(timeout=30)
        kill_all(left)
        tail = log.read_text(errors="replace")[-12_000:]
        raise AssertionError(f"{proc.args} still ran {timeout:g} s after being asked to stop:\n{tail}") from None


MEMSIFT = Path(sys.executable).parent / "memsift"
# exec with SIGINT ignored, as a shell without job control starts a script's `memsift up &`.
IGNORING_SIGINT = [
    sys.executable,
    "-c",
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_IGN); os.execv(sys.argv[1], sys.argv[1:])",
]


class Up:
    """A `memsift ... up` subprocess; its output goes to a file (a pipe nobody reads could block it)."""

    def __init__(
        self, args: list[str], env: dict[str, str], log: Path, *, sigint_ignored: bool = False, session: bool = False
    ) -> None:
        self.env, self.log = env, log
        self.home = Path(env["MEMSIFT_HOME"])
        # `sigint_ignored`: started as a script's `memsift up &` starts it (a shell without job control ignores
        # SIGINT in background commands, and exec keeps it ignored); Ctrl-C's signal must stop it all the same.
        # `session`: the leader of a process group of its own, as a terminal's foreground job is, so that
        # `os.killpg(up.process.pid, SIGINT)` is what Ctrl-C in its terminal sends.
        command = [*IGNORING_SIGINT, MEMSIFT, *args] if sigint_ignored else [MEMSIFT, *args]
        with open(log, "wb") as out:
            self.process = subprocess.Popen(
                command,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**env, "PYTHONFAULTHANDLER": "1"},  # a hang at stop dumps its threads (wait_or_dump)
                start_new_session=session,
            )

    @property
    def output(self) -> str:
        return self.log.read_text(errors="replace")

    @property
    def api_url(self) -> str:
        """The Prefect API this `up` advertises in its home."""
        from api.prefect_server import advertisement

        return advertisement(self.home).read_text()

    def stop(self, sig: signal.Signals = signal.SIGINT) -> int:
        self.process.send_signal(sig)
        # A deadline, not a pause: the stop waits for the Prefect server (up to 20 s + 20 s) and, on a busy
        # machine, for a run the watcher had started.
        return wait_or_dump(self.process, 120, self.log)

    def __enter__(self) -> Up:
        return self

    def __exit__(self, *exc: object) -> None:
        """On a failed test: stop it, then anything it left behind."""
        if self.process.poll() is None:
            left = descendants(self.process.pid)
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
            kill_all(left)


def stop_process(proc: subprocess.Popen) -> None:
    """SIGTERM a server the test started (as a user's Ctrl-C would), SIGKILL it if it has not ended in 30 s."""
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()
