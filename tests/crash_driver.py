"""A sync or a forced rebuild in a process of its own, to be SIGKILLed at a chosen point (tests/test_crash.py).

`python crash_driver.py <workspace> <sync|rebuild> <point>`. The run names each point it passes on stdout,
one line each: `scanned`, `embedded <n>` (the n-th batch's embedding requests returned, their vectors in the
shared cache, that batch not written yet), `write <path>` (inside a batch's open write transaction, after that
file's rows), `batch <n>` (a batch committed), `removed`, and for a rebuild `swap` (the temp file complete, before the
rename), `renamed` (just after the rename, before the old file's -wal and -shm are deleted) and `swapped`
(after both, before the file goes back to WAL mode). At the named point it stops
and waits on stdin, which the parent never answers: it kills the process there. `done` ends a run that did
not pass the point. Batches are two files each, so a small workspace gives many points.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

import core.indexer
import core.rebuild
import core.sync_plan
from core import MemoryIndex, load_config
from core.store import Store

stop_at = ""


def point(name: str) -> None:
    """Report a point; at the chosen one, block until killed."""
    print(name, flush=True)
    if name == stop_at:
        sys.stdin.readline()
        raise SystemExit("the parent answered instead of killing")


def reporting(fn: Callable[..., Any], before: str | None = None, after: str | None = None) -> Callable[..., Any]:
    def run(*args: Any, **kwargs: Any) -> Any:
        if before:
            point(before)
        result = fn(*args, **kwargs)
        if after:
            point(after)
        return result

    return run


def main(workspace: str, mode: str, stop: str) -> None:
    global stop_at
    stop_at = stop
    core.sync_plan.BATCH_FILES = 2
    replace_file = Store.replace_file

    def replace_and_report(self: Store, path: str, *args: Any) -> None:
        replace_file(self, path, *args)
        point(f"write {path}")

    Store.replace_file = replace_and_report
    core.rebuild.swap_in = reporting(core.rebuild.swap_in, before="swap")
    rename = os.replace

    def rename_and_report(src: Any, dst: Any) -> None:
        rename(src, dst)
        if ".tmp-" in str(src):  # the rebuilt file over the live one
            point("renamed")

    os.replace = rename_and_report  # core.rebuild calls os.replace
    core.rebuild._fsync_dir = reporting(core.rebuild._fsync_dir, after="swapped")
    embed_missing = core.indexer.embed_missing
    calls = 0

    def embed_and_report(*args: Any, **kwargs: Any) -> None:
        nonlocal calls
        embed_missing(*args, **kwargs)
        calls += 1
        point(f"embedded {calls}")

    core.indexer.embed_missing = embed_and_report
    batches = 0

    def stage(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        nonlocal batches
        if name == "index-batch":
            batches += 1
            return reporting(fn, after=f"batch {batches}")
        return reporting(fn, after={"scan-and-diff": "scanned", "remove-vanished": "removed"}.get(name))

    config = load_config(workspace=workspace, overrides={"embedding.provider": "local"})
    with MemoryIndex(config) as index:
        index.sync(force=mode == "rebuild", stage=stage)
    print("done", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
