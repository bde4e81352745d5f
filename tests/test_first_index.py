"""A search while an agent's first index runs elsewhere answers from the batches written so far, and says so.

The first index is written into the live file batch by batch (core.memory_sync `_sync_with`), so a search from
another process (`memsift search`) or thread (`memsift serve` after `POST /v1/index`) answers at once from
the files indexed so far, with `degraded` naming the run and how far it is, instead of waiting
`sync.lockTimeoutSeconds` and failing (exit 1, 503). The fake provider (tests/fake_provider.py) holds the
first request of the second batch, so the first one (64 files) is committed and the rest is not.
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

import httpx
import pytest
from conftest import wait_for as poll

import core.sync_plan
from api.prefect_server import free_port
from core import load_config
from core.config_home import db_path
from core.memory import MemoryIndex
from core.store import StoreError
from tests.fake_provider import FakeProvider

MEMSIFT = Path(sys.executable).with_name("memsift")
NOTES = 70  # two batches (core.sync_plan.BATCH_FILES = 64): 64 files, then 6
SLICE = 4  # embedding.batchMaxInputs: one request per four one-chunk notes
HOLD = 1 + 64 // SLICE + 1  # the start-up probe, the first batch's 16 requests, the second batch's first


@pytest.fixture
def provider() -> Iterator[FakeProvider]:
    server = FakeProvider(hold_at=HOLD)
    yield server
    server.close()


@pytest.fixture
def ws(workspace, provider: FakeProvider) -> Path:
    notes = {f"memory/relay-{n:03d}.md": f"# relay {n}\n- The relay{n} pump is in bay {n}.\n" for n in range(NOTES)}
    root = workspace(notes)
    (root / "memsift.toml").write_text(
        f'[embedding]\nprovider = "openai"\nbaseUrl = "{provider.url}"\nmodel = "fake-model"\n'
        f"batchMaxInputs = {SLICE}\nconcurrency = 1\nretries = 0\n"
        "[sync]\nlockTimeoutSeconds = 2\n"  # without the fix a search failed after this wait
    )
    return root


@pytest.fixture
def env(memsift_home: Path) -> dict[str, str]:
    return os.environ | {"MEMSIFT_HOME": str(memsift_home), "PREFECT_API_URL": ""}


def memsift(env: dict[str, str], ws: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [MEMSIFT, "--workspace", str(ws), *args], env=env, capture_output=True, text=True, timeout=120
    )


def running(done: int, pid: int) -> str:
    return f"the first index of this agent is running (pid {pid}): {done} of {NOTES} files indexed so far"


def test_search_and_status_during_another_process_first_index(ws: Path, env, provider: FakeProvider) -> None:
    child = subprocess.Popen([MEMSIFT, "--workspace", str(ws), "index", "--no-prefect"], env=env)
    try:
        assert provider.held.wait(120), "the first index never reached its second batch"
        found = memsift(env, ws, "search", "relay pump bay", "--max-results", "3", "--json")
        assert found.returncode == 0, found.stderr
        answer = json.loads(found.stdout)
        assert answer["degraded"].startswith(running(64, child.pid)), answer
        assert len(answer["results"]) == 3 and all(r["path"].startswith("memory/relay-") for r in answer["results"])
        human = memsift(env, ws, "search", "relay pump bay", "--max-results", "1")
        assert human.returncode == 0 and human.stdout.startswith(tuple("0123456789"))
        assert f"note: {running(64, child.pid)}" in human.stderr and "warning" not in human.stderr

        status = json.loads(memsift(env, ws, "status", "--json").stdout)
        assert status["dirty"] and status["files"] == {"memory": 64}
        assert status["dirtyReason"].startswith(f"the first index is not finished: 64 of {NOTES} files indexed")
        provider.release()
        assert child.wait(120) == 0
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    done = json.loads(memsift(env, ws, "search", "relay pump bay", "--json").stdout)
    assert "degraded" not in done
    status = json.loads(memsift(env, ws, "status", "--json").stdout)
    assert not status["dirty"] and status["files"] == {"memory": NOTES}


def test_a_search_after_a_killed_first_index_completes_it(ws: Path, env, provider: FakeProvider) -> None:
    """The killed run's first batch stays in the live file; the next search syncs the other six files."""
    with subprocess.Popen([MEMSIFT, "--workspace", str(ws), "index", "--no-prefect"], env=env) as child:
        assert provider.held.wait(120), "the first index never reached its second batch"
        child.send_signal(signal.SIGKILL)
    before = len(provider.embedded)  # the held request is never answered
    found = memsift(env, ws, "search", "relay69 pump", "--json")
    assert found.returncode == 0, found.stderr
    assert (
        found.stderr
        == "note: the first index of agent main was interrupted after 64 files: completing it before searching\n"
    )
    answer = json.loads(found.stdout)
    assert "degraded" not in answer and answer["results"][0]["path"] == "memory/relay-069.md"
    notes = [t for t in provider.embedded[before:] if t.startswith("# relay")]
    assert len(notes) == NOTES - 64  # the second batch's files: the first batch's 64 stayed in the index
    status = json.loads(memsift(env, ws, "status", "--json").stdout)
    assert not status["dirty"] and status["files"] == {"memory": NOTES}


#: The text of the second batch's first embedding request (notes 64 to 67): held, the first batch is committed
SECOND_BATCH = "The relay64 pump"


def test_serve_indexes_a_never_indexed_agent_at_start_up_and_a_search_meanwhile_waits_a_bounded_time(
    ws: Path, env, provider: FakeProvider, memsift_home: Path
) -> None:
    """`memsift serve` started no index until a search came, and that search then waited for all of it (88 s
    for locomo-dev's conv-26, 19 notes, on 2 busy cores; no bound), while /readyz said ready at once. It now
    starts the first index itself at start-up; a search meanwhile waits for it `sync.lockTimeoutSeconds` (2 s
    here) at most, then answers from the batch committed, saying so; /readyz is 503, naming how far the index
    is, until it is complete."""
    provider.hold_at, provider.hold_text = 0, SECOND_BATCH
    server, port = _serve(ws, env)
    try:
        assert provider.held.wait(180), "the server did not start the first index by itself"
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as http:
            poll(lambda: _answers(http, server), 120, "memsift serve to answer")
            r = http.get("/readyz")
            assert r.status_code == 503 and r.json()["ready"] is False, r.text
            assert r.json()["firstIndex"]["main"].startswith(f"64 of {NOTES} files indexed; indexing since start-up: ")
            started = time.monotonic()
            r = http.post("/v1/search", json={"query": "relay pump bay", "maxResults": 3})
            waited = time.monotonic() - started
            assert r.status_code == 200, r.text
            assert r.json()["degraded"].startswith(running(64, server.pid)) and len(r.json()["results"]) == 3
            assert 2 <= waited < 60, waited  # sync.lockTimeoutSeconds, then the answer: not the whole index
            provider.release()
            poll(lambda: _ready(http, server), 120, "the first index to complete")
            assert "firstIndex" not in http.get("/readyz").json()
            found = http.post("/v1/search", json={"query": "relay69 pump"}).json()
            assert "degraded" not in found and found["results"][0]["path"] == "memory/relay-069.md", found
    finally:
        server.terminate()  # a user's Ctrl-C; its stderr, whole
        stderr = server.communicate(timeout=60)[1].decode(errors="replace")
    assert "memsift serve: agent main is not indexed yet: indexing it at start-up\n" in stderr, stderr
    assert f"memsift serve: first index of main done: {NOTES} files, " in stderr, stderr
    assert db_path(memsift_home, "main", ws.resolve()).exists()


def _answers(http: httpx.Client, server: subprocess.Popen[bytes]) -> bool:
    assert server.poll() is None, server.stderr.read().decode(errors="replace") if server.stderr else ""
    try:
        return http.get("/healthz").status_code == 200
    except httpx.TransportError:
        return False


def _serve(ws: Path, env, *options: str) -> tuple[subprocess.Popen[bytes], int]:
    """`memsift serve` of the workspace on a free port, its stderr kept for the assertions."""
    port = free_port()
    cmd = [MEMSIFT, "--workspace", str(ws), "serve", "--port", str(port), *options]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE), port


def _ready(http: httpx.Client, server: subprocess.Popen[bytes]) -> bool:
    assert server.poll() is None, server.stderr.read().decode(errors="replace") if server.stderr else ""
    try:
        return http.get("/readyz").status_code == 200
    except httpx.TransportError:
        return False


@pytest.mark.parametrize("run", ["start-up", "route"])
def test_serve_stopped_during_an_index_run_exits_at_once_and_the_next_sync_completes_it(
    ws: Path, env, provider: FakeProvider, run: str
) -> None:
    """SIGTERM while the server's index run (its start-up first index, or a `POST /v1/index`) waits on an
    embedding request: the server exits at once with 0, not when the request ends; the first batch stays, and
    the next `memsift index` adds only the rest."""
    code, stderr, _ = _stop_serve_mid_index(ws, env, provider, run == "route")
    assert code == 0, stderr
    assert "stopped during an index run: the index is as its last completed batch left it" in stderr
    assert "Traceback" not in stderr
    assert json.loads(memsift(env, ws, "status", "--json").stdout)["files"] == {"memory": 64}
    again = memsift(env, ws, "index", "--no-prefect", "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["added"] == NOTES - 64
    status = json.loads(memsift(env, ws, "status", "--json").stdout)
    assert not status["dirty"] and status["files"] == {"memory": NOTES}


def test_a_first_index_that_finished_meanwhile_is_no_partial_answer(workspace) -> None:
    """The search saw the first index running, then it finished before the search read how far it was: the
    answer covers everything (it raised a TypeError reading the count of a finished index's mark)."""
    with MemoryIndex(load_config(workspace=workspace({"MEMORY.md": "- The heron pipeline shipped.\n"}))) as index:
        index.sync()
        assert index._partial(index.store) is None


@pytest.mark.usefixtures("prefect_harness")
def test_serve_stopped_during_a_recorded_index_run_marks_its_flow_run_crashed(
    ws: Path, env, provider: FakeProvider
) -> None:
    """With a Prefect server at PREFECT_API_URL, the server's index run is a flow run there. Exiting at once
    without unwinding it left it Running in the UI for good; the stopping server now marks it Crashed."""
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL

    code, stderr, pid = _stop_serve_mid_index(ws, env | {"PREFECT_API_URL": PREFECT_API_URL.value()}, provider, True)
    assert code == 0 and "its flow run is marked Crashed in Prefect" in stderr, stderr
    with get_client(sync_client=True) as client:
        (run,) = [r for r in client.read_flow_runs() if r.parameters.get("workspace") == str(ws.resolve())]
    assert run.name.startswith("sync-main-") and run.state.is_crashed(), run.state
    assert f"memsift serve (pid {pid}) stopped during this run" in run.state.message


def _stop_serve_mid_index(ws: Path, env, provider: FakeProvider, route: bool) -> tuple[int, str, int]:
    """SIGTERM to `memsift serve` while its index run waits on an embedding request of the second batch (held
    here; the provider's timeout is 600 s): (its exit code, its stderr, its pid). The run is the server's
    start-up first index, or with `route` a `POST /v1/index` (a flow run when Prefect answers): the server then
    starts over an index of no note, and the notes come back once it is ready."""
    toml = ws / "memsift.toml"
    toml.write_text(toml.read_text().replace("retries = 0\n", "retries = 0\ntimeoutSeconds = 600\n"))
    provider.hold_at, provider.hold_text = 0, SECOND_BATCH
    if route:
        toml.write_text(toml.read_text() + "watch = false\n")  # the notes coming back are the route's to sync
        (ws / "memory").rename(ws / "aside")
        assert memsift(env, ws, "index", "--no-prefect").returncode == 0
    server, port = _serve(ws, env)
    try:
        if route:
            with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as http:
                poll(lambda: _ready(http, server), 120, "memsift serve to be ready")
                (ws / "aside").rename(ws / "memory")
                assert http.post("/v1/index", json={}).status_code == 202
        assert provider.held.wait(180), "the index run never reached its second batch"
        server.send_signal(signal.SIGTERM)
        code = server.wait(60)  # a deadline, not a measure: before, the server waited for the held request
        return code, server.stderr.read().decode(errors="replace"), server.pid
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


def test_a_search_whose_first_index_cannot_be_written_answers_from_the_batches_committed(
    workspace, make_config, open_index, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A first index stopped by a full disk (SQLITE_FULL; `max_page_count` makes the same error without filling a
    disk) leaves its committed batches. A search completes such an index first, and that failed too: the search
    failed (`memsift: error: cannot write the index ...: database or disk is full`, exit 1), where a finished
    index only notes that changed files were not synced. It answers from the files indexed, and says why."""
    monkeypatch.setattr(core.sync_plan, "BATCH_FILES", 2)
    lines = "".join(f"- Okapi census line {j}: herd {j * 7} near the ridge.\n" for j in range(120))
    ws = workspace({f"memory/2026-02-{n:02d}.md": f"# Day {n}\n{lines}" for n in range(1, 21)})
    index = open_index(make_config(ws, **{"embedding.provider": "none"}))
    pages = index.store.conn.execute("PRAGMA page_count").fetchone()[0]
    index.store.conn.execute(f"PRAGMA max_page_count = {pages + 60}")
    with pytest.raises(StoreError, match="database or disk is full"):
        index.sync()
    done = sum(index.store.stats()["files"].values())
    assert 0 < done < 20

    answer = index.search("okapi census herd", min_score=0).to_dict()
    assert answer["results"]
    assert answer["degraded"].startswith("the first index of this agent is not finished (cannot write the index ")
    assert f"database or disk is full): {done} of 20 files indexed, the answers come from those" in answer["degraded"]

    index.store.conn.execute("PRAGMA max_page_count = 1073741823")  # room again: the next search completes it
    answer = index.search("okapi census herd", min_score=0).to_dict()
    assert "not finished" not in answer["degraded"]  # only that the index is keyword-only (no provider)
    assert sum(index.store.stats()["files"].values()) == 20


FEW = 3  # notes of the servers' first-index tests: each one chunk, one embedding request (batchMaxInputs 4)


@pytest.fixture
def few(workspace, memsift_home: Path) -> Iterator[tuple[Path, dict[str, str], FakeProvider]]:
    """A never-indexed workspace of `FEW` notes on the fake provider, the environment to serve it, the provider."""
    provider = FakeProvider()
    root = workspace({f"memory/valve-{n}.md": f"# valve {n}\n- The valve{n} is in bay {n}.\n" for n in range(FEW)})
    (root / "memsift.toml").write_text(
        f'[embedding]\nprovider = "openai"\nbaseUrl = "{provider.url}"\nmodel = "fake-model"\nbatchMaxInputs = 4\n'
    )
    env = os.environ | {"MEMSIFT_HOME": str(memsift_home), "PREFECT_API_URL": "", "OPENAI_API_KEY": "sk-test"}
    yield root, env, provider
    provider.close()


def _first_index_lines(stderr: str, server: str) -> list[str]:
    return [line for line in stderr.splitlines() if "index" in line and line.startswith(f"memsift {server}: ")]


@pytest.mark.parametrize("workers", [[], ["--workers", "1"]], ids=["threads", "workers"])
def test_serve_says_on_stderr_when_its_start_up_first_index_starts_and_ends(few, workers: list[str]) -> None:
    """`memsift serve` of a never-indexed agent indexes it at start-up: minutes for thousands of notes, and a
    server that said nothing meanwhile (470 s on 229 notes) could not be told from a hung one. It says it
    starts, how much there is, and what it did, once; with search workers too (it runs in the server process)."""
    ws, env, _ = few
    server, port = _serve(ws, env, *workers)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as http:
            poll(lambda: _ready(http, server), 120, "memsift serve to be ready")
            for _ in range(2):  # the index is complete: the searches say nothing more
                r = http.post("/v1/search", json={"query": "valve bay", "minScore": 0})
                assert r.status_code == 200 and r.json()["results"] and "degraded" not in r.json(), r.text
    finally:
        server.terminate()  # a user's Ctrl-C; its stderr, whole
        stderr = server.communicate(timeout=30)[1].decode()
    lines = _first_index_lines(stderr, "serve")
    assert lines[:2] == [
        "memsift serve: agent main is not indexed yet: indexing it at start-up",
        f"memsift serve: first index of main: {FEW} files to index, {FEW} chunks to embed",
    ], stderr
    assert len(lines) == 3 and lines[2].startswith(
        f"memsift serve: first index of main done: {FEW} files, {FEW} chunks ({FEW} embedded), "
    ), stderr


def test_mcp_says_its_start_up_first_index_on_stderr_and_as_progress_of_a_call_waiting_for_it(few) -> None:
    """`memsift mcp` over stdio, raw JSON-RPC as a client sends it: the agent, never indexed, is indexed at
    start-up; a `memory_search` with a `_meta.progressToken` that comes meanwhile waits for it and gets its
    `notifications/progress` before the answer (progress only growing, the last one complete), so a client that
    resets its request timeout on progress (the TypeScript SDK's `resetTimeoutOnProgress`) sees work, not a
    silent call; the answer then covers every note. stderr (which MCP clients log) says it starts and ends;
    stdout carries nothing but the protocol."""
    ws, env, provider = few
    provider.hold_text = "The valve0 is"  # the notes' one embedding request, held until the call waits
    toml = ws / "memsift.toml"
    toml.write_text(toml.read_text() + "[sync]\nlockTimeoutSeconds = 120\n")  # the call waits it out
    opening = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "pipe", "version": "1"}}
    search = {"name": "memory_search", "arguments": {"query": "valve bay", "minScore": 0}}
    lines = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": opening},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {**search, "_meta": {"progressToken": "p1"}}},
    ]
    proc = subprocess.Popen(
        [MEMSIFT, "--workspace", str(ws), "mcp"], env=env,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert provider.held.wait(120), "the server did not start the first index by itself"
        proc.stdin.write("".join(json.dumps(line) + "\n" for line in lines))
        proc.stdin.flush()
        messages = [json.loads(proc.stdout.readline())]  # the handshake's answer
        messages.append(json.loads(proc.stdout.readline()))  # the call waits: the run's progress so far
        assert messages[-1].get("method") == "notifications/progress", messages
        provider.release()
        while messages[-1].get("id") != 2:
            messages.append(json.loads(proc.stdout.readline()))
        proc.stdin.close()  # the client is done: the server ends
        assert proc.wait(60) == 0
        stderr = proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    progress = [m["params"] for m in messages if m.get("method") == "notifications/progress"]
    assert progress and all(p["progressToken"] == "p1" for p in progress), messages
    values = [p["progress"] for p in progress]
    assert values == sorted(set(values)) and values[-1] == progress[-1]["total"] == 2 * FEW, progress
    assert progress[0]["message"] == f"first index of this agent: 0/{FEW} chunks embedded", progress
    answer = messages[-1]["result"]["structuredContent"]
    assert len(answer["results"]) == FEW and "degraded" not in answer, answer
    said = _first_index_lines(stderr, "mcp")
    assert said[0] == "memsift mcp: agent main is not indexed yet: indexing it at start-up"
    assert len(said) == 3 and said[2].startswith(f"memsift mcp: first index of main done: {FEW} files, "), said


def test_a_server_s_first_index_lines_come_every_ten_seconds() -> None:
    """A long first index gets a line about every `LINE_SECONDS` with the figures of `memsift index`'s bar (the
    sync's events come after every embedding request: a line each would be thousands), a short one none."""
    from api.progress import LINE_SECONDS, FirstIndexLines
    from core.progress import ProgressEvent

    said: list[str] = []
    now = [0.0]
    lines = FirstIndexLines(said.append, "main", clock=lambda: now[0])
    lines.started(0)
    for t, chunks in [(0, 0), (3, 10), (LINE_SECONDS + 1, 40), (LINE_SECONDS + 5, 60), (2 * LINE_SECONDS + 2, 100)]:
        now[0] = t
        lines.progress(ProgressEvent(chunks, 100, chunks // 10, 10, seconds=t))
    assert said == [
        "agent main is not indexed yet: indexing it before answering a search",
        "first index of main: 10 files to index, 100 chunks to embed",
        "first index of main: 4/10 files written, 40/100 chunks embedded, 3.6 chunks/s, ETA 16 s, 11 s",
        "first index of main: 10/10 files written, 100/100 chunks embedded, 4.5 chunks/s, 22 s",
    ]
