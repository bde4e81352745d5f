"""The keyword leg of large indexes: FTS5's own BM25 scores, cached per query phrase, summed in numpy.

The query is an OR of phrases (core.query), and FTS5 computes `bm25()` for every row any phrase matches before
the LIMIT: at 100,000 chunks of notes with a small vocabulary that is half the rows, 40-80 ms a search. Yet
FTS5's BM25 is a sum over the query's phrases of one term per phrase, and each term depends only on that phrase
and that row (sqlite's fts5_aux.c, `fts5Bm25Function`):

    score(row) = sum over phrases p of  idf(p) * f(p,row) * (k1 + 1) / (f(p,row) + k1 * (1 - b + b * D(row) / avgdl))

with k1 = 1.2, b = 0.75, idf(p) = log((N - n(p) + 0.5) / (n(p) + 0.5)) floored at 1e-6, n(p) the rows matching
the phrase alone, f the phrase's hits in the row, D the row's length, N and avgdl from the table's totals. So the
term of a phrase is what `bm25()` answers for a MATCH of that phrase alone. This module asks FTS5 exactly that,
once per phrase, keeps the (chunk id, term) arrays, and scores a query by adding its phrases' arrays in query
order, as FTS5 adds them: the same floats, hence the same scores, ids and order (ties by ascending id, as FTS5's
sorter leaves them). Stemming, diacritics, trigrams and several-token phrases (`err ssl protocol`, CJK pairs) are
FTS5's business throughout: only FTS5's own tokenizer says whether a phrase is one token (core.store_search).

A phrase's first use costs one FTS5 query over its rows; later ones a numpy scatter-add. That first query paid
`bm25()`'s lookup of each row's length in FTS5's docsize table (one B-tree search a row: 4 us, so 200 ms for a
word in all 50,000 rows, which is what a fresh `memsift search` process or the first search after a sync pays).
A phrase that is one token is therefore scored here from what FTS5 stores (`bm25_terms`): its occurrences per row
from an `fts5vocab` instance table and every row's length read once per state of the index (`Lengths`), with the
float operations of fts5Bm25Function in its order, so the terms are FTS5's bit for bit (tests/test_keyword_cache.py);
a phrase of several tokens, or a prefix, is still asked of `bm25()`. The store stays the one
source of truth: the cache of an index file is tagged like the vector matrix (core.vector_matrix: inode and the
store's `vectors_version`, bumped by every write of chunks), and a search whose tag differs drops it (every score
depends on N and avgdl, so any write changes them all). One cache per index file per process, shared by the pool
of `memsift serve`; all of them together hold at most `CACHE_BYTES` of arrays, least recently used phrases out
first. Used from `CACHE_MIN_CHUNKS` chunks up (bench/keyword_leg.py, bench/README.md "Issue 17"). Its lock
guards the dictionaries and nothing else: SQL runs outside it, so concurrent searches are never serialised by
one of them reading a new phrase (at 100,000 chunks that read takes tens of milliseconds).

Keyword-only searches (asked for, or degraded to) score with Lucene's idf instead, `log(1 + (N - n + 0.5) /
(n + 0.5))`, positive and falling as n grows: FTS5 floors the idf of a phrase in half the rows or more at 1e-6,
so in an index of 1-3 chunks (a first workspace) every hit scored about 0.000 and ties ordered at random. Each
phrase's term is rescaled by the ratio of the two idfs (`lucene_idf_ratio`, from its row count n and the chunk
count N), through this cache at any index size. Hybrid search keeps FTS5's scores: the learned ranker and the
calibration were trained on them (docs/search-and-ranking.md "Keyword score").
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Callable, Collection, Hashable, Iterable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field

import numpy as np

#: From this many chunks on, the cached phrase scores answer the keyword leg (bench/keyword_leg.py).
CACHE_MIN_CHUNKS = 2_000
#: Memory of every cached phrase together, in the whole process (12 bytes a matched row: id position + score).
CACHE_BYTES = 64 * 2**20

#: (chunk id, bm25 of the phrase alone) for every row a phrase matches, as FTS5 answers them.
PhraseScores = Callable[[str], Iterable[tuple[int, float]]]
#: (the row ids a phrase matches, ascending; its occurrences in each), or None unless the phrase is one token.
PhraseHits = Callable[[str], "tuple[np.ndarray, np.ndarray] | None"]
#: (every row id, ascending; each row's length in tokens; FTS5's row count; its token count), or None when FTS5's
#: tables cannot be read so (`bm25()` then scores every phrase).
Lengths = Callable[[], "tuple[np.ndarray, np.ndarray, int, int] | None"]
#: fts5Bm25Function's constants (sqlite's fts5_aux.c).
K1, B = 1.2, 0.75
_ROW = np.dtype([("id", np.int64), ("bm25", np.float64)])


@dataclass
class _Phrase:
    rows: np.ndarray  # int32 positions in the index's sorted chunk ids
    terms: np.ndarray  # float64: the phrase's BM25 term in those rows (positive: bm25() negated)

    @property
    def nbytes(self) -> int:
        return int(self.rows.nbytes + self.terms.nbytes)


@dataclass
class _Index:
    tag: Hashable
    ids: np.ndarray  # every chunk id, ascending
    lengths: np.ndarray | None = None  # float64: each chunk's length in tokens, as `ids`; None: bm25() scores
    rows: int = 0  # FTS5's row count and average row length, for bm25_terms
    avgdl: float = 0.0
    phrases: OrderedDict[str, _Phrase] = field(default_factory=OrderedDict)
    filling: dict[str, Future[_Phrase]] = field(default_factory=dict)  # phrases a thread is reading now


class KeywordCaches:
    """Phrase scores by index file. The lock guards the dictionaries only: SQL (the chunk ids, a phrase's
    scores) runs outside it, so one search reading a new phrase from FTS5 never holds up the others (searches of
    `memsift serve` run in threads); a phrase some thread is reading is awaited, not read twice."""

    def __init__(self, max_bytes: int = CACHE_BYTES) -> None:
        self.max_bytes = max_bytes
        self._indexes: dict[str, _Index] = {}
        self._bytes = 0
        self._lock = threading.Lock()

    def search(
        self,
        path: str,
        tag: Hashable,
        chunk_ids: Callable[[], np.ndarray],
        phrases: Sequence[str],
        phrase_scores: PhraseScores,
        limit: int,
        allowed: Callable[[], Collection[int]] | None = None,
        min_chunks: int = CACHE_MIN_CHUNKS,
        positive_idf: bool = False,
        phrase_hits: PhraseHits | None = None,
        lengths: Lengths | None = None,
    ) -> list[tuple[int, float]] | None:
        """(chunk id, bm25) best first, as FTS5's `ORDER BY bm25(chunks_fts) LIMIT limit` over the OR of
        `phrases` answers, or None when the index at `path` has fewer than `min_chunks` chunks (FTS5 answers).
        `chunk_ids` (every chunk id, ascending) runs only when the tag changed and `lengths` gave none,
        `phrase_scores` only for a phrase
        not cached; `allowed`: the chunk ids a search's filters leave, scored before the cut; `positive_idf`:
        each phrase's term with Lucene's idf in place of FTS5's (`lucene_idf_ratio`). `phrase_hits` and `lengths`
        (both or neither): a one-token phrase is scored from its occurrences (`bm25_terms`), not by `bm25()`."""
        index = self._index(path, tag, chunk_ids, lengths)
        if len(index.ids) < min_chunks:
            return None
        hits = phrase_hits if index.lengths is not None else None
        parts = [self._phrase(path, index, p, phrase_scores, hits) for p in phrases]
        ids = index.ids
        if not parts:
            return []
        terms = [p.terms * lucene_idf_ratio(len(ids), len(p.rows)) if positive_idf else p.terms for p in parts]
        # bincount adds each row's terms in array order, i.e. phrase by phrase from 0.0, as fts5Bm25Function does.
        scores = np.bincount(np.concatenate([p.rows for p in parts]), np.concatenate(terms), minlength=len(ids))
        found = np.flatnonzero(scores)  # every matched row has a term > 0 (idf >= 1e-6, at least one hit)
        if allowed is not None:
            found = found[np.isin(ids[found], np.fromiter(allowed(), dtype=np.int64))]
        return _best(ids, found, -scores[found], limit)

    def counts(self, path: str, tag: Hashable, phrases: Sequence[str]) -> list[int | None]:
        """How many rows each phrase matches, from its cached scores in the index at `path` as `tag` describes it
        (None: not cached): what FTS5's `count(*) ... MATCH phrase` answers, with no FTS5 query."""
        with self._lock:
            index = self._indexes.get(path)
            if index is None or index.tag != tag:
                return [None] * len(phrases)
            return [len(found.rows) if (found := index.phrases.get(p)) is not None else None for p in phrases]

    def _index(
        self, path: str, tag: Hashable, chunk_ids: Callable[[], np.ndarray], lengths: Lengths | None = None
    ) -> _Index:
        """The cache of `path` as `tag` describes it; a changed tag reads the rows' ids and lengths (`lengths`,
        else `chunk_ids`; outside the lock) and replaces it, unless another thread did so meanwhile."""
        with self._lock:
            index = self._indexes.get(path)
            if index is not None and index.tag == tag:
                return index
        read = lengths() if lengths is not None else None
        if read is not None and read[2] > 0:
            # FTS5's rows are the chunks (written in one transaction), and its row ids are what bm25() answers.
            fresh = _Index(tag, read[0], read[1].astype(np.float64), read[2], read[3] / read[2])
        else:  # bm25() scores every phrase, as before
            fresh = _Index(tag, chunk_ids())
        with self._lock:
            index = self._indexes.get(path)
            if index is None or index.tag != tag:
                if index is not None:
                    self._bytes -= sum(p.nbytes for p in index.phrases.values())
                index = self._indexes[path] = fresh
            return index

    def _phrase(
        self, path: str, index: _Index, phrase: str, phrase_scores: PhraseScores, phrase_hits: PhraseHits | None
    ) -> _Phrase:
        """A phrase's scores: cached, or awaited from the thread reading them, or read here (outside the lock)."""
        while True:
            with self._lock:
                cached = index.phrases.get(phrase)
                if cached is not None:
                    index.phrases.move_to_end(phrase)
                    return cached
                filling = index.filling.get(phrase)
                if filling is None:
                    filling = index.filling[phrase] = Future()
                    break
            try:
                return filling.result()
            except Exception:  # the reader failed (its connection, say): read it here instead
                continue
        try:
            found = self._read(index, phrase, phrase_scores, phrase_hits)
        except BaseException as exc:
            with self._lock:
                del index.filling[phrase]
            filling.set_exception(exc)
            raise
        with self._lock:
            del index.filling[phrase]
            # Not into an index a newer tag replaced meanwhile: its bytes are no longer counted.
            if found.nbytes <= self.max_bytes and self._indexes.get(path) is index:
                index.phrases[phrase] = found
                self._bytes += found.nbytes
                self._evict()
        filling.set_result(found)
        return found

    @staticmethod
    def _read(index: _Index, phrase: str, phrase_scores: PhraseScores, phrase_hits: PhraseHits | None) -> _Phrase:
        """The phrase's (position, term) arrays, without rows written since the ids were read: computed from its
        occurrences when it is one token (and the index's lengths were read), else FTS5's `bm25()` answers."""
        hits = phrase_hits(phrase) if phrase_hits is not None else None
        if hits is not None and index.lengths is not None:
            ids, counts = hits
            at = np.searchsorted(index.ids, ids).clip(0, max(len(index.ids) - 1, 0))
            known = index.ids[at] == ids
            at = at[known]
            terms = bm25_terms(counts[known], index.lengths[at], len(ids), index.rows, index.avgdl)
            return _Phrase(at.astype(np.int32), terms)
        rows = np.fromiter(phrase_scores(phrase), dtype=_ROW)
        ids = rows["id"]
        at = np.searchsorted(index.ids, ids).clip(0, max(len(index.ids) - 1, 0))
        known = index.ids[at] == ids if len(index.ids) else np.zeros(len(ids), dtype=bool)
        return _Phrase(at[known].astype(np.int32), -rows["bm25"][known])

    def _evict(self) -> None:
        """Least recently used phrases out, oldest index first, until the arrays fit in `max_bytes`."""
        for index in list(self._indexes.values()):
            while self._bytes > self.max_bytes and index.phrases:
                _, old = index.phrases.popitem(last=False)
                self._bytes -= old.nbytes

    @property
    def nbytes(self) -> int:
        """The bytes of every cached phrase's arrays (the chunk ids of each index come on top: 8 a chunk)."""
        return self._bytes

    def clear(self) -> None:
        """Forget every index (bench/keyword_leg.py times the first searches after a write this way)."""
        with self._lock:
            self._indexes.clear()
            self._bytes = 0


def bm25_terms(counts: np.ndarray, lengths: np.ndarray, matched: int, rows: int, avgdl: float) -> np.ndarray:
    """One phrase's term in each row, as fts5Bm25Function computes it (sqlite's fts5_aux.c), operation for operation
    so the floats are FTS5's: `counts` its occurrences in the rows, `lengths` their lengths in tokens, `matched` the
    rows it matches (n), `rows` and `avgdl` FTS5's row count and average length. idf = log((N - n + 0.5) / (n + 0.5))
    through libm's log (math.log, as sqlite), floored at 1e-6; numpy's +, *, / round as C's doubles do."""
    idf = math.log((rows - matched + 0.5) / (matched + 0.5))
    if idf <= 0.0:
        idf = 1e-6
    freq = counts.astype(np.float64)
    return idf * ((freq * (K1 + 1.0)) / (freq + K1 * (1 - B + B * lengths / avgdl)))


def lucene_idf_ratio(rows: int, matched: int) -> float:
    """Lucene's idf over FTS5's for a phrase matching `matched` of `rows` rows: what turns the phrase's FTS5 term
    into Lucene's (the rest of the term, the phrase's saturated frequency in the row, is the same in both).
    FTS5 (fts5_aux.c) takes idf = log((N - n + 0.5) / (n + 0.5)) and 1e-6 where that is <= 0, i.e. from n = N/2
    on; Lucene's log(1 + (N - n + 0.5) / (n + 0.5)) is positive and falls as n grows, so a common phrase never
    outweighs a rarer one (replacing only the floored idfs would weigh a phrase in 50% of the rows log 2 = 0.69,
    one in 45% of them FTS5's 0.20)."""
    odds = (rows - matched + 0.5) / (matched + 0.5)
    fts5 = math.log(odds)
    return math.log1p(odds) / (fts5 if fts5 > 0 else 1e-6)


def _best(ids: np.ndarray, rows: np.ndarray, scores: np.ndarray, limit: int) -> list[tuple[int, float]]:
    """The `limit` lowest (bm25, chunk id) pairs in order: FTS5's ORDER BY, ties by ascending id."""
    if limit <= 0 or not len(rows):
        return []
    if limit < len(rows):
        cut = np.partition(scores, limit - 1)[limit - 1]
        keep = scores <= cut  # ties at the cut all compete; the id decides among them
        rows, scores = rows[keep], scores[keep]
    order = np.lexsort((ids[rows], scores))[:limit]
    return [(int(i), float(s)) for i, s in zip(ids[rows[order]].tolist(), scores[order].tolist())]


#: The process's phrase caches (one per index file).
KEYWORD_CACHES = KeywordCaches()
