"""What every embedder shares: the protocol the indexer and search use, and the two wrappers.

The kinds and the factory that picks one live beside this module (`core.embedders`).
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from ..errors import EmbeddingError, ProviderDown


class InputsRejected(EmbeddingError):
    """The provider refused some inputs on their own (HTTP 400, 413 or 422 for that input alone, even after
    splitting it), not the request: `vectors` holds every row (zeros for the rejected), `rejected` maps the
    index of each rejected input to the server's reason. The indexer skips those, warns and goes on."""

    def __init__(self, message: str, vectors: np.ndarray, rejected: dict[int, str]) -> None:
        super().__init__(message)
        self.vectors, self.rejected = vectors, rejected


def keep_answered(error: BaseException, vectors: dict[int, np.ndarray]) -> None:
    """Attach to the error (or Ctrl-C) that stopped an `embed_documents` call the vectors of the inputs the
    provider had answered before it (input index -> vector): they were paid for, and the caller keeps them."""
    error.answered = vectors  # type: ignore[attr-defined]


def answered_before(error: BaseException) -> dict[int, np.ndarray]:
    """The vectors `keep_answered` attached to an error, by input index (none when the call answered none)."""
    return getattr(error, "answered", {})


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
    identity (so an incremental sync goes on under it, keyword-only) and every call fails with the reason, as a
    provider that is down (ProviderDown: the sync goes on keyword-only, even a first index)."""

    calls = 0

    def __init__(self, identity: dict[str, Any], reason: str) -> None:
        self.provider, self.model = identity["provider"], identity["model"]
        self.dims, self.fingerprint = identity["dims"], identity["fingerprint"]
        self.reason = reason

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        raise ProviderDown(self.reason)

    def embed_query(self, text: str) -> np.ndarray:
        raise ProviderDown(self.reason)


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

    def before_request(self) -> None:
        """Wait for what a request must wait for (a rate-limit slot: flows.ratelimit). `embed_documents` does;
        a sync whose local-model pass also yields MaxSim tokens makes its request without it, and calls this."""
        before = getattr(self.inner, "before_request", None)
        if before is not None:
            before()
