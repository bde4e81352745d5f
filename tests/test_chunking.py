"""Line-based chunking (core/chunking.py): ranges, overlap, CJK weighting, long lines, CRLF."""

from __future__ import annotations

from conftest import python_calls
from hypothesis import given, settings
from hypothesis import strategies as st

from core.chunking import chunk_text, split_lines, weight


def numbered(n: int) -> str:
    return "\n".join(f"line {i:04d}" for i in range(1, n + 1))  # 9 characters, 10 with the newline


def covered_lines(chunks) -> set[int]:
    return {n for c in chunks for n in range(c.start_line, c.end_line + 1)}


def test_small_text_is_one_chunk_with_1_based_inclusive_range():
    [chunk] = chunk_text("first\nsecond\nthird\n")
    assert (chunk.start_line, chunk.end_line, chunk.text) == (1, 3, "first\nsecond\nthird")


def test_chunks_cover_every_line_and_their_text_matches_their_range():
    text = numbered(100)
    lines = split_lines(text)
    chunks = chunk_text(text, tokens=16, overlap=4)
    assert len(chunks) > 10
    assert covered_lines(chunks) == set(range(1, 101))
    for c in chunks:
        assert c.text == "\n".join(lines[c.start_line - 1 : c.end_line])
        assert weight(c.text) <= 16 * 4


def test_overlap_carries_whole_lines_up_to_overlap_times_four():
    # budget 64: six 10-char lines per chunk; carry budget 32: the last three lines (30 chars) come back.
    chunks = chunk_text(numbered(29), tokens=16, overlap=8)
    assert [(c.start_line, c.end_line) for c in chunks[:3]] == [(1, 6), (4, 9), (7, 12)]
    for prev, nxt in zip(chunks, chunks[1:]):
        carried = prev.end_line - nxt.start_line + 1
        assert carried == 3
        assert nxt.text.split("\n")[:carried] == prev.text.split("\n")[-carried:]


def test_no_overlap_gives_disjoint_ranges():
    chunks = chunk_text(numbered(29), tokens=16, overlap=0)
    assert all(b.start_line == a.end_line + 1 for a, b in zip(chunks, chunks[1:]))


def test_overlap_never_exceeds_its_budget():
    # Lines of 20 characters (21 with the newline): one fits in a carry budget of 32, two do not.
    text = "\n".join(f"{i:02d}" + "x" * 18 for i in range(40))
    chunks = chunk_text(text, tokens=16, overlap=8)
    for prev, nxt in zip(chunks, chunks[1:]):
        assert prev.end_line - nxt.start_line + 1 == 1


def test_cjk_weighs_four_per_character():
    assert weight("abcd") == 4
    assert weight("記憶") == 8
    assert weight("かなカナ") == 16
    assert weight("한국어") == 12
    assert weight("é—ü") == 3  # accented Latin and punctuation weigh 1


def test_cjk_text_makes_about_four_times_more_chunks_than_latin():
    latin = "\n".join("a" * 40 for _ in range(400))
    cjk = "\n".join("記" * 40 for _ in range(400))
    n_latin, n_cjk = len(chunk_text(latin, overlap=0)), len(chunk_text(cjk, overlap=0))
    assert n_latin >= 10
    assert 3.5 <= n_cjk / n_latin <= 4.5


def test_long_line_is_split_into_pieces_keeping_its_line_number():
    long = "".join(chr(ord("a") + i % 26) for i in range(192))  # three pieces of the 64-char budget
    chunks = chunk_text(f"intro\n{long}\noutro", tokens=16, overlap=0)
    assert [(c.start_line, c.end_line) for c in chunks] == [(1, 1), (2, 2), (2, 2), (2, 2), (3, 3)]
    assert [c.text for c in chunks[1:4]] == [long[:64], long[64:128], long[128:]]
    assert (chunks[0].text, chunks[-1].text) == ("intro", "outro")


def test_long_cjk_line_is_split_by_weight():
    chunks = chunk_text("漢" * 100, tokens=16, overlap=0)
    assert [len(c.text) for c in chunks] == [16] * 6 + [4]
    assert all((c.start_line, c.end_line) == (1, 1) for c in chunks)


def test_blank_only_chunks_are_dropped():
    assert chunk_text("") == []
    assert chunk_text("\n\n   \n\t\n") == []
    text = "x" * 60 + "\n" + "\n" * 40 + "   \n" * 10 + "y"
    chunks = chunk_text(text, tokens=16, overlap=0)
    assert all(c.text.strip() for c in chunks)
    assert chunks[0].start_line == 1 and chunks[-1].end_line == 52


def test_a_chunk_starts_and_ends_on_text_not_in_a_run_of_blank_lines():
    """A run of blank lines (a note padded between sections, a paste) ended up inside the chunks on either
    side of it: the one before ended 199 blank lines after its text, the one after started 199 blank lines
    before its own (the overlap carried the blanks back), and a search hit's range and citation, and the
    `get` of it, were mostly empty lines. Blank lines at a chunk's ends are in neither its range nor its
    budget, and blank lines alone are no overlap."""
    para = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar papa " * 2
    for gap in (1, 5, 200, 2000):
        text = "\n" * 3 + "\n".join([para] * 7) + "\n" * (gap + 1) + "\n".join([para] * 7) + "\n\n\n"
        lines = split_lines(text)
        chunks = chunk_text(text)
        for c in chunks:
            assert c.text == "\n".join(lines[c.start_line - 1 : c.end_line])
            assert lines[c.start_line - 1].strip() and lines[c.end_line - 1].strip(), (gap, c.start_line, c.end_line)
        assert chunks[0].start_line == 4 and chunks[-1].end_line == len(lines) - 2
        assert covered_lines(chunks) >= {n for n, line in enumerate(lines, start=1) if line.strip()}
        if gap > 80 * 4:  # the seven lines after the gap fit one budget: blank lines took none of it
            assert [(c.start_line, c.end_line) for c in chunks[-1:]] == [(11 + gap, 17 + gap)]


def test_a_long_line_without_spaces_is_cut_between_characters_as_a_reader_sees_them():
    """A long line with no space to back off to is cut at the budget, and the cut fell between a letter and its
    accent (`e` + U+0301, as macOS writes decomposed text) or inside an emoji joined by U+200D: one piece ended
    on a bare `e` or a dangling joiner, the next (and its snippet) began with the stray accent or half an emoji."""
    whole = {"x" + "e\u0301" * 1000: "e\u0301", "\U0001f469\u200d\U0001f4bb\U0001f3fd" * 500: "\U0001f469"}
    for line, unit in whole.items():
        chunks = chunk_text(line, tokens=400, overlap=0)
        assert len(chunks) > 1 and "".join(c.text for c in chunks) == line
        for c in chunks[1:]:
            assert c.text.startswith(unit) and weight(c.text) <= 1600, repr(c.text[:3])


def test_crlf_lines_are_split_without_carriage_returns():
    assert split_lines("a\r\nb\r\n\r\nc") == ["a", "b", "", "c"]
    assert split_lines("a\nb\n") == ["a", "b"]
    assert split_lines("") == []
    assert split_lines("a\fb\u2028c\n") == ["a\fb\u2028c"]  # form feeds and U+2028 end no line


def test_a_lone_carriage_return_ends_a_line_as_editors_show_it():
    assert split_lines("old\rmac\rfile\r") == ["old", "mac", "file"]
    assert split_lines("a\r\r\nb\n\rc") == ["a", "", "b", "", "c"]  # CR, CRLF, LF, CR: four breaks
    chunks = chunk_text("# Notes\r- first\r- second\r", tokens=400)
    assert [(c.start_line, c.end_line, c.text) for c in chunks] == [(1, 3, "# Notes\n- first\n- second")]
    [chunk] = chunk_text("one\r\ntwo\r\nthree\r\n")
    assert (chunk.start_line, chunk.end_line, chunk.text) == (1, 3, "one\ntwo\nthree")


def test_identical_text_has_identical_hash():
    a, b = chunk_text("same words"), chunk_text("same words\n")
    assert a[0].hash == b[0].hash
    assert chunk_text("other words")[0].hash != a[0].hash


_line = st.text(st.sampled_from(list("abc xyz.#_\t\r") + ["記", "한", "カ", "é", "🙂"]), max_size=120)
_text = st.tuples(st.lists(_line, max_size=30), st.sampled_from(["\n", "\r\n"]), st.booleans()).map(
    lambda t: t[1].join(t[0]) + (t[1] if t[2] else "")
)


@settings(max_examples=150, deadline=None)
@given(
    text=_text,
    tokens=st.integers(16, 40),
    overlap_share=st.floats(0, 0.9),
)
def test_every_non_blank_line_is_in_a_chunk_whose_range_contains_it(text, tokens, overlap_share):
    overlap = int(tokens * overlap_share)
    lines = split_lines(text)
    chunks = chunk_text(text, tokens=tokens, overlap=overlap)
    for c in chunks:
        assert 1 <= c.start_line <= c.end_line <= len(lines)
        assert c.text.split("\n")[0].strip() and c.text.split("\n")[-1].strip()  # no blank line at either end
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        around = [c for c in chunks if c.start_line <= number <= c.end_line]
        assert around, f"line {number} is in no chunk"
        if weight(line) <= tokens * 4:
            assert any(line in c.text.split("\n") for c in around)
        else:  # a long line is cut into pieces; its first 16 characters (weight <= 64) are the first piece's start
            assert any(line[:16] in c.text for c in around)


def test_a_long_line_of_words_is_cut_between_words():
    """A line over the budget was cut at the budget, mid-word: a word across the cut was in no chunk whole, so
    a keyword search for it found nothing ("No matches." for a word of a 2,000-character paragraph)."""
    line = " ".join(f"word{i:04d}" for i in range(40))  # 359 characters; 9 a word does not divide the budget 64
    chunks = chunk_text(line, tokens=16, overlap=0)
    assert "".join(c.text for c in chunks) == line  # nothing lost or doubled
    assert all(weight(c.text) <= 64 for c in chunks)
    pieces = [c.text.split() for c in chunks]
    assert [w for piece in pieces for w in piece] == line.split()  # every word whole, in one piece
    assert all(len(c.text) >= 64 * 4 // 5 for c in chunks[:-1])  # cuts back off to a space, never far


def test_a_long_word_is_still_cut_at_the_budget():
    """A URL or a base64 blob has no space to cut at: backing off would drop more than a fifth of the piece."""
    line = "see " + "x" * 150
    assert [c.text for c in chunk_text(line, tokens=16, overlap=0)] == [line[:64], line[64:128], line[128:]]


def test_a_long_line_is_split_in_steps_per_piece_not_per_character():
    """A note of one 2 MB line (a pasted log, a blob) took 2-9 s to chunk: its split walked the line one
    character at a time in Python (a function call each, 201,500 for a line of 200,000 characters). It now
    costs a few calls a piece (3,400-12,000 for these lines of 125-500 pieces), the same pieces."""
    lines = ["word " * 40_000, "e\u0301" * 100_000, "\u4e2d" * 200_000, "x" * 200_000]
    for line in lines:
        chunks: list = []
        calls = python_calls(lambda line=line, chunks=chunks: chunks.extend(chunk_text(line)))
        assert "".join(c.text for c in chunks) == line  # the pieces join back into the line
        assert all(weight(c.text) <= 1600 for c in chunks)
        assert calls < len(line) // 10, (line[:2], calls)
