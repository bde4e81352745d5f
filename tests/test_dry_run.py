"""`memsift index --dry-run` (core/estimate.py): what a run would embed and cost, before it spends anything.

Against the fake OpenAI-compatible provider, which records every request: the dry run sends nothing but the
start-up probe (and not even that once an index tells the model's dimension), and its chunks, requests and
tokens are exactly what the real run then sends (tokens counted as the rate limiter counts them); the real
run's report opens with the same plan. The local model's speed is measured on a sample when no run has
measured it yet.
"""

from __future__ import annotations

import json
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest

from api.cli import main
from core.estimate import Estimate, summary
from core.limiter import request_tokens
from tests.fake_provider import FakeProvider
from tests.index_checks import written_earlier

PROBE = "memsift probe"


def notes(count: int) -> dict[str, str]:
    """Notes of a few chunks each at 32-token chunks, some long enough to span several requests."""
    return {
        f"memory/note-{n:03d}.md": "".join(
            f"- Fact {n}.{i}: the relay {n * 10 + i} was moved.\n" for i in range(1 + n % 9)
        )
        for n in range(30)
    }


@pytest.fixture
def provider() -> Iterator[FakeProvider]:
    server = FakeProvider()
    yield server
    server.close()


def hosted(workspace, provider: FakeProvider, extra: str = "") -> Path:
    ws = workspace(notes(30))
    (ws / "memsift.toml").write_text(
        f'[embedding]\nprovider = "openai"\nbaseUrl = "{provider.url}"\nmodel = "fake-model"\n'
        f"batchMaxInputs = 8\nbatchMaxBytes = 300\nretries = 0\n{extra}"
        "[chunking]\ntokens = 32\noverlap = 8\n"
    )
    return ws


def cli_json(capsys, *argv: str | Path) -> dict:
    capsys.readouterr()
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


def sent(provider: FakeProvider) -> list[list[str]]:
    """The inputs of every embedding request but the start-up probes."""
    return [r.body["input"] for r in provider.requests if r.body["input"] != [PROBE]]


def test_a_dry_run_embeds_nothing_and_predicts_the_run_exactly(capsys, workspace, provider: FakeProvider) -> None:
    ws = hosted(workspace, provider, "pricePerMillionTokens = 0.02\nrequestsPerMinute = 6000\n")
    written_earlier(ws)  # a note written during the scan is read again by the next run (core.sync_plan)
    plan = cli_json(capsys, "--workspace", ws, "index", "--dry-run", "--json")
    assert sent(provider) == []  # nothing but the probe went out
    assert plan["rebuild"] is True and plan["filesToRead"] == 30 and plan["cacheHits"] == 0

    report = cli_json(capsys, "--workspace", ws, "index", "--no-prefect", "--json")
    requests = sent(provider)
    assert plan["chunksToEmbed"] == report["chunksEmbedded"] == sum(map(len, requests)) > 30
    assert plan["estimatedRequests"] == len(requests) > plan["chunksToEmbed"] / 8  # batchMaxBytes packs fewer
    assert plan["estimatedTokens"] == sum(request_tokens(r) for r in requests)
    assert plan["estimatedCost"] == round(plan["estimatedTokens"] / 1e6 * 0.02, 6)
    assert plan["estimatedSeconds"] == round(len(requests) / 6000 * 60, 1) and plan["secondsFrom"] == "limits"
    assert report["plan"] == plan  # the run's report opens with the same figures
    assert report["embeddingRequests"] == report["embeddingCalls"] == len(requests)  # each request one call

    served = len(provider.requests)
    again = cli_json(capsys, "--workspace", ws, "index", "--dry-run", "--force", "--json")
    assert again["chunksToEmbed"] == again["estimatedRequests"] == 0 and again["estimatedCost"] == 0
    assert again["cacheHits"] == plan["chunksToEmbed"]
    # The run measured the provider's speed: the next estimate uses it too.
    (ws / "memory" / "new.md").write_text("- a fact never seen before about the zeppelin hangar\n")
    incremental = cli_json(capsys, "--workspace", ws, "index", "--dry-run", "--json")
    assert incremental["rebuild"] is False and incremental["filesToRead"] == 1
    assert incremental["chunksToEmbed"] == 1 and incremental["secondsFrom"] == "limits+measured"
    assert len(provider.requests) == served  # once an index tells the dimension, a dry run sends nothing at all


def test_without_a_price_the_cost_is_null_and_the_human_output_says_how_to_know_it(
    capsys, workspace, provider: FakeProvider
) -> None:
    ws = hosted(workspace, provider)
    assert cli_json(capsys, "--workspace", ws, "index", "--dry-run", "--json")["estimatedCost"] is None
    assert main(["--workspace", str(ws), "index", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "nothing was embedded" in out and "cost unknown (set embedding.pricePerMillionTokens)" in out
    assert "time unknown" in out  # no limit configured, no run measured the provider yet


def test_a_run_with_nothing_to_embed_says_it_costs_nothing_without_a_price(
    capsys, workspace, provider: FakeProvider
) -> None:
    """A rebuild the cache serves whole (an upgrade) said "0 chunks to embed (30 cached), ~0 tokens in 0
    requests, ~0 s, cost unknown (set embedding.pricePerMillionTokens)": nothing to embed has nothing to price."""
    ws = hosted(workspace, provider)
    assert main(["--workspace", str(ws), "index", "--no-prefect"]) == 0
    capsys.readouterr()
    assert main(["--workspace", str(ws), "index", "--no-prefect", "--force"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("plan: 0 chunks to embed (") and first.endswith(", no cost (nothing to embed)"), first


def test_the_local_model_s_speed_is_measured_for_the_estimate(capsys, workspace, memsift_home: Path) -> None:
    ws = workspace(notes(30))
    plan = cli_json(capsys, "--workspace", ws, "index", "--dry-run", "--json")
    assert plan["provider"] == "local" and plan["estimatedCost"] is None
    assert plan["secondsFrom"] == "measured" and plan["estimatedSeconds"] > 0
    report = cli_json(capsys, "--workspace", ws, "index", "--no-prefect", "--json")
    assert report["chunksEmbedded"] == plan["chunksToEmbed"] and report["cacheHits"] == 0  # the sample was not kept
    # The report counts requests as the plan does: the plan said "in 1 request" and the report's only count,
    # `embeddingCalls`, said 30 or more (one model call per token window), which a reader took for requests.
    assert report["embeddingRequests"] == plan["estimatedRequests"] == 1
    assert report["embeddingCalls"] >= report["chunksEmbedded"] >= 30  # the local model's windows, named apart


def test_progress_tells_the_spend_so_far_and_ends_at_the_plan(workspace, provider: FakeProvider) -> None:
    """Each progress event (the CLI bar, the flow's artifact) carries the tokens sent and their price so far;
    the last one is what the plan estimated, to the token."""
    from core import MemoryIndex, load_config

    ws = hosted(workspace, provider, "pricePerMillionTokens = 0.02\n")
    events = []
    with MemoryIndex(load_config(workspace=ws)) as index:
        report = index.sync(progress=events.append)
    spending = [e.tokensSent for e in events]
    assert spending == sorted(spending) and len(set(spending)) > 2  # it grows request by request
    last = events[-1]
    assert last.tokensSent == report.plan["estimatedTokens"] == sum(request_tokens(r) for r in sent(provider))
    assert last.spent == report.plan["estimatedCost"] > 0
    assert f"~{last.tokensSent:,} tokens sent (${last.spent:.4f})" in last.describe()


def test_a_keyword_only_run_reads_each_file_once_and_its_dry_run_still_counts(workspace, capsys) -> None:
    """With no embedder the run's plan has nothing to embed or pay: it reads no file (`chunks` null) and the
    report counts what was written; the dry run reads them to count the chunks."""
    ws = workspace(notes(30))
    (ws / "memsift.toml").write_text('[embedding]\nprovider = "none"\n[chunking]\ntokens = 32\noverlap = 8\n')
    planned = cli_json(capsys, "--workspace", ws, "index", "--dry-run", "--json")
    report = cli_json(capsys, "--workspace", ws, "index", "--no-prefect", "--json")
    assert planned["chunks"] == report["chunksWritten"] > 30
    assert report["plan"]["chunks"] is None
    assert report["plan"]["filesToRead"] == planned["filesToRead"] == 30
    assert (report["plan"]["chunksToEmbed"], report["plan"]["estimatedTokens"]) == (0, 0)


def test_the_plan_line_counts_in_words_a_person_reads() -> None:
    """'1 requests', '~0.0000' for a cost of 9e-06 and 'no cost (local)' with no embedder at all were printed."""
    plan = Estimate("openai", False, 1, 1, 1, 1, 0, 1, 1, None, 9e-06, None).to_dict()
    assert summary(plan).startswith("1 chunk to embed (0 cached), ~1 token in 1 request, time unknown")
    assert summary(plan).endswith(", under 0.0001 in the price's currency")
    plan.update(chunksToEmbed=2, estimatedTokens=300, estimatedRequests=2, estimatedCost=0.25)
    assert summary(plan).startswith("2 chunks to embed (0 cached), ~300 tokens in 2 requests")
    assert summary(plan).endswith(", ~0.2500 in the price's currency")
    plan.update(provider="none", estimatedCost=None)
    assert summary(plan).endswith(", no cost (no embedder)")


def test_a_plan_holds_one_batch_of_text_at_a_time(capsys, workspace, provider: FakeProvider) -> None:
    """The plan kept the text of every chunk to embed until its end, to count requests and characters once:
    a first index's plan held the whole workspace's text at once (4.3 MB of notes: its peak went from 10.5 to
    14.6 MB). It counts each step as it reads the batches, keeping only the local model's timing sample: 40
    more notes cost the plan their hashes, not their text."""

    def notes(first: int) -> dict[str, str]:
        lines = "".join(f"- item {i}: the relay moved to rack {i % 97} after the outage review.\n" for i in range(1600))
        return {f"memory/note-{n:02d}.md": lines.replace("item", f"item {n}") for n in range(first, first + 40)}

    def peak() -> tuple[dict, int]:
        tracemalloc.start()
        try:
            plan = cli_json(capsys, "--workspace", ws, "index", "--dry-run", "--json")
            return plan, tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    ws = workspace(notes(0))
    toml = f'[embedding]\nprovider = "openai"\nbaseUrl = "{provider.url}"\nmodel = "fake-model"\nretries = 0\n'
    (ws / "memsift.toml").write_text(toml)
    cli_json(capsys, "--workspace", ws, "index", "--dry-run", "--json")  # imports and caches warmed up
    plan, before = peak()
    for path, text in notes(40).items():
        (ws / path).write_text(text)
    added = sum((ws / path).stat().st_size for path in notes(40))
    bigger, after = peak()
    assert plan["filesToRead"] == 40 and bigger["filesToRead"] == 80
    assert bigger["chunksToEmbed"] > 1.9 * plan["chunksToEmbed"] > 40 * 50
    assert after - before < added / 4, (added, before, after)
