"""How a calibrated hit's score falls below the first hit's (`calibration.scores`), measured offline.

The first hit's score is the question's estimate; every lower hit's is that times a factor read from its own
evidence relative to the first hit's. The factor decides what the default floor does under a confident first
hit: keep every hit (a flat factor), or trim the hits the model sees as junk. Both sides are measured on the
shipped calibration over train_calibration.py's collected questions (in-sample, as `memsift eval` reads it):
- locomo-dev R@10 at the floor against no floor (issue 18's target: within 1 point);
- over every answerable question (locomo-dev, cosqa-dev, the small and tiny workspaces): per question, the
  hits kept among the first `maxResults` (6) that cover no labelled line, and those that do; and the first
  for the paraphrases asked of bench/calibration's tiny workspaces (a few notes, one of them the answer).

    MEMSIFT_HOME=/tmp/memsift-quality .venv/bin/python bench/train_calibration.py --cv-only   # collects first
    .venv/bin/python bench/hit_rule.py [--cache /tmp/memsift-calibration.pkl]
"""

from __future__ import annotations

import argparse
import pickle
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from train_calibration import ANSWERABLE  # noqa: E402

from core import calibration, calibration_model  # noqa: E402
from core.config import load_config  # noqa: E402
from core.evaluate import score_query  # noqa: E402

Rule = Callable[[float, np.ndarray], np.ndarray]  # (question estimate, relative evidence) -> scores


def band(k: float) -> Rule:
    """(k + relative) / (k + 1): the shipped rule is k = 3."""
    return lambda a, r: a * (k + r) / (k + 1)


def cut_below(k: float, t: float) -> Rule:
    """As band(k) down to a relative evidence t, then falling in proportion to it."""

    def rule(a: float, r: np.ndarray) -> np.ndarray:
        at_t = (k + t) / (k + 1)
        return a * np.where(r >= t, (k + r) / (k + 1), at_t * r / t)

    return rule


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cache", type=Path, default=Path("/tmp/memsift-calibration.pkl"))
    ap.add_argument("--k", type=int, default=6, help="maxResults: the hits an agent reads")
    args = ap.parse_args()
    rows = [r for rows in pickle.loads(args.cache.read_bytes()).values() for r in rows]
    rows = [r for r in rows if r["q"]["kind"] in ANSWERABLE and r["y"].max() > 0]
    floor = load_config(None).search.minScore
    model = calibration_model.default_model()
    parts = [calibration.estimates(model, r["inputs"]) for r in rows]
    rules: dict[str, Rule] = {"flat": band(1e9)}
    rules |= {f"band k={k:g}": band(k) for k in (9, 3, 1, 0.5)}
    rules |= {f"cut k=3 t={t:g}": cut_below(3, t) for t in (0.05, 0.1, 0.2, 0.3)}
    rules |= {f"cut k=9 t={t:g}": cut_below(9, t) for t in (0.05, 0.1, 0.2, 0.3)}
    print(f"{len(rows)} answerable questions; floor {floor}; hits read: the first {args.k}")
    head = f"{'locomo R@10':>12}{'loss':>7}{'cosqa R@10':>11}{'junk kept':>10}{'relevant kept':>14}{'tiny junk':>11}"
    print(f"{'rule':<16}{head}")
    for name, rule in rules.items():
        recall: dict[str, list[float]] = {"locomo": [], "locomo0": [], "cosqa": []}
        junk: list[int] = []
        good: list[int] = []
        tiny: list[int] = []
        for r, (a, rel) in zip(rows, parts):
            s = np.minimum.accumulate(rule(a, rel))
            kept = [sp for sp, v in zip(r["spans"], s) if v >= floor]
            if r["q"]["kind"] == "own":
                recall["locomo"].append(score_query(kept, r["q"]["relevant"], 10)["R@10"])
                recall["locomo0"].append(score_query(r["spans"], r["q"]["relevant"], 10)["R@10"])
            elif r["q"]["kind"] == "code":
                recall["cosqa"].append(score_query(kept, r["q"]["relevant"], 10)["R@10"])
            y = r["y"][: len(kept)][: args.k]
            junk.append(int((y == 0).sum()))
            if r["q"]["kind"] == "tiny":
                tiny.append(junk[-1])
            good.append(int((y > 0).sum()))
        at, zero = statistics.fmean(recall["locomo"]), statistics.fmean(recall["locomo0"])
        print(
            f"{name:<16}{at:>12.4f}{100 * (zero - at):>7.2f}{statistics.fmean(recall['cosqa']):>11.4f}"
            f"{statistics.fmean(junk):>10.2f}{statistics.fmean(good):>14.2f}{statistics.fmean(tiny):>11.2f}"
        )


if __name__ == "__main__":
    main()
