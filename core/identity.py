"""An index's identity: everything that, when changed, makes its stored chunks or vectors wrong.

Apart from the sync because the status, the reload check of the servers, the search (whose vector leg needs
the index's vectors to be the embedder's) and the caches' keys all read it without syncing anything.
"""

from __future__ import annotations

from typing import Any

from .config_types import Config
from .embedders import Embedder
from .query import FTS_TEXT_VERSION
from .rerankers.local import token_capture
from .store_schema import SCHEMA_VERSION


def cache_key(embedder: Embedder) -> tuple[str, str, str]:
    return (embedder.provider, embedder.model, embedder.fingerprint)


def identity_key(identity: dict[str, Any] | None) -> tuple[str | None, str | None, str | None]:
    """The cache key of the vectors an index of this identity holds (`cache_key` of the embedder it was built
    with; the fingerprint is None under a provisional identity, and no vector has that key)."""
    identity = identity or {}
    return identity.get("provider"), identity.get("model"), identity.get("fingerprint")


def index_identity(config: Config, embedder: Embedder | None) -> dict[str, Any]:
    """Everything that, when changed, makes the stored chunks or vectors wrong."""
    return {
        "schema": SCHEMA_VERSION,
        "provider": embedder.provider if embedder else "none",
        "model": embedder.model if embedder else None,
        "fingerprint": embedder.fingerprint if embedder else None,
        "dims": embedder.dims if embedder else None,
        "chunking": {"tokens": config.chunking.tokens, "overlap": config.chunking.overlap},
        "sources": list(config.sources),
        "extraPaths": list(config.extra_paths),
        "tokenizer": config.store.fts_tokenize,
        "ftsText": FTS_TEXT_VERSION,
        # Turning MaxSim token capture on or off rebuilds once: chunks indexed before would lack token bits.
        "tokens": capture.fingerprint if (capture := token_capture(config, embedder)) else None,
    }


def provisional(identity: dict[str, Any]) -> bool:
    """An identity recorded by a first index whose hosted provider never answered (core.embedders
    `provisional_stand_in`): its dims and fingerprint are not known yet, and no chunk has a vector."""
    return identity.get("provider") not in (None, "none") and identity.get("fingerprint", "") is None


def identity_matches(stored: dict[str, Any] | None, new: dict[str, Any]) -> bool:
    """Whether an index of identity `stored` answers for `new` without a rebuild: the same identity, or a
    provisional one that `new` completes (the same provider and model, answering now: its chunks stay, the
    sync embeds them)."""
    if stored is not None and provisional(stored):
        stored = {**stored, "dims": new.get("dims"), "fingerprint": new.get("fingerprint")}
    return stored == new


#: The keys only a new memsift release changes (the table layout, the text the keyword index holds).
RELEASE_KEYS = frozenset({"schema", "ftsText"})


def _changed(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    unknown = {"dims", "fingerprint"} if provisional(new) else set()
    return [k for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k) and k not in unknown]


def identity_changes(old: dict[str, Any], new: dict[str, Any]) -> str:
    """The index identity's keys that differ, for a message: `chunking, extraPaths`. A provisional `new` (its
    provider down) does not know its dims and fingerprint yet: they are not named as changed."""
    return ", ".join(_changed(old, new))


def change_cause(old: dict[str, Any], new: dict[str, Any]) -> str:
    """Who changed the identity, for a message: a user who only upgraded memsift was told "the configuration or
    model changed", which they had not touched."""
    changed = _changed(old, new)
    if changed and set(changed) <= RELEASE_KEYS:
        return "memsift was upgraded and its index format changed"
    return "the configuration or model changed"
