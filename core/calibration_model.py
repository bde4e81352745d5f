"""Calibration's two logistic models (core/calibration.py): `Model`, `Calibrator` (the pair, with the
fingerprint that enters the search identity), the shipped file `calibration.json`, and `fit`, which
bench/train_calibration.py uses to train it. Numpy only at inference, as core/logistic.py fits them.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from . import logistic
from .calibration_features import FEATURES, QUESTION_FEATURES
from .errors import ConfigError

#: The shipped model: trained by bench/train_calibration.py on locomo-dev and cosqa-dev.
DEFAULT_MODEL = Path(__file__).with_name("calibration.json")


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
