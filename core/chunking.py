"""Line-based chunking, as OpenClaw does it.

A chunk is a run of whole lines whose weighted length stays within `tokens * 4`; CJK, kana and Hangul
characters weigh 4 (one such character is roughly one token, four Latin characters are). The next chunk
starts with whole lines carried back from the end of the previous one, up to `overlap * 4`. A line longer
than the budget is cut into budget-sized pieces that keep its line number, between words where it can, and
never inside a character as a reader sees it (a letter and its accents, an emoji sequence). Line numbers are
1-based and inclusive; a chunk starts and ends on a line that is not blank (blank chunks are dropped).
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial


@dataclass(frozen=True)
class Chunk:
    start_line: int
    end_line: int
    text: str
    hash: str


# CJK, kana and Hangul: about one token per character (and no spaces between words).
WIDE = re.compile(
    "[\u1100-\u11ff"  # Hangul Jamo
    "\u2e80-\u9fff"  # CJK radicals, kana, CJK unified ideographs
    "\ua960-\ua97f"
    "\uac00-\ud7af"  # Hangul syllables
    "\uf900-\ufaff"
    "\uff00-\uffef"  # full-width forms, half-width kana
    "\U00020000-\U0003ffff]"
)


_KEEP_AT_LEAST = 0.8  # of a long line's piece, when it backs off to a space (as a snippet's cut does)
_JOINER = "\u200d"  # zero-width joiner: the emoji on both sides of it are one


def weight(text: str) -> int:
    """Weighted length: 4 per CJK/kana/Hangul character, 1 per other character."""
    if text.isascii():
        return len(text)
    return len(text) + 3 * len(WIDE.findall(text))


_LAST_SPACE = re.compile(r".*\s", re.DOTALL)  # matched up to a piece's end: ends after its last whitespace


def _weight_before(i: int, wide: list[int]) -> int:
    """The weight of the first `i` characters of a text whose wide characters are at the offsets `wide`."""
    return i + 3 * bisect_left(wide, i)


def _window(line: str, start: int, fits: int, budget: int) -> tuple[int, list[int]]:
    """The end of a window `line[start:stop]` that holds the first character from `fits` on that takes it past
    `budget` (unless the line ends first), and its wide characters' offsets from `start`: as many characters as
    the budget holds wide ones, then, if they weigh less, as many more as the weight still missing (each
    character weighs at least 1, so that is two rounds at most)."""
    stop, wide, more = start, [], max(fits - start, budget // 4) + 1
    while stop < len(line) and (stop == start or _weight_before(stop - start, wide) <= budget):
        following = min(len(line), stop + more)
        wide += [m.start() - start for m in WIDE.finditer(line, stop, following)]
        stop = following
        more = budget - _weight_before(stop - start, wide) + 1
    return stop, wide


def _split_long(line: str, budget: int) -> Iterator[str]:
    """Pieces of at most `budget` weight that join back into `line`. A piece ends after the last whitespace
    that fits, so no word is cut in two (a word in no piece whole is lost to the keyword leg), unless that
    would drop more than a fifth of the piece (a URL, a blob, CJK text without spaces): then at the budget,
    or just before it when the budget ends inside a character (`character_start`).

    Where the budget runs out is found by bisection over the weights of a window of the line (`_window`), not
    character by character: a note of one 2 MB line (a pasted log, a base64 blob) took 2-9 s in a
    per-character loop, and one of 200,000 letters with accents 4 s."""
    start, fits = 0, 1  # the piece is line[start:]; a cut is looked for at `fits` or later
    while True:
        stop, wide = _window(line, start, fits, budget)
        # The first character at `fits` or later whose weight takes the piece past the budget; `stop` if none.
        key = partial(_weight_before, wide=wide)
        at = start + bisect_right(range(fits - start + 1, stop - start + 1), budget, key=key) + fits - start
        if at >= stop:  # only at the line's end (see the window)
            break
        piece = line[start:at]
        last = _LAST_SPACE.match(line, start, at)
        space = last.end() - 1 - start if last else -1
        if line[at].isspace() or space + 1 < len(piece) * _KEEP_AT_LEAST:
            space = character_start(line[start : at + 1], len(piece)) - 1
        yield piece[: space + 1]
        start, fits = start + space + 1, at + 1  # the character at `at` joins the next piece, as it is
    if start < len(line):
        yield line[start:]


def character_start(text: str, at: int) -> int:
    """`at`, or the start of the character a reader sees there when `at` falls inside one: a letter and its
    combining accents (`e` + U+0301 is one `é`, as macOS spells file text), an emoji and its skin tone or
    variation selector, emoji joined by U+200D (👩‍💻). A cut there kept `e` and moved the accent to the next
    piece or snippet, or left a joiner dangling. `at` itself when everything before it is one such character."""
    i = at
    while i > 0 and _continues(text[i - 1], text[i]):
        i -= 1
    return i or at


def _continues(before: str, ch: str) -> bool:
    """Whether `ch` belongs to the character that `before` is part of."""
    return (
        unicodedata.category(ch) in ("Mn", "Mc", "Me")  # combining marks, variation selectors
        or ch == _JOINER
        or before == _JOINER
        or "\U0001f3fb" <= ch <= "\U0001f3ff"  # emoji skin tones
    )


def split_lines(text: str) -> list[str]:
    """Lines as editors number them: a line ends at LF, CRLF or a lone CR (old Mac files, which editors and
    Python's universal newlines read as lines); no empty line after a final break.

    `str.splitlines` is not used: it also splits on form feeds, U+2028 and others, which would shift line
    numbers against what a person sees and what `get` returns.
    """
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def chunk_text(text: str, tokens: int = 400, overlap: int = 80) -> list[Chunk]:
    budget = max(1, tokens * 4)
    carry_budget = max(0, overlap * 4)
    # Each segment: (line number, text, weight); a long line becomes several segments of one line number.
    segments: list[tuple[int, str, int]] = []
    for number, line in enumerate(split_lines(text), start=1):
        w = weight(line)
        if w <= budget:
            segments.append((number, line, w))
        else:
            segments.extend((number, piece, weight(piece)) for piece in _split_long(line, budget))

    chunks: list[Chunk] = []
    current: list[tuple[int, str, int]] = []
    size = 0

    def flush() -> None:
        # Blank lines at either end are left out of the chunk (its range and text), not out of the carry: a run
        # of blank lines before the budget ran out made a hit's range start or end hundreds of blank lines away
        # from its text, and its citation and `get` read them.
        filled = [i for i, s in enumerate(current) if s[1].strip()]
        if filled:
            inner = current[filled[0] : filled[-1] + 1]
            body = "\n".join(s[1] for s in inner)
            chunks.append(Chunk(inner[0][0], inner[-1][0], body, hashlib.sha256(body.encode()).hexdigest()))

    for seg in segments:
        cost = seg[2] + 1  # +1 for the newline
        if current and size + cost > budget:
            flush()
            # Carry whole trailing segments back as overlap, never the whole chunk (that would not advance).
            kept: list[tuple[int, str, int]] = []
            kept_size = 0
            for prev in reversed(current[1:]):
                if kept_size + prev[2] + 1 > carry_budget:
                    break
                kept.insert(0, prev)
                kept_size += prev[2] + 1
            while kept and kept_size + cost > budget:
                kept_size -= kept.pop(0)[2] + 1
            if not any(s[1].strip() for s in kept):
                kept, kept_size = [], 0  # blank lines alone carry nothing
            current, size = kept, kept_size
        if not current and not seg[1].strip():
            continue  # blank lines before a chunk's first text: in neither its range nor its budget
        current.append(seg)
        size += cost
    if current:
        flush()
    return chunks
