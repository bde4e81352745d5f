#!/usr/bin/env python
"""Where a hybrid search's CPU goes at 50,000-100,000 chunks, run by hand on an index already built (the
`--keep` folders of bench/keyword_leg.py, `<dir>/<size>/s3-workspace` and `s3-home`, made by
bench/harness.py's `build_query_index`, rerank off).

`--queries` distinct generated queries through `MemoryIndex.search(mode="hybrid")` in one thread, the thread's CPU
clock around each stage of `core.timings` (as bench/stage_cpu.py) and around the whole search, in two states taken
in turns query by query:

  warm    the process's caches as a long-running server holds them (phrase scores, vector matrix, chunk rows)
  fresh   the keyword phrase cache emptied first: the state of the first searches after a sync (which also
          reloads the vector matrix: timed apart, `matrix_load`, once at the start)

p50 / p95 of each, ms. OPENBLAS_CORETYPE is the caller's: run it with and without to compare.

    .venv/bin/python bench/scale_stages.py --dir /tmp/kw-indexes --size 100000 --queries 60
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import corpus  # noqa: E402  (the seeded queries)
import harness  # noqa: E402  (the model, results)

from core import MemoryIndex, load_config, timings  # noqa: E402
from core.keyword_cache import KEYWORD_CACHES  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dir", required=True)
    p.add_argument("--size", type=int, required=True)
    p.add_argument("--queries", type=int, default=60)
    p.add_argument("--seed", type=int, default=7)
    args = p.parse_args()
    root = Path(args.dir) / str(args.size)
    harness.use_home(root / "s3-home")
    config = load_config(workspace=root / "s3-workspace", overrides={"rerank.enabled": False})
    emb, _ = harness.embedder()
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

    timings.StageClock.stage = stage  # type: ignore[method-assign]
    per: dict[str, dict[str, list[float]]] = {"warm": {}, "fresh": {}}
    queries = list(dict.fromkeys(corpus.make_queries(args.seed + 1, 20 * args.queries)))[: args.queries]
    with MemoryIndex(config, embedder=emb) as index:
        started, wall = time.thread_time(), time.perf_counter()
        index.search("warm up the matrix", mode="hybrid")
        matrix_load = (time.thread_time() - started, time.perf_counter() - wall)
        for q in corpus.make_queries(args.seed + 2, 5):
            index.search(q, mode="hybrid")
        for i, q in enumerate(queries):
            for state in ("warm", "fresh") if i % 2 == 0 else ("fresh", "warm"):
                if state == "fresh":
                    KEYWORD_CACHES.clear()
                else:
                    index.search(q, mode="hybrid")  # its phrases cached
                cpu.clear()
                started, wall = time.thread_time(), time.perf_counter()
                index.search(q, mode="hybrid")
                figures = dict(cpu, total=time.thread_time() - started, wall=time.perf_counter() - wall)
                for k, v in figures.items():
                    per[state].setdefault(k, []).append(v)
    timings.StageClock.stage = plain  # type: ignore[method-assign]
    out = {
        "size": args.size,
        "queries": len(queries),
        "matrix_load_ms": [round(x * 1000, 1) for x in matrix_load],
        "openblas_coretype": os.environ.get("OPENBLAS_CORETYPE"),
        "loadavg": os.getloadavg(),
        "ms": {
            state: {
                k: [round(float(np.percentile(v, 50)) * 1000, 2), round(float(np.percentile(v, 95)) * 1000, 2)]
                for k, v in stages.items()
            }
            for state, stages in per.items()
        },
    }
    print(json.dumps(out, indent=1))
    harness.log(f"wrote {harness.save_result('scale-stages', out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
