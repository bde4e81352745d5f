"""Calibrated scores (issue 18): a hit's `score` is an estimate that it is relevant, comparable across queries
and workspaces, so that one floor (`search.minScore`) means the same everywhere and a search about something
the workspace does not hold can abstain.

The rankers order hits by scores that only compare within one question (min-max fusion puts the best hit of
any question near 1). Calibration runs after the ranker has ordered the hits and never changes the order. Two
small logistic models (`calibration.json`, numpy at inference) read raw signals the fusion normalised away:
the question model estimates whether the workspace holds an answer at all (how much of the question's content
the workspace holds anywhere, whether words written as names are missing, the head's best raw cosine, BM25 and
MaxSim), the hit model how strong each hit is when it does (its own cosine, BM25, share of the question,
rank). A hit scores the first estimate times its evidence relative to the first hit's (3/4 to 1), made
non-increasing down the list, so a floor cuts a prefix of the order and top-k stays monotonic. A hit without
the identifier the question names, past the hits that hold it, scores as an absent identifier does
(`past_identifier`).

The models and the shipped file are core/calibration_model.py, what they read core/calibration_features.py
(with the size weighting that makes one model fit four notes and ten thousand). The question model is trained
to a prior (0.85 of questions answerable), which puts SPEC's default floor 0.35 where it abstains on absent
topics and keeps answers (bench/README.md, "Issue 18"). bench/train_calibration.py trains the shipped file.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .calibration_features import HEAD, QUESTION_FEATURES, Inputs, features
from .calibration_model import Calibrator
from .calibration_words import identifiers, words_in

#: A question that names an identifier the workspace holds nowhere ("PR #42" beside notes about PR #17,
#: ERR_CERT_EXPIRED beside ERR_SSL_PROTOCOL, `customer_id`) asks about something absent however closely its
#: other words match, and in a few notes the model cannot tell that from a paraphrase (it scored
#: ERR_CONNECTION_REFUSED 0.995 over examples/workspace): its estimate is multiplied by this, under the
#: default floor whatever the match. Of 2,011 answerable training questions, 3 name such an identifier
#: (cosqa web: "s3fs", "condition1", "2to"); bench/README.md, "Issue 18".
ABSENT_IDENTIFIER = 0.25
#: A hit the learned ranker rates under this share of the first hit's probability is no answer (`outranked`).
OUTRANKED = 1e-3
#: Without the learned ranker, a hit below the first that only the vector leg found, with a cosine under this,
#: is no answer (`far_by_meaning`): the floor a meaning-only hit needs in keyword- or vector-only search.
FAR_COSINE = 0.35


def scores(model: Calibrator, inp: Inputs, ranker: Sequence[float] | None = None) -> list[float]:
    """The calibrated score of each hit, non-increasing down the order: the estimate that the workspace holds
    an answer, times a hit's own evidence relative to the first hit's (from 3/4 to 1: the ranker chose the
    order, and a floor should drop questions nothing answers, not the lower hits of one that has an answer;
    a factor from 1/2 cost 0.3 points more of locomo-dev R@10 at the same abstention, bench/README.md).
    `ranker`: the learned ranker's probability of each hit, when it made the order (`outranked`); without it
    (`rerank: false`, the blend), `far_by_meaning` says which hits are no answer."""
    if not inp.texts:
        return []
    answerable, relative = estimates(model, inp)
    raw = answerable * (3.0 + relative) / 4.0 * np.where(past_identifier(inp), ABSENT_IDENTIFIER, 1.0)
    junk = outranked(ranker) if ranker is not None else far_by_meaning(inp)
    raw = raw * np.where(junk, ABSENT_IDENTIFIER, 1.0)
    return [float(v) for v in np.minimum.accumulate(raw)]


def far_by_meaning(inp: Inputs) -> np.ndarray:
    """Per hit: whether, below the first, only the vector leg found it (no query word in it) and its cosine is
    under `FAR_COSINE`. Without the learned ranker nothing else rates a hit against the first, and the 3/4 lift
    kept such hits at 3/4 of a confident first hit: `rerank: false`, "zeppelin" over examples/workspace and a
    note on the Zeppelin museum answered the museum 1.000 and the four other notes (cosine 0.005-0.09, no word
    of the query) 0.75-0.77; the learned ranker put them under the floor. On locomo-dev (`rerank: false`, floor
    0.35) 6 of the 382 meaning-only hits at ranks 2-10 are relevant (bench/README.md, "Meaning-only hits")."""
    far = np.array(
        [
            bm25 is None and (cosine if cosine is not None else 0.0) < FAR_COSINE
            for bm25, cosine in zip(inp.bm25, inp.vector)
        ],
        dtype=bool,
    )
    far[:1] = False
    return far


def outranked(ranker: Sequence[float]) -> np.ndarray:
    """Per hit: whether the learned ranker rates it under `OUTRANKED` of the first hit's probability. Such a
    hit is no answer however confident the question (over examples/workspace, "why did the deploy fail": the
    note that says why 0.79, the three others 4e-5 to 7e-6, yet each scored 0.76-0.80 under the 3/4 lift), so
    it scores as an absent identifier does, under the default floor. In CV on locomo-dev (bench/README.md,
    "Outranked hits") 0.3% of the relevant hits at ranks 2-6 fall under it against 5% of the junk (40% on
    cosqa-dev's identifiers), for 0.06 point of R@10."""
    p = np.asarray(ranker, dtype=np.float64)
    return p < OUTRANKED * max(float(p[0]), 1e-300) if len(p) else np.zeros(0, dtype=bool)


def past_identifier(inp: Inputs) -> np.ndarray:
    """Per hit: whether it comes after the last hit of the head that holds an identifier the question names
    and the workspace holds, and holds none itself. "ERR_SSL_PROTOCOL" over four notes: the note that has it
    is the answer; the three that do not are no answer however confident the question, so they score as an
    absent identifier does (the lift of 3/4 to 1 is for a question whose answer may sit lower; here the
    answer is known by its word). Only past the last holder, so a holder below a note without it is never
    cut by the floor; only within the head, so the first hits do not depend on maxResults."""
    named = identifiers(inp.query) & {t for t, df in zip(inp.terms, inp.df) if df > 0}
    lacking = np.zeros(len(inp.texts), dtype=bool)
    if not named:
        return lacking
    holds = [bool(words_in(named, text.lower())) for text in inp.texts]
    last = max((i for i, h in enumerate(holds[:HEAD]) if h), default=None)
    if last is None:
        return lacking
    lacking[last + 1 :] = [not h for h in holds[last + 1 :]]
    return lacking


def estimates(model: Calibrator, inp: Inputs) -> tuple[float, np.ndarray]:
    """(the estimate that the workspace holds an answer, each hit's evidence relative to the first hit's, at
    most 1): what `scores` combines (bench/hit_rule.py measures other ways to combine them)."""
    x = features(inp)
    answerable = float(model.question.predict(x[:1, : len(QUESTION_FEATURES)])[0])
    if identifiers(inp.query) & {t for t, df in zip(inp.terms, inp.df) if df == 0}:
        answerable *= ABSENT_IDENTIFIER
    p = model.hit.predict(x)
    return answerable, np.minimum(1.0, p / max(float(p[0]), 1e-12))
