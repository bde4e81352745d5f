"""What every reranker shares: the protocol search calls (its error, RerankError, is in `core.errors`)."""

from __future__ import annotations

from typing import Protocol


class Reranker(Protocol):
    provider: str
    model: str
    #: Changes whenever the same (query, document) could get another score: part of the score-cache key.
    fingerprint: str

    def score(self, query: str, documents: list[str]) -> list[float]:
        """One relevance per document, in order; higher is better; any scale. Raises RerankError."""
        ...
