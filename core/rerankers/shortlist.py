"""Reranking search's shortlist: scores from a per-process cache or the reranker, blended with the fused order.

Reranking refines an answer and never costs one: a reranker that cannot start or fails leaves the fused
order, with the reason in the search's `degraded`.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from .. import ranking
from ..config_types import Config
from ..embedders import Embedder
from ..words import counted
from . import Reranker, RerankError, create_reranker
from .local import token_capture

if TYPE_CHECKING:
    from ..store import Store
    from ..store_search import ChunkRow


#: Scores kept per process by (reranker fingerprint, query, chunk hash): an agent often asks again.
SCORE_CACHE_ENTRIES = 50_000


def wanted(config: Config, requested: bool | None, embedder: Embedder | None) -> bool:
    """Whether this search reranks: the request decides, else `rerank.enabled`; `auto` reranks only where it is
    cheap (local MaxSim over an index the local model built, so token bits are stored)."""
    choice = config.rerank.enabled if requested is None else requested
    if choice == "auto":
        return token_capture(config, embedder) is not None
    return bool(choice)


class ScoreCache:
    """Rerank scores by (reranker fingerprint, query, chunk hash), least recently used out first."""

    def __init__(self, capacity: int = SCORE_CACHE_ENTRIES) -> None:
        self.capacity = capacity
        self._scores: OrderedDict[tuple[str, str, str], float] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, fingerprint: str, query: str, hashes: list[str]) -> dict[str, float]:
        found = {}
        with self._lock:
            for h in hashes:
                key = (fingerprint, query, h)
                if key in self._scores:
                    self._scores.move_to_end(key)
                    found[h] = self._scores[key]
        return found

    def put(self, fingerprint: str, query: str, scores: dict[str, float]) -> None:
        with self._lock:
            for h, v in scores.items():
                self._scores[(fingerprint, query, h)] = v
                self._scores.move_to_end((fingerprint, query, h))
            while len(self._scores) > self.capacity:
                self._scores.popitem(last=False)


SCORES = ScoreCache()
#: MaxSim per line (maxsim.LINE_SIGNALS) by the same keys, for the learned ranker.
LINES = ScoreCache()


def rerank_shortlist(
    store: Store,
    config: Config,
    embedder: Embedder | None,
    query: str,
    shortlist: list[ranking.Candidate],
    rows: dict[int, ChunkRow],
    cache: ScoreCache = SCORES,
    make_reranker: Callable[[], Reranker] | None = None,
) -> tuple[list[ranking.Candidate], str | None]:
    """The shortlist reranked and blended, or as it was with the reason (search's `degraded`) when the
    reranker is unavailable or fails: reranking refines an answer, it never costs one. `make_reranker` gives
    the reranker to use (a long-lived one: MemoryIndex keeps its own); by default the configured one is built."""
    scores, problem = score_shortlist(store, config, embedder, query, shortlist, rows, cache, make_reranker)
    if problem:
        return shortlist, f"{problem}; results in fused order"
    for c, score in zip(shortlist, scores):
        c.rerank = score
    return ranking.blend(shortlist, config.rerank.weight), None


def score_shortlist(
    store: Store,
    config: Config,
    embedder: Embedder | None,
    query: str,
    shortlist: list[ranking.Candidate],
    rows: dict[int, ChunkRow],
    cache: ScoreCache = SCORES,
    make_reranker: Callable[[], Reranker] | None = None,
) -> tuple[list[float], str | None]:
    """Each candidate's rerank score, from the per-process cache or the reranker, in the shortlist's order; or
    no scores and the reason when the reranker is unavailable or fails."""
    from .maxsim import MaxSimReranker

    try:
        reranker = make_reranker() if make_reranker else create_reranker(config.rerank, embedder)
    except Exception as exc:  # a missing model folder, a bad key
        return [], f"reranker unavailable ({_reason(exc)})"
    hashes = {c.id: rows[c.id].hash for c in shortlist}
    scores = cache.get(reranker.fingerprint, query, list(hashes.values()))
    todo = [c for c in shortlist if hashes[c.id] not in scores]
    if todo:
        documents = [rows[c.id].text for c in todo]
        try:
            if isinstance(reranker, MaxSimReranker):
                stored = store.tokens_for((c.id for c in todo), reranker.fingerprint)
                fresh = reranker.score(query, documents, [stored.get(c.id) for c in todo])
            else:
                fresh = reranker.score(query, documents)
            if len(fresh) != len(todo):
                raise RerankError(f"{counted(len(fresh), 'score')} for {counted(len(todo), 'document')}")
        except Exception as exc:
            return [], f"reranking failed ({_reason(exc)})"
        new = {hashes[c.id]: float(v) for c, v in zip(todo, fresh)}
        cache.put(reranker.fingerprint, query, new)
        scores.update(new)
    return [scores[hashes[c.id]] for c in shortlist], None


def line_signals(
    store: Store,
    query: str,
    pool: list[ranking.Candidate],
    rows: dict[int, ChunkRow],
    reranker: Reranker,
    cache: ScoreCache = LINES,
    scores: ScoreCache = SCORES,
) -> np.ndarray:
    """maxsim.LINE_SIGNALS of each candidate (zeros unless `reranker` is MaxSim), from stored token lines.
    The same pass gives each candidate's MaxSim, put in `scores`: a rerank_shortlist after it unpacks nothing."""
    from .maxsim import LINE_SIGNALS, MaxSimReranker

    if not isinstance(reranker, MaxSimReranker):
        return np.zeros((len(pool), len(LINE_SIGNALS)))
    hashes = [rows[c.id].hash for c in pool]
    known = cache.get(reranker.fingerprint, query, hashes)
    todo = [c for c, h in zip(pool, hashes) if h not in known]
    if todo:
        stored = store.tokens_for((c.id for c in todo), reranker.fingerprint)
        fresh = reranker.line_scores(query, [stored.get(c.id) for c in todo], [rows[c.id].text for c in todo])
        # As Python floats in one call: a numpy scalar per value cost 0.2 ms a search of ~80 candidates.
        found = [(rows[c.id].hash, v) for c, v in zip(todo, fresh.tolist())]
        scores.put(reranker.fingerprint, query, {h: v[0] for h, v in found})
        new = {h: tuple(v[1:]) for h, v in found}
        cache.put(reranker.fingerprint, query, new)  # type: ignore[arg-type]
        known.update(new)  # type: ignore[arg-type]
    return np.array([known[h] for h in hashes], dtype=np.float64).reshape(len(pool), len(LINE_SIGNALS))


def _reason(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}"
