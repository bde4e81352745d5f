"""The learned ranker's signals (issue 18): one row of `FEATURES` per fused candidate, read from the
candidates' scores, their chunks' text and the question.

The hand-tuned pipeline (min-max fusion, then a MaxSim blend) sits on a plateau: its weights move nDCG by less
than half a point. What moves it are signals it never looks at: the date the question names against the
note's date, which lines of a chunk hold the query's terms and who wrote them, how the other chunks of the same
note scored, MaxSim per line of the chunk (the stored token bits carry each token's line), and the shape of
the query (an identifier or a sentence), so one model serves chat logs and code. core.learned combines them.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from dataclasses import dataclass
from datetime import date
from functools import lru_cache

import numpy as np

from . import dates, ranking
from .query import STOP_WORDS
from .store_search import ChunkRow

#: Signals whose best value over the pool is a feature too.
_POOLED = (
    "vector",
    "text",
    "maxsim",
    "line_best",
    "window_best",
    "coverage",
    "attr_best",
    "date_affinity",
    "maxsim_line_best",
)

FEATURES = (
    # what the pipeline already computes
    "vector",
    "text",
    "bm25_norm",
    "vector_norm",
    "has_text",
    "fused",
    "fused_gap",
    "rr_fused",
    "rr_text",
    "rr_vector",
    "maxsim",
    "maxsim_norm",
    "maxsim_gap",
    "rr_maxsim",
    "blend",
    # the question's period against the note's date
    "has_period",
    "date_affinity",
    # line-level evidence: idf-weighted share of the query's terms on one line, a 3-line window, the chunk
    "line_best",
    "line_second",
    "window_best",
    "coverage",
    "coverage_plain",
    # lines written by someone the question names (`Name:`, `user:`/`assistant:`)
    "attr_best",
    "attr_any",
    # the other chunks of the same note
    "file_best_fused",
    "file_best_maxsim",
    "file_rr",
    "file_count",
    # MaxSim per line of the chunk, from the token lines stored with the token bits (maxsim.LINE_SIGNALS)
    "maxsim_line_best",
    "maxsim_line_second",
    "maxsim_window_best",
    # the shape of the query, the same for every candidate: an identifier or a sentence
    "query_ident",
    "query_code_share",
    "query_words",
    # the best of some signals over the whole pool, the same for every candidate of a question: whether the
    # memory holds an answer at all, so that probabilities compare across questions
    *(f"pool_{name}" for name in _POOLED),
)

_WORD = re.compile(r"\w+", re.UNICODE)
# A line that says who wrote it: "Caroline: ...", "- **user**: ...", "assistant: ...".
_SPEAKER = re.compile(r"^\s*(?:[-*]\s+)?\**([^\W\d_][\w.' -]{0,40}?)\**\s*:\s", re.UNICODE)
# A word that reads as code: snake_case, camelCase, dotted.path, call(), or letters mixed with digits.
_CODE_WORD = re.compile(r"_|[a-z][A-Z]|\w\.\w|\(|[A-Za-z]\d|\d[A-Za-z]")
_FIRST_PERSON = {"i", "me", "my", "mine", "we", "our", "us"}
_SECOND_PERSON = {"you", "your", "yours", "assistant"}


def features(
    query: str,
    cands: list[ranking.Candidate],
    rows: dict[int, ChunkRow],
    today: date,
    line_maxsim: np.ndarray | None = None,
) -> np.ndarray:
    """One row of FEATURES per candidate. Each candidate needs `fused` (the retrieval score after decay),
    `rerank` (MaxSim) and `score` (the MaxSim blend), as rerankers.rerank_shortlist leaves them;
    `line_maxsim` holds maxsim.LINE_SIGNALS per candidate (zeros when absent)."""
    n = len(cands)
    x = np.zeros((n, len(FEATURES)))
    if not n:
        return x
    col = {name: i for i, name in enumerate(FEATURES)}

    def put(name: str, values) -> None:
        x[:, col[name]] = values

    vector = np.array([c.vector or 0.0 for c in cands])
    bm25 = np.array([c.bm25 if c.bm25 is not None else np.nan for c in cands])
    fused = np.array([c.fused if c.fused is not None else c.score for c in cands])
    maxsim = np.array([c.rerank or 0.0 for c in cands])
    put("vector", vector)
    put("text", [c.text or 0.0 for c in cands])
    put("bm25_norm", np.nan_to_num(_minmax(bm25)))
    put("vector_norm", _minmax(vector))
    put("has_text", ~np.isnan(bm25))
    put("fused", fused)
    put("fused_gap", fused - fused.max())
    put("rr_fused", _reciprocal_ranks(fused))
    put("rr_text", np.where(np.isnan(bm25), 0.0, _reciprocal_ranks(np.nan_to_num(bm25, nan=-1.0))))
    put("rr_vector", _reciprocal_ranks(vector))
    put("maxsim", maxsim)
    put("maxsim_norm", _minmax(maxsim))
    put("maxsim_gap", maxsim - maxsim.max())
    put("rr_maxsim", _reciprocal_ranks(maxsim))
    put("blend", [c.score for c in cands])
    if line_maxsim is not None:
        for j, name in enumerate(("maxsim_line_best", "maxsim_line_second", "maxsim_window_best")):
            put(name, line_maxsim[:, j])
    put("query_ident", float(is_identifier(query)))
    words = query.split()
    put("query_code_share", sum(bool(_CODE_WORD.search(w)) for w in words) / max(len(words), 1))
    put("query_words", min(len(words), 20) / 20)

    period = dates.parse(query, today)
    put("has_period", float(period is not None))
    put("date_affinity", [dates.affinity(ranking.note_date(rows[c.id].path), period) for c in cands])

    chunks = [_parse(rows[c.id].text) for c in cands]
    # Sorted: the idf sums then add up in one order in every process (a set's order follows the hash seed,
    # and moved a score's sixth decimal between the CLI and a server now and then).
    terms = sorted(stems_of(query))
    idf = _idf(terms, chunks)
    total = sum(idf.values()) or 1.0
    named = _named(query)
    # A line's query terms as a bit mask over `terms`; a mask's weight (its terms' idf over the total) is
    # computed once per question, whatever the chunks and lines it comes back in.
    weight = _Weights([idf[t] for t in terms], total)
    speaks: dict[str, bool] = {}  # speaker -> whether the question names them
    signals = []  # per chunk, the LINE_FEATURES
    for chunk in chunks:
        # Only lines holding a query term count (every other line scores 0 on each signal): the chunk's
        # term -> lines map finds them.
        masks: dict[int, int] = {}
        for k, t in enumerate(terms):
            for j in chunk.where.get(t, ()):
                masks[j] = masks.get(j, 0) | 1 << k
        per_line = {j: weight[mask] for j, mask in masks.items()}
        ranked = sorted(per_line.values(), reverse=True) + [0.0, 0.0]
        window = max(
            [weight[mask | masks.get(j + 1, 0) | masks.get(j + 2, 0)] for j, mask in masks.items()], default=0.0
        )
        everything = 0
        for mask in masks.values():
            everything |= mask
        attributed: list[int] = []
        for who, spoken in chunk.speakers.items():
            if who not in speaks:
                speaks[who] = _names_match(who, named)
            if speaks[who]:
                attributed += spoken
        signals.append(
            (
                ranked[0],
                ranked[1],
                window,
                weight[everything],
                everything.bit_count() / len(terms) if terms else 0.0,
                max([per_line.get(j, 0.0) for j in attributed], default=0.0),
                float(bool(attributed)),
            )
        )
    x[:, [col[name] for name in _LINE_FEATURES]] = signals

    # The other chunks of each candidate's note; most notes have one candidate (the defaults), the rest are
    # ranked by `fused` among themselves.
    x[:, col["file_rr"]] = 1.0
    x[:, col["file_count"]] = 0.1
    by_path: dict[str, list[int]] = defaultdict(list)
    for i, c in enumerate(cands):
        by_path[rows[c.id].path].append(i)
    for members in by_path.values():
        if len(members) == 1:
            continue
        order = sorted(members, key=lambda i: -fused[i])
        for rank, i in enumerate(order, start=1):
            others = [j for j in members if j != i]
            x[i, col["file_best_fused"]] = max(fused[j] for j in others)
            x[i, col["file_best_maxsim"]] = max(maxsim[j] for j in others)
            x[i, col["file_rr"]] = 1.0 / rank
            x[i, col["file_count"]] = len(members) / 10.0
    return pool_context(x)


def is_identifier(query: str) -> bool:
    """A query that reads as one code identifier: a single word with an underscore, a dot, camelCase or
    parentheses (`parse_args`, `os.path.join`, `getUserName`, `run()`)."""
    words = query.split()
    return len(words) == 1 and bool(re.search(r"_|[a-z][A-Z]|\w\.\w|\(", words[0]))


def pool_context(x: np.ndarray) -> np.ndarray:
    """Fill the `pool_*` columns: each pooled signal's best over the candidates."""
    col = {name: i for i, name in enumerate(FEATURES)}
    for name in _POOLED:
        x[:, col[f"pool_{name}"]] = x[:, col[name]].max() if len(x) else 0.0
    return x


def _minmax(values: np.ndarray) -> np.ndarray:
    if np.isnan(values).all():
        return values
    lo, hi = np.nanmin(values), np.nanmax(values)
    if hi - lo < 1e-12:
        return np.where(np.isnan(values), np.nan, 1.0)
    return (values - lo) / (hi - lo)


def _reciprocal_ranks(values: np.ndarray) -> np.ndarray:
    order = np.argsort(-values, kind="stable")
    ranks = np.empty(len(values))
    ranks[order] = np.arange(1, len(values) + 1)
    return 1.0 / ranks


#: A crude stem, a word's first characters: 'painting', 'painted' and 'paints' meet, cheaply.
_STEM = 5


#: The line-level columns `features` fills from each chunk's parse, in this order.
_LINE_FEATURES = ("line_best", "line_second", "window_best", "coverage", "coverage_plain", "attr_best", "attr_any")


class _Weights(dict[int, float]):
    """The weight of a bit mask over the query's terms (their idf, in term order, over `total`), computed on
    first use: a dictionary lookup for every line after that (a method call per line cost more)."""

    def __init__(self, idf: list[float], total: float) -> None:
        super().__init__()
        self.idf, self.total = idf, total

    def __missing__(self, mask: int) -> float:
        value = self[mask] = sum(w for k, w in enumerate(self.idf) if mask >> k & 1) / self.total
        return value


@dataclass(frozen=True)
class _Chunk:
    """A chunk's lines as the features read them."""

    where: dict[str, tuple[int, ...]]  # term -> the lines holding it, ascending
    speakers: dict[str, tuple[int, ...]]  # who wrote a line (`_speaker`) -> their lines, ascending


@lru_cache(maxsize=8192)
def _parse(text: str) -> _Chunk:
    """The lines of each term and of each speaker, kept per chunk text: the same chunks come back query after
    query, and reading them is most of the cost of the features; a question then visits only the lines holding
    its terms. Callers must not modify the result."""
    where: dict[str, list[int]] = defaultdict(list)
    speakers: dict[str, list[int]] = defaultdict(list)
    for j, (line, words) in enumerate(zip(text.split("\n"), _line_words(text.lower()))):
        for t in _stems(words):
            where[t].append(j)
        who = _speaker(line)
        if who is not None:
            speakers[who].append(j)
    return _Chunk({t: tuple(js) for t, js in where.items()}, {who: tuple(js) for who, js in speakers.items()})


def term_lines(text: str) -> dict[str, tuple[int, ...]]:
    """Each stem of `text` (`stems_of`) -> the 0-based lines holding it, ascending: the features' parse, cached,
    so a snippet's window (core.snippets) reads the lines the ranker just read for free."""
    return _parse(text).where


def stems_of(text: str) -> set[str]:
    """The crude stems (`_STEM`) of the words of `text` that are not stop words: how the features, and the
    snippet's window (core.snippets), match a question's words to a line's."""
    return _stems(_WORD.findall(text.lower()))


def _stems(words: list[str]) -> set[str]:
    """The stems of the words that are not stop words (`_STEM`): one comprehension, no call per word (the parse of
    a chunk not seen before is ~0.25 ms, a fifth of that in calls)."""
    return {w[:_STEM] for w in words if w not in STOP_WORDS}


def _line_words(low: str) -> list[list[str]]:
    """`_WORD.findall` of each line of lower-case text. ASCII text (nearly every note) takes a path in C, three
    times faster: its non-word bytes become spaces and it is split (`\\w` on ASCII is exactly [0-9A-Za-z_])."""
    if low.isascii():
        return [line.split() for line in low.encode().translate(_ASCII_WORDS).decode().split("\n")]
    return [_WORD.findall(line) for line in low.split("\n")]


#: Every byte that is not an ASCII word character or a line break, mapped to a space (`_line_words`).
_ASCII_WORDS = bytes(c if chr(c).isalnum() and c < 128 or chr(c) in "_\n" else 32 for c in range(256))


def _idf(qterms: list[str], chunks: list[_Chunk]) -> dict[str, float]:
    """Inverse document frequency of the query's terms over the candidate chunks: rare terms weigh more."""
    n = len(chunks)
    return {t: math.log((n + 1) / (sum(t in chunk.where for chunk in chunks) + 0.5)) for t in qterms}


def _speaker(line: str) -> str | None:
    m = _SPEAKER.match(line) if ":" in line else None  # (the pattern needs a colon: most lines skip it)
    return m[1].strip().lower() if m else None


def _named(query: str) -> set[str]:
    """The words of the question, and `user`/`assistant` when it speaks in the first or second person."""
    words = set(_WORD.findall(query.lower()))
    if words & _FIRST_PERSON:
        words |= {"user", "human"}
    if words & _SECOND_PERSON:
        words |= {"assistant", "ai"}
    return words


def _names_match(speaker: str, named: set[str]) -> bool:
    return any(part in named for part in _WORD.findall(speaker))
