"""What "the index is sound" means in the reliability tests: checks read straight from the index file."""

from __future__ import annotations

import os
import time
from pathlib import Path

from core.store import Store


def integrity(db: Path) -> list[str]:
    """`PRAGMA integrity_check` of the file: ['ok'] when sound."""
    with Store(db, readonly=True) as store:
        return [row[0] for row in store.conn.execute("PRAGMA integrity_check")]


def content(db: Path) -> tuple[list[tuple[str, int, int, str]], list[tuple[str, str]]]:
    """The index's content, independent of row ids: chunks (path, lines, text hash) and files (path, hash)."""
    with Store(db, readonly=True) as store:
        chunks = store.conn.execute("SELECT path, start_line, end_line, hash FROM chunks ORDER BY 1, 2, 3, 4")
        files = store.conn.execute("SELECT path, hash FROM files ORDER BY path")
        return chunks.fetchall(), files.fetchall()


def chunks_without_vectors(db: Path) -> int:
    """Chunks the vec0 table has no row for (0 when the vector leg sees every chunk)."""
    with Store(db, readonly=True) as store:
        missing = "SELECT count(*) FROM chunks WHERE id NOT IN (SELECT rowid FROM chunks_vec)"
        return store.conn.execute(missing).fetchone()[0]


def written_earlier(root: Path, seconds: float = 60.0) -> None:
    """Every file under `root` as if written `seconds` ago: a note written during a sync's scan is read again by
    the next sync (core.sync_plan.RACY_SECONDS), which a test that counts a no-op sync's reads must avoid."""
    when = time.time() - seconds
    for path in root.rglob("*"):
        if path.is_file():
            os.utime(path, (when, when))
