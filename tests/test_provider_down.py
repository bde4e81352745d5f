"""The embedding provider down for a whole sync (a real HTTP server on 127.0.0.1 answering 503).

With no fallback configured, an incremental sync still indexes the new text for keyword search, records that
its vectors are pending, and says so in its report and in `status`; searches answer from the keyword leg and
say why; once the provider is back, the next sync embeds exactly the text that waited. A provider that is
already down when a process starts (its start-up probe fails) gives the same keyword-only sync; a rebuild,
which needs the provider for every chunk, stops with the reason and leaves the index as it was.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from index_checks import chunks_without_vectors, content

from api.cli import main
from api.mcp_tools import MemoryTools
from core import MemoryIndex, load_config, memory_embedder
from core.config_types import Config
from core.embedders.hosted import PROBE_TEXT
from core.errors import EmbeddingError
from tests.fake_provider import FakeProvider

NOTES = {
    "MEMORY.md": "# Memory\n- Dana drinks a flat white every morning.\n",
    "memory/2026-11-24.md": "# 2026-11-24\n- The deploy failed with ERR_SSL_PROTOCOL.\n",
}
NEW_NOTE = "# 2026-11-30\n- The zeppelin hangar lease was signed on Friday.\n"


class Switchable(FakeProvider):
    """The fake provider with an off switch: every request answers 503 while `down`."""

    down = False

    def __post_init__(self) -> None:
        self.fault = lambda n: "503" if self.down else None
        super().__post_init__()


@pytest.fixture
def provider() -> Iterator[Switchable]:
    server = Switchable()
    yield server
    server.close()


@pytest.fixture
def config(workspace, provider: Switchable) -> Config:
    (workspace(NOTES) / "memsift.toml").write_text(
        f'[embedding]\nprovider = "openai"\nbaseUrl = "{provider.url}"\nmodel = "fake-model"\nretries = 0\n'
    )
    return load_config(workspace=workspace(NOTES))


def test_a_sync_with_the_provider_down_indexes_keywords_and_the_next_one_completes_the_vectors(
    config: Config, provider: Switchable, open_index
) -> None:
    index = open_index(config)  # a long-lived process (the API server): its embedder started while up
    index.sync()
    (config.workspace / "memory" / "2026-11-30.md").write_text(NEW_NOTE)

    provider.down = True
    report = index.sync()
    assert report.vectorsPending and report.added == 1 and report.chunksWritten == 1
    assert any("503" in w and "keyword search only" in w for w in report.warnings)
    answer = index.search("zeppelin hangar lease")
    assert answer.mode == "keyword" and "503" in answer.degraded
    assert answer.results[0].path == "memory/2026-11-30.md"  # the new note, found while the provider is down
    status = index.status()
    assert "503" in status["vectorsPending"]["reason"] and status["dirty"] and "503" in status["dirtyReason"]
    assert chunks_without_vectors(config.db_path) == 1

    provider.down = False
    served = len(provider.embedded)
    report = index.sync()
    assert not report.vectorsPending and report.chunksEmbedded == 1
    assert provider.embedded[served:] == ["# 2026-11-30\n- The zeppelin hangar lease was signed on Friday."]
    assert chunks_without_vectors(config.db_path) == 0
    status = index.status()
    assert status["vectorsPending"] is None and not status["dirty"]
    answer = index.search("zeppelin hangar lease", mode="vector")
    assert answer.degraded is None and answer.results[0].path == "memory/2026-11-30.md"
    assert [path for path, _ in content(config.db_path)[1]] == sorted([*NOTES, "memory/2026-11-30.md"])


def test_a_provider_down_when_the_process_starts_gives_the_same_keyword_only_sync(
    config: Config, provider: Switchable, capsys
) -> None:
    """`memsift index` in a new process: the provider's start-up probe fails, the index it built goes on."""
    with MemoryIndex(config) as index:
        index.sync()
    before = content(config.db_path)
    (config.workspace / "memory" / "2026-11-30.md").write_text(NEW_NOTE)
    provider.down = True
    cli = ["--workspace", str(config.workspace)]

    capsys.readouterr()
    assert main([*cli, "index", "--no-prefect"]) == 0
    assert "503" in capsys.readouterr().err  # the warning names the reason
    assert main([*cli, "search", "zeppelin hangar", "--json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["mode"] == "keyword" and "503" in answer["degraded"]
    assert answer["results"][0]["path"] == "memory/2026-11-30.md"
    assert main([*cli, "status", "--json"]) == 0  # no request (SPEC: the probe is --deep's): what the sync recorded
    status = json.loads(capsys.readouterr().out)
    assert status["embedderError"] is None and "503" in status["vectorsPending"]["reason"] and status["dirty"]
    assert main([*cli, "status", "--json", "--deep"]) == 1  # asked: the provider is down
    status = json.loads(capsys.readouterr().out)
    assert "503" in status["embedderError"] and status["probe"]["ok"] is False and status["dirty"]
    assert main([*cli, "index", "--no-prefect", "--force"]) == 1  # a rebuild needs the provider: it stops
    assert "503" in capsys.readouterr().err
    assert len(content(config.db_path)[1]) == len(before[1]) + 1  # and the index stays as it was

    provider.down = False
    assert main([*cli, "index", "--no-prefect", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["chunksEmbedded"] == 1  # exactly the text that waited
    assert chunks_without_vectors(config.db_path) == 0
    assert main([*cli, "status", "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["vectorsPending"] is None and status["embedderError"] is None and not status["dirty"]


@pytest.mark.usefixtures("prefect_harness")
def test_a_sync_flow_run_with_the_provider_down_is_the_same_keyword_only_sync(
    config: Config, provider: Switchable
) -> None:
    """The run a schedule, the watcher of `memsift up` or `memsift index` with a Prefect server starts: the flow
    asks whether to hand over to the rebuild flow before it syncs. Asked with no embedder, it took the index
    for another model's and started a `memsift-rebuild` subflow, which failed on the provider: every sync
    during the outage failed and the new note was not indexed, where `--no-prefect` indexed it keyword-only."""
    from flows.sync import run_sync
    from tests.test_flows import Runs

    with MemoryIndex(config) as index:
        index.sync()
    (config.workspace / "memory" / "2026-11-30.md").write_text(NEW_NOTE)
    provider.down = True
    runs = Runs()
    report = run_sync(workspace=str(config.workspace))
    assert report.added == 1 and report.vectorsPending and not report.rebuilt
    assert any("503" in w and "keyword search only" in w for w in report.warnings)
    assert runs.one().state.is_completed() and runs.new("memsift-rebuild") == []
    assert chunks_without_vectors(config.db_path) == 1


def test_a_search_with_the_provider_down_finds_a_note_written_since_the_last_sync(
    config: Config, provider: Switchable, capsys
) -> None:
    """A new process, the provider down at its start: `memsift search` syncs the note written since the last
    sync into the keyword index, as `memsift index` would. Before, it compared the index with the identity of
    no embedder at all, said "the configuration or model changed (model, provider)", which it had not, and
    answered without the note until `memsift index` ran."""
    with MemoryIndex(config) as index:
        index.sync()
    (config.workspace / "memory" / "2026-11-30.md").write_text(NEW_NOTE)
    provider.down = True
    capsys.readouterr()
    assert main(["--workspace", str(config.workspace), "search", "zeppelin hangar", "--json"]) == 0
    out, err = capsys.readouterr()
    answer = json.loads(out)
    assert answer["mode"] == "keyword" and "503" in answer["degraded"]
    assert answer["results"][0]["path"] == "memory/2026-11-30.md"
    assert "configuration or model changed" not in err
    assert chunks_without_vectors(config.db_path) == 1  # pending: the next sync with the provider back embeds it


def step_config(ws, provider: FakeProvider) -> Config:
    """One request at a time, about four chunks a request: one step of embedding (batchMaxInputs x
    concurrency inputs) is many requests, and a request's answer either came back or not."""
    (ws / "memsift.toml").write_text(
        f'[embedding]\nprovider = "openai"\nbaseUrl = "{provider.url}"\nmodel = "fake-model"\nretries = 0\n'
        "concurrency = 1\nbatchMaxBytes = 200\n"
    )
    return load_config(workspace=ws)


HERONS = {
    f"memory/2026-10-{n:02d}.md": f"# 2026-10-{n:02d}\n- Note {n}: the heron count was {n * 13}.\n"
    for n in range(1, 29)
}


def test_a_provider_that_gives_up_mid_step_loses_none_of_the_answers_it_gave(workspace) -> None:
    """The step's last request fails for good (retries spent): the rebuild (a forced run: it needs every vector)
    stops with the error, but the answers to the step's other requests were paid for and are kept, so the rerun
    embeds only the texts of the request that failed."""
    probe_and_requests = 1 + 7  # 28 chunks of ~47 bytes, four to a request of at most 200 bytes
    provider = FakeProvider(fault=lambda n: "500" if n == probe_and_requests else None)
    try:
        config = step_config(workspace(HERONS), provider)
        with MemoryIndex(config) as index, pytest.raises(EmbeddingError, match="HTTP 500"):
            index.sync(force=True)
        assert len(provider.requests) == probe_and_requests
        answered = [t for t in provider.embedded if t != PROBE_TEXT]
        assert len(answered) == 24

        with MemoryIndex(config) as index:
            report = index.sync()
        rerun = [t for t in provider.embedded[len(answered) + 1 :] if t != PROBE_TEXT]
        assert report.chunksEmbedded == len(rerun) == 4 and not set(rerun) & set(answered)
        assert report.cacheHits == 24 and chunks_without_vectors(config.db_path) == 0
    finally:
        provider.close()


def test_ctrl_c_mid_step_keeps_the_answers_the_step_already_received(workspace, memsift_home: Path) -> None:
    """`memsift index` stopped by Ctrl-C while a step's fifth request is in flight: the four answered before
    it reach the shared cache on the way out, so the rerun embeds only the texts never answered."""
    provider = FakeProvider(hold_at=1 + 5)  # the probe, four requests answered, the fifth held
    try:
        ws = workspace(HERONS)
        config = step_config(ws, provider)
        run = subprocess.Popen(
            [Path(sys.executable).parent / "memsift", "--workspace", str(ws), "index", "--no-prefect"],
            env=os.environ | {"MEMSIFT_HOME": str(memsift_home)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:
            assert provider.held.wait(120), "the run never reached its fifth request"
            answered = [t for t in provider.embedded if t != PROBE_TEXT]
            run.send_signal(signal.SIGINT)
            assert run.wait(timeout=60) == 130, run.stderr.read()
        finally:
            if run.poll() is None:
                run.kill()
                run.wait()
        assert len(answered) == 16

        served = len(provider.embedded)
        with MemoryIndex(config) as index:
            report = index.sync()
        rerun = [t for t in provider.embedded[served:] if t != PROBE_TEXT]
        assert report.chunksEmbedded == len(rerun) == 12 and not set(rerun) & set(answered)
        assert report.cacheHits == 16 and chunks_without_vectors(config.db_path) == 0
    finally:
        provider.close()


def first_index(how: str, config: Config, capsys) -> None:
    """The agent's first index, run as `memsift index` or as the sync a first `memsift search` runs."""
    cli = ["--workspace", str(config.workspace)]
    if how == "index":
        assert main([*cli, "index", "--no-prefect", "--json"]) == 0
        report = json.loads(capsys.readouterr().out)
        assert report["vectorsPending"] and report["chunksWritten"] == len(NOTES) and "503" in report["warnings"][0]
    else:
        assert main([*cli, "search", "flat white", "--json"]) == 0
        answer = json.loads(capsys.readouterr().out)
        assert "503" in answer["degraded"] and answer["results"][0]["path"] == "MEMORY.md"


@pytest.mark.parametrize("how", ["index", "search"])
def test_a_first_index_with_the_provider_down_says_so_until_the_next_sync_embeds_every_chunk(
    how: str, config: Config, provider: Switchable, capsys
) -> None:
    """The provider down from the start (even its start-up probe fails): the text is indexed for keyword search
    under the provider's identity, with its vectors pending. Before, `memsift index` failed and the first search
    built a keyword-only index of provider `none` that `status` called clean (`dirty: false`), and whose
    vectors waited for `memsift index --force` once the provider was back."""
    provider.down = True
    first_index(how, config, capsys)
    cli = ["--workspace", str(config.workspace)]
    assert main([*cli, "status", "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["dirty"] and status["provider"] == "openai" and status["vectorsPending"]["chunks"] == 2
    assert "2 of 2 chunks have no vector" in status["dirtyReason"] and "503" in status["dirtyReason"]
    assert main([*cli, "search", "deploy failed", "--json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["mode"] == "keyword" and "503" in answer["degraded"]
    assert answer["results"][0]["path"] == "memory/2026-11-24.md"

    provider.down = False
    served = len(provider.embedded)
    assert main([*cli, "index", "--no-prefect", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["chunksEmbedded"] == 2 and not report["rebuilt"] and not report["rebuildHeld"]
    chunk_texts = {text.strip() for text in NOTES.values()}
    assert {t for t in provider.embedded[served:] if t != PROBE_TEXT} == chunk_texts
    assert chunks_without_vectors(config.db_path) == 0
    assert main([*cli, "status", "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert not status["dirty"] and status["vectorsPending"] is None and status["dims"] == provider.dims
    assert main([*cli, "search", "deploy failed", "--json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["mode"] == "hybrid" and "degraded" not in answer
    assert answer["results"][0]["path"] == "memory/2026-11-24.md"


def test_a_provider_refusing_a_first_index_fails_memsift_index_and_the_first_search_says_dirty(
    config: Config, provider: Switchable, capsys
) -> None:
    """A refusal (HTTP 401: a key to fix) is no outage: `memsift index` stops with it, as before. A first search
    must answer all the same: keyword-only, and now `status` says dirty and why (it said `dirty: false`)."""
    provider.fault = lambda n: "401" if provider.down else None
    provider.down = True
    cli = ["--workspace", str(config.workspace)]
    capsys.readouterr()
    assert main([*cli, "index", "--no-prefect"]) == 1
    assert "HTTP 401" in capsys.readouterr().err
    assert main([*cli, "search", "flat white", "--json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert "401" in answer["degraded"] and answer["results"][0]["path"] == "MEMORY.md"
    assert main([*cli, "status", "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["dirty"] and "401" in status["dirtyReason"] and status["provider"] == "openai"

    provider.down = False  # the key fixed
    assert main([*cli, "index", "--no-prefect", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["chunksEmbedded"] == 2
    assert main([*cli, "status", "--json"]) == 0
    assert not json.loads(capsys.readouterr().out)["dirty"]


def test_serve_indexes_with_the_provider_down_and_searches_hybrid_again_once_it_is_back(
    config: Config, provider: Switchable, monkeypatch
) -> None:
    """`POST /v1/index` of `memsift serve` (in-process: no Prefect server answers) with the provider down, then
    back. Before, the run failed (FAILED: EmbedderUnavailable); and a server whose pooled index met the provider
    down kept answering keyword-only after it was back and its vectors were in, until a restart."""
    from litestar.testing import TestClient

    from api.app import create_app
    from api.prefect_server import free_port

    monkeypatch.setenv("PREFECT_API_URL", f"http://127.0.0.1:{free_port()}/api")  # nobody listens there
    monkeypatch.setattr(memory_embedder, "START_RETRY_SECONDS", 0.0)  # the minute between tries of a provider, elapsed

    def index_run(client: TestClient) -> dict:
        run = client.post("/v1/index", json={}).json()
        client.app.state.runs.wait(run["runId"], 120)
        done = client.get(f"/v1/index/{run['runId']}").json()
        assert done["state"] == "COMPLETED", done
        return done["summary"]

    provider.down = True
    app = create_app(config)
    with TestClient(app) as client:
        assert app.state.agents.ready.wait(60)
        assert index_run(client)["vectorsPending"]
        status = client.get("/v1/status").json()
        assert status["dirty"] and "2 of 2 chunks have no vector" in status["dirtyReason"]
        answer = client.post("/v1/search", json={"query": "flat white"}).json()
        assert answer["mode"] == "keyword" and "503" in answer["degraded"]
        assert answer["results"][0]["path"] == "MEMORY.md"

        provider.down = False
        assert index_run(client)["chunksEmbedded"] == 2
        assert not client.get("/v1/status").json()["dirty"]
        answer = client.post("/v1/search", json={"query": "flat white"}).json()
        assert answer["mode"] == "hybrid" and "degraded" not in answer
        assert answer["results"][0]["path"] == "MEMORY.md"


RELAYS = {f"memory/relay-{n:03d}.md": f"# relay {n}\n- The relay{n} pump is in bay {n}.\n" for n in range(70)}


def test_a_provider_failing_part_way_through_a_first_index_leaves_exactly_the_rest_pending(workspace, capsys) -> None:
    """70 notes in two batches, four to a request: the probe and two requests are answered (8 notes), then the
    provider fails. The run indexes all 70 for keyword search, asks nothing more (each request would wait out
    its retries again), says 62 chunks lack a vector; searches say so; the next sync embeds exactly those 62.
    Before, `memsift index` stopped with the 503 and left an unfinished index of no file."""
    provider = FakeProvider(fault=lambda n: "503" if n > 3 else None)
    try:
        ws = workspace(RELAYS)
        (ws / "memsift.toml").write_text(
            f'[embedding]\nprovider = "openai"\nbaseUrl = "{provider.url}"\nmodel = "fake-model"\nretries = 0\n'
            "concurrency = 1\nbatchMaxInputs = 4\n"
        )
        cli = ["--workspace", str(ws)]
        assert main([*cli, "index", "--no-prefect", "--json"]) == 0
        report = json.loads(capsys.readouterr().out)
        assert report["chunksWritten"] == 70 and report["chunksEmbedded"] == 8 and report["vectorsPending"]
        assert len(provider.requests) == 4  # the second batch sent none
        answered = [t for t in provider.embedded if t != PROBE_TEXT]
        config = load_config(workspace=ws)
        assert len(answered) == 8 and chunks_without_vectors(config.db_path) == 62
        assert main([*cli, "status", "--json"]) == 0
        assert "62 of 70 chunks have no vector" in json.loads(capsys.readouterr().out)["dirtyReason"]

        provider.fault = lambda n: None  # back: a search runs hybrid, and says which chunks it cannot see
        tools = MemoryTools(config)  # what `memsift mcp` answers with
        try:
            answer = tools.memory_search({"query": "relay7 pump"})
            assert answer["mode"] == "hybrid" and "62 chunks have no vector yet" in answer["degraded"]
            assert answer["results"][0]["path"] == "memory/relay-007.md"
        finally:
            tools.close()
        assert main([*cli, "index", "--dry-run", "--json"]) == 0  # what it will embed and cost: said 0 before
        dry = json.loads(capsys.readouterr().out)
        assert dry["chunksToEmbed"] == 62 and dry["estimatedRequests"] == 16  # four to a request
        served = len(provider.embedded)
        assert main([*cli, "index", "--no-prefect", "--json"]) == 0
        report = json.loads(capsys.readouterr().out)
        assert report["chunksEmbedded"] == report["plan"]["chunksToEmbed"] == 62
        rerun = [t for t in provider.embedded[served:] if t != PROBE_TEXT]
        assert len(rerun) == len(set(rerun)) == 62 and not set(rerun) & set(answered)
        assert chunks_without_vectors(config.db_path) == 0
        assert main([*cli, "search", "relay7 pump", "--json"]) == 0
        answer = json.loads(capsys.readouterr().out)
        assert answer["mode"] == "hybrid" and "degraded" not in answer
    finally:
        provider.close()


def test_a_search_on_a_stalled_provider_waits_one_timeout_not_every_retry(workspace, open_index) -> None:
    """A long-lived server whose provider stops answering (a black-holed route): each search's query embedding
    waited out `retries` + 1 timeouts and the backoff between them (4 x 120 s by default, 8 minutes per
    search) before degrading. A search's attempts now fit in one `timeoutSeconds` (at most 10 s)."""
    stalled = Switchable(stall_seconds=5.0)
    stalled.fault = lambda n: "stall" if stalled.down else None
    try:
        (workspace(NOTES) / "memsift.toml").write_text(
            f'[embedding]\nprovider = "openai"\nbaseUrl = "{stalled.url}"\nmodel = "fake-model"\n'
            "retries = 3\ntimeoutSeconds = 1\n"
        )
        index = open_index(load_config(workspace=workspace(NOTES)))
        index.sync()
        stalled.down = True
        sent = len(stalled.requests)
        answer = index.search("zeppelin deploy ERR_SSL_PROTOCOL")
        assert answer.mode == "keyword" and "timed out" in answer.degraded
        assert answer.results[0].path == "memory/2026-11-24.md"
        assert len(stalled.requests) - sent == 1  # one attempt fills the budget: no retry after it
    finally:
        stalled.close()


def test_a_new_model_configured_while_the_provider_is_down_is_not_reported_up_to_date(
    config: Config, provider: Switchable, capsys
) -> None:
    """The provider down when the process starts, and the model changed in the file: the index stood in with the
    old model's identity, so `status` said `dirty: no` and a sync went on under the old model as if nothing
    changed. It is the identity change it is with the provider up: the rebuild waits for `--force`."""
    with MemoryIndex(config) as index:
        index.sync()
    toml = config.workspace / "memsift.toml"
    toml.write_text(toml.read_text().replace('model = "fake-model"', 'model = "fake-model-2"'))
    provider.down = True
    cli = ["--workspace", str(config.workspace)]
    capsys.readouterr()
    assert main([*cli, "status", "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["model"] == "fake-model" and status["dirty"]
    assert "the index identity changed (model)" in status["dirtyReason"]  # dims, fingerprint: not known yet
    assert "`memsift index --force`" in status["dirtyReason"]
    assert main([*cli, "index", "--no-prefect", "--json"]) == 0
    assert "model" in json.loads(capsys.readouterr().out)["rebuildHeld"]


def test_provider_auto_down_at_start_gives_the_same_keyword_only_sync(
    workspace, provider: Switchable, capsys, monkeypatch
) -> None:
    """`provider = "auto"` resolved to openai: the index names `openai`, the file `auto`, so nothing stood in for
    the provider down at start: `memsift index` failed (exit 1) where `provider = "openai"` syncs keyword-only,
    and `status` said "the configuration or model changed: the next sync rebuilds", which it had not."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-auto")
    ws = workspace(NOTES)
    (ws / "memsift.toml").write_text(
        f'[embedding]\nprovider = "auto"\nbaseUrl = "{provider.url}"\nmodel = "fake-model"\nretries = 0\n'
    )
    cli = ["--workspace", str(ws)]
    assert main([*cli, "index", "--no-prefect"]) == 0
    provider.down = True
    (ws / "memory" / "2026-11-30.md").write_text(NEW_NOTE)
    capsys.readouterr()
    assert main([*cli, "status", "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["dirtyReason"] == "1 file new or modified, 0 removed"
    assert main([*cli, "index", "--no-prefect", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["vectorsPending"] and report["added"] == 1 and not report["rebuilt"]


def test_a_start_on_a_stalled_provider_waits_one_timeout_not_every_retry(workspace, capsys) -> None:
    """The start-up probe (`status --deep`, a served API's readiness, a CLI search's first embedder) ran the
    indexing schedule on a provider that stopped answering: `retries` + 1 timeouts and the backoff between
    them (4 x 120 s by default), so `status --deep` as a container's health check hung for 8 minutes. It is
    bounded as a query is: one `timeoutSeconds`, at most 10 s, for all its attempts and waits."""
    stalled = Switchable(stall_seconds=5.0)
    stalled.fault = lambda n: "stall"
    try:
        ws = workspace(NOTES)
        (ws / "memsift.toml").write_text(
            f'[embedding]\nprovider = "openai"\nbaseUrl = "{stalled.url}"\nmodel = "fake-model"\n'
            "retries = 3\ntimeoutSeconds = 1\n"
        )
        assert main(["--workspace", str(ws), "status", "--deep", "--json"]) == 1
        assert len(stalled.requests) == 1  # one attempt fills the budget: no retry after it
        said = capsys.readouterr().err
        assert "the embedder probe failed" in said and "after 1 attempt in the 1 s allowed: timed out" in said
    finally:
        stalled.close()
