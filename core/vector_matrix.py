"""The vector leg of large indexes: every chunk vector of an index as one float32 matrix in memory.

vec0's KNN is a linear scan inside SQLite, 10-50 times slower than one numpy matrix product over the same
vectors at every size measured, and no more exact (bench/vector_leg.py, bench/README.md "Vector leg"). The
matrix costs 1.5 KB per chunk of memory and a reload after the index changes (the first search after a sync
reads every vector again), so it is used from `MATRIX_MIN_CHUNKS` up, and whenever sqlite-vec is missing:
below 2,000 chunks vec0 takes about a millisecond, and the reload would cost more than dozens of searches save.

The store stays the one source of truth. A matrix is tagged with the index file's path and inode (a rebuild
swaps a new file in), the embedder's cache key and the store's `vectors_version` counter (bumped by every write
of chunks or cached vectors); a search whose tag differs reloads. One matrix per index file per process, so
the pool of open indexes of `memsift serve` shares it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from itertools import islice

import numpy as np

#: From this many chunks on the in-memory matrix answers the vector leg (see the module docstring).
MATRIX_MIN_CHUNKS = 2_000
#: Rows read and copied at a time when loading (3 MiB of 384-float vectors).
LOAD_BLOCK = 2048


@dataclass
class _Entry:
    tag: Hashable
    chunks: int
    ids: np.ndarray | None = None
    matrix: np.ndarray | None = None
    order: np.ndarray | None = None  # positions of `ids` in ascending order, for `vectors_of`

    def vectors_of(self, wanted: list[int]) -> dict[int, np.ndarray]:
        """Rows of some chunk ids (those with a vector), by binary search over the sorted ids."""
        assert self.ids is not None and self.matrix is not None and self.order is not None
        sorted_ids = self.ids[self.order]
        at = np.searchsorted(sorted_ids, wanted).clip(0, max(len(sorted_ids) - 1, 0))
        return {
            cid: self.matrix[self.order[i]]
            for cid, i in zip(wanted, at.tolist())
            if len(sorted_ids) and sorted_ids[i] == cid
        }


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
                entry.ids, entry.matrix = load_matrix(rows(), entry.chunks, dims)
                entry.order = np.argsort(entry.ids, kind="stable")
            return entry.ids, entry.matrix

    def loaded(self, path: str, tag: Hashable) -> _Entry | None:
        """The matrix of `path` if one is loaded for `tag` (a search's vector leg loaded it), else None: the
        keyword hits' vectors are then read from it rather than from SQLite (1.3 ms of CPU a search)."""
        with self._lock:
            entry = self._entries.get(path)
            return entry if entry is not None and entry.tag == tag and entry.matrix is not None else None


def load_matrix(rows: Iterable[tuple[int, bytes]], chunks: int, dims: int) -> tuple[np.ndarray, np.ndarray]:
    """Filled a block of rows at a time: one join and one copy per block rather than a numpy call per row (5
    times faster), and no list of every blob beside the matrix, so loading peaks at the matrix plus a block."""
    ids = np.empty(chunks, dtype=np.int64)
    matrix = np.empty((chunks, dims), dtype=np.float32)
    rows = iter(rows)
    n = 0
    while n < chunks:  # stop at `chunks`: rows added between the count and this read wait for the next reload
        block = list(islice(rows, min(LOAD_BLOCK, chunks - n)))
        if not block:
            break
        ids[n : n + len(block)] = [chunk_id for chunk_id, _ in block]
        matrix[n : n + len(block)] = np.frombuffer(b"".join(blob for _, blob in block), dtype=np.float32).reshape(
            len(block), dims
        )
        n += len(block)
    if n < chunks:  # chunks without a cached vector (an index built keyword-only)
        return ids[:n].copy(), matrix[:n].copy()
    return ids, matrix


def top_k(ids: np.ndarray, matrix: np.ndarray, query: np.ndarray, limit: int) -> list[tuple[int, float]]:
    """(chunk id, cosine) best first; the vectors are L2-normalised, so the dot product is the cosine."""
    if not len(ids) or limit <= 0:
        return []
    sims = matrix @ query
    if limit < len(sims):
        part = np.argpartition(-sims, limit - 1)[:limit]
    else:
        part = np.arange(len(sims))
    best = part[np.argsort(-sims[part], kind="stable")]
    return [(int(ids[i]), float(sims[i])) for i in best]


#: The process's matrices (one per index file).
MATRICES = VectorMatrices()
