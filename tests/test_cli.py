"""The `memsift` command line (SPEC section 3), in-process through `api.cli.main` and as a real program.

Exit codes: 0 success (also "No matches."), 1 failure with one `memsift: error: ...` line on stderr and no
traceback unless `--debug`, 2 usage error. `--json` puts exactly one JSON document on stdout.
"""

from __future__ import annotations

import json
import os
import pty
import re
import socket
import subprocess
import sys
import threading
from datetime import UTC, datetime
from http import HTTPStatus
from pathlib import Path

import pytest
from sample import NOTES

from api.arguments import parser
from api.cli import main
from core import MemoryIndex, SearchError, calibration_model, load_config
from core.config_home import db_path
from core.learned import model_for
from core.query import FTS_TEXT_VERSION
from core.store import Store

MEMSIFT = Path(sys.executable).parent / "memsift"
HEAD = re.compile(r"^(\d\.\d{3}) (\S+):(\d+)-(\d+)$")


@pytest.fixture
def ws(workspace) -> Path:
    return workspace(NOTES)


def run(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of one in-process `memsift` call."""
    capsys.readouterr()
    try:
        code = main([str(a) for a in argv])
    except SystemExit as exc:  # argparse usage errors
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(code: int, out: str, err: str, *needles: str, status: int | None = None) -> None:
    """`status`: the command had `--json`, so stdout holds the problem document REST answers with that status."""
    assert code == 1, (out, err)
    if status is None:
        assert out == ""
    else:
        assert_problem(out, err, status)
    assert "Traceback" not in err
    assert err.endswith("\n") and err.count("\n") == 1, err
    assert err.startswith("memsift: error: "), err
    for needle in needles:
        assert needle in err


def assert_problem(out: str, err: str, status: int) -> None:
    """stdout is one RFC 9457 problem document, REST's shape (api.schemas.Problem), whose detail is the reason
    on stderr's last line."""
    reason = err.rstrip("\n").splitlines()[-1].removeprefix("memsift: error: ")
    assert json.loads(out) == {
        "type": "about:blank",
        "status": status,
        "title": HTTPStatus(status).phrase,
        "detail": reason,
    }
    assert out.startswith("{") and out.endswith("}\n")


# ---------------------------------------------------------------- index


def test_index_no_prefect_json_prints_the_sync_report(capsys, ws: Path) -> None:
    code, out, err = run(capsys, "--workspace", ws, "index", "--no-prefect", "--json")
    assert code == 0, err
    report = json.loads(out)
    assert set(report) == {
        "filesScanned", "added", "changed", "removed", "unchanged", "skipped", "chunksWritten", "chunksEmbedded",
        "cacheHits", "embeddingRequests", "embeddingCalls", "inputChars", "embedSeconds", "cachePruned", "rebuilt",
        "fallback", "seconds", "warnings", "vectorsPending", "plan", "rebuildHeld", "chunksRejected", "firstIndex",
    }  # fmt: skip
    assert report["filesScanned"] == 3 and report["added"] == 3
    assert report["fallback"] is None
    assert report["changed"] == report["removed"] == report["unchanged"] == 0
    assert report["chunksWritten"] == report["chunksEmbedded"] == 3
    assert report["rebuilt"] is True and report["firstIndex"] is True  # first sync: a new index, from empty tables
    assert report["warnings"] == []

    (ws / "memory" / "2026-05-15.md").write_text("# 2026-05-15\n- Priya moved offline mode to Q2.\n")
    (ws / "MEMORY.md").unlink()
    (ws / "memory" / "new.md").write_text("a brand new note\n")
    code, out, _ = run(capsys, "--workspace", ws, "index", "--no-prefect", "--json")
    report = json.loads(out)
    assert (report["filesScanned"], report["added"], report["changed"], report["removed"]) == (3, 1, 1, 1)
    assert report["unchanged"] == 1
    assert report["chunksEmbedded"] == 2 and report["rebuilt"] is report["firstIndex"] is False


def test_index_force_rebuilds_from_the_cache(capsys, ws: Path) -> None:
    assert run(capsys, "--workspace", ws, "index", "--no-prefect")[0] == 0
    code, out, _ = run(capsys, "--workspace", ws, "--json", "index", "--no-prefect", "--force")
    report = json.loads(out)
    assert code == 0
    assert report["rebuilt"] is True and report["firstIndex"] is False  # a rebuild of an index, not a first one
    assert report["added"] == 3 and report["chunksEmbedded"] == 0 and report["cacheHits"] == 3


def test_index_human_output(capsys, ws: Path) -> None:
    (ws / "memory" / "blob.md").write_bytes(b"\x00\x01binary")
    code, out, err = run(capsys, "--workspace", ws, "index", "--no-prefect")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("plan: 3 chunks to embed (0 cached), ~") and lines[0].endswith(", no cost (local)")
    assert lines[1] == f"first index of agent main ({ws.resolve()})"  # it read "rebuilt" on a first run
    assert lines[2] == "files: 4 scanned, 3 added, 0 changed, 0 removed, 1 skipped"
    assert lines[3] == "chunks: 3 embedded, 0 cache hits, 3 written"
    assert re.fullmatch(r"seconds: \d+\.\d\d", lines[4])
    assert len(lines) == 5
    assert err == "warning: skipped memory/blob.md: binary content (NUL bytes)\n"


# ---------------------------------------------------------------- search


def test_search_on_a_never_indexed_agent_indexes_first(capsys, ws: Path, memsift_home: Path) -> None:
    assert not (memsift_home / "memory").exists()
    code, out, err = run(capsys, "--workspace", ws, "--json", "search", "flat white", "--mode", "keyword")
    assert code == 0, err
    assert err == "note: agent main is not indexed yet: indexing it before searching\n"  # not a silent wait
    doc = json.loads(out)
    assert doc["results"][0]["path"] == "MEMORY.md"
    assert doc["results"][0]["startLine"] == 1
    status = json.loads(run(capsys, "--workspace", ws, "status", "--json")[1])
    assert status["files"] == {"memory": 3} and status["dirty"] is False and status["lastSync"]


def test_search_sees_notes_as_they_are_since_the_last_index(capsys, ws: Path) -> None:
    """A note edited, emptied or deleted after `memsift index`: the next search answers from the files as they
    are (an incremental sync first), so no hit names lines a note no longer holds, nor a note that is gone."""
    assert run(capsys, "--workspace", ws, "index", "--no-prefect")[0] == 0
    note = ws / "memory" / "2026-05-15.md"
    note.write_text("# 2026-05-15\n\n\n- The zebra count at the reserve was 41.\n")
    (ws / "MEMORY.md").unlink()
    code, out, err = run(capsys, "--workspace", ws, "--json", "search", "zebra count", "--mode", "keyword")
    assert code == 0, err
    hits = json.loads(out)["results"]
    assert [(h["path"], h["startLine"], h["endLine"]) for h in hits] == [("memory/2026-05-15.md", 1, 4)]
    code, out, _ = run(capsys, "--workspace", ws, "--json", "search", "flat white", "--mode", "keyword")
    assert json.loads(out)["results"] == []
    status = json.loads(run(capsys, "--workspace", ws, "status", "--json")[1])
    assert status["dirty"] is False and status["files"] == {"memory": 2}


def test_a_search_that_syncs_a_note_with_invalid_utf8_says_so(capsys, ws: Path) -> None:
    """The search's catch-up indexed a note written in Latin-1 with U+FFFD, in silence; `memsift index` warns."""
    assert run(capsys, "--workspace", ws, "index", "--no-prefect")[0] == 0
    (ws / "memory" / "2026-05-16.md").write_bytes(b"# 2026-05-16\n- The zebra caf\xe9 opened.\n")
    code, out, err = run(capsys, "--workspace", ws, "--json", "search", "zebra", "--mode", "keyword")
    assert code == 0 and json.loads(out)["results"][0]["snippet"].endswith("caf\ufffd opened."), err
    assert err == "note: memory/2026-05-16.md: invalid UTF-8 on line 2, bad bytes replaced with U+FFFD\n"


def test_search_says_when_the_configuration_changed_since_the_last_index(capsys, ws: Path, monkeypatch) -> None:
    """A new chunking (or extraPaths, model...) makes the index out of date until `memsift index` rebuilds it:
    the search answers from the index as it was and says so on stderr, naming what changed (it said nothing)."""
    assert run(capsys, "--workspace", ws, "index", "--no-prefect")[0] == 0
    monkeypatch.setenv("MEMSIFT_CHUNKING_TOKENS", "64")
    monkeypatch.setenv("MEMSIFT_CHUNKING_OVERLAP", "8")
    code, out, err = run(capsys, "--workspace", ws, "--json", "search", "flat white", "--mode", "keyword")
    assert code == 0 and json.loads(out)["results"][0]["path"] == "MEMORY.md", err
    assert err == (
        "note: the configuration or model changed since the last sync (chunking): the answers come from the "
        "index as it was; `memsift index` rebuilds it\n"
    )


def test_an_index_an_older_release_wrote_says_memsift_was_upgraded(capsys, ws: Path) -> None:
    """After an upgrade that changed how the keyword index holds its text (`ftsText`), the search and `status`
    said "the configuration or model changed", which the user had not touched: they name the upgrade."""
    assert run(capsys, "--workspace", ws, "index", "--no-prefect")[0] == 0
    with Store(load_config(workspace=ws).db_path) as store:  # as the release before this one left it
        store.set_identity({**store.identity(), "ftsText": FTS_TEXT_VERSION - 1})
    code, out, err = run(capsys, "--workspace", ws, "--json", "search", "flat white", "--mode", "keyword")
    assert code == 0 and json.loads(out)["results"][0]["path"] == "MEMORY.md", err
    assert err == (
        "note: memsift was upgraded and its index format changed since the last sync (ftsText): the answers come "
        "from the index as it was; `memsift index` rebuilds it\n"
    )
    code, out, err = run(capsys, "--workspace", ws, "--json", "status")
    assert code == 0 and json.loads(out)["dirtyReason"] == (
        "memsift was upgraded and its index format changed (ftsText): the next sync rebuilds"
    ), err


def test_search_human_output_format(capsys, ws: Path) -> None:
    argv = ("--workspace", ws, "search", "deploy ERR_SSL_PROTOCOL certificate", "--min-score", "0")
    code, out, _ = run(capsys, *argv, "--json")
    assert code == 0
    results = json.loads(out)["results"]
    assert len(results) == 3  # min-score 0: every chunk of the three files
    assert results[0]["path"] == "memory/2026-05-14.md"

    code, out, err = run(capsys, *argv)
    assert code == 0
    expected = "\n\n".join(
        f"{r['score']:.3f} {r['path']}:{r['startLine']}-{r['endLine']}\n{r['snippet']}\nSource: {r['citation']}"
        for r in results
    )
    assert out == expected + "\n"
    blocks = out.rstrip("\n").split("\n\n")
    assert len(blocks) == 3
    for block, r in zip(blocks, results):
        head, snippet = block.split("\n", 1)
        snippet, source = snippet.rsplit("\n", 1)
        assert source == f"Source: {r['path']}#L{r['startLine']}-L{r['endLine']}"  # search.citations = "on"
        m = HEAD.match(head)
        assert m, head
        path, start, end = m.group(2), int(m.group(3)), int(m.group(4))
        assert (path, start, end) == (r["path"], r["startLine"], r["endLine"])
        # the head's line range is the snippet's place in the file
        assert snippet == "\n".join((ws / path).read_text().split("\n")[start - 1 : end])
    assert HEAD.match(blocks[0].split("\n")[0]).group(2, 3, 4) == ("memory/2026-05-14.md", "1", "11")


def test_search_scores_are_sorted_and_limited(capsys, ws: Path) -> None:
    code, out, _ = run(
        capsys, "--workspace", ws, "search", "mobile app offline", "--min-score", "0", "--max-results", "2"
    )
    assert code == 0
    heads = [HEAD.match(line) for line in out.splitlines() if HEAD.match(line)]
    assert len(heads) == 2
    scores = [float(m.group(1)) for m in heads]
    assert scores == sorted(scores, reverse=True)
    assert heads[0].group(2) == "memory/2026-05-15.md"


def test_search_explain_shows_stage_scores(capsys, ws: Path) -> None:
    code, out, _ = run(capsys, "--workspace", ws, "search", "flat white", "--explain", "--max-results", "1")
    assert code == 0
    head = out.splitlines()[0]
    assert re.match(r"^\d\.\d{3} MEMORY\.md:1-3  \(.*text \d\.\d{3}.*\)$", head), head
    code, out, _ = run(capsys, "--workspace", ws, "search", "flat white", "--explain", "--json")
    assert set(json.loads(out)["results"][0]["scores"]) >= {"vector", "text"}


def test_no_matches(capsys, ws: Path) -> None:
    code, out, err = run(capsys, "--workspace", ws, "search", "zyzzyva quokka", "--mode", "keyword")
    assert (code, out) == (0, "No matches.\n")
    assert "Traceback" not in err
    code, out, _ = run(capsys, "--workspace", ws, "search", "zyzzyva quokka", "--mode", "keyword", "--json")
    doc = json.loads(out)
    assert code == 0 and doc["results"] == [] and doc["mode"] == "keyword"


def test_search_json_document(capsys, ws: Path) -> None:
    code, out, _ = run(capsys, "--workspace", ws, "search", "who is on call", "--json")
    doc = json.loads(out)
    assert code == 0
    assert {"results", "mode", "provider", "model", "tookMs"} <= set(doc)
    assert doc["mode"] == "hybrid" and doc["provider"] == "local" and "degraded" not in doc
    hit = doc["results"][0]
    assert {"path", "startLine", "endLine", "score", "snippet", "source", "citation"} <= set(hit)
    assert hit["citation"] == f"{hit['path']}#L{hit['startLine']}-L{hit['endLine']}"
    assert "scores" not in hit  # only with --explain


def test_search_without_embedder_degrades_and_says_so(capsys, ws: Path) -> None:
    (ws / "memsift.toml").write_text('[embedding]\nprovider = "none"\n')
    code, out, err = run(capsys, "--workspace", ws, "search", "flat white")
    assert code == 0
    assert HEAD.match(out.splitlines()[0]).group(2) == "MEMORY.md"
    assert err.startswith("note: ") and "keyword" in err
    doc = json.loads(run(capsys, "--workspace", ws, "search", "flat white", "--json")[1])
    assert doc["mode"] == "keyword" and doc["degraded"] and doc["provider"] == "none"


# ---------------------------------------------------------------- get


@pytest.fixture
def lines_ws(workspace) -> Path:
    return workspace({"memory/log.md": "".join(f"line {i}\n" for i in range(1, 11)), "notes.md": "secret\n"})


def test_get_prints_exactly_the_line_range(capsys, lines_ws: Path) -> None:
    code, out, err = run(capsys, "--workspace", lines_ws, "get", "memory/log.md", "--from", "3", "--lines", "4")
    assert (code, out, err) == (0, "line 3\nline 4\nline 5\nline 6\n", "")
    assert run(capsys, "--workspace", lines_ws, "get", "memory/log.md", "--from", "9")[1] == "line 9\nline 10\n"
    whole = run(capsys, "--workspace", lines_ws, "get", "memory/log.md")[1]
    assert whole == (lines_ws / "memory" / "log.md").read_text()


@pytest.mark.parametrize(
    ("start", "count", "expected"),
    [("2", "1", "\n"), ("2", "2", "\nb\n"), ("4", "2", "\n\n"), ("1", None, "a\n\nb\n\n\n")],
)
def test_get_prints_blank_lines_of_the_range(capsys, workspace, start: str, count: str | None, expected: str) -> None:
    """A range of blank lines is that many empty lines: `--from 2 --lines 1` on a blank line printed nothing,
    as a range past the end does, so `memsift get ... | wc -l` counted 0 lines of a range of 1."""
    ws = workspace({"memory/gaps.md": "a\n\nb\n\n\n"})
    argv = ["--workspace", ws, "get", "memory/gaps.md", "--from", start] + (["--lines", count] if count else [])
    assert run(capsys, *argv) == (0, expected, "")


def test_get_json(capsys, lines_ws: Path) -> None:
    code, out, _ = run(capsys, "--workspace", lines_ws, "get", "memory/log.md", "--from", "2", "--lines", "2", "--json")
    assert code == 0
    assert json.loads(out) == {
        "path": "memory/log.md",
        "from": 2,
        "lines": 2,
        "text": "line 2\nline 3",
        "totalLines": 10,
    }


@pytest.mark.parametrize(
    ("argv", "note"),
    [
        (("get", "memory/log.md", "--from", "11"), "note: memory/log.md has 10 lines\n"),  # past the end
        # a memory file that does not exist yet, or a typo: SPEC's empty text, and a hint for the person
        (("get", "memory/2030-01-01.md"), "note: memory/2030-01-01.md is empty or does not exist\n"),
        (("get", "memory/log.md", "--lines", "0"), ""),  # asked for nothing
    ],
)
def test_get_empty_text_is_success(capsys, lines_ws: Path, argv, note: str) -> None:
    assert run(capsys, "--workspace", lines_ws, *argv) == (0, "", note)
    assert run(capsys, "--workspace", lines_ws, *argv, "--json")[2] == ""  # a program reads totalLines


@pytest.mark.parametrize("path", ["../secret.md", "/etc/passwd", "notes.md", "memory/../notes.md", "memory\\log.md"])
def test_get_refused_path_is_a_one_line_error(capsys, lines_ws: Path, path: str) -> None:
    code, out, err = run(capsys, "--workspace", lines_ws, "get", path)
    assert_one_line_error(code, out, err, "path")
    code, out, err = run(capsys, "--workspace", lines_ws, "get", path, "--json")
    assert_one_line_error(code, out, err, status=403)  # REST's answer, as a document


def test_get_through_a_symlink_is_refused(capsys, lines_ws: Path) -> None:
    (lines_ws / "memory" / "link.md").symlink_to(lines_ws / "notes.md")
    code, out, err = run(capsys, "--workspace", lines_ws, "get", "memory/link.md")
    assert_one_line_error(code, out, err, "symlink")
    assert "secret" not in out + err


# ---------------------------------------------------------------- status


STATUS_KEYS = {"provider", "model", "dims", "files", "chunks", "dirty", "vector", "fts", "cacheEntries", "lastSync"}


def test_status_json(capsys, ws: Path, memsift_home: Path) -> None:
    code, out, _ = run(capsys, "--workspace", ws, "status", "--json")
    before = json.loads(out)
    assert code == 0 and STATUS_KEYS <= set(before)
    assert before["dirty"] is True and before["lastSync"] is None and before["files"] == {"memory": 0}
    assert before["dirtyReason"] == "never indexed" and before["chunks"] == {"memory": 0}
    assert "probe" not in before
    assert not (memsift_home / "memory").exists()  # asking created no index file (nor its .swap lock)

    run(capsys, "--workspace", ws, "index", "--no-prefect")
    doc = json.loads(run(capsys, "--workspace", ws, "--json", "status")[1])
    assert doc["provider"] == "local" and doc["model"] == "all-MiniLM-L6-v2" and doc["dims"] == 384
    assert doc["files"] == {"memory": 3} and doc["chunks"] == {"memory": 3}
    assert doc["dirty"] is False
    assert doc["vector"]["enabled"] is True and doc["fts"]["enabled"] is True
    assert doc["cacheEntries"] == 3 and doc["sharedCache"]["entries"] == 3
    assert doc["sharedCache"]["path"].endswith("/cache/embeddings.sqlite")
    assert doc["rerank"] | {"weight": None} == {
        "enabled": "auto", "active": True, "provider": "local", "model": "maxsim", "endpoint": None,
        "candidates": 30, "weight": None, "method": "learned", "ranker": model_for(None).fingerprint, "tokenBits": 3,
        "calibration": calibration_model.default_model().fingerprint,
    }  # fmt: skip
    synced = datetime.fromisoformat(doc["lastSync"])
    assert abs((datetime.now(UTC) - synced).total_seconds()) < 120

    (ws / "memory" / "2026-05-16.md").write_text("a new note\n")
    assert json.loads(run(capsys, "--workspace", ws, "status", "--json")[1])["dirty"] is True
    for note in ws.rglob("*.md"):  # notes with no text: files counted, and chunks 0, not a missing key
        note.write_text("")
    run(capsys, "--workspace", ws, "index", "--no-prefect")
    emptied = json.loads(run(capsys, "--workspace", ws, "--json", "status")[1])
    assert (emptied["files"], emptied["chunks"]) == ({"memory": 4}, {"memory": 0}), emptied


def test_status_human(capsys, ws: Path) -> None:
    run(capsys, "--workspace", ws, "index", "--no-prefect")
    code, out, _ = run(capsys, "--workspace", ws, "status")
    assert code == 0
    rows = dict(re.split(r"\s{2,}", line.strip(), maxsplit=1) for line in out.splitlines())
    assert rows["provider"] == "local" and rows["dims"] == "384" and rows["dirty"] == "no"
    assert rows["files"] == "memory=3" and rows["cacheEntries"] == "3"


def test_status_deep_probes_the_embedder(capsys, ws: Path) -> None:
    code, out, _ = run(capsys, "--workspace", ws, "status", "--deep", "--json")
    probe = json.loads(out)["probe"]
    assert code == 0 and probe["ok"] is True and probe["dims"] == 384 and probe["ms"] >= 0


def test_status_deep_exits_1_when_the_probe_fails(capsys, ws: Path) -> None:
    """A health check reads the exit code: a failed probe printed its report and exited 0."""
    dead = socket.socket()
    dead.bind(("127.0.0.1", 0))  # bound, never listening: the connection is refused
    url = f"http://127.0.0.1:{dead.getsockname()[1]}/v1"
    config = f'[embedding]\nprovider = "openai"\nbaseUrl = "{url}"\napiKey = "k"\nretries = 0\n'
    (ws / "memsift.toml").write_text(config)
    with dead:
        code, out, err = run(capsys, "--workspace", ws, "--json", "status", "--deep")
        probe = json.loads(out)["probe"]  # the report is printed all the same
        assert probe["ok"] is False and "ProviderDown" in probe["error"]
        assert code == 1 and err.startswith("memsift: error: the embedder probe failed: ProviderDown")
        code, out, err = run(capsys, "--workspace", ws, "--debug", "status", "--deep")
        assert code == 1 and re.search(r"^probe +ok=no", out, re.M) and err.count("\n") == 1, err  # no traceback
        assert run(capsys, "--workspace", ws, "status")[0] == 0  # without --deep nothing is probed
    # Keyword-only is a configuration, not a fault: the probe says so and the check passes, also over an index
    # built with the local model (its identity still names that provider).
    (ws / "memsift.toml").unlink()
    assert run(capsys, "--workspace", ws, "index", "--no-prefect")[0] == 0
    (ws / "memsift.toml").write_text('[embedding]\nprovider = "none"\n')
    code, out, err = run(capsys, "--workspace", ws, "--json", "status", "--deep")
    assert code == 0 and json.loads(out)["probe"] == {"ok": False, "error": "no embedder configured"} and err == ""


def test_status_is_clean_after_indexing_a_workspace_with_a_skipped_file(capsys, ws: Path) -> None:
    (ws / "memory" / "blob.md").write_bytes(b"\x00binary")
    run(capsys, "--workspace", ws, "index", "--no-prefect")
    doc = json.loads(run(capsys, "--workspace", ws, "status", "--json")[1])
    assert doc["dirty"] is False, doc["dirtyReason"]


# ---------------------------------------------------------------- --json placement


@pytest.mark.parametrize(
    "command",
    [("status",), ("get", "MEMORY.md", "--lines", "1"), ("search", "flat white", "--mode", "keyword")],
)
def test_json_before_or_after_the_subcommand(capsys, ws: Path, command) -> None:
    code_a, before, _ = run(capsys, "--json", "--workspace", ws, *command)
    code_b, after, _ = run(capsys, "--workspace", ws, *command, "--json")
    assert code_a == code_b == 0
    a, b = json.loads(before), json.loads(after)
    for doc in (a, b):
        doc.pop("tookMs", None)
        doc.pop("lastSync", None)
    assert a == b
    human = run(capsys, "--workspace", ws, *command)[1]
    with pytest.raises(json.JSONDecodeError):
        json.loads(human)


# ---------------------------------------------------------------- failures: exit 1, one line


BAD_TOML = '[search]\nmaxResults = "x"\n'


@pytest.mark.parametrize(
    "command", [("index", "--no-prefect"), ("index",), ("search", "x"), ("get", "MEMORY.md"), ("status",)]
)
def test_bad_config_is_one_line_and_no_work(capsys, ws: Path, memsift_home: Path, command) -> None:
    (ws / "memsift.toml").write_text(BAD_TOML)
    code, out, err = run(capsys, "--workspace", ws, *command)
    assert_one_line_error(code, out, err, "search.maxResults")
    assert not memsift_home.exists()  # nothing was opened or indexed


def test_bad_config_from_env_and_flag(capsys, ws: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("MEMSIFT_SEARCH_BOGUS", "1")
    assert_one_line_error(*run(capsys, "--workspace", ws, "status"), "MEMSIFT_SEARCH_BOGUS")
    monkeypatch.delenv("MEMSIFT_SEARCH_BOGUS")
    assert_one_line_error(*run(capsys, "--config", tmp_path / "missing.toml", "--workspace", ws, "status"), "--config")
    (tmp_path / "broken.toml").write_text("[search\n")
    assert_one_line_error(*run(capsys, "--config", tmp_path / "broken.toml", "--workspace", ws, "status"), "TOML")


def test_debug_shows_the_traceback(capsys, ws: Path) -> None:
    (ws / "memsift.toml").write_text(BAD_TOML)
    code, out, err = run(capsys, "--debug", "--workspace", ws, "status")
    assert code == 1 and out == ""
    assert "Traceback (most recent call last)" in err and "ConfigError" in err
    assert err.rstrip("\n").splitlines()[-1].startswith(f"memsift: error: {ws / 'memsift.toml'}: search.maxResults")
    (ws / "memsift.toml").unlink()
    code, _, err = run(capsys, "--workspace", ws, "get", "../x.md", "--debug")
    assert code == 1 and "Traceback" in err and "GetError" in err


def test_blank_query_does_no_work(capsys, ws: Path) -> None:
    assert run(capsys, "--workspace", ws, "search", " ")[0] == 2
    status = json.loads(run(capsys, "--workspace", ws, "status", "--json")[1])
    assert status["lastSync"] is None


def test_unknown_agent_is_a_one_line_error(capsys, ws: Path, memsift_home: Path, monkeypatch) -> None:
    monkeypatch.chdir(ws)  # no --workspace: the agent must be configured
    assert_one_line_error(*run(capsys, "--agent", "nobody", "status"), "unknown agent 'nobody'")
    assert_one_line_error(*run(capsys, "--agent", "nobody", "search", "x"), "nobody")
    assert not memsift_home.exists()


def test_other_agent_through_the_config(capsys, ws: Path, workspace, memsift_home: Path) -> None:
    other = workspace({"memory/a.md": "the zebra crossing at Fifth Avenue\n"}, name="other")
    cfg = ws / "memsift.toml"
    cfg.write_text(f'[agents.side]\nworkspace = "{other}"\n')
    code, out, err = run(capsys, "--config", cfg, "--agent", "side", "search", "zebra", "--mode", "keyword", "--json")
    assert code == 0, err
    assert [r["path"] for r in json.loads(out)["results"]] == ["memory/a.md"]
    assert [p.name for p in (memsift_home / "memory").glob("*.sqlite")] == [db_path(memsift_home, "side", other).name]


def test_workspace_flag_finds_the_config_of_a_configured_agent(capsys, ws: Path, workspace, memsift_home: Path) -> None:
    """`--workspace ~/agent --agent side`: the file in ~/agent names side's folder, and every command answers
    from it, as `serve` and `up` do. search, get and status used ~/agent under side's name (an index of the
    main agent's notes called side, "No matches." for side's own)."""
    other = workspace({"memory/a.md": "the zebra crossing at Fifth Avenue\n"}, name="other")
    (ws / "memsift.toml").write_text('[agents.side]\nworkspace = "../other"\n')
    side = ("--workspace", ws, "--agent", "side")
    code, out, err = run(capsys, *side, "search", "zebra", "--mode", "keyword", "--json")
    assert code == 0, err
    assert [r["path"] for r in json.loads(out)["results"]] == ["memory/a.md"]
    assert json.loads(run(capsys, *side, "get", "memory/a.md", "--json")[1])["text"].startswith("the zebra")
    status = json.loads(run(capsys, *side, "status", "--json")[1])
    assert (status["workspace"], status["files"]) == (str(other.resolve()), {"memory": 1})
    assert [p.name for p in (memsift_home / "memory").glob("*.sqlite")] == [db_path(memsift_home, "side", other).name]
    code, out, err = run(capsys, "--workspace", other, "--agent", "scratch", "status", "--json")  # not configured
    assert code == 0 and json.loads(out)["workspace"] == str(other.resolve()), err


def test_rerank_degrades_with_a_reason(capsys, ws: Path, monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("MEMSIFT_RERANK_MODEL", str(tmp_path / "no-model-here"))
    code, out, err = run(capsys, "--workspace", ws, "--json", "search", "deploy", "--rerank")
    assert code == 0
    doc = json.loads(out)
    assert doc["results"] and "reranker unavailable" in doc["degraded"]


# ---------------------------------------------------------------- usage errors: exit 2


@pytest.mark.parametrize(
    "argv",
    [
        ("bogus",),
        (),
        ("search",),
        ("search", ""),  # a blank query is no query (REST: 400); it was exit 1
        ("search", "   "),
        ("search", "\t\n"),
        ("search", "x", "--mode", "fuzzy"),
        ("search", "x", "--max-results", "many"),
        ("search", "x", "--max-results", "-1"),
        ("search", "x", "--max-results", "0"),
        ("search", "x", "--min-score", "7"),
        ("search", "x", "--min-score", "-0.5"),
        ("get", "MEMORY.md", "--from", "x"),
        ("get", "MEMORY.md", "--from", "0"),  # exit 1 before, unlike --max-results 0
        ("get", "MEMORY.md", "--lines", "-2"),
        ("get", "MEMORY.md", "--from", "٣"),  # an Arabic-Indic 3: Python's int() reads it, no one types it
        ("get", "MEMORY.md", "--lines", "1_0"),  # int("1_0") is 10
        ("search", "x", "--min-score", "0_5"),
        ("get", ""),  # a blank path, as a blank query (it was exit 1)
        ("get", " "),
        ("status", "--frobnicate"),
        ("index", "--workspace", ""),  # `--workspace "$AGENT_DIR"`, unset: it indexed the current folder
        ("--workspace", " ", "search", "x"),
        ("--config", "", "status"),  # ignored in silence: the workspace's memsift.toml was read instead
        ("search", "x", "--path-prefix", "/memory"),  # no hit's path starts so: "No matches." in silence
        # bytes that are not UTF-8 (a Latin-1 terminal): Python hands them on as lone surrogates, which the
        # embedder refused, so the search degraded to keywords with a TypeError as its reason
        ("search", "caf\udce9"),
        ("search", "x", "--path-prefix", "memory/caf\udce9"),  # no such name is indexed: "No matches."
        # an id no configuration can have, as REST's 400: it was exit 1, unlike a blank --config
        ("--agent", " ", "status"),
        ("--agent", "", "status"),
        ("search", "x", "--agent", "../x"),
    ],
)
def test_usage_errors_exit_2(capsys, ws: Path, memsift_home: Path, argv) -> None:
    code, out, err = run(capsys, "--workspace", ws, *argv)
    assert code == 2
    assert out == ""
    assert "usage: memsift" in err and "memsift: error: " in err
    assert "Traceback" not in err
    assert not memsift_home.exists()


@pytest.mark.parametrize(("query", "code"), [("é" * 2048, 0), ("é" * 2049, 2), ("x" * 4097, 2), ("東" * 1366, 2)])
def test_a_query_over_4_kib_of_utf_8_is_refused_as_rest_and_mcp_refuse_it(capsys, ws: Path, query, code) -> None:
    """REST answers 413 and MCP an error past 4,096 bytes; the CLI searched 4,097 x's and printed hits."""
    got, out, err = run(capsys, "--workspace", ws, "search", query, "--json")
    assert got == code, err
    if code:
        assert f"{len(query.encode())} bytes, over the limit of 4096" in err, err
        assert_problem(out, err, 413)  # REST's status for it


@pytest.mark.parametrize("query", ["-coffee", "--force-with-lease", "-C++"])
def test_a_query_that_starts_with_a_dash_is_told_to_come_after_double_dash(capsys, ws: Path, query) -> None:
    """argparse reads `-coffee` as an unknown option and said only `required: query`, to a user who gave one."""
    code, out, err = run(capsys, "--workspace", ws, "search", query)
    assert code == 2 and out == ""
    assert f"{query!r} was read as an option" in err and f"memsift search -- {query!r}" in err, err
    code, out, err = run(capsys, "--workspace", ws, "search", "--json")  # a known option: the query is missing
    assert code == 2 and "read as an option" not in err and "required: query" in err, err
    code, out, err = run(capsys, "--workspace", ws, "search", "--", query)
    assert code == 0, err


@pytest.mark.parametrize("command", ["serve", "mcp"])
@pytest.mark.parametrize("host", ["", " "])
def test_a_blank_host_is_a_usage_error(capsys, command: str, host: str) -> None:
    """`serve --host "$HOST"` with the variable unset served on api.host in silence, as a blank --workspace
    indexed the current folder; `--host " "` was "refusing to serve beyond this machine". Parsed only: a
    command that passed would serve until stopped."""
    with pytest.raises(SystemExit) as exit_:
        parser().parse_args([command, "--host", host])
    assert exit_.value.code == 2
    assert "memsift: error: argument --host: must not be blank" in capsys.readouterr().err


@pytest.mark.parametrize("option", [{"max_results": -1}, {"min_score": 2.0}])
def test_search_library_validates_its_options(ws: Path, option) -> None:
    with MemoryIndex(load_config(workspace=ws)) as index:
        with pytest.raises(SearchError):
            index.search("deploy", **option)


def test_an_unreadable_ranker_model_stops_a_command_before_any_work(capsys, ws: Path, memsift_home: Path) -> None:
    """It was found by the first search only: `index` indexed, `serve` served and answered every search 500."""
    (ws / "memsift.toml").write_text('[rerank]\nrankerModel = "ranker.json"\n')
    code, out, err = run(capsys, "--workspace", ws, "index", "--no-prefect")
    assert_one_line_error(code, out, err, "rerank.rankerModel: ranker model", "No such file or directory")
    assert not (memsift_home / "memory").exists()  # no index was made


# ---------------------------------------------------------------- a real process


def _env(memsift_home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMSIFT_", "PREFECT_API_URL"))}
    env["MEMSIFT_HOME"] = str(memsift_home)
    return env


def test_real_process_json_stdout_is_one_document(ws: Path, memsift_home: Path) -> None:
    proc = subprocess.run(
        [MEMSIFT, "--workspace", ws, "search", "flat white", "--json"],
        capture_output=True, text=True, env=_env(memsift_home), timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)  # raises on anything besides one document
    assert proc.stdout.startswith("{") and proc.stdout.endswith("}\n")
    assert doc["results"][0]["path"] == "MEMORY.md"

    proc = subprocess.run(
        [MEMSIFT, "--workspace", ws, "--json", "status"], capture_output=True, text=True, env=_env(memsift_home)
    )
    assert proc.returncode == 0 and json.loads(proc.stdout)["files"] == {"memory": 3}


BAD_QUERY_LINE = '{"qid": "q1", "query": "deploy", "relevant": [{"path": "MEMORY.md", "line": 1}]}\nnot json\n'


@pytest.mark.parametrize(
    ("argv", "code", "status"),
    [
        (("search", "x", "--max-results", "abc"), 2, 400),  # argparse's usage errors: REST's 400
        (("search",), 2, 400),
        (("bogus",), 2, 400),
        (("model",), 2, 400),
        (("get", "MEMORY.md", "--lines", "6000"), 2, 400),  # over REST's MAX_LINES
        (("search", "x" * 4097), 2, 413),  # REST's 413 for a query over 4 KiB
        (("--agent", "nope", "search", "x"), 1, 404),  # REST's unknown agent
        (("--agent", "nope", "status"), 1, 404),
        (("get", "../x"), 1, 403),
        (("get", "/etc/passwd"), 1, 403),
        (("--workspace", "{missing}", "status"), 1, 400),
        (("--config", "{missing}", "search", "x"), 1, 400),
        (("--config", "{bad_key}", "index", "--no-prefect"), 1, 400),
        (("eval", "{bad_line}"), 1, 400),
        (("eval", "{missing}"), 1, 400),
        (("--config", "{no_key}", "index", "--no-prefect"), 1, 503),  # the embedder cannot start
    ],
)
def test_a_json_command_that_fails_prints_a_problem_document(
    capsys, ws: Path, tmp_path: Path, monkeypatch, argv, code: int, status: int
) -> None:
    """SPEC section 3: `--json` prints one JSON document on stdout. A failing command left stdout empty, and a
    program's `json.loads(stdout)` failed on it; now it is the RFC 9457 document REST answers the same problem
    with, the reason still on stderr and the exit code still 1 (failure) or 2 (usage)."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    files = {"missing": tmp_path / "missing", "bad_key": tmp_path / "bad.toml", "bad_line": tmp_path / "q.jsonl"}
    files["no_key"] = tmp_path / "openai.toml"
    files["bad_key"].write_text("[search]\nmaxResult = 3\n")
    files["bad_line"].write_text(BAD_QUERY_LINE)
    files["no_key"].write_text('[embedding]\nprovider = "openai"\n')
    argv = [a.format(**files) for a in argv]
    monkeypatch.chdir(ws)  # the main agent's workspace; `--workspace` would be an unknown agent's (SPEC: its folder)
    where = [] if argv[0] == "--agent" else ["--workspace", ws]
    for line in ([*where, "--json", *argv], [*where, *argv, "--json"]):
        got, out, err = run(capsys, *line)
        assert got == code, (out, err)
        assert_problem(out, err, status)
        assert "Traceback" not in err and err.splitlines()[-1].startswith("memsift: error: ")


def test_json_problem_document_from_a_real_process(ws: Path, memsift_home: Path) -> None:
    """What a program reads: stdout parses as one JSON document for a usage error and for a failure alike,
    and nothing but a problem document is printed for a `--json` that comes after `--` (a query)."""
    for argv, code in (
        (["search", "x", "--max-results", "abc", "--json"], 2),
        (["--agent", "no", "--json", "status"], 1),
    ):
        proc = subprocess.run([MEMSIFT, *argv], capture_output=True, text=True, env=_env(memsift_home), cwd=ws)
        assert proc.returncode == code and json.loads(proc.stdout)["detail"] in proc.stderr, proc.stderr
    proc = subprocess.run(
        [MEMSIFT, "--workspace", ws, "search", "--max-results", "abc", "--", "--json"],
        capture_output=True, text=True, env=_env(memsift_home),
    )  # fmt: skip
    assert proc.returncode == 2 and proc.stdout == ""  # `--json` after `--` is the query, not the flag


def test_real_process_errors(ws: Path, memsift_home: Path) -> None:
    proc = subprocess.run(
        [MEMSIFT, "--workspace", ws, "get", "/etc/passwd"], capture_output=True, text=True, env=_env(memsift_home)
    )
    assert_one_line_error(proc.returncode, proc.stdout, proc.stderr, "absolute")
    proc = subprocess.run(
        [MEMSIFT, "--workspace", ws, "serach", "x"], capture_output=True, text=True, env=_env(memsift_home)
    )
    assert proc.returncode == 2 and proc.stdout == "" and "invalid choice: 'serach'" in proc.stderr


def _on_a_terminal(
    argv: list[str | Path], env: dict[str, str], stream: str = "stdout"
) -> tuple[subprocess.CompletedProcess[bytes], bytes]:
    """Run `argv` with `stream` (stdout or stderr) on a pseudo-terminal and the other piped: the process, and
    what the terminal received."""
    master, slave = pty.openpty()
    chunks: list[bytes] = []

    def drain() -> None:
        while data := _read(master):
            chunks.append(data)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    streams = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, stream: slave}
    try:
        proc = subprocess.run(argv, **streams, env=env, timeout=120)
    finally:
        os.close(slave)
        reader.join(timeout=10)
        os.close(master)
    return proc, b"".join(chunks)


def _read(fd: int) -> bytes:
    try:
        return os.read(fd, 4096)
    except OSError:  # the terminal's other end closed
        return b""


def test_a_note_s_escape_sequences_are_shown_not_run_on_a_terminal(workspace, memsift_home: Path) -> None:
    """A note holding terminal escapes (clear the screen, OSC 52 writing the clipboard) printed them as they
    were: the terminal ran them. On a terminal, search and get show each control character as its escape; a
    pipe still gets the exact text."""
    evil = "- The quokka note \x1b[2J\x1b]52;c;aGk=\x07 ends here."
    ws = workspace({"MEMORY.md": f"# Memory\n{evil}\n"})
    env = _env(memsift_home)
    for argv in (["search", "quokka note", "--min-score", "0"], ["get", "MEMORY.md", "--from", "2"]):
        proc, shown = _on_a_terminal([MEMSIFT, "--workspace", ws, *argv], env)
        assert proc.returncode == 0 and b"\x1b" not in shown and b"\x07" not in shown, shown
        assert b"quokka note \\x1b[2J\\x1b]52;c;aGk=\\x07 ends here." in shown, shown
        piped = subprocess.run([MEMSIFT, "--workspace", ws, *argv], capture_output=True, env=env, timeout=120)
        assert evil.encode() in piped.stdout, piped.stdout


def test_progress_bar_goes_to_the_terminal_not_stdout(ws: Path, memsift_home: Path) -> None:
    """stderr on a terminal shows the bar; stdout, piped, holds only the summary."""
    argv = [MEMSIFT, "--workspace", ws, "index", "--no-prefect"]
    proc, shown = _on_a_terminal(argv, _env(memsift_home), stream="stderr")
    assert proc.returncode == 0
    assert proc.stdout.decode().startswith("plan: ")
    assert f"\nfirst index of agent main ({ws.resolve()})\n" in proc.stdout.decode()
    assert b"\x1b" not in proc.stdout
    assert b"indexing" in shown
    assert b"3/3 chunks embedded" in shown  # chunks, not files: what costs the time


def test_search_time_filters(capsys, ws: Path) -> None:
    """--after/--before keep daily notes by the date in their name; MEMORY.md stays unless --no-evergreen."""

    def found(*options: str) -> set[str]:
        code, out, err = run(capsys, "--workspace", ws, "search", "deploy Priya flat white", "--json", *options)
        assert code == 0, err
        return {h["path"] for h in json.loads(out)["results"]}

    assert found("--min-score", "0", "--after", "2026-05-15") == {"MEMORY.md", "memory/2026-05-15.md"}
    assert found("--min-score", "0", "--before", "2026-05-14", "--no-evergreen") == {"memory/2026-05-14.md"}
    assert found("--min-score", "0", "--after", "2026-05-14T00:00", "--before", "2026-05-14", "--no-evergreen") == {
        "memory/2026-05-14.md"
    }
    assert found("--after", "1d", "--no-evergreen") == set()  # notes of May 2026 are older than a day


@pytest.mark.parametrize(
    ("options", "needle"),
    [
        (("--after", "next week"), "argument --after: 'next week' is not a date (YYYY-MM-DD)"),
        (("--before", "2026-02-30"), "argument --before: '2026-02-30' is not a date"),
        (("--before", " "), "argument --before: must be a date (YYYY-MM-DD)"),
    ],
)
def test_a_time_filter_that_names_no_time_is_a_usage_error(
    capsys, ws: Path, options: tuple[str, ...], needle: str
) -> None:
    """Exit 2, as a bad --max-results or --min-score (it was 1, a failure)."""
    code, out, err = run(capsys, "--workspace", ws, "search", "deploy", *options)
    assert (code, out) == (2, "")
    last = err.splitlines()[-1]
    assert err.startswith("usage: memsift search") and last.startswith("memsift: error: ") and needle in last, err


def test_an_empty_time_window_is_a_usage_error(capsys, ws: Path) -> None:
    """Bounds that leave no time between them exit 2, as a bound that names no time does (REST: 400 for both)."""
    code, out, err = run(
        capsys, "--workspace", ws, "search", "deploy", "--after", "2026-05-15", "--before", "2026-05-14"
    )
    assert (code, out) == (2, "")
    assert err.endswith("memsift: error: after: '2026-05-15' is later than before: '2026-05-14'\n"), err


def test_real_process_time_filter(ws: Path, memsift_home: Path) -> None:
    argv = [MEMSIFT, "--workspace", ws, "search", "deploy", "--json", "--before", "2026-05-14", "--no-evergreen"]
    proc = subprocess.run(argv, capture_output=True, text=True, env=_env(memsift_home), timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert {h["path"] for h in json.loads(proc.stdout)["results"]} == {"memory/2026-05-14.md"}
    proc = subprocess.run(argv[:5] + ["--after", "soon"], capture_output=True, text=True, env=_env(memsift_home))
    assert (proc.returncode, proc.stdout) == (2, "")
    assert "memsift: error: argument --after: 'soon' is not a date" in proc.stderr and "Traceback" not in proc.stderr


def test_a_reader_that_goes_away_ends_the_command_quietly(workspace, memsift_home: Path) -> None:
    """`memsift get ... | head -1`: once the reader has closed the pipe the command stops, with no error line."""
    ws = workspace({"MEMORY.md": "".join(f"- fact number {i}\n" for i in range(200_000))})
    proc = subprocess.Popen(
        [MEMSIFT, "--workspace", ws, "get", "MEMORY.md"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(memsift_home),
    )
    assert proc.stdout.readline() == b"- fact number 0\n"
    proc.stdout.close()  # as head does after its line
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141 and "error" not in err, err


# Prefect's engine, unwinding a task run that Ctrl-C cut, has raised "ValueError: Task run is not set" in the
# interrupt's place (seen under `memsift up`'s server on a loaded machine); this command does the same.
_CUT_BY_A_SIGNAL = """
import os, signal, sys
from api import cli, cli_signals
def cut(command):
    with cli_signals.interruptible():
        try:
            os.kill(os.getpid(), signal.SIGINT)
        except KeyboardInterrupt:
            raise ValueError("Task run is not set") from None
cli._COMMANDS["index"] = cut
sys.exit(cli.main(["index"]))
"""


# A broad `except Exception` that swallows the interrupt (an import it cut short raises ImportError in its place).
_SWALLOWED = """
import os, signal, sys
from api import cli, cli_signals
def swallowed(command):
    with cli_signals.interruptible():
        try:
            try:
                os.kill(os.getpid(), signal.SIGINT)
            except KeyboardInterrupt:
                raise ImportError("initialization failed")
        except Exception:
            pass
    return 0
cli._COMMANDS["index"] = swallowed
sys.exit(cli.main(["index"]))
"""


def test_an_interrupt_something_swallowed_still_ends_the_run_as_interrupted(tmp_path: Path) -> None:
    """The run went on to its end and exited 0: the user's Ctrl-C was lost without a word."""
    env = dict(os.environ, MEMSIFT_HOME=str(tmp_path / "home"))
    done = subprocess.run([sys.executable, "-c", _SWALLOWED], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 130, done.stderr
    assert done.stderr.startswith("memsift: error: interrupted by SIGINT; the index is as the last completed step")


def test_an_error_raised_while_unwinding_from_ctrl_c_is_still_the_interrupt(tmp_path: Path) -> None:
    env = dict(os.environ, MEMSIFT_HOME=str(tmp_path / "home"))
    done = subprocess.run([sys.executable, "-c", _CUT_BY_A_SIGNAL], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 130, done.stderr
    assert done.stderr.startswith("memsift: error: interrupted by SIGINT; the index is as the last completed step")
    assert "ValueError" not in done.stderr


def test_version_prints_the_installed_version(capsys) -> None:
    """`memsift --version` was a usage error ("the following arguments are required: COMMAND")."""
    from importlib.metadata import version

    code, out, err = run(capsys, "--version")
    assert (code, out, err) == (0, f"memsift {version('memsift')}\n", "")


def test_version_json_prints_a_json_document(capsys) -> None:
    """`memsift --version --json` printed the plain line: a program reading JSON could not parse it. So did
    `--version --js`, an abbreviation every command takes for `--json`."""
    from importlib.metadata import version

    for argv in (["--version", "--json"], ["--json", "--version"], ["--version", "--js"], ["--js", "--version"]):
        code, out, err = run(capsys, *argv)
        assert (code, json.loads(out), err) == (0, {"version": version("memsift")}, ""), argv


def test_a_home_memsift_cannot_write_is_named(ws: Path, tmp_path: Path) -> None:
    """A read-only MEMSIFT_HOME failed every command with "OSError: [Errno 30] Read-only file system:
    '<home>/memory/main.ws-<hash>.sqlite.swap'", one that cannot be made with "FileNotFoundError: [Errno 2] No such
    file or directory: '<home>'": neither named the variable to change."""
    if not Path("/proc/self").is_dir():
        pytest.skip("needs procfs, where no folder can be made")
    home = Path("/proc/memsift-home")
    proc = subprocess.run(
        [MEMSIFT, "--workspace", ws, "search", "deploy"], capture_output=True, text=True, env=_env(home), timeout=120
    )
    assert (proc.returncode, proc.stdout) == (1, ""), proc.stderr
    last = f"memsift: error: MEMSIFT_HOME: {home} cannot be created: No such file or directory"
    assert proc.stderr.splitlines()[-1] == last and "Traceback" not in proc.stderr

    home = tmp_path / "ro"  # an index there, then the home mounted read-only (root in a mount namespace of its own)
    assert (
        subprocess.run([MEMSIFT, "--workspace", ws, "index", "--no-prefect"], env=_env(home), timeout=120).returncode
        == 0
    )
    read_only = f'mount --bind "{home}" "{home}" && mount -o remount,bind,ro "{home}" && exec "$@"'
    wrap = ["unshare", "-m", "sh", "-c", read_only, "sh"]
    if subprocess.run([*wrap, "true"], capture_output=True).returncode != 0:
        pytest.skip("cannot mount a read-only folder here (needs root and unshare)")
    for command in (["search", "deploy"], ["status", "--json"]):
        proc = subprocess.run(
            [*wrap, MEMSIFT, "--workspace", ws, *command], capture_output=True, text=True, env=_env(home), timeout=120
        )
        assert proc.returncode == 1, proc.stderr
        if "--json" in command:  # the problem document of a server's own failure
            assert_problem(proc.stdout, proc.stderr, 500)
        else:
            assert proc.stdout == ""
        assert proc.stderr.startswith(f"memsift: error: MEMSIFT_HOME: {home}: {home / 'memory'}/"), proc.stderr
        assert proc.stderr.count("\n") == 1 and "Read-only file system" in proc.stderr


@pytest.mark.parametrize("kind", ["file", "under a file"])
def test_an_unusable_memsift_home_is_named(ws: Path, tmp_path: Path, kind: str) -> None:
    """It was "NotADirectoryError: [Errno 20] Not a directory: '.../memory'", from the first write there."""
    (tmp_path / "afile").write_text("")
    home = tmp_path / "afile" if kind == "file" else tmp_path / "afile" / "home"
    proc = subprocess.run(
        [MEMSIFT, "--workspace", ws, "search", "deploy"], capture_output=True, text=True, env=_env(home), timeout=120
    )
    expected = "is a file, not a folder" if kind == "file" else f"cannot be created: {tmp_path / 'afile'} is a file"
    assert (proc.returncode, proc.stdout, proc.stderr) == (1, "", f"memsift: error: MEMSIFT_HOME: {home} {expected}\n")


def test_global_flags_work_after_the_command_too(ws: Path, memsift_home: Path) -> None:
    """`memsift search deploy --workspace ~/agent` was a usage error ("unrecognized arguments")."""
    before = [MEMSIFT, "--workspace", ws, "--agent", "main", "search", "deploy", "--json"]
    after = [MEMSIFT, "search", "deploy", "--json", "--workspace", ws, "--agent", "main"]
    answers = [
        subprocess.run(argv, capture_output=True, text=True, env=_env(memsift_home), timeout=120)
        for argv in (before, after)
    ]
    assert [a.returncode for a in answers] == [0, 0], [a.stderr for a in answers]
    docs = [json.loads(a.stdout) for a in answers]
    assert docs[0]["results"] and [d["results"] for d in docs] == [docs[0]["results"]] * 2


def test_an_unquoted_query_of_several_words_is_told_how_to_ask(capsys, ws: Path) -> None:
    """`memsift search deploy failure` printed the top level's usage and "unrecognized arguments: failure",
    with no word of search or of quotes; extra arguments of any command show that command's usage, as the checks
    of several options together do."""
    code, out, err = run(capsys, "--workspace", ws, "search", "deploy", "failure", "now", "--json")
    assert code == 2 and json.loads(out)["status"] == 400
    assert err.startswith("usage: memsift search ")
    last = "memsift: error: unrecognized arguments: failure now (a query of several words is one argument, in quotes: "
    assert err.splitlines()[-1] == last + "memsift search 'deploy failure now')"
    code, out, err = run(capsys, "--workspace", ws, "get", "MEMORY.md", "extra")
    assert (code, out, err.splitlines()[-1]) == (2, "", "memsift: error: unrecognized arguments: extra")
    assert err.startswith("usage: memsift get ")
    for argv in (("get", "MEMORY.md", "--lines", "6000", "--json"), ("search", "x", "--after", "2d", "--before", "5d")):
        code, out, err = run(capsys, "--workspace", ws, *argv)
        assert code == 2 and err.startswith(f"usage: memsift {argv[0]} "), err
        assert out == "" if "--json" not in argv else json.loads(out)["status"] == 400


def test_an_unreadable_index_is_set_aside_by_a_forced_run(ws: Path, memsift_home: Path) -> None:
    """An index file that is no database (a disk fault, a copy gone wrong): every command failed, and
    `memsift index --force` too, so the only way out was to find and delete the file by hand."""

    def memsift(*argv: str | Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [MEMSIFT, "--workspace", ws, *argv], capture_output=True, text=True, env=_env(memsift_home), timeout=120
        )

    assert memsift("index", "--no-prefect").returncode == 0
    (db,) = (memsift_home / "memory").glob("*.sqlite")
    db.write_bytes(b"not an index, not SQLite at all " * 200)
    for suffix in ("-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    failed = memsift("search", "deploy")
    assert failed.returncode == 1 and "`memsift index --force` sets it aside and rebuilds it" in failed.stderr
    forced = memsift("index", "--no-prefect", "--force")
    assert forced.returncode == 0, forced.stderr
    (aside,) = (memsift_home / "memory").glob("*.sqlite.unreadable-*")
    assert f"the unreadable index was set aside as {aside}" in forced.stderr
    assert aside.read_bytes().startswith(b"not an index")  # kept for the user, not deleted
    found = memsift("search", "deploy", "--json")
    assert found.returncode == 0 and json.loads(found.stdout)["results"], found.stderr


def test_ctrl_c_while_memsift_loads_is_one_line_and_130() -> None:
    """A Ctrl-C in the first ~0.3 s, while the CLI's modules load, ends as a later one does: one line, status
    130 (it printed a traceback). The interrupt is raised where a real one lands, at the import of api.cli, by
    an import hook: a signal timed against the imports would be a race."""
    from importlib.metadata import entry_points

    (script,) = [e for e in entry_points(group="console_scripts") if e.name == "memsift"]
    assert script.value == "api.entry:main"  # the installed `memsift` runs the guard
    code = (
        "import sys\n"
        "class Interrupt:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'api.cli':\n"
        "            raise KeyboardInterrupt\n"
        "sys.meta_path.insert(0, Interrupt())\n"
        "from api.entry import main\n"
        "sys.exit(main())\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (130, "", "memsift: error: interrupted\n")


def test_a_closed_standard_output_is_one_line_and_1(ws: Path, memsift_home: Path) -> None:
    """`memsift search x >&-` (a supervisor that closes stdout) failed with "AttributeError: 'NoneType' object
    has no attribute 'isatty'"; it now says what is wrong, as `cat` does, before any work."""
    done = subprocess.run(
        [MEMSIFT, "--workspace", ws, "search", "flat white"],
        stderr=subprocess.PIPE,
        text=True,
        timeout=60,
        preexec_fn=lambda: os.close(1),
    )
    assert (done.returncode, done.stderr) == (
        1,
        "memsift: error: standard output is closed: nowhere to write the answer\n",
    )
    assert not list((memsift_home / "memory").glob("*.sqlite"))  # nothing indexed for an answer nobody reads


# A real SIGINT while the embedder's runtime loads, ending as a C extension's module init ends when a
# KeyboardInterrupt cuts it: an ImportError ("initialization failed"), which the search takes for a failed
# embedder and answers from keywords.
_CTRL_C_IN_A_C_IMPORT = """
import os, signal, sys
class CutByCtrlC:
    def find_spec(self, name, path=None, target=None):
        if name == "onnxruntime":
            try:
                os.kill(os.getpid(), signal.SIGINT)
            except KeyboardInterrupt:
                raise ImportError("initialization failed") from None
sys.meta_path.insert(0, CutByCtrlC())
from api.entry import main
sys.exit(main())
"""


@pytest.mark.parametrize(
    "command", [["search", "flat white"], ["search", "flat white", "--json"], ["status", "--deep"]]
)
def test_ctrl_c_that_an_import_swallows_still_stops_a_command_as_interrupted(
    ws: Path, memsift_home: Path, command: list[str]
) -> None:
    """The search went on, printed its keyword answer with `note: embedding the query failed (ImportError:
    initialization failed)` and exited 0: the user's Ctrl-C was lost, and the note blamed the embedder. Every
    command stops as `memsift index` does: no answer, one line, 130."""
    env = _env(memsift_home)
    subprocess.run([MEMSIFT, "--workspace", ws, "index", "--no-prefect"], check=True, capture_output=True, env=env)
    argv = [sys.executable, "-c", _CTRL_C_IN_A_C_IMPORT, "--workspace", str(ws), *command]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)
    assert (done.returncode, done.stdout) == (130, ""), done.stderr
    assert done.stderr == "memsift: error: interrupted by SIGINT\n"


@pytest.mark.parametrize("command", [["serve", "--port", "8"], ["mcp"]])
def test_ctrl_c_while_a_server_starts_is_one_line_and_130(ws: Path, memsift_home: Path, command: list[str]) -> None:
    """Before a server has its own handlers (its modules loading, the watcher starting), a Ctrl-C exited 1, the
    status of a failure; it is 130, as for every other command. A real SIGINT, sent as uvicorn is imported."""
    code = _CTRL_C_IN_A_C_IMPORT.replace('"onnxruntime"', '"uvicorn"').replace(
        'raise ImportError("initialization failed") from None', "raise"
    )
    argv = [sys.executable, "-c", code, "--workspace", str(ws), *command]
    done = subprocess.run(argv, capture_output=True, text=True, env=_env(memsift_home), stdin=subprocess.DEVNULL)
    assert (done.returncode, done.stderr) == (130, "memsift: error: interrupted\n")


def test_serve_started_ignoring_sigint_still_stops_on_one_sent_before_it_serves(ws: Path, memsift_home: Path) -> None:
    """A script's `memsift serve &` (a shell without job control) starts it with SIGINT ignored: a `kill -INT`
    before uvicorn took the signal over was lost, and the server went on to serve (`up` and `mcp` take SIGINT
    back). A real SIGINT, sent as serve loads its configuration follower, after its banner: a clean stop, 0."""
    hook = _CTRL_C_IN_A_C_IMPORT.replace('"onnxruntime"', '"api.config_reload"').replace(
        'raise ImportError("initialization failed") from None', "raise"
    )
    code = "import signal; signal.signal(signal.SIGINT, signal.SIG_IGN)\n" + hook
    port = socket.socket()
    port.bind(("127.0.0.1", 0))
    argv = [sys.executable, "-c", code, "--workspace", str(ws), "serve", "--port", str(port.getsockname()[1])]
    port.close()
    try:  # the deadline, not a measure: before, it served on
        done = subprocess.run(argv, capture_output=True, text=True, env=_env(memsift_home), timeout=120)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"still serving after the SIGINT: {exc.stderr}")
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr


def test_ctrl_c_during_a_search_is_one_line_and_130(ws: Path, memsift_home: Path) -> None:
    """A Ctrl-C during `memsift search` ended with status 1, a failure's, where one while memsift loads (above)
    or during `memsift index` is 130. It is raised where a real one lands, while the model loads (onnxruntime
    is imported on the model's first use), by an import hook: a signal timed against the search is a race."""
    indexed = subprocess.run(
        [MEMSIFT, "--workspace", ws, "index", "--no-prefect"], env=_env(memsift_home), capture_output=True
    )
    assert indexed.returncode == 0
    code = (
        "import sys\n"
        "class Interrupt:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'onnxruntime':\n"
        "            raise KeyboardInterrupt\n"
        "sys.meta_path.insert(0, Interrupt())\n"
        "from api.entry import main\n"
        "sys.exit(main())\n"
    )
    argv = [sys.executable, "-c", code, "--workspace", str(ws), "search", "deploy"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=_env(memsift_home))
    assert (done.returncode, done.stdout, done.stderr) == (130, "", "memsift: error: interrupted\n")
