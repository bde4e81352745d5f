#!/usr/bin/env python
"""Load test of the REST API, run by hand: `POST /v1/search` (hybrid) at 1, 8 and 32 concurrent clients.

It builds bench/harness.py's ~10,000-chunk index (`build_query_index`: ~1,000 chunks embedded by the real
model, perturbed copies up to 10,000), starts `memsift serve` on a free 127.0.0.1 port in its own process,
and for each level runs that many clients (httpx AsyncClients in this process, one connection each, closed
loop: a client sends its next request when the last one answered) until `--requests` requests have been
answered. It reports requests/s and p50/p99 latency per level, and the server's RSS (VmRSS and its peak
VmHWM, from /proc/<pid>/status). The configuration is the default (MaxSim rerank on; the index is built with
token bits, `build_query_index(rerank=True)`) unless `--no-rerank`. `--workers 0,2` runs one server after
the other over the same index and queries, with `api.workers` 0 (searches in the server's threads) and then 2
(in two worker processes). `--code A,B,B,A` does the same over checkouts of memsift: each server runs the code
of one folder (put first on PYTHONPATH), so two versions are measured side by side in one run, in ABBA order
against the drift of a shared machine (the index is built once, by this checkout). What bounds a level: the
server's CPU seconds per request (utime + stime of its process and its worker processes), this script's (the
clients'), and the mean time per search stage from the server's own `memsift_search_stage_seconds` histograms
(scraped from /metrics before and after the level); server CPU minus the stages is roughly what HTTP, JSON and
threads cost. Everything is bounded: a fixed request count per level, a timeout per request, a deadline for
the server's start; the server is stopped by its pid at the end.

    .venv/bin/python bench/load.py                              # defaults: 10,000 chunks, 400 requests a level
    .venv/bin/python bench/load.py --chunks 2000 --distinct 200 --requests 200 --levels 1,8
    .venv/bin/python bench/load.py --distinct 300 --requests 300 --levels 1,8,32 --workers 0,2
    .venv/bin/python bench/load.py --distinct 300 --requests 300 --levels 1,8 --code /tmp/main,.,.,/tmp/main
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
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
    p.add_argument(
        "--workers",
        default="0",
        help="api.workers of each server, one server after the other over the same index (default 0; e.g. 0,2)",
    )
    p.add_argument(
        "--code",
        default="",
        help="checkouts of memsift (folders holding core/), a server each, in order (e.g. /tmp/main,.,.,/tmp/main)",
    )
    p.add_argument("--requests", type=int, default=400, help="requests per level (default 400)")
    p.add_argument("--warmup", type=int, default=20, help="requests before the first level (default 20)")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds per request")
    p.add_argument("--seed", type=int, default=7, help="seed of the notes and queries")
    p.add_argument("--noise", type=float, default=0.15, help="norm of the noise added to a copy's vector")
    p.add_argument("--no-rerank", dest="rerank", action="store_false", help="MaxSim rerank off (runs before 17)")
    p.add_argument("--keep", action="store_true", help="keep the temporary folder")
    p.add_argument("--out", type=Path, default=BENCH / "results", help="folder for the JSON result")
    args = p.parse_args(argv)
    args.levels = [int(n) for n in args.levels.split(",")]
    args.workers = [int(n) for n in args.workers.split(",")]
    args.code = [str(Path(c).resolve()) for c in args.code.split(",")] if args.code else [None]
    return args


def start_server(
    workspace: Path, home: Path, log_path: Path, rerank: bool, workers: int, code: str | None = None
) -> tuple[subprocess.Popen[bytes], str]:
    """`memsift serve` over the index, running the checkout at `code` (None: the installed one)."""
    port = harness.free_port()
    env = dict(os.environ, MEMSIFT_HOME=str(home), MEMSIFT_API_WORKERS=str(workers))
    if code is not None:
        env["PYTHONPATH"] = code
    if not rerank:  # the configuration the index was built with
        env["MEMSIFT_RERANK_ENABLED"] = "false"
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


def family(pid: int) -> list[int]:
    """A process and its descendants alive now (the server and its search workers)."""
    found = [pid]
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            found += family(int(child))
    return found


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process and its live descendants, all their threads."""
    total = 0
    for p in family(pid):
        fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def stage_sums(base: str) -> dict[str, tuple[float, float]]:
    """(seconds, count) per search stage from the server's memsift_search_stage_seconds histograms."""
    found: dict[str, list[float]] = {}
    for line in httpx.get(f"{base}/metrics", timeout=30).text.splitlines():
        m = re.match(r'memsift_search_stage_seconds_(sum|count)\{stage="(\w+)"\} ([\d.e+-]+)', line)
        if m:
            found.setdefault(m[2], [0.0, 0.0])[m[1] == "count"] = float(m[3])
    return {k: (v[0], v[1]) for k, v in found.items()}


def memory_of(pid: int) -> dict[str, float]:
    """VmRSS and VmHWM (peak RSS) summed over the server and its workers, MiB (pages they share, such as the
    model's file, count once per process), and the processes counted."""
    found = {"VmRSS": 0.0, "VmHWM": 0.0}
    processes = family(pid)
    for p in processes:
        for line in Path(f"/proc/{p}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in found:
                found[key] = round(found[key] + int(value.split()[0]) / 1024, 1)
    return found | {"processes": len(processes)}


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


def measure_level(pid: int, base: str, queries: list[str], clients: int, args: argparse.Namespace) -> dict[str, Any]:
    """One level against a running server, with its CPU per request (server and workers, and the clients) and
    the mean time per search stage from its /metrics."""
    stages0, server0, client0 = stage_sums(base), cpu_seconds(pid), time.process_time()
    level = asyncio.run(run_level(base, queries, clients, args.requests, args.timeout))
    server1, client1, stages1 = cpu_seconds(pid), time.process_time(), stage_sums(base)
    answered = level["requests"] - sum(level["failures"].values())
    level["cpu_ms_per_request"] = {
        "server": round((server1 - server0) * 1000 / answered, 2),
        "clients": round((client1 - client0) * 1000 / answered, 2),
    }
    level["stage_ms_per_request"] = {
        stage: round((s1 - stages0.get(stage, (0.0, 0.0))[0]) * 1000 / answered, 2)
        for stage, (s1, _) in stages1.items()
    }
    level["loadavg"] = round(os.getloadavg()[0], 1)
    level["memory_mib"] = memory_of(pid)
    return level


def describe(code: str | None) -> str:
    """A checkout as the tables name it: its folder and commit (`?` outside git)."""
    code = code or str(BENCH.parent)
    found = subprocess.run(["git", "-C", code, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return f"{code} ({found.stdout.strip() or '?'})"


def table(results: dict[str, Any]) -> str:
    rows = [
        "| code | workers | clients | requests | requests/s | p50 ms | p99 ms | max ms | core tookMs p50 | failures "
        "| server CPU ms/req | client CPU ms/req | stage ms/req | load avg | RSS after, MiB (processes) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for level in results["levels"]:
        lat = level["latency_ms"]
        cpu = level["cpu_ms_per_request"]
        mem = level["memory_mib"]
        stages = ", ".join(f"{k} {v}" for k, v in level["stage_ms_per_request"].items())
        rows.append(
            f"| {level['code']} | {level['workers']} | {level['clients']} | {level['requests']} "
            f"| {level['requests_per_s']} "
            f"| {lat['p50']} | {lat['p99']} | {lat['max']} | {level['core_took_ms_p50']} "
            f"| {sum(level['failures'].values())} | {cpu['server']} | {cpu['clients']} | {stages} "
            f"| {level['loadavg']} | {mem['VmRSS']} ({mem['processes']}) |"
        )
    rows.append("")
    rows.append(f"Index: {results['index']['chunks']} chunks in {results['index']['files']} files.")
    for mem in results["memory_mib"]:
        rows.append(
            f"Server RSS of {mem['code']} with api.workers {mem['workers']} (all its processes): "
            f"{mem['ready']['VmRSS']} MiB when ready, {mem['end']['VmRSS']} MiB at the end, "
            f"peaks summed {mem['end']['VmHWM']} MiB."
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
            tmp, seed=args.seed, chunks=args.chunks, distinct=args.distinct, noise=args.noise, rerank=args.rerank
        )
        results["index"] = {"chunks": built.chunks, "files": built.files, "embedded_by_model": built.distinct_texts}
        # A query is asked once per server: a repeat would be answered from the rerank score cache (per process).
        # Every server gets the same queries at the same level, so the servers compare like for like.
        pool = list(dict.fromkeys(corpus.make_queries(args.seed + 1, 4 * args.requests * len(args.levels))))
        results["memory_mib"] = []
        for n, (code, workers) in enumerate((code, workers) for code in args.code for workers in args.workers):
            log_path = tmp / f"serve-{n}-{workers}.log"
            proc, base = start_server(built.config.workspace, built.config.home, log_path, args.rerank, workers, code)
            label = describe(code)
            harness.log(f"memsift serve pid {proc.pid} ({label}, api.workers {workers}) ready at {base}")
            memory = {"code": label, "workers": workers, "ready": memory_of(proc.pid)}
            warmup = corpus.make_queries(args.seed + 2, args.warmup)
            asyncio.run(run_level(base, warmup, max(1, workers), args.warmup, args.timeout))
            for k, clients in enumerate(args.levels):
                queries = pool[k * len(pool) // len(args.levels) : (k + 1) * len(pool) // len(args.levels)]
                level = measure_level(proc.pid, base, queries, clients, args)
                results["levels"].append({"code": label, "workers": workers} | level)
                lat = level["latency_ms"]
                harness.log(
                    f"{label}, workers {workers}, {clients} clients: {level['requests_per_s']} requests/s, "
                    f"p50 {lat['p50']} ms, p99 {lat['p99']} ms"
                )
            memory["end"] = memory_of(proc.pid)
            results["memory_mib"].append(memory)
            stop_server(proc)
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
