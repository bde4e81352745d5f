"""Rerankers: a second opinion on the fused shortlist (SPEC section 5, `rerank.*`).

A reranker scores (query, document) pairs; search blends those scores with the retrieval order (see
`ranking.blend`) rather than replacing it, so an exact match that the reranker undervalues is not thrown away.
Three kinds, chosen by `rerank.provider` and `rerank.model`:

- `local` + `maxsim` (default): late interaction over the local MiniLM's token vectors; no extra weights.
- `local` + a folder holding `model.onnx` and `tokenizer.json`: any cross-encoder the user brings.
- `cohere`: any Cohere-style `/rerank` endpoint (Cohere, Jina, Voyage, text-embeddings-inference, vLLM).
"""

from __future__ import annotations

from typing import Protocol

from .config import RerankConfig
from .embedders import Embedder

#: `rerank.model` for the local provider when none is set.
LOCAL_DEFAULT = "maxsim"


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


def create_reranker(config: RerankConfig, embedder: Embedder | None = None) -> Reranker:
    """The configured reranker; `embedder` is the index's own (MaxSim needs the local model's token states)."""
    if config.provider == "cohere":
        from .rerank_http import CohereReranker

        return CohereReranker(config)
    model = config.model or LOCAL_DEFAULT
    if model == LOCAL_DEFAULT:
        from .maxsim import MaxSimReranker

        return MaxSimReranker.shared()
    from .cross_encoder import CrossEncoderReranker

    return CrossEncoderReranker.from_folder(model)
