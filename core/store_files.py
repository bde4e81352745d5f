"""The files and chunks tables as the sync writes them: each file's fingerprint, and its chunks replaced or
removed together with their FTS5 and vec0 rows. Apart from core.store_search, which reads the same chunks
for a search, because the sync alone writes."""

from __future__ import annotations

import time
from collections.abc import Iterable

import numpy as np

from .query import fts_text
from .store_schema import StoreSchema


class StoreFiles(StoreSchema):
    def file_rows(self) -> dict[str, tuple[int, int, str, float]]:
        """path -> (size, mtime_ns, hash, indexed_at: when the sync that read it scanned, core.sync_plan)."""
        rows = self.conn.execute("SELECT path, size, mtime_ns, hash, indexed_at FROM files")
        return {p: (s, m, h, at) for p, s, m, h, at in rows}

    def last_lines(self) -> dict[str, int]:
        """path -> the last line its chunks cover (0 for a file without chunks: empty or blank), for every file
        indexed: a line past it is one no hit can cover (`memsift eval`'s warning)."""
        last = dict(self.conn.execute("SELECT path, max(end_line) FROM chunks GROUP BY path").fetchall())
        return {p: last.get(p, 0) for p in self.file_rows()}

    def file_count(self) -> int:
        return self.conn.execute("SELECT count(*) FROM files").fetchone()[0]

    def recent_files(self, source: str, limit: int) -> list[tuple[str, tuple[int, int]]]:
        """(path, (size, mtime_ns)) of the `limit` files of `source` modified last, as last synced (api.catch_up
        stats them on every search)."""
        rows = self.conn.execute(
            "SELECT path, size, mtime_ns FROM files WHERE source = ? ORDER BY mtime_ns DESC LIMIT ?", (source, limit)
        )
        return [(path, (size, mtime)) for path, size, mtime in rows]

    def touch_file(self, path: str, size: int, mtime_ns: int, indexed_at: float | None = None) -> None:
        self.conn.execute(
            "UPDATE files SET size = ?, mtime_ns = ?, indexed_at = ? WHERE path = ?",
            (size, mtime_ns, time.time() if indexed_at is None else indexed_at, path),
        )

    def remove_file(self, path: str) -> int:
        ids = [r[0] for r in self.conn.execute("SELECT id FROM chunks WHERE path = ?", (path,))]
        self._delete_chunks(ids)
        self.conn.execute("DELETE FROM files WHERE path = ?", (path,))
        return len(ids)

    def _delete_chunks(self, ids: list[int]) -> None:
        if not ids:
            return
        rows = [(i,) for i in ids]
        self.conn.executemany("DELETE FROM chunks_fts WHERE rowid = ?", rows)
        if self.has_vec_table():
            if self.vec_available:
                self.conn.executemany("DELETE FROM chunks_vec WHERE rowid = ?", rows)
            else:  # vec0 cannot be touched without sqlite-vec: its rows are orphans until rebuild_vec
                self.set_meta("vec_stale", "1")
        self.conn.executemany("DELETE FROM chunks WHERE id = ?", rows)
        self._vectors_changed()

    def replace_file(
        self,
        path: str,
        source: str,
        size: int,
        mtime_ns: int,
        file_hash: str,
        chunks: list[tuple[int, int, str, str]],
        vectors: np.ndarray | list[np.ndarray | None] | None,
        indexed_at: float | None = None,
    ) -> None:
        """Swap a file's chunks for new ones: `chunks` are (start, end, text, hash), `vectors` aligned (a None
        row: a chunk the provider refused, which gets no vector row); `indexed_at`: when the sync scanned."""
        old = [r[0] for r in self.conn.execute("SELECT id FROM chunks WHERE path = ?", (path,))]
        self._delete_chunks(old)
        write_vec = (
            vectors is not None
            and self.vec_available
            and self.has_vec_table()
            and self.get_meta("vec_stale") != "1"  # stale rows may hold these rowids; rebuild_vec refills
        )
        for i, (start, end, text, h) in enumerate(chunks):
            self.conn.execute(
                "INSERT INTO chunks(path, source, start_line, end_line, hash, text) VALUES (?, ?, ?, ?, ?, ?)",
                (path, source, start, end, h, text),
            )
            rowid = self.conn.last_insert_rowid()
            self.conn.execute("INSERT INTO chunks_fts(rowid, text) VALUES (?, ?)", (rowid, fts_text(text)))
            if write_vec and vectors[i] is not None:
                self.conn.execute(
                    "INSERT INTO chunks_vec(rowid, embedding) VALUES (?, ?)", (rowid, vectors[i].tobytes())
                )
        if vectors is not None and not write_vec:
            self.set_meta("vec_stale", "1")
        self._vectors_changed()
        self.conn.execute(
            "INSERT OR REPLACE INTO files(path, source, size, mtime_ns, hash, indexed_at) VALUES (?, ?, ?, ?, ?, ?)",
            (path, source, size, mtime_ns, file_hash, time.time() if indexed_at is None else indexed_at),
        )

    def file_mtimes(self, paths: Iterable[str] | None = None) -> dict[str, int]:
        """mtime_ns by path of some files, or of every file (None)."""
        if paths is None:
            return dict(self.conn.execute("SELECT path, mtime_ns FROM files"))
        paths = list(paths)
        marks = ",".join("?" * len(paths))
        return dict(self.conn.execute(f"SELECT path, mtime_ns FROM files WHERE path IN ({marks})", paths))

    def files_without_chunks(self) -> set[str]:
        """The files of some bytes recorded with no chunk: skipped as not text, or blank. An index made before the
        sync recorded why it skipped a file (core.sync_plan.SKIPPED) has only this to go by."""
        sql = "SELECT path FROM files f WHERE size > 0 AND NOT EXISTS (SELECT 1 FROM chunks c WHERE c.path = f.path)"
        return {path for (path,) in self.conn.execute(sql)}

    def has_file(self, path: str) -> bool:
        return self.conn.execute("SELECT 1 FROM files WHERE path = ?", (path,)).fetchone() is not None
