#!/usr/bin/env python
"""A rebuild's embedding on each `sync.taskRunner`, run by hand (never as a timed test).

One generated workspace (`--files` daily notes of bench/corpus.py, ~2 chunks each) is rebuilt through the real
rebuild flow (`run_sync(force=True)` against a local `prefect server start`) into an empty MEMSIFT_HOME each
time, so every chunk is embedded, with:

  inline        embedding batch after batch inside the indexer (the default)
  thread        embed-batch tasks on a ThreadPoolTaskRunner (one thread per core) in the flow's process
  dask          embed-batch tasks on a DaskTaskRunner that starts a LocalCluster (one 1-thread process per
                core) for the rebuild and stops it after: what `sync.taskRunner = "dask"` does alone
  dask-address  the same tasks on a LocalCluster started once before timing, given as `sync.daskAddress`
                (a standing cluster: no start-up in the figure; its workers keep their model loaded)

Runs go in ABBA order over `--rounds`, medians are reported, with the CPU share other processes used before.

    .venv/bin/python bench/dask_rebuild.py                   # 300 notes, 2 rounds (~4 min on 2 cores)
    .venv/bin/python bench/dask_rebuild.py --files 60 --rounds 1
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from corpus import daily_note, write_files  # noqa: E402
from harness import cpu_busy  # noqa: E402

from api.prefect_server import PrefectServer, free_port  # noqa: E402

RUNNERS = ("inline", "thread", "dask", "dask-address")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--runners", default=",".join(RUNNERS))
    args = parser.parse_args()
    runners = args.runners.split(",")

    tmp = Path(tempfile.mkdtemp(prefix="memsift-dask-bench-"))
    for name in [n for n in os.environ if n.startswith(("MEMSIFT_", "PREFECT_"))]:
        del os.environ[name]
    ws = tmp / "ws"
    write_files(ws, {f"memory/note-{i:04d}.md": daily_note(7, i) for i in range(args.files)})
    busy = cpu_busy()
    with PrefectServer(tmp / "prefect", free_port()) as server:
        server.wait_healthy(120)
        os.environ.update(PREFECT_API_URL=server.api_url, PREFECT_HOME=str(tmp / "prefect"))
        from distributed import LocalCluster

        from flows.sync import run_sync

        cluster = LocalCluster(n_workers=os.cpu_count() or 1, threads_per_worker=1, dashboard_address=":0")
        seconds: dict[str, list[float]] = {r: [] for r in runners}
        indexer: dict[str, list[float]] = {r: [] for r in runners}  # the indexer after the fan-out
        chunks: dict[str, int] = {}
        order = runners + runners[::-1]
        for r in range(args.rounds):
            for runner in order:
                os.environ["MEMSIFT_HOME"] = str(tmp / f"home-{runner}-{r}-{len(seconds[runner])}")
                os.environ["MEMSIFT_SYNC_TASK_RUNNER"] = runner.split("-")[0]
                os.environ.pop("MEMSIFT_SYNC_DASK_ADDRESS", None)
                if runner == "dask-address":
                    os.environ["MEMSIFT_SYNC_DASK_ADDRESS"] = cluster.scheduler_address
                started = time.perf_counter()
                report = run_sync("main", workspace=str(ws), force=True)
                seconds[runner].append(time.perf_counter() - started)
                indexer[runner].append(report.seconds)
                chunks.setdefault(runner, report.chunksEmbedded)
                print(
                    f"[{time.strftime('%H:%M:%S')}] {runner}: {seconds[runner][-1]:.1f} s, indexer "
                    f"{report.seconds:.1f} s, {report.chunksEmbedded} chunks",
                    file=sys.stderr,
                    flush=True,
                )
        cluster.close()
    assert len(set(chunks.values())) == 1, chunks  # every runner embedded the same texts
    n = next(iter(chunks.values()))
    base = statistics.median(seconds[runners[0]])
    print(f"\n{args.files} notes, {n} chunks embedded per rebuild; {os.cpu_count()} cores, "
          f"{busy:.0%} busy with other processes before the start\n")  # fmt: skip
    print(f"| runner | median s | chunks/s | vs {runners[0]} | runs (s) | indexer after fan-out (s) |")
    print("|---|---|---|---|---|---|")
    for runner in runners:
        m = statistics.median(seconds[runner])
        runs = ", ".join(f"{s:.1f}" for s in seconds[runner])
        inner = ", ".join(f"{s:.1f}" for s in indexer[runner])
        print(f"| {runner} | {m:.1f} | {n / m:.1f} | {m / base:.2f}x | {runs} | {inner} |")
    out = ROOT / "bench" / "results" / f"dask-{time.strftime('%Y%m%dT%H%M%S')}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(
        json.dumps(
            {"files": args.files, "chunks": n, "busy_before": busy, "seconds": seconds, "indexer_seconds": indexer},
            indent=1,
        )
    )
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
