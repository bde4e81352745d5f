"""The index's schema and bookkeeping: the base every part of `core.store.Store` builds on.

Tables
  meta             key/value: schema version, index identity (JSON), last sync
  files            one row per indexed memory file: stat fingerprint and content hash
  chunks           line ranges and text; rowid shared with chunks_fts and chunks_vec
  chunks_fts       FTS5, contentless (the text lives in chunks), rows deletable
  chunks_vec       vec0 cosine index, created once the embedder's dimensions are known
  embedding_cache  this index's vectors by (provider, model, fingerprint, text hash): those its chunks use
                   (a sync that changed or removed files drops the others, StoreCaches.prune_caches); vec0 is
                   refilled from it and the numpy scan reads it. Embeddings shared across indexes and runs live in
                   core.shared_cache, which a sync consults before embedding.

Here: the migration to the current schema, transactions and read snapshots, the meta table (identity and the
vectors_version counter the in-memory copies check) and the vec0 table. A module of its own so that the parts
of the store (core.store_files, core.store_caches, core.store_search) share it without importing the `Store`
they make up.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import apsw

from .errors import StoreError

# 2: index chunks(hash); 3: token_cache; 4: the two caches are rowid tables (see _migrate); 5: vec0 in chunks of
# VEC_CHUNK_SIZE vectors. The version is part of the index identity: an index of an older one is rebuilt from the
# caches (nothing is embedded) into the new layout.
SCHEMA_VERSION = 5

# Vectors per vec0 chunk. vec0 allocates a whole chunk at its first vector and a KNN reads every slot of it: at its
# default (1,024) an index of 90 chunks held 1.5 MiB of vec0 for 0.13 MiB of vectors, and its KNN took 0.90 ms
# against 0.31 (bench/README.md, "Storage"). The same rows and distances come back at any size.
VEC_CHUNK_SIZE = 256

# Each chunk with its vector from the cache of one (provider, model, fingerprint). CROSS JOIN makes chunks the
# outer loop (SQLite's own choice was to walk every cache row of the model and probe chunks(hash): 50-100 ms
# per hybrid search at 10,000 chunks for a couple of dozen ids, instead of 0.6 ms).
CHUNK_VECTORS = (
    "SELECT c.id, e.embedding FROM chunks c CROSS JOIN embedding_cache e ON e.hash = c.hash "
    "AND e.provider = ? AND e.model = ? AND e.fingerprint = ?"
)

# A JSON array of strings bound as one parameter: no cap on the number of paths (SQLite caps bound parameters).
JSON_LIST = "(SELECT value FROM json_each(?))"


class StoreSchema:
    """The connection's schema, transactions and meta; `core.store.Store` opens the file and sets these."""

    conn: apsw.Connection
    path: Path
    vec_error: str | None  # why sqlite-vec could not load; None when it did
    _inode: int  # the file's inode when opened: the tag of this process's in-memory copies of it

    @property
    def vec_available(self) -> bool:
        return self.vec_error is None

    # -- schema -------------------------------------------------------------------------------------

    def _check_version(self) -> int:
        if not self._has_table("meta"):
            return 0
        row = self.conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        version = int(row[0]) if row else 0
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"the index {self.path} was written by a newer memsift (schema {version}, this one reads "
                f"{SCHEMA_VERSION}); upgrade memsift or delete the file to rebuild it"
            )
        return version

    def _migrate(self) -> None:
        if self._check_version() == SCHEMA_VERSION:
            return
        with self.transaction():
            self.conn.execute(
                """
                CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
                CREATE TABLE IF NOT EXISTS files (
                    path TEXT PRIMARY KEY,
                    source TEXT NOT NULL,
                    size INTEGER NOT NULL,
                    mtime_ns INTEGER NOT NULL,
                    hash TEXT NOT NULL,
                    indexed_at REAL NOT NULL
                );
                CREATE TABLE IF NOT EXISTS chunks (
                    id INTEGER PRIMARY KEY,
                    path TEXT NOT NULL,
                    source TEXT NOT NULL,
                    start_line INTEGER NOT NULL,
                    end_line INTEGER NOT NULL,
                    hash TEXT NOT NULL,
                    text TEXT NOT NULL
                );
                CREATE INDEX IF NOT EXISTS chunks_by_path ON chunks(path);
                -- joins with embedding_cache (vectors_for, the numpy scan, rebuild_vec) go chunk -> cache
                CREATE INDEX IF NOT EXISTS chunks_by_hash ON chunks(hash);
                -- Rowid tables (before schema 4: WITHOUT ROWID, which the same statements read and write): a
                -- WITHOUT ROWID row keeps at most ~1 KB on its b-tree page and spills the rest of a 1.5 KB vector
                -- onto an overflow page of its own, 60% of it empty (5.2 MiB for 1.9 MiB of vectors; 2.5 here).
                CREATE TABLE IF NOT EXISTS embedding_cache (
                    provider TEXT NOT NULL,
                    model TEXT NOT NULL,
                    fingerprint TEXT NOT NULL,
                    hash TEXT NOT NULL,
                    embedding BLOB NOT NULL,
                    created_at REAL NOT NULL,
                    UNIQUE (provider, model, fingerprint, hash)
                );
                -- token bits for the MaxSim reranker (core/rerankers/maxsim.py), by reranker fingerprint and text hash
                CREATE TABLE IF NOT EXISTS token_cache (
                    fingerprint TEXT NOT NULL,
                    hash TEXT NOT NULL,
                    tokens BLOB NOT NULL,
                    UNIQUE (fingerprint, hash)
                );
                """
            )
            self.set_meta("schema_version", str(SCHEMA_VERSION))

    def _has_table(self, name: str) -> bool:
        return self.conn.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (name,)).fetchone() is not None

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """BEGIN IMMEDIATE (the writer takes its lock up front), or a savepoint inside one. After a full disk
        or an I/O error SQLite may have rolled the transaction back itself: the ROLLBACK is skipped then (its
        own error would hide the cause), and a COMMIT that fails rolls back too. A file that cannot be written
        (full, read-only) is a StoreError naming it."""
        if self.conn.in_transaction:
            with self.conn:
                yield
            return
        try:
            self.conn.execute("BEGIN IMMEDIATE")
            try:
                yield
                self.conn.execute("COMMIT")
            except BaseException:
                if self.conn.in_transaction:
                    self.conn.execute("ROLLBACK")
                raise
        except (apsw.FullError, apsw.ReadOnlyError) as exc:
            raise StoreError(f"cannot write the index {self.path}: {exc}") from exc

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        """A read transaction: every query inside sees the index as of the first one, whatever the writer
        commits meanwhile (WAL), so a search never takes chunk ids from one state and their rows from the next."""
        if self.conn.in_transaction:
            yield
            return
        self.conn.execute("BEGIN")
        try:
            yield
        finally:
            if self.conn.in_transaction:  # an I/O error may have ended it: its error, not COMMIT's, is the news
                self.conn.execute("COMMIT")

    def leave_wal(self) -> None:
        """Checkpoint and switch to rollback journal mode, so the file can be swapped in on its own."""
        self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        self.conn.execute("PRAGMA journal_mode=DELETE")

    # -- meta and identity ---------------------------------------------------------------------------

    def get_meta(self, key: str) -> str | None:
        row = self.conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    def set_meta(self, key: str, value: str) -> None:
        self.conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", (key, value))

    def identity(self) -> dict[str, Any] | None:
        raw = self.get_meta("identity")
        return json.loads(raw) if raw else None

    def set_identity(self, identity: dict[str, Any]) -> None:
        self.set_meta("identity", json.dumps(identity, sort_keys=True))

    def reset(self, identity: dict[str, Any], tokenize: str) -> None:
        """Drop every file and chunk and start over under a new identity; the embedding cache stays."""
        with self.transaction():
            self.conn.execute("DROP TABLE IF EXISTS chunks_fts; DELETE FROM chunks; DELETE FROM files")
            if self.vec_available:
                self.conn.execute("DROP TABLE IF EXISTS chunks_vec")
            self.conn.execute(
                f"CREATE VIRTUAL TABLE chunks_fts USING fts5(text, content='', contentless_delete=1, "
                f"tokenize={_sql_str(tokenize)})"
            )
            dims = identity.get("dims")
            if dims and self.vec_available:
                self._create_vec(dims)
            self.set_identity(identity)
            self._vectors_changed()
            # Without sqlite-vec an old chunks_vec could not be dropped: its rows no longer match the chunks.
            self.set_meta("vec_stale", "0" if self.vec_available or not self.has_vec_table() else "1")

    def _create_vec(self, dims: int) -> None:
        self.conn.execute(
            f"CREATE VIRTUAL TABLE IF NOT EXISTS chunks_vec USING vec0(embedding float[{int(dims)}] "
            f"distance_metric=cosine, chunk_size={VEC_CHUNK_SIZE})"
        )

    def has_vec_table(self) -> bool:
        return self._has_table("chunks_vec")

    # -- the vec0 table ------------------------------------------------------------------------------

    def vec_needs_refill(self) -> bool:
        """sqlite-vec is here now, but the vectors were written (or deleted) while it could not load."""
        return self.vec_available and (self.get_meta("vec_stale") == "1" or not self.has_vec_table())

    def rebuild_vec(self, key: tuple[str, str, str], dims: int) -> None:
        """Create and refill chunks_vec from the cache after writes made while sqlite-vec could not load."""
        if not self.vec_available:
            return
        with self.transaction():
            self._create_vec(dims)
            self.conn.execute("DELETE FROM chunks_vec")
            rows = self.conn.execute(CHUNK_VECTORS, key).fetchall()
            self.conn.executemany("INSERT INTO chunks_vec(rowid, embedding) VALUES (?, ?)", rows)
            self.set_meta("vec_stale", "0")

    def _vectors_changed(self) -> None:
        """Bump the counter that tells in-memory copies of this index (core.vector_matrix, core.keyword_cache,
        core.chunk_cache) to reload. A new file's counter starts at a random number: a rebuild's file can get
        the inode of one swapped out before it, and with both counters starting at 1 it could match a stale
        copy's tag."""
        self.conn.execute(
            "INSERT INTO meta(key, value) VALUES ('vectors_version', ?) "
            "ON CONFLICT(key) DO UPDATE SET value = CAST(value AS INTEGER) + 1",
            (str(secrets.randbits(62)),),
        )


def _sql_str(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"
