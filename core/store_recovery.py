"""What is done to an index file that cannot be opened as it stands: one that is no database is set aside, and
the -wal and -shm of another database beside it are dropped. Kept apart from core.store because it works on
the file on disk, under the swap lock, before or instead of any connection to it."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import apsw

from .errors import StoreError
from .locking import swap_lock


class UnreadableIndex(StoreError):
    """The file at the index's path is no SQLite database, or a damaged one. An index is derived data (the
    memory files and the shared embedding cache rebuild it), so a forced run replaces it (`set_aside`)."""

    @classmethod
    def of(cls, path: Path, exc: apsw.Error) -> UnreadableIndex:
        return cls(
            f"cannot open the index {path}: {exc}; it holds nothing the memory files do not: "
            "`memsift index --force` sets it aside and rebuilds it"
        )


F = TypeVar("F", bound=Callable[..., Any])


def unreadable_as_such(method: F) -> F:
    """For a `MemoryIndex` method: the file damaged or overwritten under a connection opened before (a server's,
    an MCP session's) fails as opening it would, saying what to do, not with SQLite's bare `CorruptError` (a
    500 and a traceback per request). The connection is closed, so the next call opens the file as it is then
    (rebuilt by `memsift index --force`, or a backup put back in place)."""

    @functools.wraps(method)
    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except (apsw.NotADBError, apsw.CorruptError) as exc:
            self.close()
            raise UnreadableIndex.of(self.config.db_path, exc) from exc

    return run  # type: ignore[return-value]


def set_aside(path: Path) -> Path:
    """Rename an unreadable index (and its -wal and -shm) out of the way, under the swap lock so no reader
    opens it meanwhile; the name it now has. Kept, not deleted: it is the user's file to inspect or remove."""
    aside = path.with_name(f"{path.name}.unreadable-{time.strftime('%Y%m%dT%H%M%S')}")
    with swap_lock(path, exclusive=True):
        for suffix in ("-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
        path.rename(aside)
    return aside


def drop_foreign_wal(path: Path) -> None:
    """Delete a -wal and -shm that belong to another database. A rebuild renames its file (in rollback-journal
    mode) over the live one, then deletes the old file's -wal and -shm; killed between the two while a reader
    kept the old file open, it leaves the old WAL's frames beside the new file, and SQLite would replay them
    into it ("database disk image is malformed"). A file in rollback-journal mode has no WAL of its own (it
    leaves WAL mode only once its WAL is checkpointed), so they go, under the exclusive swap lock as in the
    swap itself."""
    if not Path(f"{path}-wal").exists() or not _rollback_journal(path):
        return
    with swap_lock(path, exclusive=True):
        if _rollback_journal(path):  # not swapped and switched back to WAL meanwhile
            for suffix in ("-wal", "-shm"):
                Path(f"{path}{suffix}").unlink(missing_ok=True)


def _rollback_journal(path: Path) -> bool:
    """Whether the SQLite file at `path` is in rollback-journal mode (header byte 18 is 1; 2 in WAL mode).

    Read through SQLite's own file layer, not `open()`: closing any descriptor of a file drops every POSIX
    lock the process holds on it, so a plain open and close released the SHARED lock of this process's other
    connections, the lock that tells another process closing its last connection not to checkpoint and
    delete the WAL under them. SQLite's unix layer keeps such a descriptor open until those locks go."""
    try:
        file = apsw.VFSFile("", str(path), [apsw.SQLITE_OPEN_MAIN_DB | apsw.SQLITE_OPEN_READONLY, 0])
    except apsw.Error:
        return False
    try:
        header = file.xRead(19, 0)
    except apsw.Error:
        return False
    finally:
        file.xClose()
    return len(header) == 19 and header.startswith(b"SQLite format 3\x00") and header[18] == 1
