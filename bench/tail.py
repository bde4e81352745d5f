#!/usr/bin/env python
"""Single-client search latency tail, before and after `core.threads`, run by hand.

Two indexes with the default configuration (MaxSim rerank on): one held-out-sized LoCoMo workspace
(`--locomo-conv`, embedded by the real model) with its own questions, and bench/harness.py's 10,000-chunk index
(`build_query_index(rerank=True)`) with the generated queries. Each cell is a fresh child process that loads the
model, opens the index, warms up and times `--queries` searches one after another through `MemoryIndex.search`:

- threads `before`: every library's default (MEMSIFT_BLAS_THREADS=0, MEMSIFT_ONNX_QUERY_THREADS=0, i.e.
  OpenBLAS and the query session with one thread per core, as before issue 17), or `after` (the defaults);
- machine `idle` (whatever the other users of the machine are doing) or `busy` (plus one CPU-bound process
  of ours, started before the cell and stopped by its pid after it);
- OpenBLAS `as-is` (the environment of the caller) or `coretype` (OPENBLAS_CORETYPE=`--coretype`), or
  `unset` (OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE removed for that child only) when the caller sets them.

Cells run in ABBA order of before/after within each (index, load, BLAS) group, so a drift of the machine hits
both alike; each row reports p50/p95/p99/max and the ratios p95/p50 and p99/p50 (targets <= 2 and <= 4), and
the child's view of the settings (threadpoolctl's BLAS threads, the ONNX query session's threads).

    .venv/bin/python bench/tail.py                          # both indexes, 200 queries a cell (~15 min busy)
    .venv/bin/python bench/tail.py --indexes locomo --queries 100
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import corpus  # noqa: E402  (the seeded notes and queries)
import harness  # noqa: E402  (timing, the model, the query index, results)

LOCOMO = Path("/work/shared/bench/locomo-dev")
BEFORE = {"MEMSIFT_BLAS_THREADS": "0", "MEMSIFT_ONNX_QUERY_THREADS": "0"}
BLAS_VARS = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
BURN = "import time\nend = time.time() + {s}\nwhile time.time() < end:\n    pass\n"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--indexes", default="locomo,10k", help="which indexes (default locomo,10k)")
    p.add_argument("--locomo", type=Path, default=LOCOMO, help="the locomo-dev folder")
    p.add_argument("--locomo-conv", default="conv-42", help="the workspace of locomo-dev to index (199 questions)")
    p.add_argument("--chunks", type=int, default=10_000, help="chunks of the big index")
    p.add_argument("--distinct", type=int, default=300, help="chunks of the big index embedded by the model")
    p.add_argument("--queries", type=int, default=200, help="timed searches per cell")
    p.add_argument("--warmup", type=int, default=15, help="untimed searches per cell first")
    p.add_argument("--loads", default="idle,busy", help="machine loads (default idle,busy)")
    p.add_argument("--coretype", default="Haswell", help="OPENBLAS_CORETYPE for the `coretype` cells")
    p.add_argument("--blas", default="as-is,coretype", help="OpenBLAS environments (as-is, coretype, unset)")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--keep", action="store_true")
    p.add_argument("--out", type=Path, default=BENCH / "results")
    p.add_argument("--child", help=argparse.SUPPRESS)  # JSON: run one cell and print its figures
    return p.parse_args(argv)


def child(spec: dict[str, Any]) -> None:
    """One cell: the model, the index, warm-up, then the timed searches; prints JSON."""
    from threadpoolctl import threadpool_info

    from core import MemoryIndex, load_config

    config = load_config(workspace=spec["workspace"])
    queries: list[str] = spec["queries"]
    with MemoryIndex(config) as index:
        for q in queries[: spec["warmup"]]:
            index.search(q)
        ms = []
        degraded = 0
        for q in queries[spec["warmup"] :]:
            t = time.perf_counter()
            response = index.search(q)
            ms.append((time.perf_counter() - t) * 1000)
            degraded += response.degraded is not None
        session = index.embedder()._session.get_session_options()
    blas = [(p["internal_api"], p["num_threads"], p.get("architecture")) for p in threadpool_info()]
    threads = session.intra_op_num_threads
    print(json.dumps({"ms": ms, "degraded": degraded, "blas": blas, "onnx_query_threads": threads}))


def percentiles(ms: list[float]) -> dict[str, float]:
    p50, p95, p99 = (harness.pct(ms, q) for q in (50, 95, 99))
    return {
        "p50": round(p50, 2),
        "p95": round(p95, 2),
        "p99": round(p99, 2),
        "max": round(max(ms), 2),
        "p95/p50": round(p95 / p50, 2),
        "p99/p50": round(p99 / p50, 2),
    }


def run_cell(spec: dict[str, Any], threads: str, blas: str, coretype: str, home: Path) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSIFT_")}
    env["MEMSIFT_HOME"] = str(home)
    if threads == "before":
        env.update(BEFORE)
    if blas == "coretype":
        env["OPENBLAS_CORETYPE"] = coretype
    elif blas == "unset":
        for name in BLAS_VARS:
            env.pop(name, None)
    out = subprocess.run(
        [sys.executable, __file__, "--child", json.dumps(spec)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=1800,
    )
    if out.returncode:
        raise SystemExit(f"a cell failed:\n{out.stderr[-3000:]}")
    found = json.loads(out.stdout.strip().splitlines()[-1])
    return {**percentiles(found["ms"]), **{k: v for k, v in found.items() if k != "ms"}, "ms": found["ms"]}


def start_burner(seconds: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", BURN.format(s=seconds)])


def stop(proc: subprocess.Popen[bytes] | None) -> None:
    if proc is not None and proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)


def locomo_index(args: argparse.Namespace, home: Path) -> dict[str, Any]:
    from core import MemoryIndex, load_config

    ws = (args.locomo / "workspaces" / args.locomo_conv).resolve()
    rows = [json.loads(line) for line in (args.locomo / "queries.jsonl").read_text().splitlines() if line.strip()]
    queries = [r["query"] for r in rows if r.get("conv") == args.locomo_conv]
    os.environ["MEMSIFT_HOME"] = str(home)
    t = time.perf_counter()
    with MemoryIndex(load_config(workspace=ws)) as index:
        report = index.sync()
        chunks = sum(index.store.stats()["chunks"].values())
    harness.log(f"locomo {args.locomo_conv}: {chunks} chunks indexed in {time.perf_counter() - t:.1f} s")
    return {"workspace": str(ws), "home": str(home), "chunks": chunks, "queries": queries, "sync": report.to_dict()}


def big_index(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    built = harness.build_query_index(
        tmp, seed=args.seed, chunks=args.chunks, distinct=args.distinct, noise=0.15, rerank=True
    )
    return {
        "workspace": str(built.config.workspace),
        "home": str(built.config.home),
        "chunks": built.chunks,
        "queries": corpus.make_queries(args.seed + 1, 400),
    }


def table(rows: list[dict[str, Any]]) -> str:
    out = [
        "| index | load | OpenBLAS | threads | p50 ms | p95 ms | p99 ms | max ms | p95/p50 | p99/p50 | load avg |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        out.append(
            f"| {r['index']} | {r['load']} | {r['blas_env']} | {r['threads']} | {r['p50']} | {r['p95']} | {r['p99']} "
            f"| {r['max']} | {r['p95/p50']} | {r['p99/p50']} | {r['loadavg']} |"
        )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child:
        child(json.loads(args.child))
        return 0
    for name in [n for n in os.environ if n.startswith("MEMSIFT_")]:
        del os.environ[name]
    tmp = Path(tempfile.mkdtemp(prefix="memsift-tail-"))
    started = datetime.now(UTC)
    results: dict[str, Any] = {
        "started": started.isoformat(timespec="seconds"),
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items() if k != "child"},
        "environment": harness.environment(),
        "openblas_env": {k: os.environ.get(k) for k in BLAS_VARS},
        "busy_before": harness.cpu_busy(),
        "uptime_before": os.getloadavg(),
        "rows": [],
    }
    burner = None
    try:
        indexes = {}
        for name in args.indexes.split(","):
            if name == "locomo":
                indexes[name] = locomo_index(args, tmp / "locomo-home")
            elif name == "10k":
                indexes[name] = big_index(args, tmp)
            else:
                raise SystemExit(f"--indexes: unknown {name!r} (locomo, 10k)")
        results["indexes"] = {k: {kk: vv for kk, vv in v.items() if kk != "queries"} for k, v in indexes.items()}
        for name, idx in indexes.items():
            spec = {"workspace": idx["workspace"], "warmup": args.warmup}
            spec["queries"] = idx["queries"][: args.warmup + args.queries]  # no repeats: the score cache
            for load in args.loads.split(","):
                for blas in args.blas.split(","):
                    for threads in ("before", "after", "after", "before"):
                        if load == "busy":
                            burner = start_burner(1800)
                        loadavg = round(os.getloadavg()[0], 1)
                        row = run_cell(spec, threads, blas, args.coretype, Path(idx["home"]))
                        stop(burner)
                        burner = None
                        row |= {"index": name, "load": load, "blas_env": blas, "threads": threads, "loadavg": loadavg}
                        results["rows"].append(row)
                        harness.log(
                            f"{name} {load} {blas} {threads}: p50 {row['p50']} p95 {row['p95']} p99 {row['p99']} ms "
                            f"(p99/p50 {row['p99/p50']}, load {loadavg}, blas {row['blas']})"
                        )
    finally:
        stop(burner)
        if args.keep:
            harness.log(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    results["uptime_after"] = os.getloadavg()
    md = table(results["rows"])
    print(md)
    out = harness.save_result("tail", results | {"table": md}, args.out)
    harness.log(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
