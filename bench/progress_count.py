"""What exact progress costs: `core.indexer.count_to_embed` (read and chunk the new files once more, ask the
cache which chunks it lacks) against the first sync it reports on, on the same workspace.

    .venv/bin/python bench/progress_count.py [WORKSPACE] [--rounds 5]

Default workspace: the locomo-dev conversations of /work/shared/bench copied into one (129 notes).
A fresh MEMSIFT_HOME in a temp folder; prints one JSON line: files, chunks, count seconds (median and all),
first-sync seconds (one run, local model), and the ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

LOCOMO = Path("/work/shared/bench/locomo-dev/workspaces")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("workspace", nargs="?")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="memsift-progress-bench-"))
    os.environ["MEMSIFT_HOME"] = str(tmp / "home")
    try:
        ws = Path(args.workspace) if args.workspace else _locomo(tmp / "ws")
        from core import MemoryIndex, load_config
        from core.indexer import SyncReport, count_to_embed, plan_sync

        config = load_config(workspace=ws)
        with MemoryIndex(config) as index:
            embedder = index.embedder()
            times = []
            for _ in range(args.rounds):
                started = time.perf_counter()
                plan = plan_sync(index.store, config, embedder, SyncReport(), force=True)
                chunks = count_to_embed(index.store, config, embedder, plan)
                times.append(time.perf_counter() - started)
            started = time.perf_counter()
            report = index.sync()
            sync_seconds = time.perf_counter() - started
        count = statistics.median(times)
        print(json.dumps({
            "workspace": str(args.workspace or LOCOMO), "files": len(plan.to_check), "chunksCounted": chunks,
            "chunksEmbedded": report.chunksEmbedded, "countSecondsMedian": round(count, 4),
            "countSeconds": [round(t, 4) for t in times], "firstSyncSeconds": round(sync_seconds, 2),
            "countShareOfSync": round(count / sync_seconds, 4),
        }))  # fmt: skip
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _locomo(into: Path) -> Path:
    for conv in sorted(LOCOMO.iterdir()):
        for note in (conv / "memory").glob("*.md"):
            target = into / "memory" / conv.name / note.name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(note, target)
    return into


if __name__ == "__main__":
    main()
