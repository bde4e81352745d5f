"""Pure scoring steps of a search: fusion of the two legs, temporal decay, MMR diversity.

They work on `Candidate` lists and know nothing of SQLite, so each can be tested on hand-computed cases.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date
from functools import lru_cache

_DATED = re.compile(r"(?:^|/)(\d{4})-(\d{2})-(\d{2})[^/]*\.md$", re.IGNORECASE)
_DATE_LIKE = re.compile(r"(?:^|/)(\d{4}-\d{1,2}-\d{1,2})(?!\d)[^/]*\.md$", re.IGNORECASE)  # 2026-1-5.md
_WORD = re.compile(r"\w+", re.UNICODE)


@dataclass
class Candidate:
    id: int
    bm25: float | None = None  # r = -bm25() of FTS5 (>= 0, higher is better); None: not a keyword hit
    vector: float | None = None  # cosine similarity; None: not scored by the vector leg
    score: float = 0.0
    decay: float | None = None
    rerank: float | None = None  # the reranker's raw score; None: not reranked
    fused: float | None = None  # the retrieval score (after decay) a rerank blended with; None: not reranked
    ranker: float | None = None  # the score the order was made by, before calibration; None: not calibrated
    probability: float | None = None  # the learned ranker's, before decay; None: the model did not order it

    @property
    def text(self) -> float | None:
        return None if self.bm25 is None else bm25_score(-self.bm25)


def bm25_score(bm25: float) -> float:
    """The keyword leg's score of SPEC section 5: r / (1 + r) with r = -bm25, in [0, 1)."""
    r = max(0.0, -bm25)
    return r / (1.0 + r)


def merge_legs(text_hits: list[tuple[int, float]], vector_hits: list[tuple[int, float]]) -> list[Candidate]:
    """One Candidate per chunk id from (id, bm25()) keyword hits and (id, cosine) vector hits."""
    found: dict[int, Candidate] = {}
    for cid, bm25 in text_hits:
        found.setdefault(cid, Candidate(cid)).bm25 = max(0.0, -bm25)
    for cid, score in vector_hits:
        found.setdefault(cid, Candidate(cid)).vector = score
    return list(found.values())


def fuse_weighted(cands: list[Candidate], vector_weight: float, text_weight: float) -> None:
    """OpenClaw's formula: a weighted sum of the raw leg scores, a missing leg counting 0."""
    for c in cands:
        c.score = vector_weight * (c.vector or 0.0) + text_weight * (c.text or 0.0)


def fuse_minmax(cands: list[Candidate], vector_weight: float, text_weight: float) -> None:
    """Each leg min-max normalised over the candidates, then weighted; a missing leg counts 0.

    BM25 and cosine live on scales that shift with every query; normalising puts the best hit of each leg
    at 1 and the worst at 0, so the weights mean what they say. BM25 is normalised raw, not through
    r / (1 + r), whose compression of strong matches cost 1.1 points of nDCG@10 on locomo-dev.
    """
    norm_t = _minmax([c.bm25 for c in cands if c.bm25 is not None])
    norm_v = _minmax([c.vector for c in cands if c.vector is not None])
    for c in cands:
        t = norm_t(c.bm25) if c.bm25 is not None else 0.0
        v = norm_v(c.vector) if c.vector is not None else 0.0
        c.score = vector_weight * v + text_weight * t


def _minmax(values: list[float]):
    if not values:
        return lambda x: 0.0
    lo, hi = min(values), max(values)
    if hi - lo < 1e-12:
        return lambda x: 1.0
    return lambda x: (x - lo) / (hi - lo)


def blend(cands: list[Candidate], weight: float) -> list[Candidate]:
    """Reranked order: each candidate's retrieval score and rerank score min-max normalised over the shortlist,
    mixed `1 - weight` to `weight`. A blend, not a replacement, so that a strong exact match the reranker
    undervalues keeps a place near the top (measured on locomo-dev: docs/search-and-ranking.md, "Rerankers").

    The blend orders the shortlist; the score shown is the blend mapped onto the shortlist's range of retrieval
    scores, so a reranked list reads like a fused one (its best hit keeps the best fused score, its last the
    lowest) instead of ending at an alarming 0."""
    fused = [c.score for c in cands]
    retrieval = _minmax(fused)
    reranked = _minmax([c.rerank or 0.0 for c in cands])
    lo, hi = min(fused, default=0.0), max(fused, default=0.0)
    mixed = {}
    for c in cands:
        mixed[c.id] = (1 - weight) * retrieval(c.score) + weight * reranked(c.rerank or 0.0)
        c.fused = c.score
        c.score = lo + (hi - lo) * mixed[c.id]
    return sorted(cands, key=lambda c: (-mixed[c.id], c.id))


def fuse_rrf(cands: list[Candidate], k: int, vector_weight: float = 1.0, text_weight: float = 1.0) -> None:
    """Reciprocal rank fusion, scaled so that first place in both legs scores 1."""
    ranks_t = _ranks([c for c in cands if c.bm25 is not None], lambda c: c.bm25)
    ranks_v = _ranks([c for c in cands if c.vector is not None], lambda c: c.vector)
    top = (vector_weight + text_weight) / (k + 1)
    for c in cands:
        s = 0.0
        if c.id in ranks_t:
            s += text_weight / (k + ranks_t[c.id])
        if c.id in ranks_v:
            s += vector_weight / (k + ranks_v[c.id])
        c.score = s / top


@dataclass(frozen=True)
class Fusion:
    """One way to merge the two legs: `fuse(cands, vector_weight, text_weight, rrf_k)` sets each candidate's
    score; `weights` are its default (vector, text) weights, chosen on ../shared/bench/locomo-dev
    (docs/search-and-ranking.md, "Retrieval quality")."""

    fuse: Callable[[list[Candidate], float, float, int], None]
    weights: tuple[float, float]


#: `search.fusion` -> its Fusion: the one list of fusion methods (config.py validates against it).
FUSIONS = {
    "minmax": Fusion(lambda cands, vw, tw, k: fuse_minmax(cands, vw, tw), (0.35, 0.65)),
    "weighted": Fusion(lambda cands, vw, tw, k: fuse_weighted(cands, vw, tw), (0.7, 0.3)),
    "rrf": Fusion(lambda cands, vw, tw, k: fuse_rrf(cands, k, vw, tw), (1.0, 1.0)),
}


def _ranks(cands: list[Candidate], key) -> dict[int, int]:
    ordered = sorted(cands, key=lambda c: (-key(c), c.id))
    return {c.id: i for i, c in enumerate(ordered, start=1)}


def passes_floor(c: Candidate, min_score: float) -> bool:
    """The score floor guards against the vector leg's noise, which always returns neighbours.

    A hit the keyword leg found matched a real query term and is kept whatever its score (BM25 is tiny in
    small workspaces, and a floor on it drops the best evidence: OpenClaw's weakness, measured in
    ../shared/bench/locomo-dev). A hit found by the vector leg alone needs cosine >= minScore.
    """
    return c.bm25 is not None or (c.vector or 0.0) >= min_score


@lru_cache(maxsize=65536)  # a filtered search dates every file of the index: the regex once per path
def note_date(path: str) -> date | None:
    """The date in a daily note's file name (`memory/**/YYYY-MM-DD*.md`), if any."""
    m = _DATED.search(path)
    if not m or not path.startswith("memory/"):
        return None
    try:
        return date(int(m[1]), int(m[2]), int(m[3]))
    except ValueError:
        return None


def false_date(path: str) -> str | None:
    """What is wrong with the date in a name shaped like a daily note's that dates nothing: no calendar day
    (`memory/2026-02-30.md`), or not written YYYY-MM-DD (`memory/2026-1-5.md`); None for any other name. Such a
    note is undated, and the sync says so (core/sources/memory.py)."""
    if not path.startswith("memory/"):
        return None
    if m := _DATED.search(path):
        return None if note_date(path) else f"{m[1]}-{m[2]}-{m[3]} in its name is not a calendar date"
    if m := _DATE_LIKE.search(path):
        return f"{m[1]} in its name is not written YYYY-MM-DD"
    return None


def is_evergreen(path: str) -> bool:
    """MEMORY.md, memory.md and undated notes under memory/ never decay."""
    return path in ("MEMORY.md", "memory.md") or (path.startswith("memory/") and note_date(path) is None)


def decay_factor(age_days: float, half_life_days: float) -> float:
    return 0.5 ** (max(0.0, age_days) / half_life_days)


def mmr_order(cands: list[Candidate], texts: dict[int, str], lam: float, limit: int) -> list[Candidate]:
    """Maximal marginal relevance: trade score against Jaccard similarity to what is already chosen."""
    if not cands:
        return []
    relevance = _minmax([c.score for c in cands])  # to [0, 1] whatever the sign and scale of the scores
    tokens = {c.id: set(_WORD.findall(texts.get(c.id, "").lower())) for c in cands}
    chosen: list[Candidate] = []
    rest = sorted(cands, key=lambda c: -c.score)
    while rest and len(chosen) < limit:
        best_i, best_v = 0, -math.inf
        for i, c in enumerate(rest):
            sim = max((_jaccard(tokens[c.id], tokens[s.id]) for s in chosen), default=0.0)
            value = lam * relevance(c.score) - (1 - lam) * sim
            if value > best_v:
                best_i, best_v = i, value
        chosen.append(rest.pop(best_i))
    return chosen


def _jaccard(a: set[str], b: set[str]) -> float:
    if not a and not b:
        return 0.0
    return len(a & b) / len(a | b)
