"""Searches in worker processes (`api.workers`, `memsift serve --workers N`), so one server uses every core.

A search is ~14 ms of CPU, most of it Python (bench/README.md "Where a search's CPU goes"), and one process
runs Python on one core at a time (the GIL): the server's threads add concurrency, not cores. With N workers
the server hands each search to one of N processes and waits for its answer; everything else stays in the
server process: HTTP and JSON, `/metrics` (it observes every answer), `POST /v1/index` and its runs (so a
sync still starts in one place, and the index keeps one writer), `/v1/get`, `/v1/status` and configuration
reloads.

Each worker loads the model once (at start, so readiness waits for every worker) and keeps one open index
per agent: a worker runs one search at a time. The agent's `Config` travels with each search, so a reload
in the server reaches the workers with their next search (a worker reopens an index whose settings changed).
A worker that dies (killed, out of memory) breaks the pool: that search answers 503 and the next one starts
a new pool. A worker ends itself within a second of the server's death, so none outlives it.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from multiprocessing.queues import SimpleQueue
from typing import Any

from api.agents import open_index
from core import Config, MemoryIndex, MemsiftError, SearchResponse
from core.embedders import create_embedder, warm_up

ORPHAN_CHECK_SECONDS = 1.0


class WorkersUnavailable(MemsiftError, RuntimeError):
    """A search worker died during this search (503); the next search starts new workers."""

    status = 503


class SearchPool:
    """`workers` processes that run searches; `search` blocks the calling thread until one answered."""

    def __init__(self, config: Config, workers: int) -> None:
        self.config = config
        self.workers = workers
        self.state = "starting"
        self.started = False
        self._lock = threading.Lock()
        self._pool = self._new_pool()

    def _new_pool(self) -> ProcessPoolExecutor:
        # spawn: the server has threads (uvicorn, the warm-up, a reload follower), which fork would copy mid-step
        context = multiprocessing.get_context("spawn")
        self._started = context.SimpleQueue()  # each worker puts its pid once its model is loaded
        return ProcessPoolExecutor(
            self.workers, mp_context=context, initializer=_start_worker, initargs=(self.config, self._started)
        )

    def warm_up(self) -> None:
        """Start every worker now (one task each: a pool starts a process per task while none is idle) and
        wait until each has loaded the model; `state` says how it went, `started` whether all did."""
        try:
            for future in [self._pool.submit(os.getpid) for _ in range(self.workers)]:
                future.result()
            pids = {self._started.get() for _ in range(self.workers)}
            self.state = f"{len(pids)} of {self.workers} started"
            self.started = len(pids) == self.workers
        except Exception as exc:
            self.state = f"failed: {type(exc).__name__}: {exc}"

    def search(self, config: Config, query: str, options: dict[str, Any]) -> SearchResponse:
        with self._lock:
            pool = self._pool
        try:
            future: Future[SearchResponse] = pool.submit(_search, config, query, options)
            return future.result()
        except BrokenProcessPool as exc:
            with self._lock:
                if self._pool is pool:  # the first search to see it replaces the pool
                    self._pool = self._new_pool()
            pool.shutdown(wait=False, cancel_futures=True)
            raise WorkersUnavailable("a search worker process died during this search; try again") from exc

    def close(self) -> None:
        with self._lock:
            pool = self._pool
        pool.shutdown(wait=True, cancel_futures=True)


# -- in a worker process ------------------------------------------------------------------------------------

_indexes: dict[str, MemoryIndex] = {}


def _start_worker(config: Config, started: SimpleQueue[int]) -> None:
    """Die with the server, ignore Ctrl-C (the server stops the workers), load and run the model once, then
    say so on `started`."""
    threading.Thread(target=_exit_with_parent, args=(os.getppid(),), name="memsift-orphan-check", daemon=True).start()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        embedder = create_embedder(config.embedding)
        if embedder is not None:
            warm_up(embedder)
    except Exception:  # noqa: S110  (searches meet the same error, degrade to keywords and say why)
        pass
    started.put(os.getpid())


def _exit_with_parent(parent: int) -> None:
    """End this worker once the server is gone (killed, so it could not shut the pool down). Not the kernel's
    PR_SET_PDEATHSIG: that fires when the *thread* that started the process ends, and a pool starts its
    processes from whichever request thread submits first."""
    while os.getppid() == parent:
        time.sleep(ORPHAN_CHECK_SECONDS)
    os._exit(0)


def _search(config: Config, query: str, options: dict[str, Any]) -> SearchResponse:
    index = _indexes.get(config.agent)
    if index is not None and index.config != config:  # the server reloaded this agent's settings
        index.close()
        index = None
    if index is None:
        index = _indexes[config.agent] = open_index(config)
    return index.search(query, **options)
