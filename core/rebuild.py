"""A rebuild: a full sync into a new file beside the live index, then an atomic swap.

Used when the index identity changes (model, chunking, tokenizer, sources...), with `--force`, and for the
first index of an agent. Vectors come from the shared embedding cache (core.shared_cache), which every
embedding request writes to as it returns, so only texts never embedded are embedded, and a rebuild that
fails or is killed loses no vector it paid for. Until the swap the live index is untouched and searchable;
if anything fails the temp file is removed and the live index stays exactly as it was.

The swap: the new file leaves WAL mode (a checkpoint, then the rollback journal), is fsynced, and replaces
the live file with one `rename`; the old file's `-wal` and `-shm` are deleted while the swap lock is held
exclusively, so no reader can open the new file beside them (SQLite would read another database's WAL).
Still under that lock, the new file goes back to WAL mode for its readers and its one writer.
Readers that had the old file open keep reading it until they notice the new inode and reopen.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import apsw

from .config_types import Config
from .embedders import Embedder
from .indexer import Estimator, Progress, Stage, plain_stage, sync
from .locking import swap_lock
from .store import Store
from .sync_plan import SyncReport

SIDE_FILES = ("-wal", "-shm", "-journal")


def temp_path(live: Path) -> Path:
    return live.with_name(f"{live.name}.tmp-{uuid.uuid4().hex}")


def remove_orphans(live: Path) -> list[Path]:
    """Delete temp files left by a rebuild that crashed. Call only while holding the writer lock."""
    removed = []
    for path in live.parent.glob(f"{live.name}.tmp-*"):
        path.unlink(missing_ok=True)
        removed.append(path)
    return removed


def rebuild(
    config: Config,
    embedder: Embedder | None,
    *,
    progress: Progress | None = None,
    stage: Stage = plain_stage,
    use_vec: bool = True,
    estimator: Estimator | None = None,
) -> SyncReport:
    """Rebuild the agent's index into a temp file and swap it in. The caller holds the writer lock."""
    live = config.db_path
    tmp = temp_path(live)
    try:
        new = Store(tmp, use_vec=use_vec)
        try:
            report = sync(new, config, embedder, force=True, progress=progress, stage=stage, estimator=estimator)
            new.leave_wal()
        finally:
            new.close()
        _fsync_file(tmp)
        swap_in(tmp, live)
    except BaseException:
        for path in [tmp, *(Path(f"{tmp}{s}") for s in SIDE_FILES)]:
            path.unlink(missing_ok=True)
        raise
    finally:
        Path(f"{tmp}.swap").unlink(missing_ok=True)  # the swap lock file Store made beside the temp file
    return report


def swap_in(tmp: Path, live: Path) -> None:
    with swap_lock(live, exclusive=True):
        os.replace(tmp, live)
        for suffix in SIDE_FILES:
            Path(f"{live}{suffix}").unlink(missing_ok=True)
        _fsync_dir(live.parent)
        # Back to WAL while nobody can open it: switching takes an exclusive lock, which readers opening the
        # file after the swap would otherwise fight over ("database is locked").
        conn = apsw.Connection(str(live))
        try:
            conn.execute("PRAGMA journal_mode=WAL")
        finally:
            conn.close()


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
