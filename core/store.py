"""The per-agent index: one SQLite file opened with apsw, FTS5 for BM25, sqlite-vec for KNN.

`Store` opens the file and puts its parts together: the schema, transactions and meta (core.store_schema),
the files and chunks the sync writes (core.store_files), the embedding and token caches (core.store_caches)
and what a search reads (core.store_search).

One writer (the sync), many readers: WAL mode and a busy timeout.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import apsw

from .errors import StoreError
from .locking import swap_lock
from .store_caches import StoreCaches
from .store_files import StoreFiles
from .store_recovery import UnreadableIndex, drop_foreign_wal
from .store_search import StoreSearch

BUSY_TIMEOUT_MS = 10_000


def _load_vec(conn: apsw.Connection) -> str | None:
    """Load sqlite-vec; returns None on success, else why it could not be loaded."""
    try:
        import sqlite_vec

        conn.enable_load_extension(True)
        try:
            conn.load_extension(sqlite_vec.loadable_path())
        finally:
            conn.enable_load_extension(False)
        return None
    except Exception as exc:  # ImportError, apsw.ExtensionLoadingError, missing file
        return f"{type(exc).__name__}: {exc}"


class Store(StoreFiles, StoreCaches, StoreSearch):
    def __init__(self, path: str | Path, *, use_vec: bool = True, readonly: bool = False) -> None:
        self.path = Path(path)
        if not readonly:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        drop_foreign_wal(self.path)
        flags = apsw.SQLITE_OPEN_READONLY if readonly else apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE
        try:
            # Opening (which reads the schema, and so opens -wal and -shm) never overlaps a swap.
            with swap_lock(self.path, exclusive=False):
                self.conn = apsw.Connection(str(self.path), flags=flags)
                self.conn.set_busy_timeout(BUSY_TIMEOUT_MS)
                self.vec_error = _load_vec(self.conn) if use_vec else "disabled"
                if not readonly:
                    self.conn.execute("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL")
                    self._migrate()
                else:
                    self._check_version()
                self._inode = os.stat(self.path).st_ino
        except (apsw.NotADBError, apsw.CorruptError) as exc:
            raise UnreadableIndex.of(self.path, exc) from exc
        except apsw.Error as exc:
            raise StoreError(f"cannot open the index {self.path}: {exc}") from exc

    @classmethod
    def empty(cls, *, use_vec: bool = True) -> Store:
        """An index with nothing in it, held in memory: what status reads for an agent never indexed, so that
        asking writes no file (no database, no lock file). Closed by the caller, as any Store."""
        store = cls.__new__(cls)
        store.path = Path(":memory:")
        store.conn = apsw.Connection(":memory:")
        store.vec_error = _load_vec(store.conn) if use_vec else "disabled"
        store._migrate()
        store._inode = 0
        return store

    def is_current(self) -> bool:
        """False once a rebuild has swapped another file in at this path: the caller should reopen."""
        try:
            return os.stat(self.path).st_ino == self._inode
        except FileNotFoundError:
            return False

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- status --------------------------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        files = dict(self.conn.execute("SELECT source, count(*) FROM files GROUP BY source").fetchall())
        chunks = dict(self.conn.execute("SELECT source, count(*) FROM chunks GROUP BY source").fetchall())
        cache = self.conn.execute("SELECT count(*) FROM embedding_cache").fetchone()[0]
        return {"files": files, "chunks": chunks, "cacheEntries": cache}
