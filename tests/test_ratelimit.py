"""The shared embedding quota: a Prefect global concurrency limit with slot decay."""

from __future__ import annotations

import pytest

from flows.ratelimit import LIMIT_NAME, RateLimitedEmbedder, ensure_limit, limit_status, rate_limit_status
from flows.sync import run_sync


@pytest.fixture
def api_url(prefect_harness, monkeypatch):
    from prefect.settings import PREFECT_API_URL

    monkeypatch.setenv("PREFECT_API_URL", PREFECT_API_URL.value())


def test_the_limit_is_created_then_updated(api_url):
    assert ensure_limit(120) == {"limit": 2, "slotDecayPerSecond": 2.0}
    assert limit_status() == {"name": LIMIT_NAME, "limit": 2, "slotDecayPerSecond": 2.0}
    ensure_limit(600)
    assert limit_status() == {"name": LIMIT_NAME, "limit": 10, "slotDecayPerSecond": 10.0}


def test_status_says_which_limiter_is_active(api_url, workspace, make_config, monkeypatch):
    ensure_limit(60)
    ws = workspace({"MEMORY.md": "x\n"})
    assert rate_limit_status(make_config(ws))["active"] == "none"  # no quota configured
    limited = rate_limit_status(make_config(ws, **{"embedding.requestsPerMinute": 60}))
    assert limited["active"] == "prefect" and limited["prefect"]["slotDecayPerSecond"] == 1.0
    monkeypatch.delenv("PREFECT_API_URL")
    assert rate_limit_status(make_config(ws, **{"embedding.requestsPerMinute": 60}))["prefect"] is None


def test_a_flow_with_a_quota_embeds_through_the_limit(api_url, workspace, counting_embedder):
    ensure_limit(6000)
    ws = workspace(
        {
            "MEMORY.md": "# Memory\n- a fact\n",
            "memory/a.md": "- another fact\n",
            "memsift.toml": "[embedding]\nrequestsPerMinute = 6000\nbatchMaxInputs = 1\n",
        }
    )
    report = run_sync("main", workspace=str(ws))
    assert report.chunksEmbedded == 2 and report.embeddingCalls >= 2


def test_every_request_of_the_local_model_in_a_flow_takes_a_slot(api_url, workspace):
    """The local model's pass that also yields MaxSim tokens (the default ranker's) embeds without
    `embed_documents`: its requests took no slot, so `requestsPerMinute` throttled nothing while `status` said
    the shared limit was active and the plan counted on it. A slot decays here in ~17 min: each one shows."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import GlobalConcurrencyLimitUpdate

    with get_client(sync_client=True) as client:
        ensure_limit(600)
        client.delete_global_concurrency_limit_by_name(LIMIT_NAME)  # with no slot an earlier test took
        ensure_limit(600)
        client.update_global_concurrency_limit(
            LIMIT_NAME, GlobalConcurrencyLimitUpdate(limit=10, slot_decay_per_second=0.001)
        )
        try:
            ws = workspace(
                {
                    "MEMORY.md": "# Memory\n- a fact\n",
                    "memory/a.md": "- another fact\n",
                    "memory/b.md": "- a third fact\n",
                    "memsift.toml": "[embedding]\nrequestsPerMinute = 600\nbatchMaxInputs = 1\n",
                }
            )
            report = run_sync("main", workspace=str(ws))
            assert report.chunksEmbedded == 3
            assert client.read_global_concurrency_limit_by_name(LIMIT_NAME).active_slots == 3  # one a chunk
        finally:  # slots that slow would hold up the next test's requests
            client.delete_global_concurrency_limit_by_name(LIMIT_NAME)


def test_the_wrapper_keeps_the_embedders_identity(counting_embedder):
    limited = RateLimitedEmbedder(counting_embedder)
    assert (limited.provider, limited.model, limited.dims, limited.fingerprint) == (
        counting_embedder.provider,
        counting_embedder.model,
        counting_embedder.dims,
        counting_embedder.fingerprint,
    )
    assert limited.embed_query("hello").shape == (384,)


def test_only_a_configured_quota_wraps_the_embedder(workspace, make_config):
    from flows.ratelimit import limited_embedder

    ws = workspace({"MEMORY.md": "x\n"})
    assert not isinstance(limited_embedder(make_config(ws)), RateLimitedEmbedder)
    assert isinstance(limited_embedder(make_config(ws, **{"embedding.requestsPerMinute": 60})), RateLimitedEmbedder)
    assert limited_embedder(make_config(ws, **{"embedding.provider": "none"})) is None


def test_every_http_request_of_a_hosted_provider_takes_a_slot(api_url, workspace):
    """A hosted provider's `embed_documents` call is `concurrency` requests: one slot per call let workers
    exceed the shared quota (two at 120 a minute sent 2.8 requests a second). A retry is a request the
    provider counts too. The slots decay in ~17 min here, so each one taken shows."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import GlobalConcurrencyLimitUpdate

    from tests.fake_provider import FakeProvider

    provider = FakeProvider(fault=lambda n: "500" if n == 3 else None)
    with get_client(sync_client=True) as client:
        ensure_limit(6000)
        client.delete_global_concurrency_limit_by_name(LIMIT_NAME)  # with no slot an earlier test took
        ensure_limit(6000)
        client.update_global_concurrency_limit(
            LIMIT_NAME, GlobalConcurrencyLimitUpdate(limit=100, slot_decay_per_second=0.001)
        )
        try:
            notes = {f"memory/2026-01-0{i}.md": f"- fact number {i}\n" for i in range(1, 6)}
            ws = workspace(
                {
                    **notes,
                    "memsift.toml": f'[embedding]\nprovider = "openai"\nbaseUrl = "{provider.url}"\n'
                    'model = "fake-model"\nrequestsPerMinute = 6000\nbatchMaxInputs = 1\nconcurrency = 4\n'
                    "retries = 2\n",
                }
            )
            report = run_sync("main", workspace=str(ws))
            documents = [r for r in provider.requests if r.body["input"] != ["memsift probe"]]
            assert report.chunksEmbedded == 5 and len(documents) == 6  # 5 inputs, one request retried
            slots = client.read_global_concurrency_limit_by_name(LIMIT_NAME).active_slots
            assert slots == len(provider.requests) - 1  # every request but the start-up probe, made before the flow
        finally:
            client.delete_global_concurrency_limit_by_name(LIMIT_NAME)
            provider.close()


def test_a_missing_limit_is_said_once_per_run(api_url, workspace, caplog):
    """With `requestsPerMinute` set and no limit on the server, Prefect logged `Concurrency limits
    ['memsift-embedding'] do not exist - skipping acquisition.` for every request: 150 lines in one rebuild's log."""
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        ensure_limit(6000)
        client.delete_global_concurrency_limit_by_name(LIMIT_NAME)
    ws = workspace(
        {
            **{f"memory/2026-01-0{i}.md": f"- fact number {i}\n" for i in range(1, 5)},
            "memsift.toml": "[embedding]\nrequestsPerMinute = 6000\nbatchMaxInputs = 1\n",
        }
    )
    report = run_sync("main", workspace=str(ws))
    assert report.chunksEmbedded == 4
    said = [r.getMessage() for r in caplog.records if LIMIT_NAME in r.getMessage()]
    assert len(said) == 1 and "does not exist" in said[0], said
