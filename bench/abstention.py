"""The abstention check (issue 18): questions about things absent from a workspace should get no hit above
the default floor (`search.minScore`). Prints the share that abstained, per category, and the top scores.

    MEMSIFT_HOME=/tmp/memsift-quality .venv/bin/python bench/abstention.py [--shared ../shared/bench] [--floor X]
        [--learned]

The companion figure, locomo-dev recall at the default floor against no floor, is two `memsift eval` runs:
`memsift eval ../shared/bench/locomo-dev/queries.jsonl --min-score X` with X the default, and with 0.
This set is held out: bench/train_calibration.py never reads it (figures: bench/README.md, "Issue 18").
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from core.config import load_config  # noqa: E402
from core.memory import MemoryIndex  # noqa: E402

HERE = Path(__file__).resolve().parent / "abstention"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shared", type=Path, default=Path("../shared/bench"))
    ap.add_argument("--floor", type=float, help="a floor other than the configured default")
    ap.add_argument("--learned", action="store_true", help="order by the learned ranker (rerank.method)")
    args = ap.parse_args()
    config = load_config(None, overrides={"rerank.method": "learned"} if args.learned else {})
    floor = config.search.minScore if args.floor is None else args.floor
    queries = [json.loads(line) for line in (HERE / "queries.jsonl").read_text().splitlines() if line.strip()]
    abstained: dict[str, list[bool]] = defaultdict(list)
    tops: list[float] = []
    indexes: dict[Path, MemoryIndex] = {}
    try:
        for q in queries:
            ws = (args.shared / q["sharedWorkspace"] if "sharedWorkspace" in q else HERE / q["workspace"]).resolve()
            if ws not in indexes:
                agent = "eval-" + hashlib.sha256(str(ws).encode()).hexdigest()[:12]  # as `memsift eval` names it
                indexes[ws] = MemoryIndex(replace(config, workspace=ws, agent=agent))
                indexes[ws].sync()
            answer = indexes[ws].search(q["query"], max_results=10, min_score=floor)
            top = answer.results
            tops.append(top[0].score if top else 0.0)
            if not top and not answer.abstained:  # no candidate at all is no abstention: say so
                print(f"  nothing found ({answer.empty}): {q['query']}")
            abstained[q["category"]].append(not top)
            if top:
                print(f"  answered ({top[0].score:.3f}): {q['query']}  [{top[0].path}]")
    finally:
        for index in indexes.values():
            index.close()
    every = [a for rows in abstained.values() for a in rows]
    for name, rows in sorted(abstained.items()):
        print(f"{name:<18}{len(rows):>4} questions, abstained {sum(rows) / len(rows):.3f}")
    print(f"{'overall':<18}{len(every):>4} questions, abstained {sum(every) / len(every):.3f} at floor {floor}")
    print(f"top score of the answers (0: none): median {statistics.median(tops):.3f}, max {max(tops):.3f}")


if __name__ == "__main__":
    main()
