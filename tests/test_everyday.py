"""The everyday path (issue 14), driven as a user drives it: real `memsift` subprocesses, real signals, a
real `memsift up` with its Prefect server, real files under a MEMSIFT_HOME and a HOME of the test's own.

- one index per agent and workspace: two folders never answer for, or delete, each other's files;
- `memsift index` without a Prefect server runs without Prefect (nothing under HOME, no temporary server),
  and with a server (`memsift up`'s, or PREFECT_API_URL) it is a flow run the UI shows;
- one SIGINT or SIGTERM stops `memsift index` in every mode with one line and 128 + the signal, the index
  stays sound and the next run completes it;
- a second `memsift up` on a MEMSIFT_HOME refuses at once, naming the first one's pid, touching nothing;
- a failed rebuild is one line, and a zero query vector gives a keyword answer that says why.

Waits are bounded polls on a condition (a file, a pid in the writer lock), never sleeps.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import apsw
import httpx
import pytest
from conftest import Up, wait_for

from api.prefect_server import free_port
from core.config_home import db_path, legacy_db_path
from tests.fake_provider import FakeProvider, fake_vector

MEMSIFT = Path(sys.executable).parent / "memsift"
A_NOTES = {
    "MEMORY.md": "# Memory\n- Dana starts every morning with a flat white.\n",
    "memory/2026-11-24.md": "# 2026-11-24\n- The deploy failed with ERR_SSL_PROTOCOL on the staging proxy.\n",
}
B_NOTES = {
    "MEMORY.md": "# Memory\n- Priya keeps the greenhouse keys in the blue tin.\n",
    "memory/2026-11-25.md": "# 2026-11-25\n- The deploy of the greenhouse sensors went fine.\n",
}


def user_env(home: Path, user: Path) -> dict[str, str]:
    """A user's environment: no Prefect or memsift settings, their own HOME (to see what lands there)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "MEMSIFT_"))}
    user.mkdir(parents=True, exist_ok=True)
    env.update(HOME=str(user), MEMSIFT_HOME=str(home), MEMSIFT_MODEL_CACHE=os.environ["MEMSIFT_MODEL_CACHE"])
    return env


def memsift(env: dict[str, str], *args: str | Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [MEMSIFT, *map(str, args)], env=env, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
    )


def index_json(env: dict[str, str], ws: Path, *extra: str) -> dict[str, Any]:
    done = memsift(env, "--workspace", ws, "index", "--json", *extra)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def search_paths(env: dict[str, str], ws: Path, query: str) -> list[str]:
    done = memsift(env, "--workspace", ws, "search", query, "--mode", "keyword", "--min-score", "0", "--json")
    assert done.returncode == 0, done.stderr
    return [hit["path"] for hit in json.loads(done.stdout)["results"]]


def one_line_error(done: subprocess.CompletedProcess[str], *needles: str) -> str:
    assert "Traceback" not in done.stderr and "Crash detected" not in done.stderr, done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("memsift: error: "), done.stderr
    for needle in needles:
        assert needle in done.stderr
    return done.stderr


@pytest.fixture
def user(tmp_path: Path) -> Path:
    return tmp_path / "user"


@pytest.fixture
def env(memsift_home: Path, user: Path) -> dict[str, str]:
    return user_env(memsift_home, user)


# ---------------------------------------------------------------- 1. one index per agent and workspace


def test_two_workspaces_of_the_default_agent_never_answer_for_or_delete_each_other(
    workspace, env: dict[str, str], memsift_home: Path
) -> None:
    a, b = workspace(A_NOTES, name="a"), workspace(B_NOTES, name="b")
    assert index_json(env, a)["added"] == 2
    second = index_json(env, b)
    assert (second["added"], second["removed"]) == (2, 0)
    assert index_json(env, a)["removed"] == 0 and index_json(env, b)["removed"] == 0

    assert search_paths(env, a, "deploy") == ["memory/2026-11-24.md"]
    assert search_paths(env, b, "deploy") == ["memory/2026-11-25.md"]
    assert search_paths(env, b, "ERR_SSL_PROTOCOL flat white") == []
    status = json.loads(memsift(env, "--workspace", b, "status", "--json").stdout)
    assert (status["workspace"], status["files"]) == (str(b.resolve()), {"memory": 2})
    assert sorted(p.name for p in (memsift_home / "memory").glob("*.sqlite")) == sorted(
        db_path(memsift_home, "main", ws.resolve()).name for ws in (a, b)
    )


def test_an_index_of_the_old_name_is_adopted_by_its_own_workspace_only(
    workspace, env: dict[str, str], memsift_home: Path
) -> None:
    """An index written before (`main.sqlite`, no workspace recorded) keeps serving its folder without a single
    embedding; another folder gets an index of its own and leaves it alone."""
    a, b = workspace(A_NOTES, name="a"), workspace(B_NOTES, name="b")
    index_json(env, a)
    legacy = legacy_db_path(memsift_home, "main")
    db_path(memsift_home, "main", a.resolve()).rename(legacy)
    conn = apsw.Connection(str(legacy))
    conn.execute("DELETE FROM meta WHERE key = 'workspace'")  # as the code before recorded none
    conn.close()

    assert index_json(env, b)["added"] == 2
    assert legacy.is_file(), "another folder took or changed the old index"
    adopted = index_json(env, a)
    assert (adopted["added"], adopted["removed"], adopted["chunksEmbedded"], adopted["rebuilt"]) == (0, 0, 0, False)
    assert not legacy.exists()
    assert search_paths(env, a, "ERR_SSL_PROTOCOL") == ["memory/2026-11-24.md"]


def test_an_index_recorded_for_another_folder_is_refused_in_one_line_naming_both(
    workspace, env: dict[str, str], memsift_home: Path
) -> None:
    """Were two folders ever to meet at one file name (a copied MEMSIFT_HOME, a hash collision), memsift
    neither answers from nor syncs into the other folder's index."""
    a, b = workspace(A_NOTES, name="a"), workspace(B_NOTES, name="b")
    index_json(env, a)
    a_db, b_db = (db_path(memsift_home, "main", ws.resolve()) for ws in (a, b))
    a_db.rename(b_db)
    for command in (["search", "deploy"], ["index"]):
        done = memsift(env, "--workspace", b, *command)
        assert done.returncode == 1
        one_line_error(done, f"belongs to the workspace {a.resolve()}, not to {b.resolve()}")
    conn = apsw.Connection(str(b_db))
    assert conn.execute("SELECT count(*) FROM files").fetchone() == (2,), "the other folder's rows were touched"
    conn.close()


# ---------------------------------------------------------------- 2. no server: no Prefect


def test_index_without_a_server_runs_without_prefect_and_writes_nothing_outside_home(
    workspace, env: dict[str, str], memsift_home: Path, user: Path
) -> None:
    ws = workspace(A_NOTES)
    for _ in range(2):  # a first index, then a no-op
        done = memsift(env, "--workspace", ws, "index")
        assert done.returncode == 0, done.stderr
    assert "0 added, 0 changed, 0 removed" in done.stdout
    assert done.stderr == (
        "not recorded as a Prefect flow run: no Prefect server is running (`memsift up` starts one, or set "
        "PREFECT_API_URL)\n"
    )
    assert list(user.iterdir()) == [], "written outside MEMSIFT_HOME: no ~/.prefect, no ~/.cache"
    assert not (memsift_home / "prefect").exists(), "Prefect was imported (it makes its home)"

    unreachable = memsift({**env, "PREFECT_API_URL": f"http://127.0.0.1:{free_port()}/api"}, "--workspace", ws, "index")
    assert unreachable.returncode == 0, unreachable.stderr
    assert "(PREFECT_API_URL) did not answer" in unreachable.stderr


# ---------------------------------------------------------------- a real `memsift up` for the tests that need one


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Up]:
    """One `memsift up` (its own Prefect server, watcher off) for this module's tests, on a home of its own."""
    root = tmp_path_factory.mktemp("up")
    home, ws = root / "home", root / "up-ws"
    ws.mkdir()
    (ws / "MEMORY.md").write_text("# Memory\n- the up fixture's own note\n")
    env = user_env(home, root / "user")
    env["MEMSIFT_SYNC_WATCH"] = "false"
    env.update(PREFECT_UI_ENABLED="false", MEMSIFT_API_PORT=str(free_port()))
    running = Up(["--workspace", str(ws), "up", "--prefect-port", str(free_port())], env, root / "up.log")
    try:
        wait_for(
            lambda: running.process.poll() is not None or "Ctrl-C stops everything" in running.output,
            240,
            "memsift up to be ready",
        )
        assert running.process.poll() is None, running.output
        yield running
    finally:
        if running.process.poll() is None:
            running.stop()


# ---------------------------------------------------------------- 4. one `up` per MEMSIFT_HOME


def test_a_second_up_refuses_at_once_naming_the_first_and_touches_nothing(up: Up, tmp_path: Path) -> None:
    address = up.api_url
    before = up.output
    second = memsift(up.env, "--workspace", tmp_path, "up", "--port", str(free_port()), timeout=60)
    assert second.returncode == 1
    assert second.stdout == ""
    assert second.stderr == (
        f"memsift: error: memsift up is already running on {up.home} (pid {up.process.pid}); stop it first "
        f"(Ctrl-C in its terminal, or kill {up.process.pid})\n"
    )
    assert up.api_url == address and httpx.get(f"{address}/health", timeout=10).status_code == 200
    assert up.process.poll() is None and up.output == before
    assert not list((up.home / "memory").glob(f"main.{tmp_path.name}-*")), "the second up indexed its folder"


# ---------------------------------------------------------------- 2. with a server: a recorded flow run


def test_index_with_up_running_is_a_flow_run_in_its_ui(up: Up, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "MEMORY.md").write_text(A_NOTES["MEMORY.md"])
    done = memsift(up.env, "--workspace", ws, "index")
    assert done.returncode == 0, done.stderr
    ui = up.api_url.removesuffix("/api")
    assert done.stderr.startswith(f"flow run: {ui}/runs/flow-run/"), done.stderr
    run_id = done.stderr.strip().rsplit("/", 1)[1]
    run = httpx.get(f"{up.api_url}/flow_runs/{run_id}", timeout=30).json()
    assert run["state"]["type"] == "COMPLETED" and run["parameters"]["workspace"] == str(ws.resolve())


# ---------------------------------------------------------------- 3. Ctrl-C


class Slow(FakeProvider):
    """The fake provider taking `stall_seconds` over every request: a long index on any machine."""

    def __post_init__(self) -> None:
        self.fault = lambda n: "stall"
        super().__post_init__()


@pytest.fixture
def slow() -> Iterator[Slow]:
    server = Slow(stall_seconds=0.3)
    yield server
    server.close()


def many_notes(ws: Path, count: int, offset: int = 0) -> None:
    for i in range(offset, offset + count):
        (ws / "memory").mkdir(parents=True, exist_ok=True)
        (ws / "memory" / f"note-{i:03d}.md").write_text(f"# note {i}\n- the parcel {i} went to shelf {i * 7}\n")


def slow_config(ws: Path, provider: FakeProvider) -> None:
    (ws / "memsift.toml").write_text(
        f'[embedding]\nprovider = "openai"\nbaseUrl = "{provider.url}"\nmodel = "fake-model"\n'
        "batchMaxInputs = 2\nconcurrency = 1\ntimeoutSeconds = 30\nretries = 0\n"
    )


MODES = {
    "no server, first index, SIGINT": ("", "rebuild", signal.SIGINT),
    "no server, sync, SIGTERM": ("", "sync", signal.SIGTERM),
    "--no-prefect, sync, SIGINT": ("--no-prefect", "sync", signal.SIGINT),
    "memsift up's server, first index, SIGINT": ("up", "rebuild", signal.SIGINT),
}


@pytest.mark.parametrize("mode", MODES)
def test_one_signal_stops_index_the_index_stays_sound_and_the_next_run_completes_it(
    mode: str, workspace, env: dict[str, str], slow: Slow, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    how, kind, sig = MODES[mode]
    if how == "up":
        env = request.getfixturevalue("up").env
    ws = workspace({"MEMORY.md": "# Memory\n- the zanzibarite sample\n"})
    slow_config(ws, slow)
    if kind == "sync":
        assert index_json(env, ws)["added"] == 1
    many_notes(ws, 60)
    flags = [how] if how == "--no-prefect" else []
    lock = db_path(Path(env["MEMSIFT_HOME"]), "main", ws.resolve()).with_suffix(".sqlite.lock")
    with open(tmp_path / "index.log", "wb") as out:
        process = subprocess.Popen(
            [MEMSIFT, "--workspace", str(ws), "index", *flags], env=env, stdout=out, stderr=subprocess.PIPE
        )
    try:
        served = len(slow.requests)
        # The run holds the writer lock and the provider has answered twice: it is indexing.
        wait_for(
            lambda: lock.exists() and lock.read_text() == str(process.pid) and len(slow.requests) > served + 2,
            120,
            "the index run to be embedding",
        )
        sent = time.monotonic()
        process.send_signal(sig)
        code = process.wait(timeout=60)  # a deadline, not a measure (the bound is 2 s)
        stopped_after = time.monotonic() - sent
        stderr = process.stderr.read().decode()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    print(f"{mode}: stopped {stopped_after:.2f} s after {sig.name}")
    assert code == 128 + sig, stderr
    assert "Traceback" not in stderr and "Crash detected" not in stderr, stderr
    assert stderr == (
        f"memsift: error: interrupted by {sig.name}; the index is as the last completed step left it; the next "
        "`memsift index` completes it\n"
    )
    db = lock.with_suffix("")
    assert not list(db.parent.glob(f"{db.name}.tmp-*")), "a temp file of the interrupted rebuild is left"
    if db.exists():
        conn = apsw.Connection(str(db))
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        conn.close()

    again = index_json(env, ws, *flags)
    assert again["filesScanned"] == 61
    assert memsift(env, "--workspace", ws, "status", "--json").stdout.count('"dirty": false') == 1
    assert search_paths(env, ws, "parcel 59")[0] == "memory/note-059.md"


# ---------------------------------------------------------------- 5. tracebacks and crashes


@pytest.mark.parametrize("server", [False, True], ids=["no server", "memsift up's server"])
def test_a_failed_rebuild_is_one_line(
    server: bool, workspace, env: dict[str, str], request: pytest.FixtureRequest
) -> None:
    if server:
        env = request.getfixturevalue("up").env
    provider = FakeProvider()
    try:
        ws = workspace(A_NOTES)
        slow_config(ws, provider)
        index_json(env, ws)
        provider.fault = lambda n: "503"
        done = memsift(env, "--workspace", ws, "index", "--force")
    finally:
        provider.close()
    assert done.returncode == 1 and done.stdout == ""
    one_line_error(done, "503")


class ZeroForQueries(FakeProvider):
    """Answers a query text (one input alone, as a search embeds it) with the zero vector, as providers can."""

    def _answer(self, path: str, body: dict[str, Any], fault: str | None) -> Any:
        texts, dims, answer = self._parse(path, body)
        zero = texts == ["deploy failed"]
        return answer([[0.0] * dims if zero else fake_vector(t, dims).tolist() for t in texts])


def test_a_zero_query_vector_answers_from_keywords_and_says_why(workspace, env: dict[str, str]) -> None:
    provider = ZeroForQueries()
    try:
        ws = workspace(A_NOTES)
        slow_config(ws, provider)
        index_json(env, ws)
        done = memsift(env, "--workspace", ws, "search", "deploy failed", "--json")
    finally:
        provider.close()
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["mode"] == "keyword" and "zero" in answer["degraded"]
    assert [hit["path"] for hit in answer["results"]] == ["memory/2026-11-24.md"]
