"""`memsift train-ranker`: fit the learned ranker on labelled questions in the eval format (SPEC section 6).

The features of every candidate are collected by running the real search (through `search(collect=...)`), so
a model is trained on exactly what it will see when it serves. A candidate is a positive when its line range
covers a relevant line of its question.

The logistic regression is fitted in numpy. Trees on top of it (`trees` > 0) are fitted by LightGBM, an
optional training-only dependency (`pip install 'memsift[train]'`): the model file holds the trees as arrays
that `learned.Trees` evaluates in numpy, so searching never needs LightGBM.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from . import learned, ranker_features
from .config_types import Config
from .evaluate import load_queries, query_index, same_name, warn_unheld
from .memory import MemoryIndex

#: Candidates per leg asked of each search; the ranker's pool has the same size whatever maxResults.
K = 10


class Span(NamedTuple):
    """A candidate's place, shaped like a search Hit for evaluate.score_query."""

    path: str
    startLine: int
    endLine: int


@dataclass
class Dataset:
    """Feature rows of every candidate of every question, with labels and enough to score rankings offline."""

    x: list[np.ndarray] = field(default_factory=list)  # one matrix per question
    y: list[np.ndarray] = field(default_factory=list)
    spans: list[list[Span]] = field(default_factory=list)
    queries: list[dict[str, Any]] = field(default_factory=list)
    #: questions none of whose relevant lines a hit can cover (a path not indexed, a line past its file's end),
    #: left out (`collect` with `warn`)
    left_out: int = 0

    def stacked(self, keep: list[int] | None = None) -> tuple[np.ndarray, np.ndarray]:
        keep = list(range(len(self.x))) if keep is None else keep
        width = len(ranker_features.FEATURES)
        x = np.vstack([self.x[i] for i in keep] or [np.zeros((0, width))])
        y = np.concatenate([self.y[i] for i in keep] or [np.zeros(0)])
        return x, y


def collect(
    config: Config,
    paths: list[str | Path],
    warn: Callable[[str], None] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> Dataset:
    """Search every question of every file (workspaces synced first, as `memsift eval` does) and keep the
    learned ranker's candidates, features and labels. `warn` is told of each relevant line no hit can cover
    (a path no indexed file answers to, a line past its file's end), as `memsift eval` tells it; a question
    none of whose lines can be covered is then left out: its answer, wherever it is, would be learnt as a wrong
    one. Every file is read first, so a bad line in the last one stops the command before any search;
    `progress(done, total)` is told after each question (760 of them take minutes)."""
    config = replace(config, rerank=replace(config.rerank, method="learned", enabled=True))
    data = Dataset()
    files = [(path, load_queries(path)) for path in paths]
    total, done = sum(len(queries) for _, queries in files), 0
    for path, queries in files:
        base = Path(path).resolve().parent
        indexes: dict[Path, MemoryIndex] = {}
        held: dict[Path, dict[str, int]] = {}
        try:
            for q in queries:
                if progress is not None:
                    progress(done, total)
                done += 1
                index = query_index(indexes, config, base, q)
                if warn is not None and q["relevant"]:
                    unheld = warn_unheld(warn, path, index, q, held)
                    if len(unheld) == len(q["relevant"]):
                        data.left_out += 1
                        continue
                found: list[tuple[list[Span], np.ndarray]] = []

                def keep(cands, rows, x, found=found) -> None:
                    found.append(
                        ([Span(rows[c.id].path, rows[c.id].start_line, rows[c.id].end_line) for c in cands], x)
                    )

                index.search(q["query"], max_results=K, min_score=0.0, mode="hybrid", collect=keep)
                if not found:
                    continue
                spans, x = found[0]
                wanted = {(same_name(r["path"]), int(r["line"])) for r in q["relevant"]}
                y = np.array(
                    [any(p == same_name(s.path) and s.startLine <= ln <= s.endLine for p, ln in wanted) for s in spans]
                )
                data.x.append(x)
                data.y.append(y.astype(np.float64))
                data.spans.append(spans)
                data.queries.append(q)
        finally:
            for index in indexes.values():
                index.close()
    if progress is not None:
        progress(total, total)
    return data


#: Fewer questions than this and `train-ranker` warns: 43 signals (and trees) fitted on a handful of questions
#: learn those questions; the shipped model was fitted on 760 of locomo-dev and cosqa-dev's.
FEW_QUESTIONS = 50

#: The tree ensemble's settings (measured on the dev sets, docs/search-and-ranking.md "Learned ranker").
TREE_PARAMS: dict[str, Any] = {
    "objective": "binary",
    "num_leaves": 8,
    "learning_rate": 0.05,
    "min_data_in_leaf": 50,
    "feature_fraction": 0.8,
    "bagging_fraction": 0.8,
    "bagging_freq": 1,
    "lambda_l2": 1.0,
    "verbose": -1,
    "seed": 0,
    "deterministic": True,
    "force_col_wise": True,
    "num_threads": 2,
}


def require_lightgbm() -> Any:
    """LightGBM, or a ValueError saying how to get it: `train-ranker --trees` asks before its searches."""
    try:
        import lightgbm
    except ImportError:
        raise ValueError("fitting trees needs LightGBM, a training-only extra: pip install 'memsift[train]'") from None
    return lightgbm


def fit_trees(
    x: np.ndarray,
    y: np.ndarray,
    base: np.ndarray,
    rounds: int,
    *,
    weight: np.ndarray | None = None,
    params: dict[str, Any] | None = None,
    groups: list[int] | None = None,
) -> learned.Trees:
    """Boosted trees that correct `base` (the logistic regression's logit), fitted by LightGBM and returned
    as arrays for numpy. `groups` (candidates per question, in order) is for a ranking objective."""
    lightgbm = require_lightgbm()
    settings = TREE_PARAMS | (params or {})
    dataset = lightgbm.Dataset(x, y, weight=weight, init_score=base, group=groups, params={"verbose": -1})
    booster = lightgbm.train(settings, dataset, num_boost_round=rounds)
    return learned.Trees.from_nested([t["tree_structure"] for t in booster.dump_model()["tree_info"]])


def fit(
    x: np.ndarray,
    y: np.ndarray,
    *,
    l2: float = 1.0,
    trees: int = 0,
    weight: np.ndarray | None = None,
    meta: dict[str, Any] | None = None,
) -> learned.Model:
    """The logistic regression, then `trees` boosting rounds on top of its logit."""
    model = learned.fit(x, y, l2=l2, meta=meta)
    if trees:
        model = model.with_trees(fit_trees(x, y, model.linear(x), trees, weight=weight), {"trees": trees})
    return model


def train(data: Dataset, *, l2: float = 1.0, trees: int = 0, meta: dict[str, Any] | None = None) -> learned.Model:
    if not data.x and data.left_out:
        raise ValueError(
            "every question was left out: none of their relevant lines is one a hit can cover (the warnings "
            "above); a relevant path is relative to the question's workspace, as a hit names it"
        )
    if not data.x:
        raise ValueError(
            "no question reached the learned ranker: it needs hybrid search over an index the local model built "
            "(MaxSim token bits) and rerank.provider = local"
        )
    if not any(q["relevant"] for q in data.queries):
        raise ValueError("no question has a relevant line to learn from")
    x, y = data.stacked()
    if not len(y) or y.min() == y.max():
        raise ValueError("training needs candidates of both kinds: some covering a relevant line, some not")
    return fit(x, y, l2=l2, trees=trees, meta={"questions": len(data.x), "candidates": int(len(y)), **(meta or {})})
