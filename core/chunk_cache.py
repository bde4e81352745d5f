"""What a search reads of its candidate chunks, kept in memory per index file: their rows, their token bits.

Every search read its ~100 candidates' rows (text included) and its ~30 shortlisted chunks' MaxSim token bits
(~8 KB a chunk, spread over overflow pages) from SQLite: about a fifth of a search's CPU (bench/README.md
"Throughput, continued"). Candidates repeat across searches (the same notes answer related questions), so a
process keeps what it read, least recently used out first, up to a byte budget per kind: `CHUNK_ROWS`
(a 10,000-chunk index's rows are ~20 MB) and `TOKEN_BITS` (its bits ~83 MB).

The store stays the one source of truth. Like `core.vector_matrix`, an index file's entries are tagged with
its inode (a rebuild swaps a new file in) and the store's `vectors_version` counter (bumped by every write of
chunks, vectors or token bits; token bits add the reranker's fingerprint); a read whose tag differs drops
them. What is kept is what SQLite returned (rows are frozen), so a search answers the same with or without it.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

V = TypeVar("V")


class ChunkCache(Generic[V]):
    """Values by (index file, chunk id); one tag per file; one lock (a lookup is a few dict operations)."""

    def __init__(self, capacity: int, size: Callable[[V], int]) -> None:
        self.capacity = capacity
        self.size = 0
        self._size_of = size
        self._tags: dict[str, Hashable] = {}
        self._values: OrderedDict[tuple[str, int], V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, path: str, tag: Hashable, ids: list[int], read: Callable[[list[int]], dict[int, V]]) -> dict[int, V]:
        """The values of chunks `ids` of the index at `path` as `tag` describes it; `read` fetches the ones not
        kept (a chunk absent from its answer is absent here, and read again next time)."""
        found: dict[int, V] = {}
        with self._lock:
            if self._tags.get(path) != tag:
                self._drop(path)
                self._tags[path] = tag
            for i in ids:
                value = self._values.get((path, i))
                if value is not None:
                    self._values.move_to_end((path, i))
                    found[i] = value
        missing = [i for i in ids if i not in found]
        if not missing:
            return found
        fresh = read(missing)
        found.update(fresh)
        with self._lock:
            if self._tags.get(path) == tag:  # not changed by a newer reader meanwhile
                for i, value in fresh.items():
                    if (path, i) not in self._values:
                        self._values[(path, i)] = value
                        self.size += self._size_of(value)
                while self.size > self.capacity and self._values:
                    self.size -= self._size_of(self._values.popitem(last=False)[1])
        return found

    def _drop(self, path: str) -> None:
        stale = [key for key in self._values if key[0] == path]
        for key in stale:
            self.size -= self._size_of(self._values.pop(key))


#: Bytes of token bits a process keeps, over every index file.
TOKEN_BITS_BYTES = 64 * 1024 * 1024
#: Bytes of chunk rows (their text, plus a little for the rest) a process keeps.
CHUNK_ROWS_BYTES = 32 * 1024 * 1024
#: What a row costs beyond its text: the path, the hash and the objects holding them.
ROW_OVERHEAD = 200

#: The process's caches (the pool of open indexes of `memsift serve` shares them).
TOKEN_BITS: ChunkCache[bytes] = ChunkCache(TOKEN_BITS_BYTES, len)
CHUNK_ROWS: ChunkCache = ChunkCache(CHUNK_ROWS_BYTES, lambda row: len(row.text) + ROW_OVERHEAD)
