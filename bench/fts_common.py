#!/usr/bin/env python
"""The keyword leg with and without leaving out common phrases (issue 7), run by hand.

For each size it builds bench/speed.py's query index (as bench/growth.py does), opens it read-only and, for
`--queries` generated queries, times on the same connection in ABBA order:

  full      `Store.fts_search` of the MATCH of every query term (what the keyword leg ran before)
  pruned    `core.search.keyword_hits`: `Store.common_phrases` (vocabulary look-ups) + `Store.fts_search` of
            the MATCH without them (+ the full one when that returns fewer than `--fetch` rows)

and reports p50 of each and their ratio, the median number of rows each MATCH matches, and how the top
`--fetch` ids compare (the pruned list should be the full list's head: the rows it loses matched only
phrases whose IDF BM25 clamps to 1e-6).

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
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import speed  # noqa: E402  (build_query_index, the query generator, helpers)


def measure(size: int, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    from core.query import fts_match
    from core.search import keyword_hits
    from core.store import Store

    built = speed.build_query_index(tmp, seed=args.seed, chunks=size, distinct=min(size, args.distinct), noise=0.15)
    queries = speed.make_queries(args.seed + 1, args.queries)
    full_s: list[float] = []
    pruned_s: list[float] = []
    with Store(built.config.db_path, readonly=True) as store:

        def full(q: str) -> list[tuple[int, float]]:
            return store.fts_search(fts_match(q), args.fetch)

        def pruned(q: str) -> list[tuple[int, float]]:
            return keyword_hits(store, q, args.fetch)

        def timed(leg, q: str, into: list[float]) -> list[tuple[int, float]]:
            t = time.perf_counter()
            hits = leg(q)
            into.append(time.perf_counter() - t)
            return hits

        for q in queries[:5]:  # warm-up: the page cache
            full(q), pruned(q)
        same_head, lost, matched_full, matched_pruned = 0, [], [], []
        for i, q in enumerate(queries):
            for leg, into in (
                ((full, full_s), (pruned, pruned_s)) if i % 2 == 0 else ((pruned, pruned_s), (full, full_s))
            ):
                timed(leg, q, into)
            a, b = [c for c, _ in full(q)], [c for c, _ in pruned(q)]
            same_head += a[: len(b)] == b
            lost.append(len(a) - len(b))
            count = "SELECT count(*) FROM chunks_fts WHERE chunks_fts MATCH ?"
            matched_full.append(store.conn.execute(count, (fts_match(q),)).fetchone()[0])
            matched_pruned.append(store.conn.execute(count, (fts_match(q, store.common_phrases),)).fetchone()[0])
    p50_full, p50_pruned = speed.pct(full_s, 50) * 1000, speed.pct(pruned_s, 50) * 1000
    return {
        "chunks": built.chunks,
        "full_p50_ms": round(p50_full, 2),
        "pruned_p50_ms": round(p50_pruned, 2),
        "pruned_over_full": round(p50_pruned / p50_full, 3),
        "matched_rows_full_p50": statistics.median(matched_full),
        "matched_rows_pruned_p50": statistics.median(matched_pruned),
        "pruned_is_head_of_full": f"{same_head}/{len(queries)}",
        "top_rows_lost_max": max(lost),
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
    print(
        "| chunks | fts_search p50 ms, all terms | common_phrases + fts_search p50 ms | ratio | "
        "rows matched p50, all / pruned | pruned top = head of full top | top rows lost, max |"
    )
    print("|---" * 7 + "|")
    for r in rows.values():
        print(
            f"| {r['chunks']:,} | {r['full_p50_ms']} | {r['pruned_p50_ms']} | {r['pruned_over_full']} | "
            f"{r['matched_rows_full_p50']:,.0f} / {r['matched_rows_pruned_p50']:,.0f} | "
            f"{r['pruned_is_head_of_full']} | {r['top_rows_lost_max']} |"
        )
    print(f"\nCPUs busy before: {busy:.0%}; load average {os.getloadavg()[0]:.1f}")
    speed.save_result(
        "fts-common", {"environment": speed.environment(), "busy_before": busy, "args": vars(args), "rows": rows}
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
