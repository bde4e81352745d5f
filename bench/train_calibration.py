"""Train the shipped score calibration (core/calibration.json) and report leave-one-conversation-out CV.

    MEMSIFT_HOME=/tmp/memsift-quality .venv/bin/python bench/train_calibration.py            # CV, writes the model
    MEMSIFT_HOME=/tmp/memsift-quality .venv/bin/python bench/train_calibration.py --cv-only

Training questions (never bench/abstention/queries.jsonl, the held-out check):
- every locomo-dev question asked of its own workspace: a hit is relevant when it covers a labelled line;
- the same question asked of the next conversation's workspace: nothing there is relevant;
- the same, with the conversation's two speakers' names replaced by the other conversation's speakers, so a
  known person asked about something never mentioned looks like a negative too;
- cosqa-dev web questions and identifiers (code memory), so that calibration does not learn chat logs.

Each question goes through the real search once (default configuration, no floor); what calibration reads
(`core.calibration.Inputs`) and the labels of the ordered hits are cached in --cache, so fitting and the CV
run offline in seconds. The CV fits on four conversations (all three kinds) plus cosqa and scores the fifth;
cosqa is scored by a model fitted on locomo-dev alone.
"""

from __future__ import annotations

import argparse
import pickle
import re
import statistics
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from core import calibration  # noqa: E402
from core.config import load_config  # noqa: E402
from core.evaluate import load_queries, query_index, score_query  # noqa: E402
from core.ranker_training import Span  # noqa: E402

_SPEAKER = re.compile(r"^([A-Z][\w'-]+): ", re.MULTILINE)


def speakers(workspace: Path) -> list[str]:
    """The two names that open most lines of a conversation's notes, most frequent first."""
    counts: Counter[str] = Counter()
    for note in sorted(workspace.rglob("*.md")):
        counts.update(_SPEAKER.findall(note.read_text(encoding="utf-8")))
    return [name for name, _ in counts.most_common(2)]


def variants(path: Path) -> list[dict[str, Any]]:
    """Each locomo-dev question as asked (kind "own"), of the next conversation ("other") and of the next
    conversation with the speakers' names swapped ("swapped")."""
    queries = load_queries(path)
    spaces = sorted({q["workspace"] for q in queries})
    names = {ws: speakers(path.parent / ws) for ws in spaces}
    out = []
    for q in queries:
        target = spaces[(spaces.index(q["workspace"]) + 1) % len(spaces)]
        out.append(q | {"kind": "own", "group": q["workspace"]})
        moved = q | {"workspace": target, "relevant": [], "askedOf": q["workspace"], "group": target}
        out.append(moved | {"kind": "other"})
        text = q["query"]
        for old, new in zip(names[q["workspace"]], names[target]):
            text = re.sub(rf"\b{re.escape(old)}\b", new, text)
        if text != q["query"]:
            out.append(moved | {"kind": "swapped", "query": text})
    return out


def collect(shared: Path, cache: Path) -> list[dict[str, Any]]:
    """Every training question through the real search, its calibration inputs and its hits' labels."""
    if cache.exists():
        return pickle.loads(cache.read_bytes())
    config = load_config(None)
    sets = [(shared / "locomo-dev/queries.jsonl", variants(shared / "locomo-dev/queries.jsonl"))]
    for name in ("queries.jsonl", "queries_ident.jsonl"):
        sets.append(
            (
                shared / "cosqa-dev" / name,
                [q | {"kind": "code", "group": "cosqa"} for q in load_queries(shared / "cosqa-dev" / name)],
            )
        )
    rows: list[dict[str, Any]] = []
    for path, queries in sets:
        indexes: dict = {}
        try:
            for n, q in enumerate(queries):
                index = query_index(indexes, config, path.resolve().parent, q)
                seen: list = []
                index.search(
                    q["query"],
                    max_results=calibration.HEAD,
                    min_score=0.0,
                    collect_calibration=lambda inp, cands, chunk, seen=seen: seen.append(
                        (inp, [Span(chunk[c.id].path, chunk[c.id].start_line, chunk[c.id].end_line) for c in cands])
                    ),
                )
                if not seen:
                    continue
                inputs, spans = seen[0]
                wanted = {(r["path"], int(r["line"])) for r in q["relevant"]}
                y = [any(p == s.path and s.startLine <= ln <= s.endLine for p, ln in wanted) for s in spans]
                rows.append({"q": q, "inputs": inputs, "spans": spans, "y": np.array(y, dtype=np.float64)})
                if n % 200 == 0:
                    print(f"  {path.parent.name}/{path.name}: {n}/{len(queries)}", file=sys.stderr, flush=True)
        finally:
            for index in indexes.values():
                index.close()
    cache.write_bytes(pickle.dumps(rows))
    return rows


def stacked(rows: list[dict[str, Any]]) -> tuple[np.ndarray, np.ndarray]:
    x = np.vstack([calibration.features(r["inputs"]) for r in rows])
    return x, np.concatenate([r["y"] for r in rows])


def cross_validate(rows: list[dict[str, Any]], l2: float) -> list[np.ndarray]:
    """Each row's calibrated scores from a model that never saw its conversation (for cosqa: no cosqa)."""
    out: list[np.ndarray] = [np.zeros(0)] * len(rows)
    groups = sorted({r["q"]["group"] for r in rows})
    for g in groups:
        # a locomo fold leaves out everything asked of conversation g and every question written about it
        held = [i for i, r in enumerate(rows) if g in (r["q"]["group"], r["q"].get("askedOf"))]
        train = [r for i, r in enumerate(rows) if i not in set(held)]
        model = calibration.fit(*stacked(train), l2=l2)
        for i in held:
            if rows[i]["q"]["group"] == g:
                out[i] = np.array(calibration.scores(model, rows[i]["inputs"]))
    return out


def report(rows: list[dict[str, Any]], cv: list[np.ndarray], floors: list[float]) -> None:
    """Per floor: recall and nDCG@10 of locomo-dev (own) and cosqa, and the share of locomo questions asked
    of the wrong conversation (plain and with names swapped) left with no hit."""
    print(
        f"{'floor':>6}  {'locomo R@10':>11} {'nDCG':>6}  {'cosqa R@10':>10} {'ident R@10':>10}  "
        f"{'other abst.':>11} {'swapped abst.':>13}"
    )
    for floor in floors:
        metrics: dict[str, list[dict[str, float]]] = defaultdict(list)
        abst: dict[str, list[bool]] = defaultdict(list)
        for r, s in zip(rows, cv):
            hits = [sp for sp, v in zip(r["spans"], s) if v >= floor]
            kind = r["q"]["kind"]
            if kind in ("other", "swapped"):
                abst[kind].append(not hits)
                continue
            key = kind if kind == "own" else r["q"].get("category_name", "code")
            metrics[key].append(score_query(hits, r["q"]["relevant"], 10))

        def mean(key: str, m: str, metrics: dict = metrics) -> float:
            return statistics.fmean(v[m] for v in metrics[key]) if metrics[key] else float("nan")

        print(
            f"{floor:>6.3f}  {mean('own', 'R@10'):>11.3f} {mean('own', 'nDCG@10'):>6.3f}  "
            f"{mean('code-search', 'R@10'):>10.3f} {mean('ident-probe', 'R@10'):>10.3f}  "
            f"{statistics.fmean(abst['other']):>11.3f} {statistics.fmean(abst['swapped'] or [0]):>13.3f}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shared", type=Path, default=Path("../shared/bench"), help="the shared yardsticks")
    ap.add_argument("--cache", type=Path, default=Path("/tmp/memsift-calibration.pkl"))
    ap.add_argument("--l2", type=float, default=1.0)
    ap.add_argument("--cv-only", action="store_true")
    ap.add_argument("--out", type=Path, default=calibration.DEFAULT_MODEL)
    args = ap.parse_args()
    rows = collect(args.shared, args.cache)
    kinds = Counter(r["q"]["kind"] for r in rows)
    print(f"{len(rows)} questions ({', '.join(f'{k} {v}' for k, v in sorted(kinds.items()))})")
    cv = cross_validate(rows, args.l2)
    report(rows, cv, [0.0, 0.01, 0.02, 0.03, 0.05, 0.07, 0.1, 0.15, 0.2, 0.3, 0.35])
    if args.cv_only:
        return
    meta = {"trainedOn": ["locomo-dev (own, other, swapped)", "cosqa-dev"], "l2": args.l2, "questions": len(rows)}
    model = calibration.fit(*stacked(rows), l2=args.l2, meta=meta)
    args.out.write_text(model.to_json() + "\n", encoding="utf-8")
    print(f"wrote {args.out} (fingerprint {model.fingerprint})")
    for name, w in sorted(zip(calibration.FEATURES, model.weights), key=lambda t: -abs(t[1])):
        print(f"  {name:<18}{w:+.3f}")


if __name__ == "__main__":
    main()
