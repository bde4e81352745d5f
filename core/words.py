"""Counts in the messages people read: `1 chunk`, `3 chunks`, never `1 chunks have no vector yet`."""

from __future__ import annotations


def counted(n: int, noun: str, nouns: str | None = None) -> str:
    """`n` and the noun in its number: `counted(1, "query", "queries")` is `1 query`; `nouns` defaults to `noun` + s."""
    return f"{n} {noun}" if n == 1 else f"{n} {nouns or noun + 's'}"
