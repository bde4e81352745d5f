#!/usr/bin/env python
"""What bounding the shared embedding cache costs a sync, and that it never costs an embedding, run by hand.

A temporary MEMSIFT_HOME gets the shared cache of `--home` (its vectors and token bits: the dev indexes built by
bench/same_rankings.py or `memsift eval`; its list of indexes is dropped) and copies of `--workspaces`, each
synced as an agent of its own (served by that cache: nothing embedded). Then `--stale` synthetic entries of a
model used before (384-dim vectors and `--token-bytes` of token bits each, older than any other) take the cache
past `--max-mib`, and `--edits` syncs each append a line to one note of the first workspace, under
`cache.maxMiB = --max-mib`: per sync its wall time, the time of `SharedCache.bound` in it, the entries dropped,
the chunks embedded and the cache's size. Then the same with `--tight-mib` (a bound the entries in use alone
exceed): the first pass and the runs after it. Last, the proof: every agent rebuilt with `--force`, and a new
agent on a fresh copy of the first workspace, each with its chunks embedded (all 0 when no live entry was
dropped). `--stat FILE...` instead prints each SQLite file's pages by table (`dbstat`).

    .venv/bin/python bench/cache_bound.py --home /tmp/rank-home \\
        --workspaces ../shared/bench/locomo-dev/workspaces/conv-26,../shared/bench/locomo-dev/workspaces/conv-30
    .venv/bin/python bench/cache_bound.py --stat /tmp/rank-home/memory/*.sqlite /tmp/rank-home/cache/embeddings.sqlite
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import apsw
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def stat(paths: list[str]) -> None:
    """Pages by table of each file (indexes and their autoindexes folded into their table's row)."""
    for path in paths:
        conn = apsw.Connection(path, flags=apsw.SQLITE_OPEN_READONLY)
        owner = dict(conn.execute("SELECT name, tbl_name FROM sqlite_master"))
        sizes: dict[str, list[float]] = {}
        sql = "SELECT name, sum(pgsize), sum(payload), sum(unused) FROM dbstat GROUP BY name"
        for name, size, payload, unused in conn.execute(sql):
            table = owner.get(name, name)
            for prefix in ("chunks_vec", "chunks_fts"):
                table = prefix if table.startswith(prefix) else table
            row = sizes.setdefault(table, [0, 0, 0])
            for i, v in enumerate((size, payload, unused)):
                row[i] += v / 2**20
        total = sum(r[0] for r in sizes.values())
        chunks = conn.execute("SELECT count(*) FROM chunks").fetchone()[0] if "chunks" in owner else None
        print(f"{path}: {total:.2f} MiB" + (f", {chunks} chunks" if chunks is not None else ""))
        for table, (size, payload, unused) in sorted(sizes.items(), key=lambda kv: -kv[1][0]):
            if size >= 0.01:
                print(f"  {table:24s} {size:7.2f} MiB  payload {payload:7.2f}  unused {unused:6.2f}")
        conn.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--stat", nargs="+", help="print the pages by table of these SQLite files and stop")
    p.add_argument("--home", type=Path, help="a MEMSIFT_HOME whose shared cache holds the workspaces' vectors")
    p.add_argument("--workspaces", help="workspace folders, comma-separated (copied)")
    p.add_argument("--stale", type=int, default=40_000)
    p.add_argument("--token-bytes", type=int, default=10_800, help="token bits per stale entry (10.8 KB: dev mean)")
    p.add_argument("--max-mib", type=int, default=512)
    p.add_argument("--tight-mib", type=int, default=8)
    p.add_argument("--edits", type=int, default=5)
    p.add_argument("--keep", action="store_true")
    args = p.parse_args(argv)
    if args.stat:
        stat(args.stat)
        return 0

    tmp = Path(tempfile.mkdtemp(prefix="memsift-cache-bound-"))
    for k in [k for k in os.environ if k.startswith("MEMSIFT_")]:
        del os.environ[k]  # the defaults are measured
    os.environ["MEMSIFT_HOME"] = str(tmp / "home")
    from core import load_config
    from core.memory import MemoryIndex
    from core.shared_cache import SharedCache, cache_path

    home = tmp / "home"
    cache_file = cache_path(home)
    cache_file.parent.mkdir(parents=True)
    src = apsw.Connection(str(cache_path(args.home)), flags=apsw.SQLITE_OPEN_READONLY)
    src.execute(f"VACUUM INTO '{cache_file}'")  # a consistent copy, WAL included
    src.close()
    with SharedCache(cache_file) as cache, cache.writing():
        cache.conn.execute("DELETE FROM indexes")
    if (args.home / "models").is_dir():  # the local model's optimised graph: not built again (~50 s)
        shutil.copytree(args.home / "models", home / "models")

    timings: list[float] = []
    original = SharedCache.bound

    def timed(self: SharedCache, max_bytes: int) -> int:
        started = time.perf_counter()
        try:
            return original(self, max_bytes)
        finally:
            timings.append(time.perf_counter() - started)

    SharedCache.bound = timed  # type: ignore[method-assign]

    workspaces = []
    for n, ws in enumerate(args.workspaces.split(",")):
        copy = tmp / f"ws{n}"
        shutil.copytree(ws, copy)
        workspaces.append(copy)

    def config(n: int, mib: int, ws: Path | None = None):
        env = {"MEMSIFT_HOME": str(home)}  # the temporary home alone, whatever the calling shell sets
        return load_config(workspace=ws or workspaces[n], agent=f"a{n}", overrides={"cache.maxMiB": mib}, env=env)

    def run(n: int, mib: int, *, force: bool = False, ws: Path | None = None, label: str = "") -> dict:
        index = MemoryIndex(config(n, mib, ws))
        try:
            timings.clear()
            started = time.perf_counter()
            report = index.sync(force=force)
            wall = time.perf_counter() - started
        finally:
            index.close()
        with SharedCache(cache_file) as cache:
            used, count = cache.used_bytes() / 2**20, cache.count()
        row = {
            "wall_s": round(wall, 3),
            "bound_ms": round(sum(timings) * 1000, 2),
            "pruned": report.cachePruned,
            "embedded": report.chunksEmbedded,
            "hits": report.cacheHits,
            "cache_mib": round(used, 1),
            "entries": count,
        }
        print(f"{label:34s} " + "  ".join(f"{k} {v}" for k, v in row.items()), flush=True)
        return row

    for n in range(len(workspaces)):
        run(n, args.max_mib, label=f"first sync a{n}")
    with SharedCache(cache_file) as cache:
        live = cache.count()
        rng = np.random.default_rng(0)
        key = ("local", "old-model", "old")
        started = time.perf_counter()
        for start in range(0, args.stale, 1000):
            hashes = [f"stale{i:07d}" for i in range(start, min(start + 1000, args.stale))]
            cache.put(key, {h: rng.standard_normal(384).astype(np.float32) for h in hashes})
            cache.tokens_put("maxsim-bits-lines:old", {h: rng.bytes(args.token_bytes) for h in hashes})
        with cache.writing():
            cache.conn.execute("UPDATE embeddings SET used_at = rowid WHERE model = 'old-model'")  # the oldest
        print(
            f"{args.stale} stale entries added in {time.perf_counter() - started:.1f} s: {cache.count()} entries "
            f"({live} live), {cache.used_bytes() / 2**20:.1f} MiB, file {cache_file.stat().st_size / 2**20:.1f} MiB",
            flush=True,
        )
    note = sorted((workspaces[0] / "memory").glob("*.md"))[-1]
    for e in range(args.edits):
        with note.open("a", encoding="utf-8") as fh:
            fh.write(f"\nEdit {e}: the storage bench appended this line to check what a bounded cache costs.\n")
        run(0, args.max_mib, label=f"edit {e}, maxMiB {args.max_mib}")
    run(0, args.max_mib, label=f"no-op, maxMiB {args.max_mib}")
    for e in range(args.edits):
        with note.open("a", encoding="utf-8") as fh:
            fh.write(f"\nTight {e}: a bound below what the indexes use.\n")
        run(0, args.tight_mib, label=f"edit {e}, maxMiB {args.tight_mib}")
    for n in range(len(workspaces)):
        run(n, args.max_mib, force=True, label=f"--force a{n}")
    fresh = tmp / "fresh"
    shutil.copytree(args.workspaces.split(",")[0], fresh)
    row = run(len(workspaces), args.max_mib, ws=fresh, label="new agent, copy of ws0")
    print(f"cache file {cache_file.stat().st_size / 2**20:.1f} MiB; new agent embedded {row['embedded']}")
    if not args.keep:
        shutil.rmtree(tmp)
    else:
        print(f"kept: {tmp}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
