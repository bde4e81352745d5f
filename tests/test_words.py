"""The words a person meets on the everyday path (issue 14, point 6), each through a real `memsift` process:
a workspace with nothing to index, a bad environment variable, `status`, `--help`, the MCP server's version,
and a cut snippet."""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from sample import NOTES

from api import arguments

MEMSIFT = Path(sys.executable).parent / "memsift"


def _env(memsift_home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMSIFT_", "PREFECT_API_URL"))}
    env["MEMSIFT_HOME"] = str(memsift_home)
    env["MEMSIFT_MODEL_CACHE"] = os.environ["MEMSIFT_MODEL_CACHE"]
    return {**env, **extra}


def memsift(home: Path, *argv: str | Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [MEMSIFT, *map(str, argv)], capture_output=True, text=True, env=_env(home, **env), timeout=300
    )


def test_a_workspace_without_memory_files_is_named(tmp_path: Path, memsift_home: Path) -> None:
    typo = tmp_path / "agnet"  # a real folder, but no MEMORY.md and no memory/
    (typo / "notes").mkdir(parents=True)
    (typo / "notes" / "todo.md").write_text("- buy milk\n")

    proc = memsift(memsift_home, "--workspace", typo, "index", "--no-prefect")
    assert proc.returncode == 0, proc.stderr
    assert f"warning: no memory files in {typo}: memsift looks for MEMORY.md, memory.md, memory/**/*.md" in proc.stderr
    proc = memsift(memsift_home, "--workspace", typo, "index", "--no-prefect", "--json")  # said on stderr too
    assert proc.returncode == 0 and json.loads(proc.stdout)["warnings"], proc.stderr
    assert f"warning: no memory files in {typo}" in proc.stderr

    proc = memsift(memsift_home, "--workspace", typo, "search", "milk")
    assert proc.returncode == 0 and proc.stdout == "No matches.\n"
    assert f"no memory files in {typo}" in proc.stderr and "MEMORY.md" in proc.stderr
    fresh = tmp_path / "agnet2"  # a first search indexes it: its sync's note and the search's warning said it twice
    fresh.mkdir()
    for json_flag in ((), ("--json",)):
        proc = memsift(memsift_home, "--workspace", fresh, "search", "milk", *json_flag)
        assert proc.returncode == 0 and proc.stderr.count(f"no memory files in {fresh}") == 1, proc.stderr

    ws = tmp_path / "ws"  # a workspace with memory: no such warning, for index or a search that finds nothing
    (ws / "memory").mkdir(parents=True)
    (ws / "MEMORY.md").write_text("- Dana drinks a flat white.\n")
    index = memsift(memsift_home, "--workspace", ws, "index", "--no-prefect")
    search = memsift(memsift_home, "--workspace", ws, "search", "zebra", "--mode", "keyword")
    assert "no memory files" not in index.stderr + search.stderr
    assert search.stdout == "No matches.\n"


def test_a_bad_environment_variable_is_named(tmp_path: Path, memsift_home: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    proc = memsift(memsift_home, "--workspace", ws, "search", "x", MEMSIFT_SEARCH_MAXRESULTS="abc")
    assert proc.returncode == 1
    assert proc.stderr == (
        "memsift: error: MEMSIFT_SEARCH_MAXRESULTS (search.maxResults): expected an integer, got 'abc'\n"
    )
    proc = memsift(memsift_home, "--workspace", ws, "status", MEMSIFT_SEARCH_MIN_SCORE="2")
    assert proc.returncode == 1 and "MEMSIFT_SEARCH_MIN_SCORE (search.minScore): 2.0 is out of range" in proc.stderr


def test_status_speaks_words_not_python(workspace, memsift_home: Path) -> None:
    ws = workspace(NOTES)
    never = memsift(memsift_home, "--workspace", ws, "status")
    assert never.returncode == 0, never.stderr
    assert re.search(r"^lastSync\s+never$", never.stdout, re.M)
    assert re.search(r"^dirty\s+yes$", never.stdout, re.M)

    memsift(memsift_home, "--workspace", ws, "index", "--no-prefect")
    proc = memsift(memsift_home, "--workspace", ws, "status")
    for out in (never.stdout, proc.stdout):
        assert not re.search(r"\b(True|False|None)\b", out), out
    assert re.search(r"^dirty\s+no$", proc.stdout, re.M)
    assert re.search(r"^dirtyReason\s+—$", proc.stdout, re.M)
    assert "enabled=yes" in proc.stdout and "error=—" in proc.stdout
    assert json.loads(memsift(memsift_home, "--workspace", ws, "--json", "status").stdout)["dirty"] is False

    (ws / "MEMORY.md").write_text("# Memory\n- changed\n")  # one file: "1 file", not "1 files"
    changed = memsift(memsift_home, "--workspace", ws, "status").stdout
    assert re.search(r"^dirtyReason\s+1 file new or modified, 0 removed$", changed, re.M), changed


def _subparsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    found = [parser]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found += _subparsers(sub)
    return found


def test_every_option_says_what_it_does_and_its_default() -> None:
    for parser in _subparsers(arguments.parser()):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction | argparse._HelpAction):
                continue
            where = f"{parser.prog} {'/'.join(action.option_strings) or action.dest}"
            assert action.help, f"{where}: no description"
            takes_value = (
                action.option_strings and action.nargs != 0 and not isinstance(action, argparse.BooleanOptionalAction)
            )
            if takes_value and not action.required:  # a required option has no default to state
                assert "default" in action.help, f"{where}: no default in {action.help!r}"


def test_help_as_printed(memsift_home: Path) -> None:
    search = memsift(memsift_home, "search", "--help").stdout
    assert "at most N hits, 1-100 (default: search.maxResults, 6)" in search
    options = search.split("options:", 1)[1]
    min_score = " ".join(options.split("--min-score X", 1)[1].split("--mode")[0].split())
    assert "found only by meaning" in min_score and "cosine similarity >= X" in min_score
    assert "calibrated estimates that the hit is relevant" in min_score and "abstains" in min_score
    assert "always kept" in min_score and "default: search.minScore, 0.35" in min_score
    get = " ".join(memsift(memsift_home, "get", "--help").stdout.split())
    assert "first line, 1-based (default: 1)" in get
    assert "(default: to the end of the file; with --json at most 5000, as REST)" in get
    up = " ".join(memsift(memsift_home, "up", "--help").stdout.split())
    for needle in ("REST API on api.host:api.port", "(default 127.0.0.1:8000", "file watcher", "Ctrl-C", "4200"):
        assert needle in up


def test_the_mcp_server_reports_the_installed_version(workspace, memsift_home: Path) -> None:
    ws = workspace(NOTES)
    params = StdioServerParameters(command=str(MEMSIFT), args=["--workspace", str(ws), "mcp"], env=_env(memsift_home))
    seen: list[str] = []

    async def main() -> None:
        async with Client(params, read_timeout_seconds=120) as client:
            seen.append(client.server_info.version)

    anyio.run(main)
    assert seen == [version("memsift")] and seen[0]


@pytest.mark.parametrize("limit", [60, 97])
def test_a_cut_snippet_ends_with_an_ellipsis_at_a_word(workspace, memsift_home: Path, limit: int) -> None:
    words = "The checkout deploy failed because the load balancer certificate had expired on Sunday night " * 4
    ws = workspace({"MEMORY.md": words + "\n"})
    env = {"MEMSIFT_SEARCH_SNIPPETCHARS": str(limit)}
    # words the line's start holds (with words past the snippet's end, it opens at them: test_search.py)
    proc = memsift(memsift_home, "--workspace", ws, "--json", "search", "checkout deploy failed", **env)
    [hit] = json.loads(proc.stdout)["results"]
    snippet = hit["snippet"]
    assert snippet.endswith("…") and len(snippet) <= limit
    body = snippet[:-1]
    assert words.startswith(body) and words[len(body)] == " "  # whole words, then the ellipsis
    human = memsift(memsift_home, "--workspace", ws, "search", "checkout deploy failed", **env).stdout
    assert snippet in human
