"""No silent spend on a hosted provider (SPEC section 1, `sync.autoRebuild`).

When the index identity changes and the rebuild would embed on a paid provider, a sync leaves the index as it
is and says why and what `memsift index --force` would cost: in its report, in `status`, in every search's
`degraded` (which answers keyword-only meanwhile). `--force`, or the Prefect rebuild, does it. The local
model, and a rebuild the caches serve whole, still rebuild on their own; the key changes either default.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from index_checks import content

from api.cli import main
from core import MemoryIndex
from core.config import load_config
from core.config_home import db_path
from tests.fake_provider import FakeProvider

PROBE = "memsift probe"
NOTES = {
    "MEMORY.md": "# Memory\n- Dana drinks a flat white every morning.\n",
    "memory/2026-11-24.md": "# 2026-11-24\n- The deploy failed with ERR_SSL_PROTOCOL on the zeppelin host.\n",
    "memory/2026-11-25.md": "# 2026-11-25\n- Priya moved offline mode to Q2.\n",
}


@pytest.fixture
def provider() -> Iterator[FakeProvider]:
    server = FakeProvider()
    yield server
    server.close()


def configure(ws: Path, provider: FakeProvider, model: str, extra: str = "") -> None:
    (ws / "memsift.toml").write_text(
        f'[embedding]\nprovider = "openai"\nbaseUrl = "{provider.url}"\nmodel = "{model}"\nretries = 0\n'
        f"pricePerMillionTokens = 0.13\n{extra}"
    )


def cli_json(capsys, *argv: str | Path) -> dict:
    capsys.readouterr()
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


def documents(provider: FakeProvider) -> list[str]:
    return [t for t in provider.embedded if t != PROBE]


def test_a_new_hosted_model_waits_for_force_and_search_says_what_it_would_cost(
    capsys, workspace, provider: FakeProvider, memsift_home: Path
) -> None:
    ws = workspace(NOTES)
    configure(ws, provider, "model-a")
    cli_json(capsys, "--workspace", ws, "index", "--no-prefect", "--json")
    db = db_path(memsift_home, "main", ws.resolve())
    before = content(db)
    provider.embedded.clear()

    configure(ws, provider, "model-b")
    report = cli_json(capsys, "--workspace", ws, "index", "--no-prefect", "--json")
    assert documents(provider) == [] and content(db) == before  # nothing spent, the same chunks
    assert report["rebuilt"] is False and "`memsift index --force`" in report["rebuildHeld"]
    assert "model" in report["rebuildHeld"] and report["plan"]["chunksToEmbed"] == 3
    assert report["plan"]["estimatedCost"] == round(report["plan"]["estimatedTokens"] / 1e6 * 0.13, 6)

    found = cli_json(capsys, "--workspace", ws, "search", "zeppelin deploy", "--json")
    assert found["results"] and found["results"][0]["path"] == "memory/2026-11-24.md"  # keyword-only, still there
    assert "`memsift index --force`" in found["degraded"] and "3 chunks to embed" in found["degraded"]
    status = cli_json(capsys, "--workspace", ws, "status", "--json")
    assert status["dirty"] and "`memsift index --force`" in status["dirtyReason"]
    assert "3 chunks to embed" in status["dirtyReason"] and status["model"] == "model-a"
    dry = cli_json(capsys, "--workspace", ws, "index", "--dry-run", "--json")
    assert dry["chunksToEmbed"] == 3 and "`memsift index --force`" in dry["rebuildHeld"]  # the figures of --force
    assert documents(provider) == []

    forced = cli_json(capsys, "--workspace", ws, "index", "--no-prefect", "--force", "--json")
    assert forced["rebuilt"] and forced["chunksEmbedded"] == len(documents(provider)) == 3
    assert forced["rebuildHeld"] is None
    found = cli_json(capsys, "--workspace", ws, "search", "zeppelin deploy", "--json")
    assert "degraded" not in found


def test_a_held_rebuild_of_new_extra_paths_is_said_by_every_search(capsys, workspace, provider: FakeProvider) -> None:
    """A new chunking or extraPaths keeps the old vectors usable, so the search runs hybrid as before: it said
    nothing of the held rebuild (only a new model's did), and a REST client never learnt that the notes of the
    new extraPaths folder were not searched."""
    ws = workspace({**NOTES, "decisions/adr-1.md": "# ADR 1\n- The zeppelin host moves to Frankfurt.\n"})
    configure(ws, provider, "model-a")
    cli_json(capsys, "--workspace", ws, "index", "--no-prefect", "--json")
    configure(ws, provider, "model-a")
    decisions = 'extraPaths = ["decisions"]\n' + (ws / "memsift.toml").read_text()  # a top-level key: first
    (ws / "memsift.toml").write_text(decisions)
    assert "extraPaths" in cli_json(capsys, "--workspace", ws, "index", "--no-prefect", "--json")["rebuildHeld"]

    found = cli_json(capsys, "--workspace", ws, "search", "zeppelin host", "--json")
    assert found["mode"] == "hybrid" and found["results"]  # the old index, at full strength
    assert "decisions/adr-1.md" not in {r["path"] for r in found["results"]}
    assert "(extraPaths)" in found["degraded"] and "`memsift index --force`" in found["degraded"]
    assert found["degraded"].endswith("the answers come from the index as it was")

    (ws / "memsift.toml").write_text(decisions.replace("model-a", "model-b"))  # a new model: said once
    cli_json(capsys, "--workspace", ws, "index", "--no-prefect", "--json")
    found = cli_json(capsys, "--workspace", ws, "search", "zeppelin host", "--json")
    assert found["mode"] == "keyword" and found["degraded"].count("`memsift index --force`") == 1

    configure(ws, provider, "model-a")  # back to what the index holds: nothing to say
    assert "degraded" not in cli_json(capsys, "--workspace", ws, "search", "zeppelin host", "--json")


def test_a_rebuild_the_caches_serve_whole_runs_on_its_own(capsys, workspace, provider: FakeProvider) -> None:
    ws = workspace(NOTES)
    configure(ws, provider, "model-a")
    cli_json(capsys, "--workspace", ws, "index", "--no-prefect", "--json")
    provider.embedded.clear()
    configure(ws, provider, "model-a", '[store.fts]\ntokenizer = "trigram"\n')  # the text index only
    report = cli_json(capsys, "--workspace", ws, "index", "--no-prefect", "--json")
    assert report["rebuilt"] and report["rebuildHeld"] is None and report["chunksEmbedded"] == 0
    assert documents(provider) == []


@pytest.mark.parametrize(("policy", "rebuilds"), [("always", True), ("never", False)])
def test_sync_auto_rebuild_changes_the_default(
    capsys, workspace, provider: FakeProvider, policy: str, rebuilds: bool
) -> None:
    ws = workspace(NOTES)
    configure(ws, provider, "model-a")
    cli_json(capsys, "--workspace", ws, "index", "--no-prefect", "--json")
    configure(ws, provider, "model-b", f'[sync]\nautoRebuild = "{policy}"\n')
    report = cli_json(capsys, "--workspace", ws, "index", "--no-prefect", "--json")
    assert report["rebuilt"] is rebuilds and (report["rebuildHeld"] is None) is rebuilds


def test_never_holds_the_local_model_too(capsys, workspace) -> None:
    ws = workspace(NOTES)
    cli_json(capsys, "--workspace", ws, "index", "--no-prefect", "--json")
    (ws / "memsift.toml").write_text('[chunking]\ntokens = 64\noverlap = 8\n[sync]\nautoRebuild = "never"\n')
    report = cli_json(capsys, "--workspace", ws, "index", "--no-prefect", "--json")
    assert not report["rebuilt"] and "chunking" in report["rebuildHeld"]
    (ws / "memsift.toml").write_text("[chunking]\ntokens = 64\noverlap = 8\n")  # the default: local rebuilds
    assert cli_json(capsys, "--workspace", ws, "index", "--no-prefect", "--json")["rebuilt"]


@pytest.mark.usefixtures("prefect_harness")
def test_the_sync_flow_holds_and_a_forced_flow_run_rebuilds(workspace, provider: FakeProvider) -> None:
    from flows.sync import run_sync

    ws = workspace(NOTES)
    configure(ws, provider, "model-a")
    run_sync("main", workspace=str(ws))
    provider.embedded.clear()
    configure(ws, provider, "model-b")
    held = run_sync("main", workspace=str(ws))
    assert not held.rebuilt and held.rebuildHeld and documents(provider) == []
    forced = run_sync("main", workspace=str(ws), force=True)
    assert forced.rebuilt and forced.chunksEmbedded == len(documents(provider)) == 3


def test_a_note_deleted_while_a_rebuild_is_held_is_no_longer_a_hit(
    capsys, workspace, provider: FakeProvider, memsift_home: Path
) -> None:
    """The held rebuild froze the index: a note the user deleted (a secret written down by mistake) was still
    a hit, its text in the snippet, for as long as they did not pay for `--force`. Removing rows costs nothing."""
    ws = workspace(NOTES)
    configure(ws, provider, "model-a")
    cli_json(capsys, "--workspace", ws, "index", "--no-prefect", "--json")
    provider.embedded.clear()
    configure(ws, provider, "model-b")
    (ws / "memory/2026-11-24.md").unlink()
    report = cli_json(capsys, "--workspace", ws, "index", "--no-prefect", "--json")
    assert report["rebuildHeld"] and report["removed"] == 1
    assert cli_json(capsys, "--workspace", ws, "search", "zeppelin deploy", "--json")["results"] == []

    (ws / "memory/2026-11-25.md").unlink()  # a search alone, as it catches up an edit when nothing is held
    found = cli_json(capsys, "--workspace", ws, "search", "Priya offline mode", "--json")
    assert found["results"] == [] and "`memsift index --force`" in found["degraded"]
    assert cli_json(capsys, "--workspace", ws, "search", "flat white", "--json")["results"]  # the rest answers
    assert documents(provider) == []  # nothing spent


def test_a_held_rebuild_of_a_new_base_url_names_what_changed(capsys, workspace, provider: FakeProvider) -> None:
    """The same provider and model at another `baseUrl` (a proxy, another vLLM): the search said "the index was
    built with openai/model-a, not openai/model-a", a contradiction that hid why it answers keyword-only."""
    ws = workspace(NOTES)
    configure(ws, provider, "model-a")
    cli_json(capsys, "--workspace", ws, "index", "--no-prefect", "--json")
    other = FakeProvider()
    try:
        configure(ws, other, "model-a")
        assert cli_json(capsys, "--workspace", ws, "index", "--no-prefect", "--json")["rebuildHeld"]
        found = cli_json(capsys, "--workspace", ws, "search", "zeppelin deploy", "--json")
    finally:
        other.close()
    assert found["mode"] == "keyword" and "not openai/model-a" not in found["degraded"]
    assert "built with openai/model-a, under other settings (baseUrl)" in found["degraded"]


@pytest.mark.parametrize("prefix", ["", "/v1"])
def test_status_without_deep_sends_the_provider_nothing_and_still_says_dirty(
    capsys, workspace, provider: FakeProvider, prefix: str
) -> None:
    """SPEC gives the probe to `status --deep`: plain `status` built the embedder, whose start-up probe is a paid
    request, each time. Now it sends none, and reads what only the probe finds from the index: the dimension of
    a model memsift does not know (`model-a`), and the `/v1` a bare base URL answers under."""
    provider.prefix = prefix  # with "/v1", the configured bare URL 404s and the client finds `/v1` itself
    ws = workspace(NOTES)
    configure(ws, provider, "model-a")

    def status(*flags: str) -> tuple[dict, int]:
        before = len(provider.requests)
        doc = cli_json(capsys, "--workspace", ws, "status", "--json", *flags)
        return doc, len(provider.requests) - before

    doc, sent = status()  # never indexed: what the configuration says, without asking
    assert sent == 0 and doc["dirtyReason"] == "never indexed"
    assert (doc["provider"], doc["model"], doc["dims"]) == ("openai", "model-a", None)
    cli_json(capsys, "--workspace", ws, "index", "--no-prefect", "--json")
    doc, sent = status()
    assert sent == 0 and doc["dirty"] is False and doc["dims"] == provider.dims, doc["dirtyReason"]
    doc, sent = status("--deep")  # one probe: the start-up probe of the embedder made for it (it paid a second)
    assert sent == (1 if not prefix else 2), provider.requests  # with /v1: the bare URL's 404 first
    assert doc["probe"]["ok"] is True and doc["probe"]["dims"] == provider.dims and doc["dirty"] is False
    configure(ws, provider, "model-b")  # another model: dirty, still without a request
    doc, sent = status()
    assert sent == 0 and doc["dirty"] is True and "(model" in doc["dirtyReason"]
    configure(ws, provider, "model-a", "dimensions = 8\n")  # another dimension of the same model
    doc, sent = status()
    assert sent == 0 and doc["dirty"] is True and "dims" in doc["dirtyReason"]


def _bytes_read() -> int:
    """What this process has read so far (`rchar`: every read call, whatever it reads)."""
    return int(Path("/proc/self/io").read_text().split("rchar: ")[1].split()[0])


def test_a_held_rebuild_is_re_estimated_from_the_files_changed_since(
    workspace, provider: FakeProvider, memsift_home: Path
) -> None:
    """While the rebuild waits for `--force`, every sync (the watcher's, after each append) estimates it again:
    it read and chunked every note (0.12-0.15 s of CPU a sync on 551 notes, 3.5-4.1 s per 30 s of appends on
    `memsift serve`). Now only the notes changed since are read; the figures stay those of a fresh estimate."""
    line = "- Dana moved the {} meeting to room {} and wrote it down in the planning notes.\n"
    notes = {f"memory/2025-01-{d:02}.md": "".join(line.format(d, k) for k in range(150)) for d in range(1, 29)}
    ws = workspace(notes)
    for rel in notes:  # settled: written long before the scan (a note written the same instant is read again)
        os.utime(ws / rel, (1e9, 1e9))
    configure(ws, provider, "model-a")
    with MemoryIndex(load_config(workspace=ws)) as index:
        index.sync()
    configure(ws, provider, "model-a", "[chunking]\ntokens = 100\noverlap = 0\n")
    total = sum(len(text) for text in notes.values())
    with MemoryIndex(load_config(workspace=ws)) as index:
        assert index.sync().rebuildHeld  # the first estimate reads every note
        with (ws / "memory" / "2025-01-03.md").open("a") as note:
            note.write("- Appended: the otter count was 7.\n")
        before = _bytes_read()
        report = index.sync()
        read = _bytes_read() - before
        assert report.rebuildHeld and report.plan == index.plan(force=True).to_dict()
        assert read < total * 3 / 4, (read, total)  # the changed note and the index pages: 127 KB; before 451 KB
