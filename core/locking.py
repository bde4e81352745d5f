"""File locks beside an agent's index, across processes and threads.

`writer_lock`: one sync or rebuild of an agent at a time (`<db>.lock`). It is an `flock` (`pid_lock`, which
`memsift up` holds too, one per MEMSIFT_HOME), which the kernel drops when its holder dies, so a lock left by a
crashed process is simply taken over; the holder's pid is written into the file for the error message.
`swap_lock` (`<db>.swap`) orders opening the index against swapping a rebuilt file in: readers hold it shared
for the few milliseconds of opening, the swap holds it exclusive, so no reader ever pairs the new database file
with the old one's `-wal` and `-shm`.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

from .errors import LockTimeout

POLL_SECONDS = 0.05


@contextmanager
def _flock(path: Path, mode: int, timeout: float | None) -> Iterator[int]:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, mode | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if deadline is not None and time.monotonic() >= deadline:
                    raise
                time.sleep(POLL_SECONDS)  # flock has no timed wait; poll
        yield fd
    finally:
        os.close(fd)  # releases the lock


@contextmanager
def pid_lock(path: Path, timeout: float | None, busy: Callable[[str], Exception]) -> Iterator[None]:
    """An exclusive `flock` on `path` with this process's pid written in it, until the block ends; `busy(the
    holder's pid)` is raised when another process holds it past `timeout` seconds (0: at once). The kernel drops
    the lock when its holder dies, so a crashed holder never blocks the next one. The file stays (unlinking a
    locked file would let a third process lock a fresh one beside the second)."""
    held = False
    try:
        with _flock(path, fcntl.LOCK_EX, timeout) as fd:
            held = True
            os.ftruncate(fd, 0)
            os.pwrite(fd, str(os.getpid()).encode(), 0)
            yield
    except BlockingIOError:
        if held:  # raised by the work done under the lock (EAGAIN), not by a busy lock
            raise
        raise busy(_holder(path)) from None


def writer_lock(db: Path, timeout: float = 10.0) -> AbstractContextManager[None]:
    return pid_lock(
        db.with_name(db.name + ".lock"),
        timeout,
        lambda pid: LockTimeout(f"another sync or rebuild of this index is running (pid {pid}); waited {timeout:g} s"),
    )


def writer_pid(db: Path) -> str:
    """The pid written by the last holder of `db`'s writer lock, for a message ("unknown" when none)."""
    return _holder(db.with_name(db.name + ".lock"))


def _holder(path: Path) -> str:
    try:
        return path.read_text(errors="replace").strip() or "unknown"
    except OSError:
        return "unknown"


@contextmanager
def swap_lock(db: Path, *, exclusive: bool) -> Iterator[None]:
    with _flock(db.with_name(db.name + ".swap"), fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH, None):
        yield


@contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive lock on `path` across processes, waited for without limit (a one-off build)."""
    with _flock(path, fcntl.LOCK_EX, None):
        yield
