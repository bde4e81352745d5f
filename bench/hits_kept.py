#!/usr/bin/env python
"""What a search at the default configuration hands an agent, per question: hits kept by the floor among the
first `search.maxResults`, and of those the ones covering a labelled line (relevant) or none (junk). Recall
says whether the answer is there; this says how much else the agent reads beside it. Run by hand over any
query files in the eval format (SPEC section 6), each workspace indexed as `memsift eval` does:

    MEMSIFT_HOME=/tmp/memsift-quality .venv/bin/python bench/hits_kept.py \
        ../shared/bench/cosqa-dev/queries_ident.jsonl ../shared/bench/locomo-dev/queries.jsonl
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from core import load_config  # noqa: E402
from core.evaluate import load_queries, query_index  # noqa: E402
from core.memory import MemoryIndex  # noqa: E402


def main(files: list[str]) -> None:
    config = load_config()
    print("| query file | questions | hits kept / question | relevant | junk |")
    print("|---|---|---|---|---|")
    for name in files:
        questions = [q for q in load_queries(name) if q["relevant"]]
        base = Path(name).resolve().parent
        indexes: dict[Path, MemoryIndex] = {}
        relevant = junk = 0
        try:
            for q in questions:
                hits = query_index(indexes, config, base, q).search(q["query"]).results
                wanted = [(r["path"], int(r["line"])) for r in q["relevant"]]
                good = sum(any(p == h.path and h.startLine <= n <= h.endLine for p, n in wanted) for h in hits)
                relevant, junk = relevant + good, junk + len(hits) - good
        finally:
            for index in indexes.values():
                index.close()
        n = len(questions)
        label = f"{Path(name).parent.name}/{Path(name).name}"
        print(f"| {label} | {n} | {(relevant + junk) / n:.2f} | {relevant / n:.2f} | {junk / n:.2f} |")


if __name__ == "__main__":
    main(sys.argv[1:] or ["../shared/bench/locomo-dev/queries.jsonl"])
