"""The vector leg of large indexes: every chunk vector of an index as one float32 matrix in memory.

vec0's KNN is a linear scan inside SQLite; at 100,000 chunks it is several times slower than one numpy matrix
product over the same vectors, which is just as exact (bench/vector_leg.py, bench/README.md "Vector leg").
The matrix costs 1.5 KB per chunk of memory and a reload (about a second at 100,000 chunks) after the index
changes, so it is used from `MATRIX_MIN_CHUNKS` up, where vec0 would miss the latency budget, and whenever
sqlite-vec is missing; smaller indexes keep vec0.

The store stays the one source of truth. A matrix is tagged with the index file's path and inode (a rebuild
swaps a new file in), the embedder's cache key and the store's `vectors_version` counter (bumped by every write
of chunks or cached vectors); a search whose tag differs reloads. One matrix per index file per process, so
the pool of open indexes of `memsift serve` shares it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass

import numpy as np

#: From this many chunks on the in-memory matrix answers the vector leg (see the module docstring).
MATRIX_MIN_CHUNKS = 20_000


@dataclass
class _Entry:
    tag: Hashable
    chunks: int
    ids: np.ndarray | None = None
    matrix: np.ndarray | None = None


class VectorMatrices:
    """Matrices by index file; a lock makes concurrent searches load one matrix once."""

    def __init__(self) -> None:
        self._entries: dict[str, _Entry] = {}
        self._lock = threading.Lock()

    def get(
        self,
        path: str,
        tag: Hashable,
        count: Callable[[], int],
        rows: Callable[[], Iterable[tuple[int, bytes]]],
        dims: int,
        min_chunks: int = MATRIX_MIN_CHUNKS,
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """(chunk ids, matrix) for the index at `path` as `tag` describes it, or None when it has fewer than
        `min_chunks` chunks. `count` and `rows` read the store; they run only when the tag changed."""
        with self._lock:
            entry = self._entries.get(path)
            if entry is None or entry.tag != tag:
                entry = self._entries[path] = _Entry(tag, count())  # the old matrix is dropped here
            if entry.chunks < min_chunks:
                return None
            if entry.matrix is None:
                entry.ids, entry.matrix = _load(rows(), entry.chunks, dims)
            return entry.ids, entry.matrix


def _load(rows: Iterable[tuple[int, bytes]], chunks: int, dims: int) -> tuple[np.ndarray, np.ndarray]:
    """Filled row by row: no list of blobs beside the matrix, so loading peaks at the matrix's own size."""
    ids = np.empty(chunks, dtype=np.int64)
    matrix = np.empty((chunks, dims), dtype=np.float32)
    n = 0
    for chunk_id, blob in rows:
        if n == chunks:  # chunks were added between the count and this read: the next search reloads
            break
        ids[n] = chunk_id
        matrix[n] = np.frombuffer(blob, dtype=np.float32)
        n += 1
    if n < chunks:  # chunks without a cached vector (an index built keyword-only)
        return ids[:n].copy(), matrix[:n].copy()
    return ids, matrix


def top_k(
    ids: np.ndarray, matrix: np.ndarray, query: np.ndarray, limit: int, allowed: np.ndarray | None = None
) -> list[tuple[int, float]]:
    """(chunk id, cosine) best first; the vectors are L2-normalised, so the dot product is the cosine.
    `allowed`: a boolean mask over the rows; only those rows compete (a search's filters)."""
    if not len(ids) or limit <= 0:
        return []
    sims = matrix @ query
    rows = np.arange(len(sims)) if allowed is None else np.flatnonzero(allowed)
    if limit < len(rows):
        rows = rows[np.argpartition(-sims[rows], limit - 1)[:limit]]
    best = rows[np.argsort(-sims[rows], kind="stable")]
    return [(int(ids[i]), float(sims[i])) for i in best]


#: The process's matrices (one per index file).
MATRICES = VectorMatrices()
