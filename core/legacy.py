"""Indexes of the old name, `<home>/memory/<agent>.sqlite` (before an index was bound to its workspace).

`adopt_legacy` moves such a file to the name of the workspace it belongs to, keeping its chunks, vectors and
cache (nothing is embedded again). Those files recorded no workspace; one belongs to a workspace when at
least half of the files it lists are there with the same size and modification time (a copy or another
folder does not match to the nanosecond). A legacy file that belongs elsewhere is left alone for its own
workspace to adopt.
"""

from __future__ import annotations

from pathlib import Path

from .binding import META_KEY, record_workspace
from .config_home import legacy_db_path
from .config_types import Config
from .locking import writer_lock
from .rebuild import SIDE_FILES, swap_in
from .store import Store


def adopt_legacy(config: Config) -> bool:
    """Move `<home>/memory/<agent>.sqlite` to this workspace's index name when it belongs to this workspace
    and the workspace has no index yet; True when it did."""
    legacy, live = legacy_db_path(config.home, config.agent), config.db_path
    if live.exists() or not legacy.exists():
        return False
    with writer_lock(legacy, config.sync.lockTimeoutSeconds), writer_lock(live, config.sync.lockTimeoutSeconds):
        if live.exists() or not legacy.exists():  # another process adopted it while we waited
            return False
        with Store(legacy, use_vec=False) as old:
            recorded = old.get_meta(META_KEY)
            if not (recorded == str(config.workspace) if recorded is not None else _same_files(old, config)):
                return False
            with old.transaction():
                record_workspace(old, config)
            old.leave_wal()  # a file on its own, as a rebuild's temp file before its swap
        swap_in(legacy, live)
        for suffix in (*SIDE_FILES, ".swap"):
            Path(f"{legacy}{suffix}").unlink(missing_ok=True)
    return True


def _same_files(store: Store, config: Config) -> bool:
    rows = store.file_rows()
    same = 0
    for rel, (size, mtime_ns, *_) in rows.items():
        try:
            stat = (config.workspace / rel).stat()
        except (OSError, ValueError):
            continue
        same += stat.st_size == size and stat.st_mtime_ns == mtime_ns
    return bool(rows) and same * 2 >= len(rows)
