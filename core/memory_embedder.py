"""Which embedder an agent's index is built and searched with: the configured one (tried again a while after
it failed to start), the fallback once a switch to it is recorded in the index, or a stand-in that keeps the
index taking text keyword-only while the provider is down. Apart from core.memory because this is the one
piece of `MemoryIndex` with state of its own, and the sync (core.memory_sync) and search both ask it."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from typing import Any

from .config_types import Config, EmbeddingConfig
from .embedders import (
    DownEmbedder,
    Embedder,
    EmbedderUnavailable,
    EmbeddingError,
    create_embedder,
    provisional_stand_in,
    unprobed,
)
from .errors import ProviderDown
from .store import Store
from .store_recovery import UnreadableIndex

#: A configured embedder that failed to start is tried again by the first use this long after: a long-lived
#: process (`memsift serve`'s pooled indexes, `memsift mcp`) searches and syncs with the provider once it is back
#: instead of keyword-only until a restart, and a provider still down costs one probe a minute, not one a search.
START_RETRY_SECONDS = 60.0


class EmbedderChoice:
    """Part of `MemoryIndex` (core.memory), which sets the state below in its `__init__` and gives `store` and
    `_indexed`."""

    config: Config
    store: Store
    _embedder: Embedder | None
    _embedder_error: str | None
    _embedder_loaded: bool
    _retry_at: float
    _provider_down: bool
    _fallback: Embedder | None
    _fallback_error: str | None
    _fallback_loaded: bool

    def embedder(self) -> Embedder | None:
        """The embedder the index is built with: the fallback while a switch is recorded, else the configured
        one. Loaded once (one that failed: again after START_RETRY_SECONDS); None when `none` or when it
        failed (see `embedder_error`)."""
        if self.fallback_record() is not None:
            return self._fallback_embedder()
        return self._primary()

    def _primary(self) -> Embedder | None:
        if not self._embedder_loaded or (self._embedder_error and time.monotonic() >= self._retry_at):
            self._embedder_loaded, self._embedder_error = True, None
            try:
                self._embedder = create_embedder(self.config.embedding)
            except (EmbedderUnavailable, EmbeddingError) as exc:  # a provider's start-up probe may fail either way
                self._embedder_error = str(exc)
                self._retry_at = time.monotonic() + START_RETRY_SECONDS
                self._provider_down = isinstance(exc.__cause__ or exc, ProviderDown)
        return self._embedder

    def unprobed(self) -> Embedder | None:
        """For `status` without --deep, which must not pay for a request: the configured hosted provider (or the
        recorded fallback) described from the configuration and the index's identity (`embedders.unprobed`).
        None when the embedder in use is loaded already (a server's: asking it costs nothing) or is built
        without a request anyway (the local model, `none`, a provider lacking its key)."""
        record = self.fallback_record()
        if self._fallback_loaded if record else self._embedder_loaded:
            return None
        config = self._fallback_config() if record else self.config.embedding
        return unprobed(config, self.store.identity() if self._indexed() else None)

    @property
    def embedder_error(self) -> str | None:
        """Why `embedder()` is None when something was configured; while switched, why we left the provider."""
        record = self.fallback_record()
        if record is None:
            self._primary()
            return self._embedder_error
        if self._fallback_embedder() is None:
            return (
                self._fallback_error or f"{record['from']} failed ({record['reason']}); on the fallback {record['to']}"
            )
        return None

    def require_embedder(self) -> Embedder | None:
        """For indexing: a configured provider that cannot start is an error, not a silent keyword index,
        unless a fallback is configured (the sync switches to it) or the index was built by it (`_stand_in`)."""
        if self.fallback_record() is not None:
            return self._require_fallback()
        embedder = self._primary()
        if self._embedder_error and self.config.embedding.fallback == "none":
            stand_in = self._stand_in()  # the index this provider built can still take text, keyword-only
            if stand_in is None:
                raise EmbedderUnavailable(self._embedder_error)
            return stand_in
        return embedder

    def _stand_in(self, *, refused: bool = False) -> Embedder | None:
        """While the configured provider cannot start, the index it built can still take new text for keyword
        search (its vectors wait for the next sync): a DownEmbedder with the index's identity, or None when
        the index was not built by this provider. An index not built yet is built keyword-only under the
        provider's provisional identity (`provisional_stand_in`), its vectors pending as well, when the
        provider is down; one that refused (a key, a model to fix) stands in only when `refused` allows it
        (a search must answer; `memsift index` fails with the reason)."""
        if not self._embedder_error:
            return None
        identity = self.store.identity()
        configured = provisional_stand_in(self.config.embedding, self._embedder_error)
        if identity is None:
            if not (self._provider_down or refused):
                return None
            return configured
        # `auto` as resolved (the index names `openai`, not `auto`: no stand-in made a down provider fail syncs)
        if identity.get("provider") != (configured.provider if configured else self.config.embedding.provider):
            return None
        if configured is not None and identity.get("model") != configured.model:
            # A new model configured: standing in as the old one said the index was up to date (status not
            # dirty, syncs keyword-only under the old identity); as the new one, the rebuild waits for --force.
            return configured
        return DownEmbedder(identity, self._embedder_error)

    def fallback_record(self) -> dict[str, Any] | None:
        """The recorded switch to `embedding.fallback` ({from, to, reason, at}), or None."""
        if not self._indexed():
            return None
        try:
            raw = self.store.get_meta("fallback")
        except UnreadableIndex:  # none readable: a forced sync sets the file aside, any other use reports it
            return None
        return json.loads(raw) if raw else None

    def _fallback_config(self) -> EmbeddingConfig:
        """The embedding settings with the fallback as provider. What belongs to the primary's endpoint (its
        URL, key and headers, which may carry a proxy's credentials) and model (its dimensions and prefixes)
        is not passed to a fallback of another provider: it gets its own defaults."""
        embedding = self.config.embedding
        if embedding.fallback == embedding.provider:
            return embedding
        return replace(
            embedding,
            provider=embedding.fallback,
            model=None,
            baseUrl=None,
            apiKey=None,
            headers={},
            dimensions=None,
            queryPrefix=None,
            documentPrefix=None,
        )

    def _fallback_embedder(self) -> Embedder | None:
        if not self._fallback_loaded:
            self._fallback_loaded = True
            try:
                self._fallback = create_embedder(self._fallback_config())
            except (EmbedderUnavailable, EmbeddingError) as exc:
                self._fallback_error = str(exc)
        return self._fallback

    def _require_fallback(self) -> Embedder | None:
        embedder = self._fallback_embedder()
        if self._fallback_error:
            raise EmbedderUnavailable(self._fallback_error)
        return embedder
