"""Threads of the numeric libraries a search runs, set on purpose instead of left to each library's default.

numpy's BLAS (OpenBLAS) and onnxruntime each start a pool of one thread per core, and their threads spin while
they wait for work. A search's arithmetic is small (a 384-float query against the chunk vectors, MaxSim over 30
shortlisted chunks, one short query through the model), so a pool gains it nothing; but when another request or
another process holds the cores, the pool's threads wait for a time slice, and the search with them: on 2
shared cores p50 17 ms, p95 216-468 ms, up to 870 ms (issue 17); with one BLAS thread, max 27 ms.

So a search runs single-threaded in each library, and concurrency comes from concurrent requests. A sync's
batch embedding is the exception: large batches use every core (bench/README.md "Threads"), so documents go
through a second onnxruntime session with a pool (built on first use: a process that only searches never holds
it; ~30 MB when it does).

The settings are per process (the model and BLAS are shared by every agent a process serves), so they are
environment variables rather than configuration keys:

- `MEMSIFT_BLAS_THREADS` (default 1): numpy's BLAS threads, set through threadpoolctl; 0 leaves the library's
  own default (OpenBLAS: one per core, or `OPENBLAS_NUM_THREADS`).
- `MEMSIFT_ONNX_QUERY_THREADS` (default 1): onnxruntime intra-op threads for query embedding.
- `MEMSIFT_ONNX_THREADS` (default: the number of cores): intra-op threads for document embedding (sync).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from typing import Any

from .config import ConfigError

BLAS_ENV = "MEMSIFT_BLAS_THREADS"
QUERY_ENV = "MEMSIFT_ONNX_QUERY_THREADS"
DOCUMENTS_ENV = "MEMSIFT_ONNX_THREADS"

_applied: int | None = None
_lock = threading.Lock()


class ThreadsError(ConfigError):
    """A thread-count variable holds something other than a non-negative integer."""


def _count(name: str, default: int, env: Mapping[str, str]) -> int:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        n = int(raw)
    except ValueError:
        raise ThreadsError(f"{name}: expected a whole number of threads, got {raw!r}") from None
    if n < 0:
        raise ThreadsError(f"{name}: expected 0 or more threads, got {n}")
    return n


def cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def blas_threads(env: Mapping[str, str] | None = None) -> int:
    """Threads numpy's BLAS may use; 0 means the library's own default."""
    return _count(BLAS_ENV, 1, os.environ if env is None else env)


def query_threads(env: Mapping[str, str] | None = None) -> int:
    """onnxruntime intra-op threads for queries (0: one per core)."""
    return _count(QUERY_ENV, 1, os.environ if env is None else env) or cores()


def document_threads(env: Mapping[str, str] | None = None) -> int:
    """onnxruntime intra-op threads for documents (0: one per core)."""
    return _count(DOCUMENTS_ENV, cores(), os.environ if env is None else env) or cores()


def session_options(threads: int) -> Any:
    """onnxruntime options with `threads` intra-op threads and no inter-op pool (our graphs are sequential)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    return options


def limit_blas() -> None:
    """Apply `MEMSIFT_BLAS_THREADS` to every BLAS numpy has loaded, once per process (threadpoolctl walks the
    loaded libraries, a millisecond or so: not something to do per search)."""
    global _applied
    wanted = blas_threads()
    if _applied == wanted:
        return
    with _lock:
        if _applied == wanted:
            return
        if wanted:
            import numpy  # noqa: F401  (loads the BLAS, so threadpoolctl finds it)
            from threadpoolctl import threadpool_limits

            threadpool_limits(limits=wanted, user_api="blas")
        _applied = wanted
