"""`embedding.fallback`: a provider that fails a sync hands the index to the fallback, once, and recorded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import CountingEmbedder, FailingEmbedder, file_digest

from api.cli import main
from core.embedders import EmbeddingError
from core.embedders.local import LocalEmbedder

NOTES = {
    "MEMORY.md": "# Memory\n- Dana drinks a flat white every morning.\n- The ledger runs on PostgreSQL 15.\n",
    "memory/2026-11-24.md": "# 2026-11-24\n- The deploy failed with ERR_SSL_PROTOCOL.\n- PR #17 pins OpenSSL.\n",
    "memory/2026-11-26.md": "# 2026-11-26\n- Priya wants offline mode in Q1.\n- Conflicts: last writer wins.\n",
    "memory/2026-11-28.md": "# 2026-11-28\n- Replication lag reached 40 s.\n- Missing index on settlements.\n",
}
# A provider that is configured but cannot answer: nothing listens on port 9.
UNREACHABLE = {"embedding.baseUrl": "http://127.0.0.1:9/v1", "embedding.retries": 0, "embedding.timeoutSeconds": 5}


def index_then_add_a_new_note(ws: Path, config, open_index) -> str:
    """Index the workspace with the healthy model, then add a note no cache holds; the index file's digest."""
    first = open_index(config, embedder=CountingEmbedder())
    first.sync()
    first.close()
    (ws / "memory" / "2026-11-30.md").write_text("# 2026-11-30\n- A note the cache has never seen.\n")
    return file_digest(config.db_path)


def quota_exhausted(fail_on_call: int) -> FailingEmbedder:
    """The real model, failing as a provider does after its retries, from its n-th document request on."""
    return FailingEmbedder(fail_on_call, EmbeddingError("provider answered 429 after 3 retries: quota exceeded"))


@pytest.fixture
def ws(workspace):
    return workspace(NOTES)


@pytest.fixture(autouse=True)
def _no_provider_keys(monkeypatch):
    for name in ("OPENAI_API_KEY", "GEMINI_API_KEY", "VOYAGE_API_KEY", "MISTRAL_API_KEY"):
        monkeypatch.delenv(name, raising=False)


def test_a_provider_failing_mid_sync_switches_to_the_fallback_until_forced_back(ws, make_config, open_index):
    config = make_config(
        ws, **{"embedding.provider": "local", "embedding.fallback": "local", "embedding.batchMaxInputs": 1}
    )
    flaky = quota_exhausted(fail_on_call=3)  # two notes embedded, then the quota runs out
    index = open_index(config, embedder=flaky)
    report = index.sync()
    assert flaky.calls == 2
    assert report.rebuilt and report.chunksWritten == 4
    assert report.fallback is not None and "quota exceeded" in report.fallback
    assert any("fallback 'local'" in w for w in report.warnings)

    status = index.status()
    assert status["fallback"]["from"] == "local" and status["fallback"]["to"] == "local"
    assert status["fallback"]["reason"].startswith("EmbeddingError: ") and "quota" in status["fallback"]["reason"]
    assert not status["dirty"]
    assert index.embedder() is LocalEmbedder.shared()  # searches use what the index was built with
    response = index.search("deploy failed ERR_SSL_PROTOCOL")
    assert response.degraded is None and response.mode == "hybrid"
    assert response.results[0].path == "memory/2026-11-24.md"

    # The next sync stays on the fallback: the provider is not tried (it would fail at once).
    (ws / "memory" / "2026-11-29.md").write_text("# 2026-11-29\n- Zanzibar offsite booked.\n")
    again = quota_exhausted(fail_on_call=1)
    report = open_index(config, embedder=again).sync()
    assert again.calls == 0 and again.documents == []
    assert report.added == 1 and not report.rebuilt and report.fallback == status["fallback"]["reason"]

    # `memsift index --force` tries the provider again; healthy, it takes over and the record goes.
    (ws / "memory" / "2026-11-30.md").write_text("# 2026-11-30\n- Quota raised to 1M tokens.\n")
    healthy = CountingEmbedder()
    index = open_index(config, embedder=healthy)
    report = index.sync(force=True)
    assert report.rebuilt and report.fallback is None
    assert any("Quota raised" in text for text in healthy.documents)  # the rest is served by the cache
    assert index.status()["fallback"] is None
    assert index.embedder() is healthy
    assert index.search("Zanzibar offsite").results[0].path == "memory/2026-11-29.md"


def test_a_provider_that_cannot_start_falls_back_to_the_local_model(ws, make_config, open_index):
    config = make_config(
        ws,
        **{"embedding.provider": "openai", "embedding.model": "text-embedding-3-small", "embedding.fallback": "local"},
        **UNREACHABLE,
    )
    index = open_index(config)
    report = index.sync()
    assert report.rebuilt and report.chunksWritten == 4 and report.fallback
    status = index.status()
    # The fallback is another provider: the primary's model and endpoint were not passed to it.
    assert status["provider"] == "local" and status["model"] == LocalEmbedder.shared().model and status["dims"]
    assert status["fallback"]["from"] == "openai" and status["fallback"]["to"] == "local"
    response = index.search("flat white")
    assert response.degraded is None and response.provider == "local"
    assert response.results[0].path == "MEMORY.md"


def test_the_primarys_endpoint_and_model_settings_do_not_reach_a_fallback_of_another_provider(
    ws, make_config, open_index
):
    """A proxy's credentials in `embedding.headers`, and the dimensions and prefixes of the primary's model,
    went to the fallback's service too (the key alone was kept back)."""
    primary = {
        "embedding.provider": "openai",
        "embedding.apiKey": "sk-primary-0123456789abcdef",
        "embedding.headers": {"X-Proxy-Auth": "proxy-secret-0123456789"},
        "embedding.dimensions": 256,
        "embedding.queryPrefix": "query: ",
        "embedding.documentPrefix": "passage: ",
    }
    fallback = open_index(make_config(ws, **primary, **{"embedding.fallback": "ollama"}))._fallback_config()
    assert (fallback.provider, fallback.model, fallback.baseUrl, fallback.apiKey) == ("ollama", None, None, None)
    assert (fallback.headers, fallback.dimensions, fallback.queryPrefix, fallback.documentPrefix) == (
        {},
        None,
        None,
        None,
    )
    same = open_index(make_config(ws, **primary, **{"embedding.fallback": "openai"}))._fallback_config()
    assert same.headers == primary["embedding.headers"] and same.dimensions == 256  # the same provider: all of it


def test_without_a_fallback_the_error_propagates_and_the_index_is_unchanged(ws, make_config, open_index):
    config = make_config(ws)
    assert config.embedding.fallback == "none"
    before = index_then_add_a_new_note(ws, config, open_index)

    index = open_index(config, embedder=quota_exhausted(fail_on_call=1))
    with pytest.raises(EmbeddingError, match="quota exceeded"):
        index.sync(force=True)
    assert index.status()["fallback"] is None
    index.close()
    assert file_digest(config.db_path) == before


def test_a_fallback_that_fails_too_raises_the_original_error_with_its_failure(ws, make_config, open_index):
    config = make_config(ws, **{"embedding.fallback": "ollama", "embedding.retries": 0, "embedding.timeoutSeconds": 5})
    before = index_then_add_a_new_note(ws, config, open_index)

    index = open_index(config, embedder=quota_exhausted(fail_on_call=1))
    with pytest.raises(EmbeddingError, match="quota exceeded.*the fallback 'ollama' failed too: ") as raised:
        index.sync(force=True)
    assert raised.value.__cause__ is not None
    assert index.status()["fallback"] is None
    index.close()
    assert file_digest(config.db_path) == before


def test_the_cli_indexes_on_the_fallback_and_status_shows_the_switch(ws, capsys):
    (ws / "memsift.toml").write_text(
        '[embedding]\nprovider = "openai"\nbaseUrl = "http://127.0.0.1:9/v1"\nretries = 0\nfallback = "local"\n'
    )
    capsys.readouterr()
    assert main(["--workspace", str(ws), "index", "--no-prefect", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["fallback"] and report["chunksWritten"] == 4
    assert main(["--workspace", str(ws), "status", "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert (status["fallback"]["from"], status["fallback"]["to"]) == ("openai", "local")
    assert status["provider"] == "local" and status["embedderError"] is None


def test_the_sync_flow_falls_back_too(ws, prefect_harness, monkeypatch):
    from flows.sync import run_sync

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key")
    (ws / "memsift.toml").write_text(
        '[embedding]\nprovider = "openai"\nbaseUrl = "http://127.0.0.1:9/v1"\nretries = 0\nfallback = "local"\n'
    )
    report = run_sync("main", workspace=str(ws))
    assert report.fallback and report.chunksWritten == 4
    assert "sk-test-not-a-real-key" not in report.fallback
