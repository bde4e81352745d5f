"""Property-based fuzzing (hypothesis): chunking, the FTS query builder, and `get`'s path handling.

Each property is what a user relies on: every line is findable in a chunk at its own line numbers, with
the configured overlap and no more; no user text ever reaches FTS5 as an operator; and `get` answers with
the lines of an allowed memory file or refuses, whatever path it is given.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from core import GetError, load_config
from core.chunking import chunk_text, split_lines, weight
from core.get import get_lines
from core.query import fts_match, query_terms
from core.sources.memory import scan
from core.store import Store

# -------------------------------------------------------------------------------- chunking

_line = st.text(st.sampled_from([*"ab yz.#_-\t", "記", "한", "カ", "é", "🙂", "\r", "\x0c", "\u2028"]), max_size=90)
_text = st.builds(
    lambda lines, eol, final: eol.join(lines) + (eol if final else ""),
    st.lists(_line, max_size=40),
    st.sampled_from(["\n", "\r\n"]),
    st.booleans(),
)


@settings(max_examples=300, deadline=None)
@given(text=_text, tokens=st.integers(16, 48), overlap_share=st.floats(0, 0.95))
def test_chunks_are_line_ranges_of_the_file_with_the_configured_overlap(text, tokens, overlap_share) -> None:
    overlap = int(tokens * overlap_share)
    budget, carry = tokens * 4, overlap * 4
    lines = split_lines(text)
    chunks = chunk_text(text, tokens=tokens, overlap=overlap)
    for c in chunks:
        assert 1 <= c.start_line <= c.end_line <= len(lines)  # within the file
        assert weight(c.text) <= budget + c.text.count("\n")
        span = "\n".join(lines[c.start_line - 1 : c.end_line])
        assert c.text in span  # the chunk's text is its lines (or a piece of its one long line)
        if all(weight(line) <= budget for line in lines[c.start_line - 1 : c.end_line]):
            assert c.text == span
    covered = {n for c in chunks for n in range(c.start_line, c.end_line + 1)}
    assert {n for n, line in enumerate(lines, 1) if line.strip()} <= covered  # every line is in some chunk
    for prev, nxt in zip(chunks, chunks[1:]):
        assert nxt.start_line >= prev.start_line and nxt.end_line >= prev.end_line  # chunks advance
        # Overlap: whole lines carried back, at most `overlap` tokens' worth (none for 0). A line longer than a
        # chunk is cut into pieces, which may end one chunk and start the next: that is no overlap.
        carried = [n for n in range(nxt.start_line, prev.end_line + 1) if weight(lines[n - 1]) <= budget]
        assert sum(weight(lines[n - 1]) + 1 for n in carried) <= carry


# -------------------------------------------------------------------------------- the FTS query builder

# A MATCH expression the builder may produce: quoted phrases joined by OR, quotes inside doubled.
_SAFE_MATCH = re.compile(r'"(?:[^"]|"")*"(?: OR "(?:[^"]|"")*")*')
_fts_noise = st.sampled_from(
    ["AND", "OR", "NOT", "NEAR", "NEAR(", "(", ")", "*", "^", ":", '"', "'", "-", "+", "{", "}", "\x00", "col:", " "]
)
_query = st.lists(st.one_of(_fts_noise, st.text(max_size=12)), max_size=12).map("".join)


@pytest.fixture(scope="module")
def fts(tmp_path_factory: pytest.TempPathFactory) -> Store:
    store = Store(tmp_path_factory.mktemp("fts") / "fts.sqlite", use_vec=False)
    store.reset({}, "porter unicode61 remove_diacritics 2")
    notes = ["alpha AND beta NEAR gamma", "col: value * ^ caret", 'the "quoted" word', "記憶 한국어 café"]
    for n, note in enumerate(notes):
        store.replace_file(f"memory/{n}.md", "memory", 1, 0, str(n), [(1, 1, note, str(n))], None)
    yield store
    store.close()


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=_query)
@example(text="\u093a")  # a lone Devanagari vowel sign
def test_the_query_builder_never_raises_and_lets_no_operator_through(fts: Store, text: str) -> None:
    match = fts_match(text)
    if match is None:
        assert query_terms(text) == []
        return
    assert _SAFE_MATCH.fullmatch(match), match
    phrases = [p.replace('""', '"') for p in re.findall(r'"((?:[^"]|"")*)"', match)]
    # Word characters only, no operator survives; an Indic vowel sign is written as a private-use character
    # (core/query.py), which unicode61 reads as a word character too.
    assert all(re.fullmatch(r"[\w\ue000-\ue4ff ]+", p) for p in phrases)
    fts.fts_search(match, 10)  # and FTS5 accepts it
    fts.fts_search(match, 10, paths=["memory/a.md"])


# -------------------------------------------------------------------------------- `get` path handling

ALLOWED = {
    "MEMORY.md": "# Memory\nline two\n",
    "memory/a.md": "alpha\r\nbeta\n",
    "memory/sub/b.md": "bravo\n",
    "notes/extra.md": "extra path file\n",
}
SECRET = "outside-the-allowed-files-51c0"
_component = st.sampled_from(
    ["memory", "MEMORY.md", "memory.md", "a.md", "sub", "b.md", "notes", "extra.md", "secret.md", "memsift.toml",
     "link.md", "linkdir", "outside.md",
     "..", ".", "", "%2e%2e", "~", "C:", "\\", "..\\..", "/", "etc", "passwd", "\x00", "é.md"]
)  # fmt: skip
_path = st.one_of(st.lists(_component, max_size=6).map("/".join), st.text(max_size=30))


@pytest.fixture(scope="module")
def fenced(tmp_path_factory: pytest.TempPathFactory):
    """A workspace with allowed files, files beside them that are not memory, and symlinks out."""
    root = tmp_path_factory.mktemp("get")
    ws = root / "ws"
    for rel, text in {**ALLOWED, "secret.md": SECRET, "memsift.toml": f'# {SECRET}\nextraPaths = ["notes"]\n'}.items():
        (ws / rel).parent.mkdir(parents=True, exist_ok=True)
        (ws / rel).write_text(text)
    (root / "outside.md").write_text(SECRET)
    (ws / "memory" / "link.md").symlink_to(root / "outside.md")
    (ws / "memory" / "linkdir").symlink_to(root, target_is_directory=True)
    (ws / "notes" / "link.md").symlink_to("/etc/passwd")
    config = load_config(workspace=ws)
    assert sorted(f.path for f in scan(config).files) == sorted(ALLOWED)
    return config


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(path=_path, start=st.integers(1, 4), count=st.one_of(st.none(), st.integers(0, 3)))
def test_get_returns_lines_of_an_allowed_file_or_refuses(fenced, path: str, start: int, count) -> None:
    try:
        answer = get_lines(fenced, path, start, count)
    except GetError as refused:
        assert refused.status in (400, 403, 404, 422) and SECRET not in str(refused)
        return
    assert SECRET not in answer["text"] and "root:" not in answer["text"]
    if answer["path"] not in ALLOWED:  # a memory file that does not exist yet reads as empty
        assert answer["text"] == "" and not (Path(fenced.workspace) / answer["path"]).exists()
        return
    lines = split_lines(ALLOWED[answer["path"]])
    assert answer["text"] == "\n".join(lines[start - 1 : None if count is None else start - 1 + count])
