"""A hit's snippet: the start of its chunk, at most `search.snippetChars` characters.

A cut chunk ends with an ellipsis, so a reader knows there is more (`get` reads it), and is cut after the
last whole word that fits, unless that throws away more than a fifth of the budget (one long token, a URL,
CJK text without spaces): then it is cut where the budget ends. The ellipsis counts toward the budget.
"""

from __future__ import annotations

ELLIPSIS = "…"
_KEEP_AT_LEAST = 0.8  # of the budget, when backing off to a word boundary


def snippet(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    room = limit - len(ELLIPSIS)
    cut = text[:room]
    if not text[room].isspace():  # the budget ends inside a word: back off to the space before it
        space = max(cut.rfind(" "), cut.rfind("\n"), cut.rfind("\t"))
        if space >= room * _KEEP_AT_LEAST:
            cut = cut[:space]
    return cut.rstrip() + ELLIPSIS
