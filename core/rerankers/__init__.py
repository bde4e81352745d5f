"""Rerankers: the family of kinds that give a second opinion on the fused shortlist (SPEC section 5, `rerank.*`).

A reranker scores (query, document) pairs; search blends those scores with the retrieval order (see
`ranking.blend`, and `shortlist` for the cache and the fall-back to the fused order) rather than replacing
it, so an exact match that the reranker undervalues is not thrown away. `rerank.provider` names the kind:

- `local` (`local.py`): `maxsim` (default), late interaction over the local MiniLM's token vectors with no
  extra weights (`maxsim.py`); or a folder holding `model.onnx` and `tokenizer.json`, any cross-encoder the
  user brings (`cross_encoder.py`).
- `cohere` (`cohere.py`): any Cohere-style `/rerank` endpoint (Cohere, Jina, Voyage, text-embeddings-inference).

A new kind is one file plus one line in `RERANKERS`; `rerank.provider` takes its choices from that table.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import RerankError
from ..registry import load
from .base import Reranker

if TYPE_CHECKING:
    from ..config_types import RerankConfig
    from ..embedders import Embedder

__all__ = ["RERANKERS", "RerankError", "Reranker", "create_reranker"]

#: `rerank.provider` -> "module:callable" that builds the reranker from (RerankConfig, the index's embedder).
RERANKERS = {
    "local": "core.rerankers.local:from_config",
    "cohere": "core.rerankers.cohere:from_config",
}


def create_reranker(config: RerankConfig, embedder: Embedder | None = None) -> Reranker:
    """The configured reranker; `embedder` is the index's own (MaxSim needs the local model's token states)."""
    return load(RERANKERS[config.provider])(config, embedder)
