#!/usr/bin/env python
"""The local embedder's two graphs side by side, run by hand: `shipped` against `optimized`.

Each measurement runs in a fresh child process (so resident memory is the graph's own): load the graph,
warm up, embed `--passages` passages of 1,600 characters of the seeded daily notes (bench/corpus.py), time
`--queries` single queries, and report passages/s, windows/s, query p50 and the process's VmRSS / VmHWM.
Rounds alternate ABBA (shipped, optimized, optimized, shipped ...) so a drift of the shared machine's speed
hits both; medians are reported with the ratio optimized / shipped. The parent also reports the cosine of
each passage's two vectors and the one-off build time of the optimised graph (into a fresh cache).

    .venv/bin/python bench/embedder.py                       # 128 passages, 2 rounds (~3 min on 2 idle cores)
    .venv/bin/python bench/embedder.py --passages 32 --rounds 1
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent))

import corpus  # noqa: E402  (the seeded notes and queries)
import harness  # noqa: E402  (timing, the model, the query index, results)
from load import memory_of  # noqa: E402

PASSAGE_CHARS = 1600


def passages(seed: int, n: int) -> list[str]:
    text = "".join(corpus.daily_note(seed, i) for i in range(n // 2 + 2))
    return [text[i * PASSAGE_CHARS : (i + 1) * PASSAGE_CHARS] for i in range(n)]


def child(graph: str, n: int, queries: int, seed: int, vectors_out: Path) -> dict[str, Any]:
    """One graph in this process: load, warm up, time documents and queries, resident memory."""
    from core.embedders.local import LocalEmbedder

    t = time.perf_counter()
    emb = LocalEmbedder(graph=graph)
    load_s = time.perf_counter() - t
    assert emb.graph == graph, f"asked for {graph}, got {emb.graph} (see the warning above)"
    emb.embed_documents(passages(seed + 1, 8))  # warm-up on other texts
    texts = passages(seed, n)
    windows = len(emb._windows(texts, whole=True)[0])
    t = time.perf_counter()
    vectors = emb.embed_documents(texts)
    docs_s = time.perf_counter() - t
    np.save(vectors_out, vectors)
    query_s = []
    for q in corpus.make_queries(seed, queries):
        t = time.perf_counter()
        emb.embed_query(q)
        query_s.append(time.perf_counter() - t)
    return {
        "graph": graph,
        "load_s": round(load_s, 2),
        "passages_per_s": round(n / docs_s, 2),
        "windows_per_s": round(windows / docs_s, 2),
        "windows": windows,
        "query_p50_ms": round(harness.pct(query_s, 50) * 1000, 2),
        **memory_of(os.getpid()),
    }


def run_child(args: argparse.Namespace, graph: str, out: Path, env: dict[str, str]) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--child", graph, "--passages", str(args.passages)]
    cmd += ["--queries", str(args.queries), "--seed", str(args.seed), "--vectors", str(out)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--passages", type=int, default=128)
    p.add_argument("--queries", type=int, default=100)
    p.add_argument("--rounds", type=int, default=2, help="ABBA rounds")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--child", choices=("shipped", "optimized"), help=argparse.SUPPRESS)
    p.add_argument("--vectors", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.passages, args.queries, args.seed, args.vectors)))
        return 0

    with tempfile.TemporaryDirectory(prefix="memsift-bench-embedder-") as tmp:
        env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSIFT_")}
        env.update(MEMSIFT_HOME=str(Path(tmp) / "home"), MEMSIFT_MODEL_CACHE=str(Path(tmp) / "models"))
        harness.log("building the optimised graph into a fresh cache")
        t = time.perf_counter()
        subprocess.run([sys.executable, "-m", "api.cli", "model", "build"], env=env, cwd=BENCH.parent, check=True)
        build_s = time.perf_counter() - t
        busy = harness.cpu_busy()
        runs: dict[str, list[dict[str, Any]]] = {"shipped": [], "optimized": []}
        for r in range(args.rounds):
            order = ("shipped", "optimized") if r % 2 == 0 else ("optimized", "shipped")
            for graph in order + order[::-1]:
                runs[graph].append(run_child(args, graph, Path(tmp) / f"{graph}.npy", env))
                harness.log(f"{graph}: {runs[graph][-1]}")
        cosines = (np.load(Path(tmp) / "shipped.npy") * np.load(Path(tmp) / "optimized.npy")).sum(axis=1)

    def median(graph: str, key: str) -> float:
        return round(statistics.median(run[key] for run in runs[graph]), 2)

    keys = ("passages_per_s", "windows_per_s", "query_p50_ms", "VmRSS", "VmHWM", "load_s")
    result = {
        "environment": harness.environment(),
        "busy_before": busy,
        "load_average": os.getloadavg(),
        "args": {k: v for k, v in vars(args).items() if k not in ("child", "vectors")},
        "build_s": round(build_s, 1),
        "median": {g: {k: median(g, k) for k in keys} for g in runs},
        "ratio_optimized_over_shipped": {k: round(median("optimized", k) / median("shipped", k), 2) for k in keys},
        "cosine": {"min": round(float(cosines.min()), 4), "mean": round(float(cosines.mean()), 4)},
        "runs": runs,
    }
    print("| metric | shipped | optimized | optimized / shipped |\n|---|---|---|---|")
    for k in keys:
        print(
            f"| {k} | {result['median']['shipped'][k]} | {result['median']['optimized'][k]} "
            f"| {result['ratio_optimized_over_shipped'][k]} |"
        )
    print(
        f"\ncosine optimized vs shipped over {args.passages} passages: {result['cosine']}; "
        f"build {build_s:.1f} s; CPUs busy before: {busy:.0%}; load average {os.getloadavg()[0]:.1f}"
    )
    harness.save_result("embedder", result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
