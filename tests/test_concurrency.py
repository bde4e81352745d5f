"""Concurrency: 8 searching threads, a syncing process and rebuilds on one agent for a bounded time.

Every file of the workspace is one chunk holding a generation number; a writer thread saves new generations
(atomically, as editors do) and runs `memsift index --no-prefect` in a process of its own after each; another
thread forces a rebuild after each sync, which swaps a new index file in under the readers. A consistent
index holds every file exactly once, with the text of one generation of that file: each keyword answer
must list all files once, each hybrid answer must have no file twice, and every snippet must be a whole
generation of its own file.
Any exception reaching a searcher ("database is locked" included) fails the test.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from index_checks import chunks_without_vectors, content, integrity

from core import MemoryIndex

pytestmark = pytest.mark.reliability

FILES = 12
SEARCHERS = 8
SECONDS = 15
MEMSIFT = Path(sys.executable).with_name("memsift")


def path_of(k: int) -> str:
    return f"memory/2026-02-{k:02d}.md"


def note(k: int, generation: int) -> str:
    return f"# Day {k}\n- Generation {generation}: the heron{k} pipeline ships build g{generation}.\n"


GENERATION = re.compile(r"Generation (\d+):")


def save(ws: Path, k: int, generation: int) -> None:
    """Write-then-rename, so a sync never reads a half-written file (what editors do)."""
    tmp = ws / "memory" / f".{k}.partial"
    tmp.write_text(note(k, generation))
    os.replace(tmp, ws / path_of(k))


def test_searches_stay_correct_while_a_sync_process_and_rebuilds_rewrite_the_index(
    workspace, make_config, memsift_home
) -> None:
    ws = workspace({path_of(k): note(k, 0) for k in range(1, FILES + 1)})
    config = make_config(ws)
    with MemoryIndex(config) as index:
        index.sync()
    deadline = time.monotonic() + SECONDS
    errors: list[str] = []
    answers = [0] * SEARCHERS
    syncs: list[int] = []
    rebuilds: list[int] = []
    synced = threading.Event()

    def check(answer: dict, keyword: bool) -> None:
        paths = [hit["path"] for hit in answer["results"]]
        if len(paths) != len(set(paths)):
            errors.append(f"a file twice in one answer: {paths}")
        if keyword and sorted(paths) != [path_of(k) for k in range(1, FILES + 1)]:
            errors.append(f"a keyword answer without every file once: {sorted(paths)}")
        if answer.get("degraded"):
            errors.append(f"degraded: {answer['degraded']}")
        for hit in answer["results"]:
            k = int(hit["path"][-5:-3])
            generation = int(GENERATION.search(hit["snippet"]).group(1))
            if hit["snippet"] != note(k, generation).rstrip("\n"):
                errors.append(f"a snippet that is no generation of its file: {hit}")

    def searcher(n: int) -> None:
        with MemoryIndex(config) as index:
            while time.monotonic() < deadline:
                keyword = answers[n] % 2 == 0
                try:
                    answer = index.search(
                        "which build does the heron pipeline ship",
                        mode="keyword" if keyword else "hybrid",
                        max_results=FILES + 4,
                        min_score=0,
                    ).to_dict()
                except Exception as exc:  # anything reaching a user fails the test
                    errors.append(f"searcher {n}: {type(exc).__name__}: {exc}")
                    return
                check(answer, keyword)
                answers[n] += 1

    def writer() -> None:
        generation = 0
        while time.monotonic() < deadline:
            generation += 1
            for k in range(1 + generation % 3, FILES + 1, 3):  # a third of the files each round
                save(ws, k, generation)
            run = subprocess.run(
                [str(MEMSIFT), "--workspace", str(ws), "index", "--no-prefect", "--json"],
                env=os.environ | {"MEMSIFT_HOME": str(memsift_home)},
                capture_output=True,
                text=True,
            )
            if run.returncode != 0:
                errors.append(f"sync process: {run.stderr.strip()}")
                return
            syncs.append(generation)
            synced.set()

    def rebuilder() -> None:
        """A rebuild after each sync, overlapping the next one (back to back, they would starve the sync
        process of the writer lock: a waiter polls it, and would time out after sync.lockTimeoutSeconds)."""
        with MemoryIndex(config) as index:
            while synced.wait(max(0.0, deadline - time.monotonic())) and time.monotonic() < deadline:
                synced.clear()
                try:
                    rebuilds.append(index.sync(force=True).chunksWritten)
                except Exception as exc:
                    errors.append(f"rebuild: {type(exc).__name__}: {exc}")
                    return

    threads = [threading.Thread(target=searcher, args=(n,)) for n in range(SEARCHERS)]
    threads += [threading.Thread(target=writer), threading.Thread(target=rebuilder)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(SECONDS + 120)
    assert not any(thread.is_alive() for thread in threads)
    assert errors == []
    assert min(answers) >= 1 and len(syncs) >= 1 and len(rebuilds) >= 1, (answers, syncs, rebuilds)

    # Afterwards: a sound file, and one more sync gives the workspace's exact content.
    with MemoryIndex(config) as index:
        index.sync()
    assert integrity(config.db_path) == ["ok"]
    chunks, files = content(config.db_path)
    assert [c[0] for c in chunks] == [path_of(k) for k in range(1, FILES + 1)]
    assert files == [(path_of(k), hashlib.sha256((ws / path_of(k)).read_bytes()).hexdigest()) for k in range(1, 13)]
    assert chunks_without_vectors(config.db_path) == 0
    print(f"searches {sum(answers)}, sync processes {len(syncs)}, rebuilds {len(rebuilds)}")
