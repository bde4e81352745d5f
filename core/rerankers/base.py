"""What every reranker shares: the protocol search calls, and the error it raises."""

from __future__ import annotations

from typing import Protocol


class RerankError(RuntimeError):
    """The reranker could not score this shortlist; search answers in fused order and says why (`degraded`)."""


class Reranker(Protocol):
    provider: str
    model: str
    #: Changes whenever the same (query, document) could get another score: part of the score-cache key.
    fingerprint: str

    def score(self, query: str, documents: list[str]) -> list[float]:
        """One relevance per document, in order; higher is better; any scale. Raises RerankError."""
        ...
