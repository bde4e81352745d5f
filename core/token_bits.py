"""The MaxSim rerank's token bits of recently shortlisted chunks, kept in memory per index file.

Each search reranks ~30 chunks and read their bits from SQLite every time: ~7 KB a chunk, spread over overflow
pages, about a tenth of a search's CPU (bench/README.md "Where a search's CPU goes"). Shortlists repeat
chunks often (the same notes answer related questions), so a process keeps the blobs it read, least recently
used out first, up to `TOKEN_BITS_BYTES` in all (a 10,000-chunk index's bits are ~70 MB).

The store stays the one source of truth. Like `core.vector_matrix`, the bits of an index file are tagged with
its inode (a rebuild swaps a new file in), the reranker's fingerprint and the store's `vectors_version`
counter (bumped by every write of chunks, vectors or token bits); a read whose tag differs drops them. The
blobs are kept as stored, so a reranked score is the same with or without them.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable

#: Bytes of token bits a process keeps, over every index file.
TOKEN_BITS_BYTES = 64 * 1024 * 1024


class TokenBits:
    """Blobs by (index file, chunk id); one tag per file; one lock (a lookup is a few dict operations)."""

    def __init__(self, capacity: int = TOKEN_BITS_BYTES) -> None:
        self.capacity = capacity
        self.size = 0
        self._tags: dict[str, Hashable] = {}
        self._blobs: OrderedDict[tuple[str, int], bytes] = OrderedDict()
        self._lock = threading.Lock()

    def get(
        self, path: str, tag: Hashable, ids: list[int], read: Callable[[list[int]], dict[int, bytes]]
    ) -> dict[int, bytes]:
        """Bits of the chunks `ids` of the index at `path` as `tag` describes it; `read` fetches the ones not
        kept (chunks without bits are absent from its answer, and read again next time)."""
        found: dict[int, bytes] = {}
        with self._lock:
            if self._tags.get(path) != tag:
                self._drop(path)
                self._tags[path] = tag
            for i in ids:
                blob = self._blobs.get((path, i))
                if blob is not None:
                    self._blobs.move_to_end((path, i))
                    found[i] = blob
        missing = [i for i in ids if i not in found]
        if not missing:
            return found
        fresh = read(missing)
        found.update(fresh)
        with self._lock:
            if self._tags.get(path) == tag:  # not changed by a newer reader meanwhile
                for i, blob in fresh.items():
                    if (path, i) not in self._blobs:
                        self._blobs[(path, i)] = blob
                        self.size += len(blob)
                while self.size > self.capacity and self._blobs:
                    self.size -= len(self._blobs.popitem(last=False)[1])
        return found

    def _drop(self, path: str) -> None:
        stale = [key for key in self._blobs if key[0] == path]
        for key in stale:
            self.size -= len(self._blobs.pop(key))


#: The process's token bits (the pool of open indexes of `memsift serve` shares them).
TOKEN_BITS = TokenBits()
