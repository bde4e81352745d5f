"""Session transcripts (core/sources/sessions.py): opt-in, user and assistant messages only, JSONL line numbers,
bad lines skipped, re-indexed only after growing by a delta, `source: "sessions"`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core import ConfigError, load_config
from core.get import GetError
from core.sources.sessions import transcript_text


def message(role: str, text: str, wrapped: bool = True) -> str:
    if not wrapped:
        return json.dumps({"role": role, "content": text})
    content = [{"type": "text", "text": text}]
    return json.dumps({"type": "message", "message": {"role": role, "content": content}})


TRANSCRIPT = [
    json.dumps({"type": "session", "id": "s1", "cwd": "/tmp"}),  # 1: not a message
    message("user", "Which database did we pick for the ledger?"),  # 2
    json.dumps({"type": "message", "message": {"role": "toolResult", "content": "SELECT 1 zebrafish"}}),  # 3
    "{not json",  # 4: skipped with a warning
    message("assistant", "We picked PostgreSQL 15;\nthe ledger moves to pgvector later.", wrapped=False),  # 5
    message("system", "You are a helpful quokka"),  # 6: not user or assistant
]


@pytest.fixture
def setup(workspace, tmp_path, make_config):
    ws = workspace({"MEMORY.md": "# Memory\n- Dana drinks flat whites.\n"})
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    (sessions / "s1.jsonl").write_text("\n".join(TRANSCRIPT) + "\n", encoding="utf-8")

    def config(**overrides):
        keys = {"sources": ["memory", "sessions"], "sessions.dir": str(sessions), **overrides}
        return make_config(ws, **keys)

    return config, sessions


def paths(index, query: str) -> list[tuple[str, str, int, int]]:
    response = index.search(query, mode="keyword", min_score=0)
    return [(h.path, h.source, h.startLine, h.endLine) for h in response.results]


def test_rendering_keeps_jsonl_line_numbers_and_reports_bad_lines():
    text, bad = transcript_text("\n".join(TRANSCRIPT) + "\n")
    assert text.split("\n")[:-1] == [
        "",
        "User: Which database did we pick for the ledger?",
        "",
        "",
        "Assistant: We picked PostgreSQL 15; the ledger moves to pgvector later.",
        "",
    ]
    assert bad == [4]


def test_transcripts_are_searchable_with_their_source_and_lines(setup, open_index):
    config, _ = setup
    index = open_index(config(), embedder=None)
    report = index.sync()
    assert report.added == 2 and any("sessions/s1.jsonl" in w and "line 4" in w for w in report.warnings)
    assert paths(index, "pgvector") == [("sessions/s1.jsonl", "sessions", 2, 5)]
    assert paths(index, "flat whites") == [("MEMORY.md", "memory", 1, 2)]
    assert paths(index, "zebrafish") == [] and paths(index, "quokka") == []  # tool and system events are not
    assert index.status()["files"] == {"memory": 1, "sessions": 1}

    got = index.get("sessions/s1.jsonl", 5, 1)
    assert got == {"path": "sessions/s1.jsonl", "from": 5, "lines": 1, "totalLines": 6,
                   "text": "Assistant: We picked PostgreSQL 15; the ledger moves to pgvector later."}  # fmt: skip


def test_transcripts_are_opt_in(setup, make_config, open_index):
    config, _ = setup
    plain = config(sources=["memory"])
    assert plain.sessions is None
    index = open_index(plain, embedder=None)
    index.sync()
    assert paths(index, "pgvector") == []
    with pytest.raises(GetError) as refused:
        index.get("sessions/s1.jsonl")
    assert refused.value.status == 403


def test_a_transcript_is_reindexed_only_after_growing_by_a_delta(setup, open_index):
    config, sessions = setup
    index = open_index(config(**{"sessions.deltaMessages": 3, "sessions.deltaBytes": 100_000}), embedder=None)
    index.sync()
    log = sessions / "s1.jsonl"
    with log.open("a", encoding="utf-8") as fh:
        fh.write(message("user", "Remind me about the capybara offsite") + "\n")
    report = index.sync()
    assert report.changed == 0 and paths(index, "capybara") == []  # one message: below the delta

    with log.open("a", encoding="utf-8") as fh:
        fh.write(message("assistant", "Noted.") + "\n" + message("user", "thanks") + "\n")
    report = index.sync()
    assert report.changed == 1 and paths(index, "capybara") == [("sessions/s1.jsonl", "sessions", 2, 9)]


def test_bytes_delta_and_rewrites_reindex_at_once(setup, open_index):
    config, sessions = setup
    index = open_index(config(**{"sessions.deltaMessages": 1000, "sessions.deltaBytes": 200}), embedder=None)
    index.sync()
    log = sessions / "s1.jsonl"
    with log.open("a", encoding="utf-8") as fh:
        fh.write(message("user", "the narwhal budget " + "is large " * 30) + "\n")  # > 200 bytes, one line
    assert index.sync().changed == 1 and paths(index, "narwhal")

    log.write_text(message("user", "a shorter axolotl transcript") + "\n", encoding="utf-8")  # rewritten, shrunk
    assert index.sync().changed == 1
    assert paths(index, "axolotl") == [("sessions/s1.jsonl", "sessions", 1, 1)] and not paths(index, "narwhal")

    log.unlink()
    assert index.sync().removed == 1 and not paths(index, "axolotl")


def test_a_missing_sessions_folder_is_a_warning(workspace, tmp_path, make_config, open_index):
    ws = workspace({"MEMORY.md": "# Memory\n"})
    config = make_config(ws, sources=["memory", "sessions"], **{"sessions.dir": "no-such-folder"})
    assert config.sessions.dir == ws / "no-such-folder"  # relative to the workspace
    report = open_index(config, embedder=None).sync()
    assert report.filesScanned == 1 and any("does not exist" in w for w in report.warnings)


@pytest.mark.parametrize(
    ("sources", "message"),
    [(["memory", "chats"], "'chats' is not one of memory, sessions"), (["sessions"], 'must include "memory"')],
)
def test_bad_sources_are_clear_errors(workspace, sources, message):
    with pytest.raises(ConfigError, match="sources: ") as error:
        load_config(workspace=workspace({}), overrides={"sources": sources})
    assert message in str(error.value)


def test_the_default_sessions_folder_is_per_agent(workspace, memsift_home: Path):
    config = load_config(workspace=workspace({}), overrides={"sources": ["memory", "sessions"]})
    assert config.sessions.dir == memsift_home / "sessions" / "main"
    assert (config.sessions.deltaBytes, config.sessions.deltaMessages) == (100_000, 50)


def test_cli_search_and_get_on_a_transcript(setup, capsys):
    from api.cli import main

    config, sessions = setup
    toml = config().workspace / "memsift.toml"
    toml.write_text(f'sources = ["memory", "sessions"]\n[sessions]\ndir = "{sessions}"\n', encoding="utf-8")
    ws = str(config().workspace)
    assert main(["--workspace", ws, "index", "--no-prefect", "--json"]) == 0
    capsys.readouterr()
    assert main(["--workspace", ws, "search", "pgvector ledger", "--mode", "keyword", "--json"]) == 0
    top = json.loads(capsys.readouterr().out)["results"][0]
    assert (top["path"], top["source"], top["citation"]) == ("sessions/s1.jsonl", "sessions", "sessions/s1.jsonl#L2-L5")
    assert main(["--workspace", ws, "get", "sessions/s1.jsonl", "--from", "2", "--lines", "1"]) == 0
    assert capsys.readouterr().out == "User: Which database did we pick for the ledger?\n"
