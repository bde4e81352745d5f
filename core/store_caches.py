"""The two caches inside an index: each text's vector by (provider, model, fingerprint, text hash), and the
MaxSim reranker's token bits by (reranker fingerprint, text hash). What a sync looks up before it embeds,
and what it has left to embed; kept apart from the chunks they serve, and pruned to them after a sync that changed
or removed files."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from .chunk_cache import TOKEN_BITS
from .store_schema import JSON_LIST, StoreSchema

# The chunks with no vector in the index's cache under one (provider, model, fingerprint).
_WITHOUT_VECTORS = (
    "FROM chunks c WHERE NOT EXISTS (SELECT 1 FROM embedding_cache e "
    "WHERE e.provider = ? AND e.model = ? AND e.fingerprint = ? AND e.hash = c.hash)"
)


class StoreCaches(StoreSchema):
    # -- embedding cache -----------------------------------------------------------------------------

    def cache_get(self, key: tuple[str, str, str], hashes: Iterable[str]) -> dict[str, np.ndarray]:
        sql = (
            "SELECT hash, embedding FROM embedding_cache WHERE provider = ? AND model = ? AND fingerprint = ? AND hash"
        )
        return {h: np.frombuffer(blob, dtype=np.float32) for h, blob in self._by_hash(sql, key, hashes)}

    def cache_known(self, key: tuple[str, str, str], hashes: Iterable[str]) -> set[str]:
        """Which of `hashes` the cache holds a vector for under `key` (without loading the vectors)."""
        sql = "SELECT hash FROM embedding_cache WHERE provider = ? AND model = ? AND fingerprint = ? AND hash"
        return {h for (h,) in self._by_hash(sql, key, hashes)}

    def _by_hash(self, sql: str, params: tuple[Any, ...], hashes: Iterable[str]) -> Iterator[tuple[Any, ...]]:
        """Rows of `sql ... IN (hashes)`, in slices of 500 (SQLite caps the number of bound parameters)."""
        hashes = list(dict.fromkeys(hashes))
        for i in range(0, len(hashes), 500):
            part = hashes[i : i + 500]
            yield from self.conn.execute(f"{sql} IN ({','.join('?' * len(part))})", (*params, *part))

    def cache_put(self, key: tuple[str, str, str], items: dict[str, np.ndarray]) -> None:
        now = time.time()
        self.conn.executemany(
            "INSERT OR REPLACE INTO embedding_cache(provider, model, fingerprint, hash, embedding, created_at) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            [(*key, h, np.asarray(v, dtype=np.float32).tobytes(), now) for h, v in items.items()],
        )
        self._vectors_changed()

    def prune_caches(self) -> int:
        """Drop the vectors and token bits of text no chunk holds any more; the vectors dropped. Before, only a
        rebuild dropped them: a note edited 200 times (a sync after each) left 544 stale vectors, the index
        growing from 4.0 to 6.5 MiB for 14 more chunks. A text that comes back is found in the shared cache
        (core.shared_cache), which every embedding goes to, or embedded again: a cost, never a wrong answer.
        No chunk's vector changes, so the in-memory copies keep their tag."""
        with self.transaction():
            self.conn.execute("DELETE FROM embedding_cache WHERE hash NOT IN (SELECT hash FROM chunks)")
            dropped = self.conn.changes()
            self.conn.execute("DELETE FROM token_cache WHERE hash NOT IN (SELECT hash FROM chunks)")
        return dropped

    # -- token cache (MaxSim reranker) ----------------------------------------------------------------

    def tokens_put(self, fingerprint: str, items: dict[str, bytes]) -> None:
        self.conn.executemany(
            "INSERT OR REPLACE INTO token_cache(fingerprint, hash, tokens) VALUES (?, ?, ?)",
            [(fingerprint, h, blob) for h, blob in items.items()],
        )
        self._vectors_changed()

    def tokens_known(self, fingerprint: str, hashes: Iterable[str]) -> set[str]:
        sql = "SELECT hash FROM token_cache WHERE fingerprint = ? AND hash"
        return {h for (h,) in self._by_hash(sql, (fingerprint,), hashes)}

    def tokens_count(self, fingerprint: str) -> int:
        return self.conn.execute("SELECT count(*) FROM token_cache WHERE fingerprint = ?", (fingerprint,)).fetchone()[0]

    def tokens_for(self, ids: Iterable[int], fingerprint: str) -> dict[int, bytes]:
        """Stored token bits of some chunks (those indexed with them), through the process's copy of the recently
        read ones (core.chunk_cache)."""
        ids = list(ids)
        if not ids:
            return {}

        def read(wanted: list[int]) -> dict[int, bytes]:
            marks = ",".join("?" * len(wanted))
            sql = (
                "SELECT c.id, t.tokens FROM chunks c CROSS JOIN token_cache t "
                f"ON t.hash = c.hash AND t.fingerprint = ? WHERE c.id IN ({marks})"
            )
            return {int(i): blob for i, blob in self.conn.execute(sql, (fingerprint, *wanted))}

        tag = (self._inode, fingerprint, self.get_meta("vectors_version"))
        return TOKEN_BITS.get(str(self.path), tag, ids, read)

    def chunks_without_cached_vectors(self, key: tuple[str, str, str]) -> dict[str, str]:
        """hash -> text of the chunks whose vector the cache lacks under `key` (a sync the embedder failed)."""
        return dict(self.conn.execute(f"SELECT c.hash, c.text {_WITHOUT_VECTORS}", key).fetchall())

    def count_without_vectors(
        self, key: tuple[str | None, str | None, str | None], among: list[str] | None = None
    ) -> int:
        """How many chunks have no vector under `key` (all of them under a provisional identity's, whose
        fingerprint is None: what `status` and a search say while vectors are pending), or how many of those
        whose hash is `among`."""
        if among is None:
            return self.conn.execute(f"SELECT count(*) {_WITHOUT_VECTORS}", key).fetchone()[0]
        sql = f"SELECT count(*) {_WITHOUT_VECTORS} AND c.hash IN {JSON_LIST}"
        return self.conn.execute(sql, (*key, json.dumps(among))).fetchone()[0]
