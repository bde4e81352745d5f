"""`rerank.provider = "local"`: MaxSim over the local model's token states, or a cross-encoder from a folder.

`rerank.model` decides: `maxsim` (or unset) reuses the index's own local MiniLM, so it needs no extra weights
and, when the index was built by that model, reads the token bits the sync stored; any other value names a
folder with a cross-encoder as ONNX.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..config_types import Config, RerankConfig
from ..embedders import Embedder, EmbedderWrapper
from ..embedders.local import LocalEmbedder
from .base import Reranker

if TYPE_CHECKING:
    from .maxsim import MaxSimReranker

#: `rerank.model` for the local provider when none is set.
LOCAL_DEFAULT = "maxsim"


def from_config(config: RerankConfig, embedder: Embedder | None = None) -> Reranker:
    model = config.model or LOCAL_DEFAULT
    if model == LOCAL_DEFAULT:
        from .maxsim import MaxSimReranker

        return MaxSimReranker.of(local_model(embedder) or LocalEmbedder.shared())
    from .cross_encoder import CrossEncoderReranker

    return CrossEncoderReranker.from_folder(model)


def local_model(embedder: Embedder | None) -> LocalEmbedder | None:
    """The local model under any wrappers, or None when the index is built by another embedder."""
    while isinstance(embedder, EmbedderWrapper):
        embedder = embedder.inner
    return embedder if isinstance(embedder, LocalEmbedder) else None


def is_maxsim(config: RerankConfig) -> bool:
    return config.provider == "local" and (config.model or LOCAL_DEFAULT) == LOCAL_DEFAULT


def token_capture(config: Config, embedder: Embedder | None) -> MaxSimReranker | None:
    """The MaxSim reranker when the sync should keep token bits: reranking may run with it and the index is
    built by the local model (whose pass over each chunk yields the token states for free)."""
    local = local_model(embedder)
    if config.rerank.enabled is False or not is_maxsim(config.rerank) or local is None:
        return None
    from .maxsim import MaxSimReranker

    return MaxSimReranker.of(local)
