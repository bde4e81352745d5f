"""`memsift status`: what an agent's index holds, whether a sync is due and why, and what searches use.

Read from one `Store` (the index, or an empty one in memory before the first sync: asking writes nothing),
so a rebuild swapping the file mid-way cannot mix two states of the index in one answer.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from . import calibration_model, learned
from .config_types import Config, RerankConfig
from .embedders import Embedder
from .identity import change_cause, identity_changes, identity_key, identity_matches, index_identity
from .indexer import UNFINISHED
from .rerankers.local import LOCAL_DEFAULT, is_maxsim, token_capture
from .rerankers.shortlist import wanted
from .shared_cache import SharedCache, cache_path
from .store import Store
from .sync_plan import SyncReport, plan_sync
from .sync_vectors import VECTORS_PENDING, vectorless
from .words import counted


def status_document(
    config: Config,
    store: Store,
    fallback: dict[str, Any] | None,
    embedder: Embedder | None,
    embedder_error: str | None,
    *,
    deep: bool,
    rebuild_held: Callable[[], dict[str, Any] | None],
    asked: float = float("inf"),
) -> dict[str, Any]:
    """The document of `memsift status` (SPEC section 3), read from `store` alone: one state of the index.
    `rebuild_held`: why a rebuild the identity calls for waits for a forced run, if it does. `asked`: when
    (`time.monotonic()`) the status was asked for: an embedder whose start-up probe ran since is not probed
    again."""
    identity = store.identity()
    stats = store.stats()
    dirty_reason = None
    unfinished = json.loads(store.get_meta(UNFINISHED) or "null")
    if identity is None:
        dirty_reason = "never indexed"
    elif unfinished is not None:
        done = sum(stats["files"].values())
        dirty_reason = (
            f"the first index is not finished: {done} of {counted(unfinished['files'], 'file')} indexed (the sync "
            "running now, or the next one, completes it)"
        )
    elif not identity_matches(identity, new := index_identity(config, embedder)):
        held = rebuild_held()
        dirty_reason = (
            f"{held['reason']}; it would embed: {held['summary']}"
            if held
            else f"{change_cause(identity, new)} ({identity_changes(identity, new)}): the next sync rebuilds"
        )
    else:
        plan = plan_sync(store, config, embedder, SyncReport())
        if plan.to_check or plan.removed:
            n = len(plan.to_check)
            dirty_reason = f"{counted(n, 'file')} new or modified, {len(plan.removed)} removed"
    pending = json.loads(store.get_meta(VECTORS_PENDING) or "null")
    waiting, refused = vectorless(store, identity_key(identity), waiting=bool(pending)) if identity else (0, 0)
    if pending:
        pending["chunks"] = waiting
    if pending and dirty_reason is None:
        dirty_reason = (
            f"{pending['chunks']} of {counted(sum(stats['chunks'].values()), 'chunk')} "
            f"{'has' if pending['chunks'] == 1 else 'have'} no vector: the embedder failed "
            f"({pending['reason']}); keyword search finds them, the next sync embeds them"
            + (
                f" ({refused} more the provider refused {'stays' if refused == 1 else 'stay'} keyword-only)"
                if refused
                else ""
            )
        )
    last = store.get_meta("last_sync")
    doc: dict[str, Any] = {
        "agent": config.agent,
        "workspace": str(config.workspace),
        "dbPath": str(config.db_path),
        "provider": (identity or {}).get("provider") or (embedder.provider if embedder else "none"),
        "model": (identity or {}).get("model") or (embedder.model if embedder else None),
        "dims": (identity or {}).get("dims"),
        # Every configured source is counted, 0 included: a note with no text (or no sync yet) is {"memory": 0}
        # chunks, as a client reading `chunks.memory` expects, not a missing key.
        "files": {**dict.fromkeys(config.sources, 0), **stats["files"]},
        "chunks": {**dict.fromkeys(config.sources, 0), **stats["chunks"]},
        "dirty": dirty_reason is not None,
        "dirtyReason": dirty_reason,
        "vector": {
            "enabled": bool((identity or {}).get("dims")),
            "backend": "sqlite-vec" if store.vec_available else "numpy",
            "error": store.vec_error if not store.vec_available else None,
            # chunks the provider refused on their own (HTTP 400 naming them): keyword search only, for good
            "refused": refused,
        },
        "fts": {"enabled": identity is not None, "tokenizer": config.store.fts_tokenize},
        "cacheEntries": stats["cacheEntries"],
        "sharedCache": _shared_cache_status(config),
        "lastSync": iso(float(last)) if last else None,
        "embedderError": embedder_error,
        "fallback": fallback,
        "vectorsPending": {**pending, "at": iso(pending["at"])} if pending else None,  # reason, at, chunks
        "rerank": _rerank_status(config, store, embedder),
    }
    if deep:
        doc["probe"] = _probe(embedder, embedder_error, asked)
    return doc


def _shared_cache_status(config: Config) -> dict[str, Any]:
    """The home's shared embedding cache: where, and how many vectors (0 before any sync made it)."""
    path = cache_path(config.home)
    if not path.exists():
        return {"path": str(path), "entries": 0}
    with SharedCache(path) as cache:
        return {"path": str(path), "entries": cache.count()}


def _rerank_status(config: Config, store: Store, embedder: Embedder | None) -> dict[str, Any]:
    """Whether searches rerank by default, with what (the method and model they use, not only the keys: the
    learned ranker orders only a MaxSim rerank, a hosted service's model defaults per dialect), where a hosted
    reranker is called, and how many chunks have MaxSim token bits."""
    r = config.rerank
    capture = token_capture(config, embedder)
    method = r.method if is_maxsim(r) else "blend"
    model, endpoint = (r.model or LOCAL_DEFAULT, None) if r.provider == "local" else _hosted_service(r)
    return {
        "enabled": r.enabled,
        "active": wanted(config, None, embedder),
        "provider": r.provider,
        "model": model,
        "endpoint": endpoint,
        "candidates": r.candidates,
        "weight": r.weight,
        "method": method,
        "ranker": _ranker_identity(r.rankerModel) if method == "learned" else None,
        "tokenBits": store.tokens_count(capture.fingerprint) if capture else None,
        # what hybrid scores are calibrated with: part of what a score means, as the ranker is
        "calibration": calibration_model.default_model().fingerprint,
    }


def _hosted_service(r: RerankConfig) -> tuple[str, str | None]:
    from .rerankers.cohere import service  # imported when configured: it brings the HTTP client

    return service(r)


def _probe(embedder: Embedder | None, embedder_error: str | None, asked: float) -> dict[str, Any]:
    """`--deep`'s probe: one query embedded, timed. A hosted provider made for this status (a CLI's, a server's
    first use) sent its start-up probe a moment ago: that one is reported, as one request is all it takes
    (`memsift status --deep` paid two, cold)."""
    if embedder is None:
        return {"ok": False, "error": embedder_error or "no embedder configured"}
    probed = getattr(embedder, "probed", None)
    if probed is not None and probed["at"] >= asked:
        return {key: value for key, value in probed.items() if key != "at"}
    started = time.perf_counter()
    try:
        vec = embedder.embed_query("memsift probe")
    except Exception as exc:
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    return {"ok": True, "dims": int(vec.shape[0]), "ms": round((time.perf_counter() - started) * 1000, 1)}


def iso(ts: float) -> str:
    """A Unix time as status shows times (UTC, seconds)."""
    return datetime.fromtimestamp(ts, tz=UTC).isoformat(timespec="seconds")


def _ranker_identity(path: str | None) -> str:
    """The learned ranker's fingerprint (what searches are scored with), or why its model cannot be read."""
    try:
        fingerprint, error = learned.model_for(path).fingerprint, learned.load_error(path)
    except learned.RankerModelError as exc:
        return f"unreadable: {exc}"
    return (
        f"{fingerprint} (the file now unreadable: {error}; the model read before is in use)" if error else fingerprint
    )
