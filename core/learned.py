"""The learned second stage: the signals of each fused candidate (core.ranker_features) combined by a
logistic regression into the probability that the hit is relevant (issue 18), optionally corrected by a small
gradient-boosted tree ensemble.

Inference is one dot product over standardised features plus, when the model has them, the sum of a few
shallow trees (their splits read the raw features; evaluated here in numpy, so the library that fitted them is
needed only for training). The model is a small JSON file (`ranker.json` ships in the package, `memsift
train-ranker` writes others).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from . import logistic
from .errors import ConfigError
from .ranker_features import FEATURES

#: The model that ships: trained by bench/train_ranker.py on locomo-dev (+ questions asked of the wrong
#: conversation) and cosqa-dev identifiers.
DEFAULT_MODEL = Path(__file__).with_name("ranker.json")


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

    def save(self, path: Path) -> None:
        """Written whole or not at all: into a temporary file beside `path`, then renamed over it. A server whose
        configuration names `path` reads it again at its next search (`model_for`), so it must never find half
        a file; an interrupted or failed write leaves the previous model as it was."""
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            tmp.write_text(self.to_json() + "\n", encoding="utf-8")
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)

    @classmethod
    def load(cls, path: str | Path | None = None) -> Model:
        where = f"rerank.rankerModel: ranker model {path}" if path else f"ranker model {DEFAULT_MODEL}"
        path = Path(path) if path else DEFAULT_MODEL
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
            if not isinstance(raw, dict):  # `[]` was "AttributeError: 'list' object has no attribute 'get'"
                raise ValueError("not a model (a JSON object with kind and features)")
            if raw.get("kind") not in ("logistic", "logistic+trees") or list(raw["features"]) != list(FEATURES):
                # a model another memsift version wrote: the fix is to fit one on this version's signals
                raise ValueError(
                    f"not a model over this version's {len(FEATURES)} signals (another memsift version wrote it?): "
                    "fit it again with `memsift train-ranker QUERIES.jsonl --out PATH`"
                )
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
        except OSError as exc:  # not "[Errno 2] No such file or directory: '<the path again>'"
            raise RankerModelError(f"{where}: {exc.strerror or exc}") from None
        except KeyError as exc:  # not a bare "'features'"
            raise RankerModelError(f"{where}: not a model, no {exc} field") from None
        except (ValueError, TypeError) as exc:
            raise RankerModelError(f"{where}: {exc}") from None
        return model


_LOADED: dict[str, tuple[tuple[int, int, int] | None, Model]] = {}
#: path -> the version of the file that could not be read since the model in use was, and why
_FAILED: dict[str, tuple[tuple[int, int, int] | None, str]] = {}


def model_for(path: str | None) -> Model:
    """The model at `path` (None: the shipped one), loaded once per version of the file. A model retrained in
    place (`memsift train-ranker --out` the file `rerank.rankerModel` names) is what the next search uses, in a
    running `serve` or `up` too: it was cached by path for the life of the process, and the configuration that
    names it did not change, so no reload noticed and `status` kept the old fingerprint. One stat per call.

    A version that cannot be read (a `cp` caught halfway, a hand edit, the file deleted) leaves the model read
    before in use, as a configuration reload keeps the settings in force when the file turns invalid: searches
    go on, and `status` says why (`load_error`). With no model read before it is the error, naming the file."""
    key = path or str(DEFAULT_MODEL)
    try:
        st = os.stat(key)
        version: tuple[int, int, int] | None = (st.st_mtime_ns, st.st_size, st.st_ino)
    except OSError:
        version = None  # Model.load says why, naming the file
    cached = _LOADED.get(key)
    if cached is not None and (cached[0] == version or _FAILED.get(key, (0,))[0] == version):
        return cached[1]
    try:
        model = Model.load(path)
    except RankerModelError as exc:
        if cached is None:
            raise
        _FAILED[key] = (version, str(exc))
        return cached[1]
    _FAILED.pop(key, None)
    _LOADED[key] = (version, model)
    return model


def load_error(path: str | None) -> str | None:
    """Why the file at `path` could not be read since the model `model_for` answers with was, else None."""
    model_for(path)
    failed = _FAILED.get(path or str(DEFAULT_MODEL))
    return failed[1] if failed else None


def fit(x: np.ndarray, y: np.ndarray, *, l2: float = 1.0, meta: dict | None = None) -> Model:
    """Logistic regression with an L2 penalty on the standardised weights (core/logistic.py)."""
    return Model(FEATURES, *logistic.newton(x, y, l2=l2, iters=50), dict(meta or {}))
