#!/usr/bin/env python
"""The keyword leg with and without leaving out common phrases (issue 7), run by hand.

For each size it builds bench/speed.py's query index (as bench/growth.py does, but with `rerank.enabled =
false`: the MaxSim token bits would make the sync run the model over every chunk, ~1 hour at 10,000 here),
then times, per generated query, on the same open index and in ABBA order:

  keyword  full:   `Store.fts_search` of the MATCH of every query term (the keyword leg before)
           pruned: `core.search.keyword_hits` (`Store.common_phrases`, `fts_search` without them, the full
                   OR again when that returns fewer than `--fetch` rows)
  hybrid   `MemoryIndex.search(mode="hybrid")` minus its query embedding, with `common_phrases` answering
           "none" (full) or as shipped (pruned)

and reports p50s, their ratios, the median number of rows each MATCH matches, and whether the pruned
keyword leg returned the full one's ids in the full one's order.

    .venv/bin/python bench/fts_common.py --sizes 10000,100000
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import speed  # noqa: E402  (build_query_index, TimingEmbedder, the query generator, helpers)


def measure(size: int, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    from core import MemoryIndex
    from core.query import fts_match
    from core.search import keyword_hits

    emb, _ = speed.embedder()
    built = speed.build_query_index(tmp, seed=args.seed, chunks=size, distinct=min(size, args.distinct), noise=0.15)
    queries = speed.make_queries(args.seed + 1, args.queries)
    timing = speed.TimingEmbedder(emb)
    ms: dict[str, list[float]] = {"keyword full": [], "keyword pruned": [], "hybrid full": [], "hybrid pruned": []}
    same, matched_full, matched_pruned = 0, [], []
    with MemoryIndex(built.config, embedder=timing) as index:
        store = index.store
        shipped = store.common_phrases

        def hybrid(prune: bool) -> Callable[[str], Any]:
            def run(q: str) -> Any:
                store.common_phrases = shipped if prune else lambda phrases: set()
                index.search(q, mode="hybrid")
                return timing.last_query_s  # subtracted: the target is the search without embedding

            return run

        def full_hits(q: str) -> list[tuple[int, float]]:
            return store.fts_search(fts_match(q), args.fetch)

        legs = {
            "keyword full": lambda q: full_hits(q) and 0.0,
            "keyword pruned": lambda q: keyword_hits(store, q, args.fetch) and 0.0,
            "hybrid full": hybrid(False),
            "hybrid pruned": hybrid(True),
        }
        for q in speed.make_queries(args.seed + 2, 5):  # warm-up: the page cache, the vector matrix
            for run in legs.values():
                run(q)
        for i, q in enumerate(queries):
            order = list(legs) if i % 2 == 0 else list(reversed(legs))
            for name in order:
                t = time.perf_counter()
                inner = legs[name](q) or 0.0
                ms[name].append((time.perf_counter() - t - inner) * 1000)
            store.common_phrases = shipped
            ids = [[cid for cid, _ in hits] for hits in (full_hits(q), keyword_hits(store, q, args.fetch))]
            same += ids[0] == ids[1]
            count = "SELECT count(*) FROM chunks_fts WHERE chunks_fts MATCH ?"
            matched_full.append(store.conn.execute(count, (fts_match(q),)).fetchone()[0])
            matched_pruned.append(store.conn.execute(count, (fts_match(q, shipped),)).fetchone()[0])
    p50 = {name: round(speed.pct(values, 50), 2) for name, values in ms.items()}
    return {
        "chunks": built.chunks,
        **{f"{name} p50 ms": v for name, v in p50.items()},
        "keyword ratio": round(p50["keyword pruned"] / p50["keyword full"], 3),
        "hybrid ratio": round(p50["hybrid pruned"] / p50["hybrid full"], 3),
        "rows matched p50 full": statistics.median(matched_full),
        "rows matched p50 pruned": statistics.median(matched_pruned),
        "same ids and order": f"{same}/{len(queries)}",
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", default="10000,100000")
    p.add_argument("--distinct", type=int, default=100, help="chunks embedded by the real model (at most)")
    p.add_argument("--queries", type=int, default=100)
    p.add_argument("--fetch", type=int, default=24, help="rows the keyword leg asks for (maxResults x multiplier)")
    p.add_argument("--seed", type=int, default=7)
    args = p.parse_args(argv)
    for name in [n for n in os.environ if n.startswith("MEMSIFT_")]:  # the defaults are what is measured
        del os.environ[name]
    os.environ["MEMSIFT_RERANK_ENABLED"] = "false"
    tmp = Path(tempfile.mkdtemp(prefix="memsift-fts-common-"))
    os.environ["MEMSIFT_MODEL_CACHE"] = str(tmp / "models")
    busy = speed.cpu_busy()
    rows: dict[int, dict[str, Any]] = {}
    try:
        for size in (int(s) for s in args.sizes.split(",")):
            rows[size] = measure(size, args, tmp / f"n{size}")
            speed.log(f"{size}: {rows[size]}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    columns = list(next(iter(rows.values())))
    print("| " + " | ".join(columns) + " |")
    print("|---" * len(columns) + "|")
    for r in rows.values():
        print("| " + " | ".join(str(r[c]) for c in columns) + " |")
    print(f"\nCPUs busy before: {busy:.0%}; load average {os.getloadavg()[0]:.1f}")
    speed.save_result(
        "fts-common", {"environment": speed.environment(), "busy_before": busy, "args": vars(args), "rows": rows}
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
