#!/usr/bin/env python
"""CPU time per search stage, run by hand: what bounds throughput, read without the noise of a shared machine.

Wall-clock stage times (`timings`, /metrics) grow with whatever else runs on the cores; the CPU a search's
thread spends in each stage does not, much. This builds bench/harness.py's 10,000-chunk index for the default
configuration (`build_query_index(rerank=True)`), runs `--queries` distinct hybrid searches in one thread
through `MemoryIndex.search`, and reads the thread's CPU clock (`time.thread_time`) around each stage of
`core.timings` (a wrapper of `StageClock.stage`) and around the whole search. One onnxruntime thread and one
BLAS thread (the defaults of `core.threads`) run in the caller's thread, so nothing escapes the clock.

Two arms, alternating query by query in the one run: `kept` as the product runs (the process keeps the chunk
rows and token bits it read, core/chunk_cache.py, warming up over the run), and `read` with caches of no
capacity (every search reads its candidates' rows and its shortlist's token bits from SQLite, as before issue
17's throughput work).

    .venv/bin/python bench/stage_cpu.py                 # 10,000 chunks, 300 queries
    .venv/bin/python bench/stage_cpu.py --warm 600      # the kept caches warmed by 600 other searches first
    .venv/bin/python bench/stage_cpu.py --chunks 2000 --distinct 100 --queries 100
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import corpus  # noqa: E402  (the seeded notes and queries)
import harness  # noqa: E402  (timing, the model, the query index, results)

import core.store_caches  # noqa: E402  (its TOKEN_BITS are swapped per arm)
import core.store_search  # noqa: E402  (its CHUNK_ROWS are swapped per arm)
from core import MemoryIndex, timings  # noqa: E402
from core.chunk_cache import ChunkCache  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--chunks", type=int, default=10_000)
    p.add_argument("--distinct", type=int, default=300, help="chunks embedded by the real model")
    p.add_argument("--queries", type=int, default=300)
    p.add_argument("--warm", type=int, default=20, help="distinct searches before, warming the kept caches")
    p.add_argument("--seed", type=int, default=7)
    args = p.parse_args(argv)
    for name in [n for n in os.environ if n.startswith("MEMSIFT_")]:
        del os.environ[name]
    tmp = Path(tempfile.mkdtemp(prefix="memsift-stage-cpu-"))
    none: ChunkCache = ChunkCache(0, lambda _: 1)
    arms = {"kept": (core.store_search.CHUNK_ROWS, core.store_caches.TOKEN_BITS), "read": (none, none)}
    spent: dict[str, dict[str, float]] = {arm: {} for arm in arms}
    cpu: dict[str, float] = {}
    plain = timings.StageClock.stage

    @contextmanager
    def stage(self: timings.StageClock, name: str) -> Iterator[None]:
        started = time.thread_time()
        try:
            with plain(self, name):
                yield
        finally:
            cpu[name] = cpu.get(name, 0.0) + time.thread_time() - started

    results: dict[str, Any] = {"environment": harness.environment(), "busy_before": harness.cpu_busy()}
    try:
        built = harness.build_query_index(
            tmp, seed=args.seed, chunks=args.chunks, distinct=args.distinct, noise=0.15, rerank=True
        )
        wanted = args.warm + args.queries
        queries = list(dict.fromkeys(corpus.make_queries(args.seed + 5, 20 * wanted)))[:wanted]
        timings.StageClock.stage = stage  # type: ignore[method-assign]
        with MemoryIndex(built.config) as index:
            for q in queries[: args.warm]:
                index.search(q)
            totals = {arm: [0.0, 0.0] for arm in arms}  # CPU seconds, wall seconds
            for i, q in enumerate(queries[args.warm :]):
                arm = "kept" if i % 2 == 0 else "read"
                core.store_search.CHUNK_ROWS, core.store_caches.TOKEN_BITS = arms[arm]
                cpu.clear()
                started, wall = time.thread_time(), time.perf_counter()
                index.search(q)
                totals[arm][0] += time.thread_time() - started
                totals[arm][1] += time.perf_counter() - wall
                for k, v in cpu.items():
                    spent[arm][k] = spent[arm].get(k, 0.0) + v
        n = (len(queries) - args.warm) / 2
        results |= {
            "chunks": built.chunks,
            "searches_per_arm": n,
            "arms": {
                arm: {
                    "cpu_ms_per_search": round(totals[arm][0] / n * 1000, 2),
                    "wall_ms_per_search": round(totals[arm][1] / n * 1000, 2),
                    "stage_cpu_ms": {k: round(v / n * 1000, 2) for k, v in spent[arm].items()},
                }
                for arm in arms
            },
            "kept_mib": {
                "rows": round(arms["kept"][0].size / 2**20, 1),
                "bits": round(arms["kept"][1].size / 2**20, 1),
            },
            "loadavg": os.getloadavg(),
        }
    finally:
        timings.StageClock.stage = plain  # type: ignore[method-assign]
        core.store_search.CHUNK_ROWS, core.store_caches.TOKEN_BITS = arms["kept"]
        shutil.rmtree(tmp, ignore_errors=True)
    stages = list(results["arms"]["kept"]["stage_cpu_ms"])
    print("| chunks | rows, bits | CPU ms/search | " + " | ".join(stages) + " | other | wall ms/search | load avg |")
    print("|---" * (len(stages) + 6) + "|")
    for arm, figures in results["arms"].items():
        rest = round(figures["cpu_ms_per_search"] - sum(figures["stage_cpu_ms"].values()), 2)
        print(
            f"| {results['chunks']} | {arm} | {figures['cpu_ms_per_search']} | "
            + " | ".join(str(figures["stage_cpu_ms"].get(k, 0.0)) for k in stages)
            + f" | {rest} | {figures['wall_ms_per_search']} | {results['loadavg'][0]:.1f} |"
        )
    harness.log(f"kept at the end, MiB: {results['kept_mib']}")
    harness.log(f"wrote {harness.save_result('stage-cpu', results)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
