"""Embedders: the family of kinds that turn text into vectors, and the choice of one from the configuration.

Each kind is one module here: `local` (the packaged MiniLM, with `model_graph` building its optimised graph)
and the hosted providers (`openai` and `mistral`, `gemini`, `voyage`, `ollama`) on the shared HTTP base in
`hosted`. `base` holds what they all share: the protocol, the wrappers and the errors. A new provider is one
file plus one line in `EMBEDDERS`; `embedding.provider` takes its choices from that table. Besides the kinds,
`none` gives keyword-only search and `auto` picks a hosted kind only when a model or base URL is configured
and its key is set.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from ..errors import EmbedderUnavailable, EmbeddingError
from ..registry import load
from .base import DownEmbedder, Embedder, EmbedderWrapper, InputsRejected, answered_before

if TYPE_CHECKING:
    from ..config_types import EmbeddingConfig

__all__ = [
    "EMBEDDERS",
    "PROVIDERS",
    "DownEmbedder",
    "Embedder",
    "EmbedderUnavailable",
    "EmbedderWrapper",
    "EmbeddingError",
    "InputsRejected",
    "answered_before",
    "auto_provider",
    "create_embedder",
    "provisional_stand_in",
    "unprobed",
    "warm_up",
]

#: `embedding.provider` -> "module:callable" that builds the embedder from the EmbeddingConfig.
EMBEDDERS = {
    "local": "core.embedders.local:from_config",
    "openai": "core.embedders.openai:OpenAIEmbedder",
    "gemini": "core.embedders.gemini:GeminiEmbedder",
    "voyage": "core.embedders.voyage:VoyageEmbedder",
    "mistral": "core.embedders.openai:MistralEmbedder",
    "ollama": "core.embedders.ollama:OllamaEmbedder",
}
#: Every `embedding.provider` (and `embedding.fallback`) value: the kinds, and the two names that are not one.
PROVIDERS = ("auto", *EMBEDDERS, "none")
#: `auto` tries these, in this order, when a model or base URL is configured and the key is set.
AUTO_ORDER = ("openai", "gemini", "voyage", "mistral")


def auto_provider(config: EmbeddingConfig) -> str:
    """`local` unless a model or base URL is configured and a hosted key is in the environment."""
    if config.model or config.baseUrl:
        for name in AUTO_ORDER:
            key_env = load(EMBEDDERS[name]).key_env
            if key_env and os.environ.get(key_env):
                return name
    return "local"


def create_embedder(config: EmbeddingConfig) -> Embedder | None:
    """The embedder the configuration asks for; None for `provider = "none"`.

    Raises EmbedderUnavailable with a reason a person can act on.
    """
    if config.provider == "none":
        return None
    provider = auto_provider(config) if config.provider == "auto" else config.provider
    if provider in EMBEDDERS:
        return load(EMBEDDERS[provider])(config)
    raise EmbedderUnavailable(
        f"embedding.provider = {config.provider!r} is not available in this version; "
        f"use one of {', '.join(name for name in PROVIDERS if name != 'auto')}"
    )


def unprobed(config: EmbeddingConfig, stored: dict[str, Any] | None) -> Embedder | None:
    """The configured hosted provider without its start-up probe, for `memsift status` without --deep (SPEC gives
    the probe to --deep; each plain status paid a request): its identity from the configuration, with what only
    the probe tells taken from `stored`, the index's identity. Its client is closed: it describes, it does not
    embed. None for the local model and `none` (built as usual, no request), and when it cannot be made (no
    key: `create_embedder` says why, without a request either)."""
    provider = auto_provider(config) if config.provider == "auto" else config.provider
    kind = load(EMBEDDERS[provider]) if provider in EMBEDDERS else None
    if not isinstance(getattr(kind, "default_model", None), str):  # a hosted kind, as `provisional_stand_in` asks
        return None
    try:
        embedder = kind(config, probe=False, stored=stored)
    except EmbedderUnavailable:
        return None
    embedder.close()
    if not embedder.dims:  # only an answer tells: a provisional identity (`provisional_stand_in`), not a change
        embedder.dims, embedder.fingerprint = None, None  # type: ignore[assignment]
    return embedder


def provisional_stand_in(config: EmbeddingConfig, reason: str) -> DownEmbedder | None:
    """Stands in for a hosted provider that failed to start before any index of it exists (the first index of an
    agent while it is down): its kind and model are known, its dimensions and fingerprint only once it answers,
    so they are None: a provisional identity, which the provider's own completes (core.identity.identity_matches).
    None for the local model and `none`: they have no hosted model to wait for."""
    provider = auto_provider(config) if config.provider == "auto" else config.provider
    kind = load(EMBEDDERS[provider]) if provider in EMBEDDERS else None
    if not isinstance(getattr(kind, "default_model", None), str):
        return None
    identity = {"provider": provider, "model": config.model or kind.default_model, "dims": None, "fingerprint": None}
    return DownEmbedder(identity, reason)


def warm_up(embedder: Embedder) -> None:
    """Run a freshly made embedder once, so the first search does not pay for it (the local model sizes its
    ONNX session's buffers). A hosted provider's start-up probe was that run: the client made for it is
    closed, where a warm-up query cost a paid request and the client stayed open for the process's life."""
    from .hosted import HostedEmbedder  # httpx and the providers only when one is configured

    if isinstance(embedder, HostedEmbedder):
        embedder.close()
    else:
        embedder.embed_query("memsift warm-up")
