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

What the workspace's statistics say depends on its size: in four notes, a word the notes do not use is a
paraphrase as often as an absence, and the best match of four chunks is on another scale than of a thousand.
So the question features are weighted by `size_weight` (0 up to 20 chunks, 1 from 500) and repeated times
1 - size_weight (`MIRRORED`): the model has one set of weights for large workspaces and one for small, mixed
by size. In a large workspace, missing words and the head's MaxSim tell a known person with something absent
("What cryptocurrency did Caroline invest in?") from a question about her; in a small one, how closely the
best hits match (MaxSim and cosine) tells a paraphrase from an off-topic question in plain words; names and
identifiers found nowhere ("PR #17") count at every size. The question model is trained to a prior (0.85 of
questions answerable), which puts SPEC's default floor 0.35 where it abstains on absent topics and keeps
answers (bench/README.md, "Issue 18").

Every question feature is taken from the first `HEAD` hits of the order, whatever `maxResults`: the score of
the first hit is the same for k = 1 and k = 10. bench/train_calibration.py trains the shipped file.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from . import logistic
from .errors import ConfigError
from .query import is_hex_prefix, query_terms, term_match
from .ranking import Candidate
from .store import Store
from .store_search import ChunkRow

#: The shipped model: trained by bench/train_calibration.py on locomo-dev and cosqa-dev.
DEFAULT_MODEL = Path(__file__).with_name("calibration.json")
#: The hits whose signals describe the question (the order's head), whatever maxResults.
HEAD = 10
#: Workspace sizes (chunks) between which the question's corpus statistics come to count: not at all up to
#: SMALL, fully from LARGE, on a log scale between (see `size_weight`).
SMALL, LARGE = 20, 500
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
_QUANTITY = re.compile(r"\d+(?:st|nd|rd|th|s|am|pm|k|m|h|km|kg|min)?")
# JIRA-4412, CVE-2024-3094: their numbers of 3 digits or more (UTF-8, COVID-19 and MP-3 name no ticket, and
# notes may write them utf8 or covid: a number the workspace lacks would read as something absent)
_TICKET = re.compile(r"\b[A-Z][A-Z0-9]+((?:-\d{3,})+)\b")

QUESTION_BASE = (
    # the question: does the workspace hold what it asks about?
    "q_cover",  # share of the content terms found anywhere in the workspace
    "q_cover_idf",  # the same, idf-weighted (a term found nowhere weighs as a term found once)
    "q_missing",  # how many content terms are found nowhere
    "q_terms",  # how many content terms (capped)
    "q_top_vector",  # best cosine of the head
    "q_top3_vector",  # mean of the three best cosines of the head
    "q_top_text",  # best raw BM25 of the head, r / (1 + r)
    "q_best_hit_cover",  # best idf-weighted share of the question's terms held by one hit of the head
    "q_marked",  # terms written as names are (a capital inside the question, a digit, `_`): PR, Kubernetes, 17
    "q_marked_missing",  # such terms found nowhere in the workspace
    "q_top_maxsim",  # best MaxSim of the head (late interaction over the local model's token states)
    "q_inference",  # the question asks for an inference: "Would Caroline enjoy Dr. Seuss?", "What might ...?"
    "q_inference_marked_missing",  # q_inference times q_marked_missing (see `INFERENCE`)
)
#: The question features read from corpus statistics or from the head's scores, multiplied by `size_weight`:
#: in a workspace of a few notes, a word the notes do not use says little (a paraphrase: "what database" over
#: "PostgreSQL 15"), and the best match of four chunks is on another scale than of a thousand. The counts of
#: names and identifiers found nowhere are not gated: "PR #17" absent from four notes is absent.
GATED = frozenset(
    (
        "q_cover",
        "q_cover_idf",
        "q_missing",
        "q_top_vector",
        "q_top3_vector",
        "q_top_text",
        "q_best_hit_cover",
        "q_top_maxsim",
    )
)
#: Gated by size too, with no weights of their own for a small workspace: over a few notes the model cannot
#: tell an inference about a person the notes know from a question about something they lack ("Would Dana
#: likely enjoy a sailing trip to Greece?" over examples/workspace's four notes scored 0.875 with them ungated).
LARGE_ONLY = frozenset(("q_inference", "q_inference_marked_missing"))
#: The question features repeated times 1 - size_weight (`q_small_<name>`): their weights for a small
#: workspace, where a paraphrase and an off-topic question in plain words both miss words, and how closely the
#: best hits match tells them apart (trained on bench/calibration's tiny workspaces).
MIRRORED = tuple(n for n in QUESTION_BASE if n in GATED) + ("q_marked_missing",)
QUESTION_FEATURES = QUESTION_BASE + ("q_size",) + tuple(f"q_small_{n[2:]}" for n in MIRRORED)
FEATURES = QUESTION_FEATURES + (
    # the hit
    "vector",
    "text",
    "has_text",
    "hit_cover",
    "log_rank",
    "vector_gap",  # its cosine below the head's best
)

_WORD = re.compile(r"\w+", re.UNICODE)
#: Words that make a question ask for an inference from what the notes say rather than for a fact they
#: state. Such a question names what it asks about ("Would Melanie likely enjoy the song "The Four Seasons" by
#: Vivaldi?") without the notes having to: what they say of her taste answers it. Without the two features
#: that read these words, names missing from the workspace read as an absent topic, and locomo-dev's 44
#: open-domain questions (29 of them of this kind) lost 0.165 of their R@10 at the default floor; 0.063 with
#: them (bench/README.md, "Issue 18").
INFERENCE = re.compile(r"\b(?:would|likely|might|could|probably|possibly|perhaps|maybe)\b", re.IGNORECASE)


@dataclass(frozen=True)
class Inputs:
    """Everything the features read, for one question: its content terms with their document frequency in
    the workspace, the workspace's chunk count, and per hit of the head (in ranked order) its cosine, raw
    BM25 (r >= 0, or None), text and MaxSim (None: not scored by the local MaxSim reranker).
    bench/train_calibration.py keeps these to fit the model offline."""

    query: str
    terms: tuple[str, ...]
    df: tuple[int, ...]
    chunks: int
    vector: tuple[float | None, ...]
    bm25: tuple[float | None, ...]
    texts: tuple[str, ...]
    maxsim: tuple[float | None, ...] = ()


@dataclass(frozen=True)
class Model:
    """A logistic regression over standardised features."""

    features: tuple[str, ...]
    mean: np.ndarray
    std: np.ndarray
    weights: np.ndarray
    bias: float

    def predict(self, x: np.ndarray) -> np.ndarray:
        """A feature that is unknown (NaN: a search without MaxSim) reads as the training mean: it does not count."""
        z = self.bias + np.nan_to_num((x - self.mean) / self.std, nan=0.0) @ self.weights
        return 1.0 / (1.0 + np.exp(-np.clip(z, -40, 40)))

    def to_dict(self) -> dict:
        return {
            "features": list(self.features),
            "mean": [round(float(v), 8) for v in self.mean],
            "std": [round(float(v), 8) for v in self.std],
            "weights": [round(float(v), 8) for v in self.weights],
            "bias": round(float(self.bias), 8),
        }

    @staticmethod
    def from_dict(raw: dict) -> Model:
        return Model(
            tuple(raw["features"]),
            np.array(raw["mean"], dtype=np.float64),
            np.array(raw["std"], dtype=np.float64),
            np.array(raw["weights"], dtype=np.float64),
            float(raw["bias"]),
        )


@dataclass(frozen=True)
class Calibrator:
    """Two logistic models: `question` estimates whether the workspace holds an answer at all (from the
    question's features), `hit` how likely each hit is relevant when it does (from every feature)."""

    question: Model
    hit: Model
    meta: dict

    @property
    def fingerprint(self) -> str:
        """Changes whenever the calibration would score anything differently: part of the search identity."""
        return hashlib.sha256(self.to_json().encode()).hexdigest()[:16]

    def to_json(self) -> str:
        doc = {"kind": "calibration", "question": self.question.to_dict(), "hit": self.hit.to_dict(), "meta": self.meta}
        return json.dumps(doc, sort_keys=True)


def load_model(path: Path) -> Calibrator:
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        model = Calibrator(Model.from_dict(raw["question"]), Model.from_dict(raw["hit"]), dict(raw.get("meta") or {}))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"calibration model {path}: cannot be read ({type(exc).__name__}: {exc})") from None
    if model.question.features != QUESTION_FEATURES or model.hit.features != FEATURES:
        raise ConfigError(f"calibration model {path}: its features are not this version's; retrain it")
    return model


@lru_cache(maxsize=1)
def default_model() -> Calibrator:
    return load_model(DEFAULT_MODEL)


def fit(
    x: np.ndarray,
    y: np.ndarray,
    features: tuple[str, ...],
    *,
    l2: float = 1.0,
    iters: int = 60,
    weight: np.ndarray | None = None,
) -> Model:
    """L2-regularised logistic regression (core/logistic.py); `weight` per row (default 1) sets what share of
    the rows the fit sees as positive, hence its prior."""
    return Model(features, *logistic.newton(x, y, l2=l2, iters=iters, weight=weight))


def size_weight(chunks: int) -> float:
    """0 up to SMALL chunks, 1 from LARGE, linear in log(chunks) between."""
    if chunks <= SMALL:
        return 0.0
    return min(1.0, math.log(chunks / SMALL) / math.log(LARGE / SMALL))


def inputs(
    store: Store, query: str, head: list[Candidate], rows: dict[int, ChunkRow], maxsim: Sequence[float | None]
) -> Inputs:
    """Read what the features need from the index: each content term's document frequency (core.store_search's
    `phrase_counts`) and the chunk count.
    `maxsim`: each hit's MaxSim, None where unknown (another reranker's scores are on another scale)."""
    terms = tuple(query_terms(query))
    df = tuple(store.phrase_counts([term_match(t) for t in terms]))
    (chunks,) = store.conn.execute("SELECT count(*) FROM chunks").fetchone()
    return Inputs(
        query,
        terms,
        df,
        int(chunks),
        tuple(c.vector for c in head),
        tuple(c.bm25 for c in head),
        tuple(rows[c.id].text for c in head),
        tuple(maxsim),
    )


def features(inp: Inputs) -> np.ndarray:
    """One row per hit, in `FEATURES` order; the question's features read the first `HEAD` hits only."""
    n = len(inp.texts)
    idf = np.array([math.log((inp.chunks + 1) / (d + 0.5)) for d in inp.df]) if inp.terms else np.zeros(0)
    present = np.array([d > 0 for d in inp.df], dtype=bool)
    total_idf = float(idf.sum()) or 1.0
    vec = np.array([v if v is not None else 0.0 for v in inp.vector], dtype=np.float64)
    text = np.array([b / (1 + b) if b is not None else 0.0 for b in inp.bm25], dtype=np.float64)
    cover = np.array([_hit_cover(inp.terms, idf, total_idf, t) for t in inp.texts], dtype=np.float64)
    head_vec, head_text, head_cover = vec[:HEAD], text[:HEAD], cover[:HEAD]
    top_vec = float(head_vec.max()) if n else 0.0
    top3 = float(np.sort(head_vec)[::-1][:3].mean()) if n else 0.0
    q = [
        float(present.mean()) if inp.terms else 0.0,
        float(idf[present].sum() / total_idf) if inp.terms else 0.0,
        float((~present).sum()),
        float(min(len(inp.terms), 12)),
        top_vec,
        top3,
        float(head_text.max()) if n else 0.0,
        float(head_cover.max()) if n else 0.0,
    ]
    marked = _marked(inp.query)
    is_marked = np.array([t in marked for t in inp.terms], dtype=bool)
    q += [float(is_marked.sum()), float((is_marked & ~present).sum())]
    known = [m for m in inp.maxsim[:HEAD] if m is not None]
    q.append(max(known) if known else math.nan)
    inference = 1.0 if INFERENCE.search(inp.query) else 0.0
    q += [inference, inference * q[QUESTION_BASE.index("q_marked_missing")]]
    raw = dict(zip(QUESTION_BASE, q))
    gate = size_weight(inp.chunks)
    q = (
        [v * gate if name in GATED or name in LARGE_ONLY else v for name, v in raw.items()]
        + [gate]
        + [raw[n] * (1 - gate) for n in MIRRORED]
    )
    x = np.zeros((n, len(FEATURES)))
    x[:, : len(q)] = q
    x[:, len(q) + 0] = vec
    x[:, len(q) + 1] = text
    x[:, len(q) + 2] = [b is not None for b in inp.bm25]
    x[:, len(q) + 3] = cover
    x[:, len(q) + 4] = np.log1p(np.arange(n))
    x[:, len(q) + 5] = top_vec - vec
    return x


def identifiers(query: str) -> set[str]:
    """The question's words shaped as identifiers, lower-cased: with `_` inside, letters and digits mixed (not
    a quantity such as 15th, 10am or 5k), a lower-case letter then a capital (macOS, getUser), or a number
    after `#` (PR #42) or of 3 digits or more after an upper-case key and a hyphen (JIRA-4412, CVE-2024-3094: a
    ticket's numbers, the words the keyword leg matches; `top-10`, `covid-19` and UTF-8 are no tickets)."""
    numbers = set(re.findall(r"#(\d+)", query))
    numbers |= {n for m in _TICKET.finditer(query) for n in re.findall(r"\d+", m[1])}
    return {
        w.lower()
        for w in _WORD.findall(query)
        if "_" in w.strip("_")
        or w in numbers
        or (any(c.isdigit() for c in w) and any(c.isalpha() for c in w) and not _QUANTITY.fullmatch(w.lower()))
        or re.search(r"[a-z][A-Z]", w)
    }


def _marked(query: str) -> set[str]:
    """The question's words written as names, identifiers or numbers are: with a digit or `_`, or with a
    capital letter anywhere but in the first letter of the question."""
    words = _WORD.findall(query)
    return {
        w.lower()
        for i, w in enumerate(words)
        if any(ch.isdigit() or ch == "_" for ch in w) or any(ch.isupper() for ch in (w[1:] if i == 0 else w))
    }


def _hit_cover(terms: tuple[str, ...], idf: np.ndarray, total: float, text: str) -> float:
    """The idf-weighted share of the question's terms the hit's text holds (words; CJK bigrams as substrings)."""
    if not terms:
        return 0.0
    lowered = text.lower()
    words = _words_in(terms, lowered)
    held = [t in words if t.isascii() else t in lowered for t in terms]
    return float(idf[np.array(held, dtype=bool)].sum() / total)


def _words_in(terms: Iterable[str], lowered: str) -> set[str]:
    """Which of `terms` the lower-case text holds as words (its `\\w+` tokens), found by `str.find` and a look at
    the characters around each occurrence, twice over 10 hits a search: splitting each text into all its words
    (as before), or one regular expression of the terms between word boundaries, made `scores` 1.3-1.6 ms of
    CPU at 10,000 chunks, against 0.6 ms this way. A hex id's prefix (core.query `is_hex_prefix`) is held by the
    words it begins, as the keyword leg matches it."""
    return {t for t in terms if _WORD.fullmatch(t) and _holds_word(lowered, t, is_hex_prefix(t))}


def _holds_word(text: str, word: str, prefix: bool = False) -> bool:
    """Whether `word` (word characters only) occurs in `text` with no word character either side (with `prefix`,
    before it only). A term holding another character (a combining mark left by lower(): "İ" gives "i̇") is no
    `\\w+` token of any text: `_words_in` leaves it out."""
    at = text.find(word)
    while at >= 0:
        end = at + len(word)
        after = prefix or end == len(text) or not _is_word_char(text[end])
        if (at == 0 or not _is_word_char(text[at - 1])) and after:
            return True
        at = text.find(word, at + 1)
    return False


def _is_word_char(ch: str) -> bool:
    """What `\\w` matches in a str pattern: alphanumeric (`str.isalnum`) or the underscore."""
    return ch.isalnum() or ch == "_"


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
    holds = [bool(_words_in(named, text.lower())) for text in inp.texts]
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
