"""A hit's snippet: at most `search.snippetChars` characters of its chunk, from the lines that hold the most of
the question's words.

The snippet is what an agent reads to decide whether to `get` a hit, so it shows the part of the chunk that
matched: a long chunk (a runbook note of 1,500 characters) answered a question about its last section with
its first 700 characters, which never held the answer. The window is whole lines, the earliest holding the
most of the question's distinct words (crude stems, as the learned ranker matches them); a chunk whose start
holds as many as any window, or a question none of whose words is in it (a paraphrase), shows its start.

A snippet that starts past the chunk's first line begins with an ellipsis, and a cut one ends with one, so
a reader knows there is more (`get` reads it). A cut is after the last whole word that fits, unless that
throws away more than a fifth of the budget (one long token, a URL, CJK text without spaces): then it is
where the budget ends, never inside a character as a reader sees it (a letter and its accents, an emoji
sequence). The ellipses count toward the budget.
"""

from __future__ import annotations

import re
from collections import defaultdict
from itertools import accumulate

from .chunking import character_start
from .ranker_features import stems_of, term_lines

ELLIPSIS = "…"
_KEEP_AT_LEAST = 0.8  # of the budget, when backing off to a word boundary
_WORDS = re.compile(r"\w+")  # as the features split a line into words (core.ranker_features)
_WORD_START = re.compile(r"(?<!\S)\S")  # where a snippet may open: never inside a word, nor on a space


def snippet(text: str, limit: int, query: str = "") -> str:
    if len(text) <= limit:
        return text
    start = _window_start(text, limit, query) if query else 0
    if start:
        return ELLIPSIS + _cut(text[start:], limit - len(ELLIPSIS))
    return _cut(text, limit)


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    room = limit - len(ELLIPSIS)
    cut = text[:room]
    if not text[room].isspace():  # the budget ends inside a word: back off to the space before it
        space = max(cut.rfind(" "), cut.rfind("\n"), cut.rfind("\t"))
        cut = cut[:space] if space >= room * _KEEP_AT_LEAST else cut[: character_start(text, room)]
    return cut.rstrip() + ELLIPSIS


def _window_start(text: str, limit: int, query: str) -> int:
    """The offset of the first line of the earliest window of whole lines (within `limit` characters, or one
    line alone) holding the most of the query's distinct words; 0 when the chunk's start holds as many."""
    where = term_lines(text)
    held: dict[int, set[str]] = defaultdict(set)
    for term in stems_of(query) & where.keys():
        for line in where[term]:
            held[line].add(term)
    if not held:
        return 0
    lines = text.split("\n")
    offsets = list(accumulate((len(line) + 1 for line in lines), initial=0))  # each line's start
    best, best_at = -1, 0
    for i in sorted({0, *held}):  # a window that starts on a line holding none is beaten by the next one's
        covered, j = set(held.get(i, ())), i + 1
        while j < len(lines) and offsets[j + 1] - 1 - offsets[i] <= limit:
            covered |= held.get(j, set())
            j += 1
        if len(covered) > best:
            best, best_at = len(covered), i
    if offsets[best_at + 1] - 1 - offsets[best_at] > limit:  # one line alone, longer than the snippet
        return offsets[best_at] + _inside_line(lines[best_at], limit - 2 * len(ELLIPSIS), held[best_at])
    return offsets[best_at]


def _inside_line(line: str, room: int, terms: set[str]) -> int:
    """Where to start in a line longer than the snippet (a paragraph written as one line): at a word, shortly
    before the earliest of the line's words from which `room` characters hold the most of `terms` (the
    question's stems in the line); 0 when the line's start holds as many.

    The matching words in reach of each start are a window that only slides forward (words are in order and
    do not overlap), so each word's stems are counted in and out once: the union taken afresh for every start
    cost 12 ms a hit for a 1,600-character line holding the question's words 114 times, 0.45 s at 16,000."""
    found = [(m.start(), m.end()) for m in _WORDS.finditer(line) if stems_of(m.group()) & terms]
    stems = [stems_of(line[a:b]) for a, b in found]
    context = room // 10  # a few words before the first match, so the snippet does not open mid-thought
    best, best_at = -1, 0
    held: dict[str, int] = {}  # the stems of the words in the window: found[first:last], and how many hold each
    last = 0
    for n, at in enumerate([0] + [a for a, _ in found]):
        first = max(n - 1, 0)  # the first word starting at `at` or after
        if n >= 2 and n - 2 < last:  # the word before `at` leaves the window
            for stem in stems[n - 2]:
                held[stem] -= 1
                if not held[stem]:
                    del held[stem]
        last = max(last, first)
        while last < len(found) and found[last][1] <= at + room - context:
            for stem in stems[last]:
                held[stem] = held.get(stem, 0) + 1
            last += 1
        if len(held) > best:
            best, best_at = len(held), at
    if best_at:  # the first whole word within `context` before it; the match itself when none starts there
        opening = _WORD_START.search(line, max(0, best_at - context), best_at + 1)
        best_at = opening.start() if opening else best_at
    return best_at
