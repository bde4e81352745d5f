#!/usr/bin/env python
"""Load test of the REST API, run by hand: `POST /v1/search` (hybrid) at 1, 8 and 32 concurrent clients.

It builds bench/harness.py's ~10,000-chunk index (`build_query_index`: ~1,000 chunks embedded by the real
model, perturbed copies up to 10,000), starts `memsift serve` on a free 127.0.0.1 port in its own process,
and for each level runs that many clients (httpx AsyncClients in this process, one connection each, closed
loop: a client sends its next request when the last one answered) until `--requests` requests have been
answered. It reports requests/s and p50/p99 latency per level, and the server's RSS (VmRSS and its peak
VmHWM, from /proc/<pid>/status). Everything is bounded: a fixed request count per level, a timeout per
request, a deadline for the server's start; the server is stopped by its pid at the end.

    .venv/bin/python bench/load.py                              # defaults: 10,000 chunks, 400 requests a level
    .venv/bin/python bench/load.py --chunks 2000 --distinct 200 --requests 200 --levels 1,8
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import corpus  # noqa: E402  (the seeded notes and queries)
import harness  # noqa: E402  (timing, the model, the query index, results)

START_SECONDS = 120


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--chunks", type=int, default=10_000, help="chunks in the index (default 10,000)")
    p.add_argument("--distinct", type=int, default=1_000, help="chunks embedded by the real model (default 1,000)")
    p.add_argument("--levels", default="1,8,32", help="concurrent clients per level (default 1,8,32)")
    p.add_argument("--requests", type=int, default=400, help="requests per level (default 400)")
    p.add_argument("--warmup", type=int, default=20, help="requests before the first level (default 20)")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds per request")
    p.add_argument("--seed", type=int, default=7, help="seed of the notes and queries")
    p.add_argument("--noise", type=float, default=0.15, help="norm of the noise added to a copy's vector")
    p.add_argument("--keep", action="store_true", help="keep the temporary folder")
    p.add_argument("--out", type=Path, default=BENCH / "results", help="folder for the JSON result")
    args = p.parse_args(argv)
    args.levels = [int(n) for n in args.levels.split(",")]
    return args


def start_server(workspace: Path, home: Path, log_path: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = harness.free_port()
    # The same configuration the bench index was built with (harness.build_query_index: no MaxSim rerank).
    env = dict(os.environ, MEMSIFT_HOME=str(home), MEMSIFT_RERANK_ENABLED="false")
    memsift = Path(sys.executable).with_name("memsift")
    with open(log_path, "wb") as log_file:
        proc = subprocess.Popen(
            [str(memsift), "--workspace", str(workspace), "serve", "--port", str(port)],
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env=env,
        )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{base}/readyz", timeout=5).status_code == 200:
                return proc, base
        except httpx.TransportError:
            pass
        try:  # wait on the process between polls: a server that died is reported at once
            code = proc.wait(timeout=0.2)
        except subprocess.TimeoutExpired:
            continue
        raise SystemExit(f"memsift serve exited with {code}:\n{log_path.read_text(errors='replace')[-3000:]}")
    stop_server(proc)
    raise SystemExit(f"memsift serve was not ready within {START_SECONDS} s")


def stop_server(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    os.kill(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def memory_of(pid: int) -> dict[str, float]:
    """VmRSS and VmHWM (peak RSS) of a process, MiB."""
    found = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            found[key] = round(int(value.split()[0]) / 1024, 1)
    return found


async def run_level(base: str, queries: list[str], clients: int, requests: int, timeout: float) -> dict[str, Any]:
    """`clients` closed-loop clients share `requests` searches; latency of each, wall time of all."""
    latencies: list[float] = []
    core_ms: list[float] = []
    failures: dict[str, int] = {}
    next_request = 0

    async def client() -> None:
        nonlocal next_request
        limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
        async with httpx.AsyncClient(base_url=base, timeout=timeout, limits=limits) as http:
            while next_request < requests:
                query = queries[next_request % len(queries)]
                next_request += 1
                t = time.perf_counter()
                try:
                    r = await http.post("/v1/search", json={"query": query, "mode": "hybrid"})
                except httpx.HTTPError as exc:
                    failures[type(exc).__name__] = failures.get(type(exc).__name__, 0) + 1
                    continue
                latencies.append(time.perf_counter() - t)
                if r.status_code != 200:
                    failures[str(r.status_code)] = failures.get(str(r.status_code), 0) + 1
                else:
                    core_ms.append(r.json()["tookMs"])

    started = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    wall = time.perf_counter() - started
    ms = [x * 1000 for x in latencies]
    return {
        "clients": clients,
        "requests": requests,
        "failures": failures,
        "seconds": round(wall, 2),
        "requests_per_s": round(len(latencies) / wall, 1),
        "latency_ms": {
            "p50": round(harness.pct(ms, 50), 1),
            "p99": round(harness.pct(ms, 99), 1),
            "max": round(max(ms), 1),
            "mean": round(statistics.fmean(ms), 1),
        },
        "core_took_ms_p50": round(harness.pct(core_ms, 50), 1) if core_ms else None,
    }


def table(results: dict[str, Any]) -> str:
    rows = [
        "| clients | requests | requests/s | p50 ms | p99 ms | max ms | core tookMs p50 | failures | RSS after, MiB |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for level in results["levels"]:
        lat = level["latency_ms"]
        rows.append(
            f"| {level['clients']} | {level['requests']} | {level['requests_per_s']} | {lat['p50']} | {lat['p99']} "
            f"| {lat['max']} | {level['core_took_ms_p50']} | {sum(level['failures'].values())} "
            f"| {level['memory_mib']['VmRSS']} |"
        )
    mem = results["memory_mib"]
    rows.append("")
    rows.append(
        f"Index: {results['index']['chunks']} chunks in {results['index']['files']} files. Server RSS: "
        f"{mem['ready']['VmRSS']} MiB when ready, {mem['end']['VmRSS']} MiB at the end, peak {mem['end']['VmHWM']} MiB."
    )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    for name in [n for n in os.environ if n.startswith("MEMSIFT_")]:  # the defaults are what is measured
        del os.environ[name]
    tmp = Path(tempfile.mkdtemp(prefix="memsift-load-"))
    started = datetime.now(UTC)
    results: dict[str, Any] = {
        "started": started.isoformat(timespec="seconds"),
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "environment": harness.environment(),
        "busy_before": harness.cpu_busy(),
        "levels": [],
    }
    proc = None
    try:
        built = harness.build_query_index(
            tmp, seed=args.seed, chunks=args.chunks, distinct=args.distinct, noise=args.noise
        )
        results["index"] = {"chunks": built.chunks, "files": built.files, "embedded_by_model": built.distinct_texts}
        proc, base = start_server(built.config.workspace, built.config.home, tmp / "serve.log")
        harness.log(f"memsift serve pid {proc.pid} ready at {base}")
        results["memory_mib"] = {"ready": memory_of(proc.pid)}
        queries = corpus.make_queries(args.seed + 1, 200)
        asyncio.run(run_level(base, corpus.make_queries(args.seed + 2, args.warmup), 1, args.warmup, args.timeout))
        for clients in args.levels:
            level = asyncio.run(run_level(base, queries, clients, args.requests, args.timeout))
            level["memory_mib"] = memory_of(proc.pid)
            results["levels"].append(level)
            lat = level["latency_ms"]
            harness.log(
                f"{clients} clients: {level['requests_per_s']} requests/s, p50 {lat['p50']} ms, p99 {lat['p99']} ms"
            )
        results["memory_mib"]["end"] = memory_of(proc.pid)
    finally:
        if proc is not None:
            stop_server(proc)
        if args.keep:
            harness.log(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    results["seconds"] = round((datetime.now(UTC) - started).total_seconds(), 1)
    md = table(results)
    print(md)
    out = harness.save_result("load", results | {"table": md}, args.out)
    harness.log(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
