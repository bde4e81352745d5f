"""Logistic regression by Newton's method, numpy only: the learned ranker's linear part (core/learned.py) and
calibration's two models (core/calibration.py) are fitted by it, so nothing at run time or in training needs a
machine-learning library."""

from __future__ import annotations

import numpy as np


def newton(
    x: np.ndarray, y: np.ndarray, *, l2: float, iters: int, weight: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """(mean, std, coefficients, bias) of an L2-penalised logistic regression on the standardised features (the
    bias is not penalised). `weight` per row (default 1) sets what share of the rows the fit sees as positive,
    hence its prior. A handful of iterations over thousands of rows; it stops once a step moves nothing."""
    weight = np.ones(len(y)) if weight is None else weight
    mean = x.mean(axis=0)
    std = x.std(axis=0)
    std[std < 1e-9] = 1.0
    z = np.hstack([np.ones((len(x), 1)), (x - mean) / std])
    w = np.zeros(z.shape[1])
    penalty = np.full(z.shape[1], l2)
    penalty[0] = 0.0
    for _ in range(iters):
        p = 1.0 / (1.0 + np.exp(-np.clip(z @ w, -40, 40)))
        grad = z.T @ (weight * (p - y)) + penalty * w
        hess = (z * (weight * p * (1 - p))[:, None]).T @ z + np.diag(penalty + 1e-9)
        step = np.linalg.solve(hess, grad)
        w -= step
        if np.abs(step).max() < 1e-8:
            break
    return mean, std, w[1:], float(w[0])
