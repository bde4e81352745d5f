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


def about_absent(row: dict[str, Any]) -> bool:
    """A question with a content term found nowhere in the workspace: what "about something absent" means
    here and in bench/abstention (a question asked of another conversation that its words all match may
    well have an answer there, so it is no negative)."""
    return min(row["inputs"].df, default=1) == 0


def fit(rows: list[dict[str, Any]], l2: float, meta: dict | None = None) -> calibration.Calibrator:
    """The question model on own and code questions (answerable when a hit of the head is relevant) and on
    the questions about something absent; the hit model on the hits of answerable questions."""
    asked = [r for r in rows if r["q"]["kind"] in ("own", "code") or about_absent(r)]
    qx = np.vstack([calibration.features(r["inputs"])[:1, : len(calibration.QUESTION_FEATURES)] for r in asked])
    qy = np.array([float(r["y"].max()) for r in asked])
    answered = [r for r in rows if r["q"]["kind"] in ("own", "code") and r["y"].max() > 0]
    hx = np.vstack([calibration.features(r["inputs"]) for r in answered])
    hy = np.concatenate([r["y"] for r in answered])
    return calibration.Calibrator(
        calibration.fit(qx, qy, calibration.QUESTION_FEATURES, l2=l2),
        calibration.fit(hx, hy, calibration.FEATURES, l2=l2),
        meta or {},
    )


def cross_validate(rows: list[dict[str, Any]], l2: float) -> list[np.ndarray]:
    """Each row's calibrated scores from a model that never saw its conversation (for cosqa: no cosqa)."""
    out: list[np.ndarray] = [np.zeros(0)] * len(rows)
    for g in sorted({r["q"]["group"] for r in rows}):
        # a locomo fold leaves out everything asked of conversation g and every question written about it
        held = {i for i, r in enumerate(rows) if g in (r["q"]["group"], r["q"].get("askedOf"))}
        model = fit([r for i, r in enumerate(rows) if i not in held], l2)
        for i in held:
            if rows[i]["q"]["group"] == g:
                out[i] = np.array(calibration.scores(model, rows[i]["inputs"]))
    return out


def at_floor(rows: list[dict[str, Any]], cv: list[np.ndarray], floor: float) -> dict[str, float]:
    """R@10 / nDCG@10 of locomo-dev (own) and cosqa-dev at `floor`, and the share of questions about something
    absent (asked of another conversation, plainly or with the names swapped) left with no hit."""
    metrics: dict[str, list[dict[str, float]]] = defaultdict(list)
    abst: dict[str, list[bool]] = defaultdict(list)
    for r, s in zip(rows, cv):
        hits = [sp for sp, v in zip(r["spans"], s) if v >= floor]
        kind = r["q"]["kind"]
        if kind in ("other", "swapped"):
            if about_absent(r):
                abst[kind].append(not hits)
            continue
        key = "locomo" if kind == "own" else r["q"]["category_name"]
        metrics[key].append(score_query(hits, r["q"]["relevant"], 10))
    out = {f"{k} {m}": statistics.fmean(v[m] for v in vs) for k, vs in metrics.items() for m in ("R@10", "nDCG@10")}
    return out | {f"{k} abstained": statistics.fmean(v) for k, v in abst.items()}


def highest(table: dict[float, dict[str, float]], floors: list[float]) -> float:
    """The highest floor that costs at most one point of R@10 on locomo-dev and on both cosqa files."""
    recalls = [n for n in table[0.0] if n.endswith("R@10")]
    return max(f for f in floors if all(table[f][n] >= table[0.0][n] - 0.01 for n in recalls))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shared", type=Path, default=Path("../shared/bench"), help="the shared yardsticks")
    ap.add_argument("--cache", type=Path, default=Path("/tmp/memsift-calibration.pkl"))
    ap.add_argument("--l2", type=float, default=3.0, help="1, 3, 10, 30 tried: 3 abstains most at its default floor")
    ap.add_argument("--cv-only", action="store_true")
    ap.add_argument("--out", type=Path, default=calibration.DEFAULT_MODEL)
    args = ap.parse_args()
    rows = collect(args.shared, args.cache)
    kinds = Counter(r["q"]["kind"] for r in rows)
    print(f"{len(rows)} questions ({', '.join(f'{k} {v}' for k, v in sorted(kinds.items()))})")
    print(f"about something absent: {sum(about_absent(r) for r in rows if r['q']['kind'] in ('other', 'swapped'))}")
    cv = cross_validate(rows, args.l2)
    floors = [round(0.005 * i, 3) for i in range(0, 21)] + [round(0.05 * i, 2) for i in range(3, 11)]
    table = {f: at_floor(rows, cv, f) for f in floors}
    names = list(table[0.0])
    print("floor " + " ".join(f"{n:>22}" for n in names))
    for f in floors:
        print(f"{f:5.3f} " + " ".join(f"{table[f][n]:>22.3f}" for n in names))
    print(f"highest floor within 1 point of R@10 everywhere (CV): {highest(table, floors):.3f}")
    if args.cv_only:
        return
    meta = {"trainedOn": ["locomo-dev (own, other, swapped)", "cosqa-dev"], "l2": args.l2, "questions": len(rows)}
    model = fit(rows, args.l2, meta)
    # what `memsift eval` will measure with this model (it saw these questions); the default floor must keep
    # R@10 within a point in CV and here
    shipped = {f: at_floor(rows, [np.array(calibration.scores(model, r["inputs"])) for r in rows], f) for f in floors}
    print(f"highest floor within 1 point of R@10 everywhere (shipped model): {highest(shipped, floors):.3f}")
    print(f"the default floor (search.minScore): {min(highest(table, floors), highest(shipped, floors)):.3f}")
    args.out.write_text(model.to_json() + "\n", encoding="utf-8")
    print(f"wrote {args.out} (fingerprint {model.fingerprint})")
    for label, m in (("question", model.question), ("hit", model.hit)):
        print(
            f"{label} model: "
            + ", ".join(f"{n} {w:+.2f}" for n, w in sorted(zip(m.features, m.weights), key=lambda t: -abs(t[1])))
        )


if __name__ == "__main__":
    main()
