"""Train the shipped learned ranker (core/ranker.json) and report leave-one-conversation-out CV on locomo-dev.

    .venv/bin/python bench/train_ranker.py                       # CV table, then writes core/ranker.json
    .venv/bin/python bench/train_ranker.py --cv-only --l2 3      # try a setting without writing the model

Candidates and features are collected once through the real search (`memsift train-ranker` does the same) and
cached in --cache, so later runs fit and score offline in numpy in seconds. Offline metrics rank each question's
candidate pool by the model, take the top 10 and score them as `memsift eval` does; the "today" row orders the
same pools as the MaxSim blend did before the learned ranker (top 30 by fused score, blend 0.4).
"""

from __future__ import annotations

import argparse
import json
import pickle
import statistics
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from core import learned, ranker_training  # noqa: E402
from core.config import load_config  # noqa: E402
from core.evaluate import METRICS, score_query  # noqa: E402

LOCOMO = Path("../shared/bench/locomo-dev/queries.jsonl")  # from the checkout, as README's commands
COL = {name: i for i, name in enumerate(learned.FEATURES)}


def load(path: Path, cache: Path) -> ranker_training.Dataset:
    if cache.exists():
        return pickle.loads(cache.read_bytes())
    data = ranker_training.collect(load_config(None), [path])
    cache.write_bytes(pickle.dumps(data))
    return data


def shifted(path: Path, out: Path) -> Path:
    """Every question asked of the next conversation's workspace, with nothing relevant: the negatives that
    teach the model what a question about something absent looks like, so that its probability means the
    same across questions (trained on answerable questions only, the top of any pool looks relevant)."""
    queries = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    spaces = sorted({q["workspace"] for q in queries})
    with out.open("w") as f:
        for q in queries:
            target = spaces[(spaces.index(q["workspace"]) + 1) % len(spaces)]
            moved = q | {"workspace": str((path.parent / target).resolve()), "relevant": [], "askedOf": q["workspace"]}
            f.write(json.dumps(moved) + "\n")
    return out


def blend_order(x: np.ndarray, shortlist: int = 30, weight: float = 0.4) -> np.ndarray:
    """The pre-learned default: the fused top `shortlist` blended with MaxSim, the rest in fused order."""
    fused, maxsim = x[:, COL["fused"]], x[:, COL["maxsim"]]
    order = np.argsort(-fused, kind="stable")
    head, tail = order[:shortlist], order[shortlist:]

    def mm(v: np.ndarray) -> np.ndarray:
        return (v - v.min()) / (v.max() - v.min()) if v.max() - v.min() > 1e-12 else np.ones_like(v)

    mixed = (1 - weight) * mm(fused[head]) + weight * mm(maxsim[head])
    return np.concatenate([head[np.argsort(-mixed, kind="stable")], tail])


def table(
    data: ranker_training.Dataset, scores: list[np.ndarray], floor: float = 0.0, k: int = 10, on_top: bool = False
) -> dict:
    """Metrics of each question's pool ordered by `scores`, top k, hits below `floor` dropped (`on_top`: all
    of a question's hits dropped when its best is below the floor, none otherwise)."""
    rows: dict[str, list[dict[str, float]]] = defaultdict(list)
    spans: list[int] = []
    for i, q in enumerate(data.queries):
        order = np.argsort(-scores[i], kind="stable")
        least = scores[i][order[0]] if on_top else None
        hits = [data.spans[i][j] for j in order[:k] if (least if on_top else scores[i][j]) >= floor]
        spans.extend(h.endLine - h.startLine + 1 for h in hits)
        rows[str(q.get("category_name") or "all")].append(score_query(hits, q["relevant"], k))
    rows["overall"] = [r for name in list(rows) for r in rows[name]]
    out = {name: {m: statistics.fmean(r[m] for r in rs) for m in METRICS} | {"n": len(rs)} for name, rs in rows.items()}
    out["span"] = statistics.fmean(spans) if spans else 0.0
    return out


def show(label: str, t: dict) -> None:
    print(f"== {label} (mean hit span {t['span']:.2f} lines)")
    print(f"{'category':<14}{'n':>5}" + "".join(f"{m:>9}" for m in METRICS))
    for name in sorted(k for k in t if k not in ("overall", "span")) + ["overall"]:
        print(f"{name:<14}{t[name]['n']:>5}" + "".join(f"{t[name][m]:>9.3f}" for m in METRICS))


def loco(
    data: ranker_training.Dataset, negatives: ranker_training.Dataset | None, l2: float, also: list | None = None
) -> tuple[list, list]:
    """Leave one conversation (workspace) out: each conversation's questions, and the other conversations'
    questions asked of it, are scored by a model fitted on everything that touches neither."""
    groups = [q["workspace"] for q in data.queries]
    touches = [{q["askedOf"], Path(q["workspace"]).name} for q in (negatives.queries if negatives else [])]
    out: list[np.ndarray] = [np.zeros(0)] * len(groups)
    neg_out: list[np.ndarray] = [np.zeros(0)] * len(touches)
    for g in sorted(set(groups)):
        x, y = data.stacked([i for i, h in enumerate(groups) if h != g])
        if negatives:
            keep = [i for i, t in enumerate(touches) if g not in t and Path(g).name not in t]
            nx, ny = negatives.stacked(keep)
            x, y = np.vstack([x, nx]), np.concatenate([y, ny])
        for extra in also or []:
            ex, ey = extra.stacked()
            x, y = np.vstack([x, ex]), np.concatenate([y, ey])
        model = learned.fit(x, y, l2=l2)
        for i, h in enumerate(groups):
            if h == g:
                out[i] = model.predict(data.x[i])
        for i, q in enumerate(negatives.queries if negatives else []):
            if Path(q["workspace"]).name == Path(g).name:
                neg_out[i] = model.predict(negatives.x[i])
    return out, neg_out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--queries", type=Path, default=LOCOMO)
    ap.add_argument("--cache", type=Path, default=Path("/tmp/memsift-ranker-locomo.pkl"))
    ap.add_argument("--l2", type=float, default=1.0)
    ap.add_argument("--cv-only", action="store_true")
    ap.add_argument("--also", type=Path, action="append", default=[], help="another query file for every training fold")
    ap.add_argument(
        "--negatives", action="store_true", help="also train on every question asked of the next conversation"
    )
    ap.add_argument("--out", type=Path, default=learned.DEFAULT_MODEL)
    args = ap.parse_args()

    data = load(args.queries, args.cache)
    negatives = None
    if args.negatives:
        shifted_path = shifted(args.queries, args.cache.with_suffix(".shifted.jsonl"))
        negatives = load(shifted_path, args.cache.with_suffix(".shifted.pkl"))
    print(f"{len(data.queries)} questions, {sum(len(y) for y in data.y)} candidates")
    show(
        "today: MaxSim blend of the fused top 30 (offline)",
        table(data, [-np.argsort(blend_order(x)).astype(float) for x in data.x], floor=-np.inf),  # minus the rank
    )
    also = [load(path, args.cache.with_suffix(f".{path.stem}.pkl")) for path in args.also]
    cv, neg_cv = loco(data, negatives, args.l2, also)
    show(f"learned, leave-one-conversation-out CV (l2 {args.l2})", table(data, cv))
    tops = np.array([p.max() for p in cv])
    neg_tops = np.array([p.max() if len(p) else 0.0 for p in neg_cv])
    for floor in (0.01, 0.02, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5):
        t, top = table(data, cv, floor), table(data, cv, floor, on_top=True)
        print(
            f"floor {floor}: R@10 {t['overall']['R@10']:.3f} nDCG@10 {t['overall']['nDCG@10']:.3f} "
            f"(on the best hit only: {top['overall']['R@10']:.3f} / {top['overall']['nDCG@10']:.3f}), "
            f"questions left with no hit {np.mean(tops < floor):.3f}"
            + (
                f", questions of another conversation left with no hit {np.mean(neg_tops < floor):.3f}"
                if neg_cv
                else ""
            )
        )
    if args.cv_only:
        return
    for extra in also:
        data.x += extra.x
        data.y += extra.y
        data.queries += extra.queries
    if negatives:
        data.x += negatives.x
        data.y += negatives.y
        data.queries += negatives.queries
    trained_on = [args.queries.parent.name] + [f"{p.parent.name}/{p.name}" for p in args.also]
    meta = {"trainedOn": trained_on, "negatives": args.negatives, "l2": args.l2}
    model = ranker_training.train(data, l2=args.l2, meta=meta)
    args.out.write_text(model.to_json() + "\n", encoding="utf-8")
    print(f"wrote {args.out} (fingerprint {model.fingerprint})")
    for name, w in sorted(zip(learned.FEATURES, model.weights), key=lambda t: -abs(t[1])):
        print(f"  {name:<18}{w:+.3f}")


if __name__ == "__main__":
    main()
