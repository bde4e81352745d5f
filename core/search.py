"""Hybrid search (SPEC section 5): keyword and vector legs, fusion, decay, MMR, floor, cut.

The search never fails because the embedder is missing or broken: it answers from the keyword leg and
says why in `degraded`.

The parts: `core.search_request` checks the arguments, `core.search_order` scores and orders the candidates
(fusion, decay, the learned ranker, calibration), `core.search_response` is what the search answers.
"""

from __future__ import annotations

import json
import time
import unicodedata
from collections.abc import Callable
from datetime import date
from typing import Any

import numpy as np

from . import calibration_features, dates, ranking, rerankers, threads, timefilter
from .config_schema import MODES
from .config_types import Config
from .embedders import Embedder
from .errors import SearchError
from .identity import cache_key, identity_key
from .indexer import REBUILD_HELD
from .query import STOP_WORDS, fts_phrases, query_terms, used_as_name
from .rerankers import shortlist
from .rerankers.local import is_maxsim, token_capture
from .search_order import (
    CalibrationCollector,
    Collector,
    apply_decay,
    calibrate,
    fuse,
    learned_wanted,
    order_by_learned,
    period_first,
    under,
)
from .search_request import check_request
from .search_response import Hit, SearchResponse
from .snippets import snippet
from .sources import as_typed
from .store import Store
from .store_search import ChunkRow
from .sync_vectors import VECTORS_PENDING, vectorless
from .timefilter import TimeWindow
from .timings import StageClock
from .words import counted

MAX_CANDIDATES = 200
#: The learned ranker sees at least this many candidates from each leg, whatever `maxResults`: its features
#: (ranks, normalised scores) then do not depend on k, and the first hits for k = 1 are those for k = 10.
LEARNED_FETCH = 40

NO_WORDS = "the query holds no word to search for (only punctuation or symbols)"
# Said whether or not the notes hold the word ("no", "IT"): a stop word alone is not searched for.
ONE_STOP_WORD = "the query is one stop word ({!r}), too common to tell notes apart: add words that say what to find"


def search(
    store: Store,
    config: Config,
    embedder: Embedder | None,
    query: str,
    *,
    max_results: int | None = None,
    min_score: float | None = None,
    mode: str | None = None,
    path_prefix: str | None = None,
    after: str | None = None,
    before: str | None = None,
    evergreen: bool = True,
    explain: bool = False,
    rerank: bool | None = None,
    make_reranker: Callable[[], rerankers.Reranker] | None = None,
    embedder_error: str | None = None,
    now: float | None = None,
    collect: Collector | None = None,
    collect_calibration: CalibrationCollector | None = None,
) -> SearchResponse:
    started = time.perf_counter()
    clock = StageClock()
    threads.limit_blas()  # once per process; a pool of BLAS threads is what gave searches their tail
    s = config.search
    check_request(query, max_results, min_score, after, before, path_prefix)
    now = time.time() if now is None else now
    mode = mode or s.mode
    if mode not in MODES:
        raise SearchError(f"mode: {mode!r} is not one of {', '.join(MODES)}")
    limit = max_results or s.maxResults
    floor = s.minScore if min_score is None else min_score
    # A pool that does not depend on maxResults: top-k is monotonic (SPEC section 5), the first j hits of
    # maxResults k are those of maxResults j, since every stage before the cut sees the same candidates.
    fetch = min(MAX_CANDIDATES, s.fetch)
    use_learned = learned_wanted(config, rerank, embedder)
    if use_learned:
        fetch = max(fetch, LEARNED_FETCH)

    identity = store.identity() or {}
    degraded = None
    degraded_by: list[str] = []  # which parts, for telemetry (SearchResponse.degradedBy)
    if mode != "keyword":
        pending = json.loads(store.get_meta(VECTORS_PENDING) or "null")
        degraded = _vector_problem(identity, embedder, embedder_error, store.get_meta(REBUILD_HELD), pending)
        if degraded:
            mode = "keyword"
            degraded_by.append("vector")
        elif pending:  # the vector leg runs, but cannot see the chunks a failed sync left without a vector
            lacking, refused = vectorless(store, identity_key(identity))
            degraded = (
                f"{counted(lacking, 'chunk')} {'has' if lacking == 1 else 'have'} no vector yet, the embedder failed "
                f"({pending['reason']}): keyword search alone finds those until the next sync embeds them"
                + (
                    f" ({refused} more the provider refused {'stays' if refused == 1 else 'stay'} keyword-only)"
                    if refused
                    else ""
                )
            )
            degraded_by.append("vectors_pending")

    phrases = fts_phrases(query)
    period = dates.only_period(query, date.fromtimestamp(now))

    def leg_fetch() -> int:
        """Candidates a leg fetches. A keyword- or vector-only order (asked for, or degraded to) is the leg's
        own (a rerank blends a head of fixed length), so a longer list of it has the same first hits: it
        fetches all that `maxResults` asks for (`maxResults` 100 over 100 matching notes gave the pool's 40).
        Decay, MMR and a period's notes move hits up from deeper in the pool, and hybrid's ranker and fusion
        read the whole pool: there the pool must not depend on maxResults."""
        own_order = mode != "hybrid" and not (s.decayEnabled or s.mmrEnabled or period)
        return max(fetch, limit) if own_order else fetch

    scope = _scope(store, path_prefix, timefilter.window(after, before, evergreen=evergreen, now=now))

    def keyword_leg() -> list[tuple[int, float]]:
        if not phrases:
            return []
        with clock.stage("keyword"):
            # Keyword-only: Lucene's idf, which FTS5 floors to 1e-6 in tiny indexes (every hit scored 0.000).
            # Hybrid keeps FTS5's bm25: the learned ranker and the calibration were trained on it.
            return store.keyword_search(phrases, leg_fetch(), scope, positive_idf=mode == "keyword")

    text_hits = keyword_leg() if mode != "vector" else []

    vector_hits: list[tuple[int, float]] = []
    # An index of no file has no vector to rank: the query's embedding, a paid request, would buy nothing.
    if mode != "keyword" and store.file_count():
        assert embedder is not None
        try:
            with clock.stage("embed"):
                qvec = embedder.embed_query(query)
            problem = None if _usable(qvec) else "the embedder returned a zero (or non-finite) vector for the query"
        except Exception as exc:  # the model or service failed: answer from keywords, say so
            problem = f"embedding the query failed ({type(exc).__name__}: {exc})"
        if problem:  # a zero vector has no direction: no cosine (sqlite-vec answers NULL distances)
            degraded = f"{problem}; keyword results only"
            degraded_by.append("vector")
            mode = "keyword"
            text_hits = keyword_leg()  # scored as keyword-only (a hybrid search's leg had FTS5's idf)
        if mode != "keyword":
            with clock.stage("vector"):
                vector_hits = store.vec_search(qvec, leg_fetch(), cache_key(embedder), scope)
                if period:
                    vector_hits = _with_period(store, vector_hits, qvec, fetch, cache_key(embedder), scope, period)

    with clock.stage("fusion"):
        cands = ranking.merge_legs(text_hits, vector_hits)
        if mode == "hybrid":
            # Keyword hits the KNN cut left out get their true cosine rather than 0 (+0.7 nDCG@10 on locomo-dev).
            unscored = {c.id: c for c in cands if c.vector is None}
            for cid, vec in store.vectors_for(unscored, cache_key(embedder)).items():
                unscored[cid].vector = float(vec @ qvec)
            fuse(cands, config)
        else:
            for c in cands:
                c.score = (c.text if mode == "keyword" else c.vector) or 0.0

        pool = cands  # every candidate, before the floor (the steps below make new lists)
        rows = store.chunks_by_ids(c.id for c in cands)
        if s.decayEnabled:
            apply_decay(store, cands, rows, s.halfLifeDays, now)
    # The model reads both legs: a keyword or vector search (asked for, or degraded to) gets the blend.
    learned_order = use_learned and mode == "hybrid" and bool(cands)
    # With `search.calibrate` (the default), hybrid scores are calibrated after the order is made and the floor
    # acts on them. Otherwise, and in keyword- or vector-only search, the floor acts on each hit's retrieval
    # scores: a hit the keyword leg found is kept, a vector-only hit needs cosine >= minScore.
    calibrated = mode == "hybrid" and s.calibrate
    if learned_order:
        with clock.stage("rerank"):  # the learned ranker's features include the MaxSim score
            cands, problem = order_by_learned(
                store, config, embedder, query, cands, rows, date.fromtimestamp(now), make_reranker, collect
            )
        if not calibrated:  # after the model ordered the whole pool, so the order does not depend on the floor
            cands = [c for c in cands if ranking.passes_floor(c, floor)]
        if problem:
            degraded = f"{degraded}; {problem}" if degraded else problem
            degraded_by.append("rerank")
    else:
        with clock.stage("fusion"):
            kept_by_floor = (c for c in cands if calibrated or ranking.passes_floor(c, floor))
            cands = sorted(kept_by_floor, key=lambda c: (-c.score, c.id))
    if cands and not learned_order and shortlist.wanted(config, rerank, embedder):
        with clock.stage("rerank"):
            head, problem = shortlist.rerank_shortlist(
                store, config, embedder, query, cands[: config.rerank.candidates], rows, make_reranker=make_reranker
            )
        cands = head + cands[config.rerank.candidates :]
        if problem:
            degraded = f"{degraded}; {problem}" if degraded else problem
            degraded_by.append("rerank")
    with clock.stage("shaping"):
        # MMR last (SPEC puts it before the rerank): a reranker scores near-duplicates alike and would undo it.
        reach = max(limit, calibration_features.HEAD)  # what calibration reads does not depend on maxResults
        if s.mmrEnabled:
            cands = ranking.mmr_order(cands, {c.id: rows[c.id].text for c in cands}, s.mmrLambda, reach)
        if period:  # before calibration, which then estimates relevance along this order
            cands = period_first(cands, rows, period)
        abstained = None
        if calibrated and cands and not phrases and floor > 0:
            # Punctuation or symbols alone ("—", "##", an emoji): nothing in the question to match, and
            # calibration, which reads how much of the question the notes hold, read none of it as all held
            # ("—" scored 0.82 over examples/workspace). `--min-score 0` still lists what the vectors found.
            cands, abstained = [], NO_WORDS
        elif calibrated and cands and floor > 0 and len(terms := query_terms(query)) == 1 and terms[0] in STOP_WORDS:
            # One stop word ("the", "and"): every note holds it, so calibration read it as fully held ("the"
            # scored 0.95 over examples/workspace). A question made of stop words ("who am I") is searched. One
            # typed as a name ("IT", "US", "Will") is searched among the hits whose notes write it so.
            cands = [c for c in cands if used_as_name(query, rows[c.id].text)]
            if not cands:
                abstained = ONE_STOP_WORD.format(terms[0])
        if calibrated and cands:
            head = cands[:reach]
            maxsim = [c.rerank if is_maxsim(config.rerank) else None for c in head]
            if maxsim[0] is None and token_capture(config, embedder) is not None:
                # Not reranked (`rerank: false`): calibration still reads the head's MaxSim, from the token bits
                # the index holds (the hits are not reranked by it). Without it "zebra" over four notes kept them
                # all at 0.52-0.68 (0.16 with it); should it fail, calibration reads MaxSim as unknown.
                scores, _ = shortlist.score_shortlist(
                    store, config, embedder, query, head, rows, make_reranker=make_reranker
                )
                maxsim = scores or maxsim
            asked = frozenset(c.id for c in head if period and period.holds(ranking.note_date(rows[c.id].path)))
            cands, abstained = calibrate(store, query, head, rows, floor, collect_calibration, maxsim, asked)
        if pool and not cands and not calibrated:  # the retrieval floor dropped them all: say so, as hybrid does
            best_cosine = max((c.vector for c in pool if c.vector is not None), default=0.0)
            abstained = (
                f"the best hit's cosine was {under(best_cosine, floor)}, under the floor minScore {floor:g} "
                "(a hit found by meaning alone needs cosine >= minScore)"
            )
        kept = cands[:limit]
        hits = [_hit(rows[c.id], c, query, s.snippetChars, s.citations, explain) for c in kept]
    return SearchResponse(
        results=hits,
        mode=mode,
        provider=identity.get("provider") or (embedder.provider if embedder else "none"),
        model=identity.get("model") or (embedder.model if embedder else None),
        tookMs=round((time.perf_counter() - started) * 1000, 2),
        degraded=degraded,
        degradedBy=tuple(degraded_by),
        timings=clock.ms(),
        explain=explain,
        empty=None if hits else "below_floor" if pool else "no_match",
        abstained=abstained,
    )


def _usable(vector: np.ndarray) -> bool:
    """A query vector the vector leg can rank by: finite and not all zeros."""
    return bool(np.isfinite(vector).all() and np.any(vector))


def _with_period(
    store: Store,
    hits: list[tuple[int, float]],
    qvec: np.ndarray,
    fetch: int,
    key: tuple[str, str, str],
    scope: list[str] | None,
    period: dates.Interval,
) -> list[tuple[int, float]]:
    """The vector leg's hits and those of the period's daily notes, for a question that only names a period
    ("what did I do two days ago"): its words say nothing of what the notes hold, so the day's note was left out
    of the nearest `fetch` chunks as often as not, and `period_first` had nothing to put first."""
    paths = [p for p in (store.file_mtimes() if scope is None else scope) if period.holds(ranking.note_date(p))]
    if not paths:
        return hits
    found = dict(hits) | dict(store.vec_search(qvec, fetch, key, paths))  # a chunk's cosine is the same in both
    return sorted(found.items(), key=lambda hit: (-hit[1], hit[0]))


def _scope(store: Store, path_prefix: str | None, window: TimeWindow | None) -> list[str] | None:
    """The files a filtered search may answer from (None: every file). Both legs take it inside their
    candidate selection, so filtering never leaves a search short of hits that exist."""
    # `--path-prefix ./memory/`, as a shell completes it; `memory/café` in either Unicode normal form, as `get`
    # takes a path (Linux keeps names byte for byte: an NFD prefix matched no NFC name, "No matches.")
    path_prefix = path_prefix and unicodedata.normalize("NFC", as_typed(path_prefix))
    if path_prefix == ".":  # the workspace itself, as `find .` reads it (it matched no path: "No matches.")
        path_prefix = ""
    if not path_prefix and window is None:
        return None
    return [
        path
        for path, mtime_ns in store.file_mtimes().items()
        if (not path_prefix or unicodedata.normalize("NFC", path).startswith(path_prefix))
        and (window is None or window.keeps(path, mtime_ns))
    ]


def _vector_problem(
    identity: dict[str, Any],
    embedder: Embedder | None,
    error: str | None,
    held: str | None = None,
    pending: dict[str, Any] | None = None,
) -> str | None:
    """Why the vector leg cannot run, or None when it can; `held`: the record of a rebuild waiting for --force;
    `pending`: the record of the embedder failing a sync ({reason, at})."""
    if embedder is None:
        return (
            f"no embedder ({error}); keyword results only" if error else "no embedder configured; keyword results only"
        )
    if not identity.get("dims"):
        if pending:  # a first index while the provider was down (a provisional identity)
            return (
                f"no chunk has a vector yet, the embedder failed ({pending['reason']}); the next sync embeds them; "
                "keyword results only"
            )
        return "the index holds no vectors (built without an embedder); run `memsift index`; keyword results only"
    if identity_key(identity) != cache_key(embedder):
        built = f"the index was built with {identity.get('provider')}/{identity.get('model')}, " + (
            f"not {embedder.provider}/{embedder.model}"
            if (identity.get("provider"), identity.get("model")) != (embedder.provider, embedder.model)
            else f"under other settings ({_changed_settings(identity.get('fingerprint'), embedder.fingerprint)})"
        )
        if held:
            record = json.loads(held)
            return f"{built}; {record['reason']}, which would embed: {record['summary']}; keyword results only"
        return f"{built}; run `memsift index`; keyword results only"
    return None


def _changed_settings(built: str | None, now: str) -> str:
    """What differs between two fingerprints of one provider and model (a hosted embedder's are JSON objects:
    baseUrl, dims, prefixes, headers): "the index was built with openai/m, not openai/m" told the user nothing."""
    try:
        old, new = json.loads(built or "{}"), json.loads(now)
    except ValueError:
        return "fingerprint"
    if not (isinstance(old, dict) and isinstance(new, dict)):
        return "fingerprint"
    return ", ".join(sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k))) or "fingerprint"


def _hit(row: ChunkRow, c: ranking.Candidate, query: str, snippet_chars: int, citations: bool, explain: bool) -> Hit:
    scores = None
    if explain:
        scores = {
            k: round(v, 6)
            for k, v in (
                ("vector", c.vector),
                ("text", c.text),
                ("decay", c.decay),
                ("fused", c.fused),
                ("rerank", c.rerank),
                ("ranker", c.ranker),
            )
            if v is not None
        }
    return Hit(
        path=row.path,
        startLine=row.start_line,
        endLine=row.end_line,
        score=round(c.score, 6),
        snippet=snippet(row.text, snippet_chars, query),
        source=row.source,
        citation=f"{row.path}#L{row.start_line}-L{row.end_line}" if citations else None,
        scores=scores,
    )
