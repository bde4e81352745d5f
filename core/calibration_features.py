"""The signals calibration reads (core/calibration.py): `Inputs`, what one question's search gives it, and
`features`, the rows its two logistic models score.

The question features say whether the workspace holds what the question asks about (how much of its content
the workspace holds anywhere, whether words written as names are missing, the head's best raw cosine, BM25 and
MaxSim); the hit features how strong each hit is (its own cosine, BM25, share of the question, rank).

What the workspace's statistics say depends on its size: in four notes, a word the notes do not use is a
paraphrase as often as an absence, and the best match of four chunks is on another scale than of a thousand.
So the question features are weighted by `size_weight` (0 up to 20 chunks, 1 from 500) and repeated times
1 - size_weight (`MIRRORED`): the model has one set of weights for large workspaces and one for small, mixed
by size. In a large workspace, missing words and the head's MaxSim tell a known person with something absent
("What cryptocurrency did Caroline invest in?") from a question about her; in a small one, how closely the
best hits match (MaxSim and cosine) tells a paraphrase from an off-topic question in plain words; names and
identifiers found nowhere ("PR #17") count at every size.

Every question feature is taken from the first `HEAD` hits of the order, whatever `maxResults`: the score of
the first hit is the same for k = 1 and k = 10.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .calibration_words import marked, words_in
from .query import query_terms, term_match
from .ranking import Candidate
from .store import Store
from .store_search import ChunkRow

#: The hits whose signals describe the question (the order's head), whatever maxResults.
HEAD = 10
#: Workspace sizes (chunks) between which the question's corpus statistics come to count: not at all up to
#: SMALL, fully from LARGE, on a log scale between (see `size_weight`).
SMALL, LARGE = 20, 500
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
    named = marked(inp.query)
    is_marked = np.array([t in named for t in inp.terms], dtype=bool)
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


def _hit_cover(terms: tuple[str, ...], idf: np.ndarray, total: float, text: str) -> float:
    """The idf-weighted share of the question's terms the hit's text holds (words; CJK bigrams as substrings)."""
    if not terms:
        return 0.0
    lowered = text.lower()
    words = words_in(terms, lowered)
    held = [t in words if t.isascii() else t in lowered for t in terms]
    return float(idf[np.array(held, dtype=bool)].sum() / total)
