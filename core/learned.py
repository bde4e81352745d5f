"""The learned second stage: signals of each fused candidate, combined by a logistic regression into the
probability that the hit is relevant (issue 18), optionally corrected by a small gradient-boosted tree ensemble.

The hand-tuned pipeline (min-max fusion, then a MaxSim blend) sits on a plateau: its weights move nDCG by less
than half a point. What moves it are signals it never looks at, combined by a small model: the date the
question names against the note's date, which lines of a chunk hold the query's terms and who wrote them, and
how the other chunks of the same note scored, MaxSim per line of the chunk (the stored token bits carry each
token's line). Inference is one dot product over standardised features plus, when the model has them, the sum
of a few shallow trees (their splits read the raw features; evaluated here in numpy, so the library that fitted
them is needed only for training). Trees also see the shape of the query (an identifier or a sentence), so one
model serves chat logs and code. The model is a small JSON file (`ranker.json` ships in the package,
`memsift train-ranker` writes others).
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import re
from collections import defaultdict
from dataclasses import dataclass, replace
from datetime import date
from functools import lru_cache
from pathlib import Path

import numpy as np

from . import dates, ranking
from .errors import ConfigError
from .query import STOP_WORDS
from .store import ChunkRow

#: The model that ships: trained by bench/train_ranker.py on locomo-dev (+ questions asked of the wrong
#: conversation) and cosqa-dev identifiers.
DEFAULT_MODEL = Path(__file__).with_name("ranker.json")

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


class RankerModelError(ConfigError):
    """The ranker model file is missing, unreadable or not a model; the message names the file."""


@dataclass(frozen=True)
class Trees:
    """Binary trees over raw features, summed into the logit. Node arrays are padded to one width per tree:
    an internal node sends x to `left` when x[feature] <= threshold, else to `right`; a child below zero is
    the leaf ~child, whose value is `values[tree, ~child]`. Every tree starts at node 0."""

    feature: np.ndarray  # trees x nodes, int
    threshold: np.ndarray  # trees x nodes
    left: np.ndarray  # trees x nodes, int
    right: np.ndarray  # trees x nodes, int
    values: np.ndarray  # trees x leaves

    def predict(self, x: np.ndarray) -> np.ndarray:
        """The summed leaf values per row: every (tree, row) pair steps down together, one level per
        iteration, over flat arrays (`_flat`); pairs that reached a leaf drop out."""
        n = len(x)
        trees, width = self.feature.shape
        if not n or not trees:
            return np.zeros(n)
        feature, threshold, child, values = self._flat
        flat_x = np.ascontiguousarray(x, dtype=np.float64).ravel()
        node = np.repeat(np.arange(trees, dtype=np.int32) * width, n)  # each pair's node, tree-major
        row = np.tile(np.arange(n, dtype=np.int32) * x.shape[1], trees)  # each pair's row, as an offset into flat_x
        pair = np.arange(trees * n, dtype=np.int32)
        leaf = np.empty(trees * n, dtype=np.int32)
        while len(pair):
            node = child.take(2 * node + (flat_x.take(row + feature.take(node)) <= threshold.take(node)))
            done = node < 0
            if done.any():
                leaf[pair[done]] = ~node[done]
                keep = ~done
                pair, node, row = pair[keep], node[keep], row[keep]
        return values.take(leaf).reshape(trees, n).sum(axis=0)

    @functools.cached_property
    def _flat(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The node arrays flattened for `predict`, in int32: node p's children at 2p (x[feature] > threshold)
        and 2p + 1 (<=) as absolute node indices, a leaf as ~(its index into the flat values). A step is then one
        gather of the child, with no per-tree offsets to add and no `where`: 1.3-1.5 times faster, the same sums."""
        trees, width = self.feature.shape
        nodes = (np.arange(trees) * width)[:, None]
        leaves = (np.arange(trees) * self.values.shape[1])[:, None]

        def absolute(children: np.ndarray) -> np.ndarray:
            return np.where(children >= 0, nodes + children, ~(leaves + ~children))

        child = np.stack([absolute(self.right), absolute(self.left)], axis=-1)
        return (
            self.feature.astype(np.int32).ravel(),
            self.threshold.ravel(),
            child.astype(np.int32).ravel(),
            self.values.ravel(),
        )

    def to_dict(self) -> dict:
        return {
            "feature": self.feature.tolist(),
            "threshold": self.threshold.tolist(),  # exact: a rounded split point can move a row
            "left": self.left.tolist(),
            "right": self.right.tolist(),
            "values": self.values.tolist(),
        }

    @classmethod
    def from_dict(cls, raw: dict) -> Trees:
        trees = cls(
            np.asarray(raw["feature"], dtype=np.int64).reshape(len(raw["feature"]), -1),
            np.asarray(raw["threshold"], dtype=np.float64).reshape(len(raw["threshold"]), -1),
            np.asarray(raw["left"], dtype=np.int64).reshape(len(raw["left"]), -1),
            np.asarray(raw["right"], dtype=np.int64).reshape(len(raw["right"]), -1),
            np.asarray(raw["values"], dtype=np.float64).reshape(len(raw["values"]), -1),
        )
        shapes = {a.shape for a in (trees.feature, trees.threshold, trees.left, trees.right)}
        if len(shapes) != 1 or len(trees.values) != len(trees.feature):
            raise ValueError("tree arrays of different shapes")
        if len(trees.feature) and not (0 <= trees.feature.min() and trees.feature.max() < len(FEATURES)):
            raise ValueError("a tree splits on a feature this version does not have")
        return trees

    @classmethod
    def from_nested(cls, roots: list[dict]) -> Trees:
        """From nested nodes as LightGBM's `dump_model()["tree_info"][i]["tree_structure"]` writes them
        (`split_feature`, `threshold`, `left_child`, `right_child`; leaves with `leaf_value`); only numerical
        `<=` splits, which is all LightGBM makes over numeric features without missing values."""
        flat = [_flatten(root) for root in roots]
        width = max((len(f[0]) for f in flat), default=1) or 1
        leaves = max((len(f[4]) for f in flat), default=1)

        def pad(values: list, size: int, fill: float) -> list:
            return values + [fill] * (size - len(values))

        return cls(
            np.array([pad(f[0], width, 0) for f in flat], dtype=np.int64).reshape(len(flat), width),
            np.array([pad(f[1], width, 0.0) for f in flat], dtype=np.float64).reshape(len(flat), width),
            np.array([pad(f[2], width, -1) for f in flat], dtype=np.int64).reshape(len(flat), width),
            np.array([pad(f[3], width, -1) for f in flat], dtype=np.int64).reshape(len(flat), width),
            np.array([pad(f[4], leaves, 0.0) for f in flat], dtype=np.float64).reshape(len(flat), leaves),
        )


def _flatten(root: dict) -> tuple[list[int], list[float], list[int], list[int], list[float]]:
    """One nested tree as node arrays (internal nodes numbered in visiting order, leaves as ~index)."""
    feature: list[int] = []
    threshold: list[float] = []
    left: list[int] = []
    right: list[int] = []
    values: list[float] = []
    if "leaf_value" in root:  # a tree that never split: one node whose both sides reach its only leaf
        return [0], [0.0], [-1], [-1], [float(root["leaf_value"])]

    def visit(node: dict) -> int:
        if "leaf_value" in node:
            values.append(float(node["leaf_value"]))
            return ~(len(values) - 1)
        if node.get("decision_type", "<=") != "<=":
            raise ValueError(f"a split of kind {node['decision_type']!r}: only numerical '<=' splits are evaluated")
        i = len(feature)
        feature.append(int(node["split_feature"]))
        threshold.append(float(node["threshold"]))
        left.append(0)
        right.append(0)
        left[i] = visit(node["left_child"])
        right[i] = visit(node["right_child"])
        return i

    visit(root)
    return feature, threshold, left, right, values


@dataclass(frozen=True)
class Model:
    """A logistic regression over standardised features, plus optional trees over the raw features:
    p = sigmoid(bias + sum w_i (x_i - mean_i) / std_i + sum of the trees' leaves)."""

    features: tuple[str, ...]
    mean: np.ndarray
    std: np.ndarray
    weights: np.ndarray
    bias: float
    meta: dict
    trees: Trees | None = None

    @property
    def fingerprint(self) -> str:
        """Changes whenever the model would score anything differently: part of the search identity."""
        return hashlib.sha256(self.to_json().encode()).hexdigest()[:16]

    def linear(self, x: np.ndarray) -> np.ndarray:
        """The logistic regression's logit alone (trees are fitted on top of it)."""
        return self.bias + ((x - self.mean) / self.std) @ self.weights

    def predict(self, x: np.ndarray) -> np.ndarray:
        z = self.linear(x)
        if self.trees is not None:
            z = z + self.trees.predict(x)
        return 1.0 / (1.0 + np.exp(-np.clip(z, -40, 40)))

    def with_trees(self, trees: Trees | None, meta: dict | None = None) -> Model:
        return replace(self, trees=trees, meta={**self.meta, **(meta or {})})

    def to_json(self) -> str:
        return json.dumps(
            {
                "kind": "logistic+trees" if self.trees is not None else "logistic",
                "features": list(self.features),
                "mean": [round(float(v), 8) for v in self.mean],
                "std": [round(float(v), 8) for v in self.std],
                "weights": [round(float(v), 8) for v in self.weights],
                "bias": round(float(self.bias), 8),
                **({"trees": self.trees.to_dict()} if self.trees is not None else {}),
                "meta": self.meta,
            },
            indent=1,
        )

    @classmethod
    def load(cls, path: str | Path | None = None) -> Model:
        path = Path(path) if path else DEFAULT_MODEL
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
            if raw.get("kind") not in ("logistic", "logistic+trees") or list(raw["features"]) != list(FEATURES):
                raise ValueError("not a model over this version's features")
            model = cls(
                tuple(raw["features"]),
                np.asarray(raw["mean"], dtype=np.float64),
                np.asarray(raw["std"], dtype=np.float64),
                np.asarray(raw["weights"], dtype=np.float64),
                float(raw["bias"]),
                dict(raw.get("meta") or {}),
                Trees.from_dict(raw["trees"]) if raw["kind"] == "logistic+trees" else None,
            )
            if not (len(model.mean) == len(model.std) == len(model.weights) == len(FEATURES)):
                raise ValueError("vector lengths do not match the features")
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise RankerModelError(f"ranker model {path}: {exc}") from None
        return model


_LOADED: dict[str, Model] = {}


def model_for(path: str | None) -> Model:
    """The model at `path` (None: the shipped one), loaded once per process."""
    key = path or str(DEFAULT_MODEL)
    if key not in _LOADED:
        _LOADED[key] = Model.load(path)
    return _LOADED[key]


def fit(x: np.ndarray, y: np.ndarray, *, l2: float = 1.0, meta: dict | None = None) -> Model:
    """Logistic regression by Newton's method with an L2 penalty on the standardised weights (not the bias).

    A handful of iterations over a few thousand rows: numpy only, no training library."""
    mean = x.mean(axis=0)
    std = x.std(axis=0)
    std[std < 1e-9] = 1.0
    z = np.hstack([np.ones((len(x), 1)), (x - mean) / std])
    w = np.zeros(z.shape[1])
    penalty = np.full(z.shape[1], l2)
    penalty[0] = 0.0
    for _ in range(50):
        p = 1.0 / (1.0 + np.exp(-np.clip(z @ w, -40, 40)))
        grad = z.T @ (p - y) + penalty * w
        hess = (z * (p * (1 - p))[:, None]).T @ z + np.diag(penalty + 1e-9)
        step = np.linalg.solve(hess, grad)
        w -= step
        if np.max(np.abs(step)) < 1e-8:
            break
    return Model(FEATURES, mean, std, w[1:], float(w[0]), dict(meta or {}))


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
    terms = sorted(_terms(query))
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


def _terms(text: str) -> set[str]:
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
