"""The order and scores of a search's candidates: fusion, temporal decay, the learned ranker, calibration.

Apart from `core.search` (which runs the legs, the floor and the cut and calls these in turn) because each
is a scoring of the candidate pool on its own, and the training scripts collect what these read.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import date

import numpy as np

from . import calibration, calibration_features, calibration_model, dates, learned, ranker_features, ranking, rerankers
from .config_types import Config
from .embedders import Embedder
from .rerankers import shortlist
from .rerankers.local import is_maxsim
from .store import Store
from .store_search import ChunkRow

#: Receives every candidate the learned ranker scored, their chunks and feature rows (`memsift train-ranker`).
Collector = Callable[[list[ranking.Candidate], dict[int, ChunkRow], np.ndarray], None]
#: Receives what calibration read and the ordered candidates it scored (bench/train_calibration.py).
CalibrationCollector = Callable[[calibration_features.Inputs, list[ranking.Candidate], dict[int, ChunkRow]], None]


def calibrate(
    store: Store,
    query: str,
    ordered: list[ranking.Candidate],
    rows: dict[int, ChunkRow],
    floor: float,
    collect: CalibrationCollector | None,
    maxsim: list[float | None],
    asked: frozenset[int] = frozenset(),
) -> tuple[list[ranking.Candidate], str | None]:
    """Each hit's score made the calibrated estimate that it is relevant (the order stays), then the floor:
    the scores never increase down the order, so the floor keeps a prefix of it. Returns the hits kept and,
    when the floor kept none, why the search abstains. `asked`: the hits a question that only names a period
    asks for by their date (`period_first` put them first), scored at least `ASKED_SCORE`."""
    inputs = calibration_features.inputs(store, query, ordered, rows, maxsim)
    if collect is not None:
        collect(inputs, ordered, rows)
    # The model's probabilities, before temporal decay (which orders, never drops); none when the fused order
    # or the blend stood.
    ranker = [c.probability for c in ordered] if ordered[0].probability is not None else None
    for c, p in zip(ordered, calibration.scores(calibration_model.default_model(), inputs, ranker)):
        c.ranker, c.score = c.score, max(p, ASKED_SCORE) if c.id in asked else p
    kept = [c for c in ordered if c.score >= floor]
    if kept:
        return kept, None
    return kept, f"the best hit scored {under(ordered[0].score, floor)}, under the floor minScore {floor:g}"


#: The least score of a daily note that a question naming only its period asks for ("what did I do last week"):
#: relevant by its date, which calibration cannot see (it reads how much of the question the notes hold as
#: text, and the date is in the file's name), so the search abstained (0.082) over the notes of that week.
ASKED_SCORE = 0.9


def period_first(
    cands: list[ranking.Candidate], rows: dict[int, ChunkRow], period: dates.Interval
) -> list[ranking.Candidate]:
    """For a question that only names a period (`dates.only_period`): the daily notes of that period first, in
    the order they had, each place keeping its score, so scores still never increase down the hits (calibration,
    when on, then estimates relevance along this order). Before, "2026-11-20" put the note of 21 November
    ("Follow-up from 2026-11-20") above that day's own note."""

    ordered = sorted(cands, key=lambda c: not period.holds(ranking.note_date(rows[c.id].path)))
    for c, score in zip(ordered, [c.score for c in cands], strict=True):
        c.score = score
    return ordered


def under(value: float, floor: float) -> str:
    """`value` with the digits that show it under `floor`: 0.99957 under minScore 1 read "scored 1.000"."""
    for digits in (3, 6):
        if float(text := f"{value:.{digits}f}") < floor:
            return text
    return repr(value)


def learned_wanted(config: Config, requested: bool | None, embedder: Embedder | None) -> bool:
    """Whether this search orders by the learned ranker: a rerank happens and it is local MaxSim (a feature of
    the model), with `rerank.method = "learned"`. Otherwise the fused order, or the MaxSim blend, as before."""
    return (
        config.rerank.method == "learned" and is_maxsim(config.rerank) and shortlist.wanted(config, requested, embedder)
    )


def order_by_learned(
    store: Store,
    config: Config,
    embedder: Embedder | None,
    query: str,
    cands: list[ranking.Candidate],
    rows: dict[int, ChunkRow],
    today: date,
    make_reranker: Callable[[], rerankers.Reranker] | None,
    collect: Collector | None,
) -> tuple[list[ranking.Candidate], str | None]:
    """Every candidate scored by MaxSim and blended (both features), then ordered by the model's probability.
    Without MaxSim scores the model has no basis: the fused order stands and the reason is returned."""
    pool = sorted(cands, key=lambda c: (-c.score, c.id))
    try:  # MaxSim per line, and (into the score cache) each candidate's MaxSim, from one product per chunk
        reranker = make_reranker() if make_reranker else rerankers.create_reranker(config.rerank, embedder)
        by_id = dict(zip((c.id for c in pool), shortlist.line_signals(store, query, pool, rows, reranker)))
    except Exception:  # the same failure reaches rerank_shortlist, which says why in `degraded`
        by_id = {}
    pool, problem = shortlist.rerank_shortlist(store, config, embedder, query, pool, rows, make_reranker=make_reranker)
    if problem:
        return pool, problem
    lines = np.array([by_id[c.id] for c in pool]) if by_id else None  # in the blend's order, as `pool` now is
    x = ranker_features.features(query, pool, rows, today, lines)
    if collect is not None:
        collect(pool, rows, x)
    for c, p in zip(pool, learned.model_for(config.rerank.rankerModel).predict(x)):
        # Temporal decay scales the model's probability as it scaled the fused score: the model was trained
        # without decay and reads `fused` among forty signals, so a note 30 half-lives old came first.
        c.probability = float(p)
        c.score = c.probability * (c.decay if c.decay is not None else 1.0)
    return sorted(pool, key=lambda c: (-c.score, c.id)), None


def fuse(cands: list[ranking.Candidate], config: Config) -> None:
    s = config.search
    ranking.FUSIONS[s.fusion].fuse(cands, s.vectorWeight, s.textWeight, s.rrfK)


def apply_decay(
    store: Store, cands: list[ranking.Candidate], rows: dict[int, ChunkRow], half_life: float, now: float
) -> None:
    """Each dated hit's score times 0.5^(age / half_life), the age in whole local days: today's date minus the
    note's (its file name's date, else its mtime's). Counted in seconds from `now`, the scores of two identical
    requests differed in the sixth decimal; a day is the resolution of a daily note's date anyway."""
    today = date.fromtimestamp(now)
    paths = {rows[c.id].path for c in cands}
    mtimes = store.file_mtimes(paths)
    for c in cands:
        path = rows[c.id].path
        if ranking.is_evergreen(path):
            continue
        dated = ranking.note_date(path)
        if dated is None:
            dated = date.fromtimestamp(mtimes[path] / 1e9) if path in mtimes else today
        c.decay = ranking.decay_factor((today - dated).days, half_life)
        c.score *= c.decay
