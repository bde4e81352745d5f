#!/usr/bin/env python
"""The keyword leg side by side, run by hand: FTS5's OR query against the cached phrase scores (core.keyword_cache).

Per size it builds bench/harness.py's query index (`build_query_index`, rerank off: the copies' vectors are
planted; `--keep DIR` keeps the indexes in DIR/<size> and reuses them on the next run), opens it once and, over
`--queries` generated queries:

  load     reading the index's chunk ids (what a search pays once after every write, before any phrase)
  cold     each query's first search with an empty phrase cache, in query order: the phrases it brings are
           filled (one FTS5 query each), those of earlier queries read; against FTS5 in ABBA order
  warm     `--passes` more passes, every phrase cached, ABBA against FTS5; wall and thread-CPU time
  same     whether both legs gave the same ids in the same order and the same scores (float tolerance 1e-9)
  memory   the cache's arrays after all queries, and the process's RSS before and after filling them
  hybrid   `MemoryIndex.search(mode="hybrid", explain=True)` minus its query embedding, FTS5 against the
           cache in ABBA order per query (warm), with the keyword stage from `timings`
  recall   the vector leg's top 10 against the exact float64 product over every stored vector
  serve    (`--serve N`) `memsift serve` on the index, its own process: VmRSS once ready and after N hybrid
           searches of distinct queries over HTTP (the cache filled by them), and the cache's bound

    .venv/bin/python bench/keyword_leg.py                                  # 1k, 10k, 100k (~10 min)
    .venv/bin/python bench/keyword_leg.py --sizes 10000 --queries 50 --keep /tmp/kw-indexes
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

import numpy as np

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import corpus  # noqa: E402  (the seeded notes and queries)
import harness  # noqa: E402  (timing, the model, the query index, results)
import load  # noqa: E402  (memory_of)

import core.store_search as store_module  # noqa: E402  (CACHE_MIN_CHUNKS: which leg answers)
from core import MemoryIndex, load_config  # noqa: E402
from core.identity import cache_key  # noqa: E402
from core.keyword_cache import KEYWORD_CACHES  # noqa: E402
from core.query import fts_phrases  # noqa: E402

NEVER, ALWAYS = 10**12, 0


class CpuTimingEmbedder(harness.TimingEmbedder):
    """Also the thread's CPU time of the last query embedding, to take it out of a search's CPU."""

    last_query_cpu_s: float = 0.0

    def embed_query(self, text: str) -> np.ndarray:
        cpu = time.thread_time()
        out = super().embed_query(text)
        self.last_query_cpu_s = time.thread_time() - cpu
        return out


def _config(root: Path, size: int, args: argparse.Namespace) -> Any:
    tmp = root / str(size)
    ws = tmp / "s3-workspace"
    if ws.exists() and (tmp / "s3-home").exists():
        harness.use_home(tmp / "s3-home")
        config = load_config(workspace=ws, overrides={"rerank.enabled": False})
        if config.db_path.exists():
            harness.log(f"reusing the {size}-chunk index in {tmp}")
            return config
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    return harness.build_query_index(tmp, seed=args.seed, chunks=size, distinct=min(size, 300), noise=0.15).config


def _timed(fn: Any) -> tuple[Any, float, float]:
    wall, cpu = time.perf_counter(), time.thread_time()
    out = fn()
    return out, time.perf_counter() - wall, time.thread_time() - cpu


def _same(a: list[tuple[int, float]], b: list[tuple[int, float]]) -> bool:
    return [c for c, _ in a] == [c for c, _ in b] and np.allclose([s for _, s in a], [s for _, s in b], atol=1e-9)


def _ms(values: list[float]) -> dict[str, float]:
    return {"p50": round(harness.pct(values, 50) * 1000, 3), "p95": round(harness.pct(values, 95) * 1000, 3)}


def measure(config: Any, args: argparse.Namespace) -> dict[str, Any]:
    emb, _ = harness.embedder()
    timing = CpuTimingEmbedder(emb)
    queries = list(dict.fromkeys(corpus.make_queries(args.seed + 1, 20 * args.queries)))[: args.queries]
    phrases = [p for p in (fts_phrases(q) for q in queries) if p]
    fetch = config.search.fetch
    with MemoryIndex(config, embedder=timing) as index:
        store = index.store
        chunks = store.conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
        store_module.CACHE_MIN_CHUNKS = ALWAYS
        KEYWORD_CACHES.clear()
        store.fts_search(" OR ".join(phrases[0]), fetch)  # FTS5's pages in the page cache, for both legs
        _, load_s, load_cpu = _timed(lambda: store.keyword_search([], fetch))
        rss_before = load.memory_of(os.getpid())["VmRSS"]
        legs: dict[str, dict[str, list[float]]] = {
            f"{leg}_{phase}_{clock}": [] for leg in ("fts", "cached") for phase in ("cold", "warm") for clock in "wc"
        }
        same = differ = 0
        for p in range(1 + args.passes):
            phase = "cold" if p == 0 else "warm"
            for i, ph in enumerate(phrases):
                order = ("fts", "cached") if (i + p) % 2 == 0 else ("cached", "fts")
                got = {}
                for leg in order:
                    if leg == "fts":
                        got[leg], wall, cpu = _timed(lambda ph=ph: store.fts_search(" OR ".join(ph), fetch))
                    else:
                        got[leg], wall, cpu = _timed(lambda ph=ph: store.keyword_search(ph, fetch))
                    legs[f"{leg}_{phase}_w"].append(wall)
                    legs[f"{leg}_{phase}_c"].append(cpu)
                same, differ = (same + 1, differ) if _same(got["fts"], got["cached"]) else (same, differ + 1)
        rss_after = load.memory_of(os.getpid())["VmRSS"]
        cache_mib = KEYWORD_CACHES.nbytes / 2**20
        matched = [len(store.fts_search(" OR ".join(ph), 10**9)) for ph in phrases[:20]]

        for q in corpus.make_queries(args.seed + 2, 5):  # warm-up: the vector matrix of a large index
            index.search(q, mode="hybrid")
        hybrid: dict[str, list[float]] = {"fts": [], "cached": []}
        hybrid_cpu: dict[str, list[float]] = {"fts": [], "cached": []}
        keyword_stage: dict[str, list[float]] = {"fts": [], "cached": []}
        for i, q in enumerate(queries[: args.hybrid]):
            for leg in ("fts", "cached") if i % 2 == 0 else ("cached", "fts"):
                store_module.CACHE_MIN_CHUNKS = NEVER if leg == "fts" else ALWAYS
                t, cpu = time.perf_counter(), time.thread_time()
                response = index.search(q, mode="hybrid", explain=True)
                hybrid[leg].append(time.perf_counter() - t - timing.last_query_s)
                hybrid_cpu[leg].append(time.thread_time() - cpu - timing.last_query_cpu_s)
                keyword_stage[leg].append((response.timings or {}).get("keyword", 0.0) / 1000)

        key = cache_key(emb)
        stored = store.conn.execute(
            "SELECT c.id, e.embedding FROM chunks c JOIN embedding_cache e ON e.hash = c.hash "
            "AND e.provider = ? AND e.model = ? AND e.fingerprint = ?",
            key,
        ).fetchall()
        ids = np.array([c for c, _ in stored], dtype=np.int64)
        vectors = np.frombuffer(b"".join(v for _, v in stored), dtype=np.float32).reshape(len(stored), -1)
        del stored
        recall = []
        for q in queries[: args.hybrid]:
            qvec = emb.embed_query(q)
            found = {c for c, _ in store.vec_search(qvec, 10, key)}
            exact = ids[np.argsort(-(vectors.astype(np.float64) @ qvec.astype(np.float64)), kind="stable")[:10]]
            recall.append(len(found & set(exact.tolist())) / max(1, len(exact)))
    store_module.CACHE_MIN_CHUNKS = NEVER
    out = {
        "chunks": chunks,
        "queries": len(phrases),
        "rows_matched_p50": int(np.median(matched)),
        "load_ms": round(load_s * 1000, 2),
        "load_cpu_ms": round(load_cpu * 1000, 2),
        "same_results": f"{same}/{same + differ}",
        "cache_mib": round(cache_mib, 2),
        "ids_mib": round(chunks * 8 / 2**20, 2),
        "rss_mib_before_after": [rss_before, rss_after],
        "hybrid_minus_embed_ms": {leg: _ms(v) for leg, v in hybrid.items()},
        "hybrid_minus_embed_cpu_ms": {leg: _ms(v) for leg, v in hybrid_cpu.items()},
        "hybrid_keyword_stage_ms": {leg: _ms(v) for leg, v in keyword_stage.items()},
        "vector_recall_at_10": round(float(np.mean(recall)), 4) if recall else None,
        "loadavg": os.getloadavg(),
    }
    out |= {name: _ms(values) for name, values in legs.items()}
    return out


def serve_rss(config: Any, searches: int, seed: int) -> dict[str, Any]:
    """`memsift serve`'s memory once ready and after `searches` distinct hybrid searches (phrases cached)."""
    import httpx

    proc, base = load.start_server(config.workspace, config.home, config.home / "serve.log", rerank=False)
    try:
        ready = load.memory_of(proc.pid)
        queries = list(dict.fromkeys(corpus.make_queries(seed + 3, 20 * searches)))[:searches]
        for q in queries:
            httpx.post(f"{base}/v1/search", json={"query": q, "mode": "hybrid"}, timeout=120).raise_for_status()
        return {"ready": ready, "after": load.memory_of(proc.pid), "searches": len(queries)}
    finally:
        load.stop_server(proc)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="1000,10000,100000")
    p.add_argument("--queries", type=int, default=100)
    p.add_argument("--passes", type=int, default=2, help="warm passes after the cold one")
    p.add_argument("--hybrid", type=int, default=60, help="queries for the hybrid search and the recall")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--keep", type=Path, help="keep the built indexes here and reuse them")
    p.add_argument("--serve", type=int, default=0, help="searches through `memsift serve` for its RSS (0: none)")
    args = p.parse_args(argv)
    for name in [n for n in os.environ if n.startswith("MEMSIFT_")]:
        del os.environ[name]
    root = args.keep or Path(tempfile.mkdtemp(prefix="memsift-keyword-leg-"))
    results: dict[str, Any] = {"environment": harness.environment(), "busy_before": harness.cpu_busy(), "sizes": []}
    try:
        for size in [int(s) for s in args.sizes.split(",")]:
            config = _config(root, size, args)
            row = measure(config, args)
            if args.serve:
                row["serve_rss_mib"] = serve_rss(config, args.serve, args.seed)
            results["sizes"].append(row)
            harness.log(f"{size}: {row}")
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    print(
        "| chunks | rows matched p50 | FTS5 warm p50 / p95 ms | cached warm p50 / p95 | FTS5 cold | cached cold "
        "| CPU ms p50 FTS5 / cached (warm) | load ms | cache MiB | same | hybrid − embed p50 / p95 FTS5 | cached "
        "| hybrid − embed CPU p50 FTS5 / cached | recall@10 | load avg |"
    )
    print("|---" * 15 + "|")
    for r in results["sizes"]:
        h = r["hybrid_minus_embed_ms"]
        print(
            f"| {r['chunks']:,} | {r['rows_matched_p50']:,} | {r['fts_warm_w']['p50']} / {r['fts_warm_w']['p95']} "
            f"| {r['cached_warm_w']['p50']} / {r['cached_warm_w']['p95']} "
            f"| {r['fts_cold_w']['p50']} / {r['fts_cold_w']['p95']} | {r['cached_cold_w']['p50']} / "
            f"{r['cached_cold_w']['p95']} | {r['fts_warm_c']['p50']} / {r['cached_warm_c']['p50']} "
            f"| {r['load_ms']} | {r['cache_mib']} | {r['same_results']} "
            f"| {h['fts']['p50']} / {h['fts']['p95']} | {h['cached']['p50']} / {h['cached']['p95']} "
            f"| {r['hybrid_minus_embed_cpu_ms']['fts']['p50']} / {r['hybrid_minus_embed_cpu_ms']['cached']['p50']} "
            f"| {r['vector_recall_at_10']} | {r['loadavg'][0]:.1f} |"
        )
    harness.log(f"wrote {harness.save_result('keyword-leg', results)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
