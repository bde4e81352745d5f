"""Embedders: the interface the indexer and search use, and the choice of one from the configuration.

`local` is the packaged MiniLM, `none` gives keyword-only search, the hosted providers live in
`core.providers`; `auto` picks a hosted one only when a model or base URL is configured and its key is set.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from .config import EmbeddingConfig


class EmbedderUnavailable(RuntimeError):
    """The configured embedder cannot run; search degrades to keyword mode and says why."""


class EmbeddingError(RuntimeError):
    """A provider failed to embed after its retries (quota, outage, bad answer); the message names the
    provider, the status and what to do, never a key. A sync that meets it may switch to the fallback."""


class InputsRejected(EmbeddingError):
    """The provider refused some inputs on their own (HTTP 400, 413 or 422 for that input alone, even after
    splitting it), not the request: `vectors` holds every row (zeros for the rejected), `rejected` maps the
    index of each rejected input to the server's reason. The indexer skips those, warns and goes on."""

    def __init__(self, message: str, vectors: np.ndarray, rejected: dict[int, str]) -> None:
        super().__init__(message)
        self.vectors, self.rejected = vectors, rejected


class Embedder(Protocol):
    provider: str
    model: str
    dims: int
    #: Everything besides provider and model that changes the vectors (base URL, prefixes, dimensions).
    fingerprint: str
    #: Number of model invocations so far (tests assert on it).
    calls: int

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        """float32 [n, dims], L2-normalised rows."""

    def embed_query(self, text: str) -> np.ndarray:
        """float32 [dims], L2-normalised."""


class DownEmbedder:
    """Stands in for the provider an index was built with while that provider cannot start: it has the stored
    identity (so an incremental sync goes on under it, keyword-only) and every call fails with the reason."""

    calls = 0

    def __init__(self, identity: dict[str, Any], reason: str) -> None:
        self.provider, self.model = identity["provider"], identity["model"]
        self.dims, self.fingerprint = identity["dims"], identity["fingerprint"]
        self.reason = reason

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        raise EmbeddingError(self.reason)

    def embed_query(self, text: str) -> np.ndarray:
        raise EmbeddingError(self.reason)


class EmbedderWrapper:
    """Another embedder with the same identity (so the same cache and index): subclasses add behaviour
    around one call (a rate limit, a timer) and leave the rest to the wrapped one."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.provider, self.model, self.dims = inner.provider, inner.model, inner.dims
        self.fingerprint = inner.fingerprint

    @property
    def calls(self) -> int:
        return self.inner.calls

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> np.ndarray:
        return self.inner.embed_query(text)


def create_embedder(config: EmbeddingConfig) -> Embedder | None:
    """The embedder the configuration asks for; None for `provider = "none"`.

    Raises EmbedderUnavailable with a reason a person can act on.
    """
    if config.provider == "none":
        return None
    from .providers import PROVIDERS, auto_provider

    provider = auto_provider(config) if config.provider == "auto" else config.provider
    if provider == "local":
        from .local_embedder import LocalEmbedder

        return LocalEmbedder.shared(config.model, config.localGraph)
    if provider in PROVIDERS:
        return PROVIDERS[provider](config)
    raise EmbedderUnavailable(
        f"embedding.provider = {config.provider!r} is not available in this version; "
        f"use one of local, none, {', '.join(PROVIDERS)}"
    )
