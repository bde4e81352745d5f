"""Train the shipped learned ranker (core/ranker.json) on locomo-dev and both cosqa-dev files, with CV figures.

    .venv/bin/python bench/train_ranker.py                     # CV tables, then writes core/ranker.json
    .venv/bin/python bench/train_ranker.py --cv-only --trees 0 # the logistic regression alone, no model written
    .venv/bin/python bench/train_ranker.py --cv-only --seed 1 --without file_   # another bagging seed, an ablation

CV: each locomo-dev conversation is scored by a model fitted on the other conversations and all of cosqa-dev
(leave one conversation out); each half of each cosqa-dev file (questions alternate) by a model fitted on all
of locomo-dev and the other halves. So every figure is on questions the model never saw, and every model saw
both chat and code. Trees need the training extra (`pip install 'memsift[train]'`: LightGBM).

Candidates and features are collected once through the real search (`memsift train-ranker` does the same) and
cached in --cache-dir (~10 min per file on a busy 2-core machine); delete the cache after changing features.
Offline metrics rank each question's candidate pool by the model, take the top 10 and score them as
`memsift eval` does; the "today" rows order the same pools as the MaxSim blend (top 30 by fused score, blend 0.4).
"""

from __future__ import annotations

import argparse
import pickle
import statistics
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from core import learned, ranker_features, ranker_training  # noqa: E402
from core.config import load_config  # noqa: E402
from core.evaluate import METRICS, score_query  # noqa: E402

SETS = {  # from the checkout, as README's commands
    "locomo": Path("../shared/bench/locomo-dev/queries.jsonl"),
    "web": Path("../shared/bench/cosqa-dev/queries.jsonl"),
    "ident": Path("../shared/bench/cosqa-dev/queries_ident.jsonl"),
}
COL = {name: i for i, name in enumerate(ranker_features.FEATURES)}


def load(path: Path, cache: Path) -> ranker_training.Dataset:
    if cache.exists():
        return pickle.loads(cache.read_bytes())
    data = ranker_training.collect(load_config(None), [path])
    cache.write_bytes(pickle.dumps(data))
    return data


def blend_order(x: np.ndarray, shortlist: int = 30, weight: float = 0.4) -> np.ndarray:
    """The MaxSim blend default: the fused top `shortlist` blended with MaxSim, the rest in fused order."""
    fused, maxsim = x[:, COL["fused"]], x[:, COL["maxsim"]]
    order = np.argsort(-fused, kind="stable")
    head, tail = order[:shortlist], order[shortlist:]

    def mm(v: np.ndarray) -> np.ndarray:
        return (v - v.min()) / (v.max() - v.min()) if v.max() - v.min() > 1e-12 else np.ones_like(v)

    mixed = (1 - weight) * mm(fused[head]) + weight * mm(maxsim[head])
    return np.concatenate([head[np.argsort(-mixed, kind="stable")], tail])


def table(data: ranker_training.Dataset, scores: list[np.ndarray], k: int = 10, floor: float = -np.inf) -> dict:
    """Metrics of each question's pool ordered by `scores`, top k, hits below `floor` dropped, per category
    and overall."""
    rows: dict[str, list[dict[str, float]]] = defaultdict(list)
    spans: list[int] = []
    for i, q in enumerate(data.queries):
        hits = [data.spans[i][j] for j in np.argsort(-scores[i], kind="stable")[:k] if scores[i][j] >= floor]
        spans.extend(h.endLine - h.startLine + 1 for h in hits)
        rows[str(q.get("category_name") or q.get("category") or "all")].append(score_query(hits, q["relevant"], k))
    rows["overall"] = [r for name in list(rows) for r in rows[name]]
    out = {name: {m: statistics.fmean(r[m] for r in rs) for m in METRICS} | {"n": len(rs)} for name, rs in rows.items()}
    out["span"] = statistics.fmean(spans) if spans else 0.0
    return out


def show(label: str, t: dict) -> None:
    print(f"== {label} (mean hit span {t['span']:.2f} lines)")
    print(f"{'category':<14}{'n':>5}" + "".join(f"{m:>9}" for m in METRICS))
    names = sorted(k for k in t if k not in ("overall", "span"))
    for name in (names if len(names) > 1 else []) + ["overall"]:
        print(f"{name:<14}{t[name]['n']:>5}" + "".join(f"{t[name][m]:>9.3f}" for m in METRICS))


def subset(data: ranker_training.Dataset, keep: list[int]) -> ranker_training.Dataset:
    return ranker_training.Dataset(
        [data.x[i] for i in keep],
        [data.y[i] for i in keep],
        [data.spans[i] for i in keep],
        [data.queries[i] for i in keep],
    )


def fit(parts: list[ranker_training.Dataset], args: argparse.Namespace, meta: dict | None = None) -> learned.Model:
    """One model on the union of `parts`; each code part's rows weighted by --code-weight."""
    xs, ys, ws = [], [], []
    for part in parts:
        x, y = part.stacked()
        code = bool(part.queries) and "cosqa" in part.queries[0]["workspace"]
        xs.append(x)
        ys.append(y)
        ws.append(np.full(len(y), args.code_weight if code else 1.0))
    x, y = without(np.vstack(xs), args.without), np.concatenate(ys)
    w = np.concatenate(ws) if args.code_weight != 1.0 else None
    params = {"num_leaves": args.leaves, "learning_rate": args.rate, "objective": args.objective, "seed": args.seed}
    model = learned.fit(x, y, l2=args.l2, meta=meta)
    if args.trees:
        groups = [len(y) for part in parts for y in part.y] if args.objective == "lambdarank" else None
        trees = ranker_training.fit_trees(x, y, model.linear(x), args.trees, weight=w, params=params, groups=groups)
        model = model.with_trees(trees)
    return model


def without(x: np.ndarray, names: list[str]) -> np.ndarray:
    """`x` with the columns of the features named (or starting with a name given) set to 0: a constant column
    moves neither the regression nor the trees, so this is the model without those features, fitted on the
    same rows (an ablation from one cache)."""
    drop = [i for i, f in enumerate(ranker_features.FEATURES) if any(f.startswith(n) for n in names)]
    if drop:
        x = x.copy()
        x[:, drop] = 0.0
    return x


def cross_validate(sets: dict[str, ranker_training.Dataset], args: argparse.Namespace) -> dict[str, list[np.ndarray]]:
    """Scores of every question by a model that never saw it (see the module's docstring)."""
    out = {name: [np.zeros(0)] * len(data.x) for name, data in sets.items()}
    locomo = sets["locomo"]
    groups = [q["workspace"] for q in locomo.queries]
    code = [name for name in sets if name != "locomo"]
    for g in sorted(set(groups)):
        rest = subset(locomo, [i for i, h in enumerate(groups) if h != g])
        model = fit([rest, *(sets[name] for name in code)], args)
        for i, h in enumerate(groups):
            if h == g:
                out["locomo"][i] = model.predict(without(locomo.x[i], args.without))
    for half in (0, 1):
        train = [locomo] + [subset(sets[name], list(range(1 - half, len(sets[name].x), 2))) for name in code]
        model = fit(train, args)
        for name in code:
            for i in range(half, len(sets[name].x), 2):
                out[name][i] = model.predict(without(sets[name].x[i], args.without))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cache-dir", type=Path, default=Path("/tmp/memsift-ranker"))
    ap.add_argument("--l2", type=float, default=100.0)
    ap.add_argument("--trees", type=int, default=300, help="boosting rounds on top of the regression (0: none)")
    ap.add_argument("--leaves", type=int, default=16)
    ap.add_argument("--rate", type=float, default=0.05)
    ap.add_argument("--objective", default="binary", choices=("binary", "lambdarank"), help="the trees' loss")
    ap.add_argument("--code-weight", type=float, default=1.0, help="weight of cosqa-dev rows for the trees")
    ap.add_argument("--seed", type=int, default=0, help="the trees' bagging seed (CV noise: compare over several)")
    ap.add_argument(
        "--without",
        type=lambda v: [n for n in v.split(",") if n],
        default=[],
        help="comma-separated features (or name prefixes) held at 0, for an ablation over the same cache",
    )
    ap.add_argument("--cv-only", action="store_true")
    ap.add_argument("--no-cv", action="store_true", help="only fit and write the model")
    ap.add_argument("--out", type=Path, default=learned.DEFAULT_MODEL)
    args = ap.parse_args()

    args.cache_dir.mkdir(parents=True, exist_ok=True)
    sets = {name: load(path, args.cache_dir / f"feat-{name}.pkl") for name, path in SETS.items()}
    cv = cross_validate(sets, args) if not args.no_cv else {}
    for name, data in sets.items() if cv else ():
        print(f"\n### {name}: {len(data.queries)} questions, {sum(len(y) for y in data.y)} candidates")
        show(
            "today: MaxSim blend of the fused top 30 (offline)",
            table(data, [-np.argsort(blend_order(x)).astype(float) for x in data.x]),
        )
        show(
            f"learned (l2 {args.l2}, {args.trees} trees, {args.leaves} leaves, rate {args.rate}), CV",
            table(data, cv[name]),
        )
        floors = {f: table(data, cv[name], floor=f)["overall"] for f in (0.01, 0.05, 0.1, 0.2, 0.35)}
        print(
            "floor on the probability, R@10 / nDCG@10: "
            + ", ".join(f"{f}: {t['R@10']:.3f} / {t['nDCG@10']:.3f}" for f, t in floors.items())
        )
    if args.cv_only:
        return
    meta = {
        "trainedOn": [f"{p.parent.name}/{p.name}" for p in SETS.values()],
        "l2": args.l2,
        "trees": args.trees,
        "leaves": args.leaves,
        "rate": args.rate,
        "codeWeight": args.code_weight,
        "seed": args.seed,
        **({"without": args.without} if args.without else {}),
        "questions": sum(len(d.x) for d in sets.values()),
        "candidates": int(sum(sum(len(y) for y in d.y) for d in sets.values())),
    }
    model = fit(list(sets.values()), args, meta)
    model.save(args.out)
    print(f"wrote {args.out} (fingerprint {model.fingerprint})")


if __name__ == "__main__":
    main()
