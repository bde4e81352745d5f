#!/usr/bin/env python
"""How cost grows with the index, run by hand: 1,000 / 10,000 / 100,000 chunks.

For each size it builds bench/harness.py's query index (`build_query_index`: `--distinct` chunks embedded by the
real model, perturbed copies up to the size with their vectors put in the embedding cache before one normal
`MemoryIndex(config).sync()`), then reports:

  index     the sync's wall time (it embeds nothing: the vectors are cached) and, apart, the model time the
            same chunks would take at the model speed measured on the distinct texts in this run
  db        the index file's size (with its -wal)
  search    `MemoryIndex.search` in hybrid mode over `--queries` generated queries: p50 of the whole search,
            of the query embedding inside it, and of the rest (the target figure: search without embedding)
  rss       `memsift serve` (its own process, model loaded) after `--serve-queries` searches: VmRSS, VmHWM

The optimised graph is built once into a temporary `MEMSIFT_MODEL_CACHE` that the server shares.

    .venv/bin/python bench/growth.py                              # 1k, 10k, 100k (~15 min on 2 idle cores)
    .venv/bin/python bench/growth.py --sizes 1000,10000 --queries 50
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import corpus  # noqa: E402  (the seeded notes and queries)
import harness  # noqa: E402  (timing, the model, the query index, results)
import load  # noqa: E402  (start_server, stop_server, memory_of)


def measure(size: int, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    from core import MemoryIndex
    from core.vector_matrix import MATRIX_MIN_CHUNKS

    emb, _ = harness.embedder()
    built = harness.build_query_index(
        tmp, seed=args.seed, chunks=size, distinct=min(size, args.distinct), noise=args.noise
    )
    db = built.config.db_path
    db_bytes = sum(p.stat().st_size for p in (db, db.with_name(db.name + "-wal")) if p.exists())
    timing = harness.TimingEmbedder(emb)
    total, embed = [], []
    with MemoryIndex(built.config, embedder=timing) as index:
        for q in corpus.make_queries(args.seed + 2, 5):  # warm-up: loads the matrix of a large index
            index.search(q, mode="hybrid")
        for q in corpus.make_queries(args.seed + 1, args.queries):
            t = time.perf_counter()
            index.search(q, mode="hybrid")
            total.append(time.perf_counter() - t)
            embed.append(timing.last_query_s)
    rest = [t - e for t, e in zip(total, embed)]
    proc, base = load.start_server(built.config.workspace, built.config.home, tmp / "serve.log")
    try:
        ready = load.memory_of(proc.pid)
        for q in corpus.make_queries(args.seed + 3, args.serve_queries):
            httpx.post(f"{base}/v1/search", json={"query": q, "mode": "hybrid"}, timeout=60).raise_for_status()
        served = load.memory_of(proc.pid)
    finally:
        load.stop_server(proc)
    return {
        "chunks": built.chunks,
        "files": built.files,
        "vector_leg": "numpy matrix" if built.chunks >= MATRIX_MIN_CHUNKS else "vec0",
        "sync_s": round(built.build_s, 1),
        "db_mib": round(db_bytes / 2**20, 1),
        "search_p50_ms": round(harness.pct(total, 50) * 1000, 2),
        "embed_query_p50_ms": round(harness.pct(embed, 50) * 1000, 2),
        "search_minus_embed_p50_ms": round(harness.pct(rest, 50) * 1000, 2),
        "search_minus_embed_p95_ms": round(harness.pct(rest, 95) * 1000, 2),
        "serve_rss_ready_mib": ready.get("VmRSS"),
        "serve_rss_mib": served.get("VmRSS"),
        "serve_peak_mib": served.get("VmHWM"),
        "model_texts_embedded": built.embedded_texts,
        "model_embed_s": round(built.embed_s, 1),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", default="1000,10000,100000")
    p.add_argument("--distinct", type=int, default=300, help="chunks embedded by the real model (at most)")
    p.add_argument("--queries", type=int, default=100)
    p.add_argument("--serve-queries", type=int, default=20)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--noise", type=float, default=0.15)
    args = p.parse_args(argv)
    for name in [n for n in os.environ if n.startswith("MEMSIFT_")]:  # the defaults are what is measured
        del os.environ[name]
    tmp = Path(tempfile.mkdtemp(prefix="memsift-growth-"))
    os.environ["MEMSIFT_MODEL_CACHE"] = str(tmp / "models")
    busy = harness.cpu_busy()
    rows: dict[int, dict[str, Any]] = {}
    texts_per_s = None
    try:
        for size in (int(s) for s in args.sizes.split(",")):
            rows[size] = measure(size, args, tmp / f"n{size}")
            if rows[size]["model_texts_embedded"]:
                texts_per_s = rows[size]["model_texts_embedded"] / rows[size]["model_embed_s"]
            harness.log(f"{size}: {rows[size]}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(
        "| chunks | vector leg | sync s (vectors cached) | + model s (est.) | DB MiB | hybrid p50 ms | "
        "query embedding p50 ms | hybrid minus embedding p50 / p95 ms | serve RSS MiB (peak) |"
    )
    print("|---" * 9 + "|")
    for r in rows.values():
        model_s = f"{r['chunks'] / texts_per_s:,.0f}" if texts_per_s else "?"
        print(
            f"| {r['chunks']:,} | {r['vector_leg']} | {r['sync_s']} | {model_s} | {r['db_mib']} | "
            f"{r['search_p50_ms']} | {r['embed_query_p50_ms']} | {r['search_minus_embed_p50_ms']} / "
            f"{r['search_minus_embed_p95_ms']} | {r['serve_rss_mib']} ({r['serve_peak_mib']}) |"
        )
    print(
        f"\nmodel speed in this run: {texts_per_s or 0:.1f} chunks/s; CPUs busy before: {busy:.0%}; "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    doc = {
        "environment": harness.environment(),
        "busy_before": busy,
        "args": vars(args),
        "rows": rows,
        "model_chunks_per_s": texts_per_s,
    }
    harness.save_result("growth", doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
