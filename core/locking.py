"""File locks beside an agent's index, across processes and threads.

`writer_lock`: one sync or rebuild of an agent at a time (`<db>.lock`). It is an `flock`, which the kernel
drops when its holder dies, so a lock left by a crashed process is simply taken over; the holder's pid is
written into the file for the error message. `swap_lock` (`<db>.swap`) orders opening the index against
swapping a rebuilt file in: readers hold it shared for the few milliseconds of opening, the swap holds it
exclusive, so no reader ever pairs the new database file with the old one's `-wal` and `-shm`.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
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
def writer_lock(db: Path, timeout: float = 10.0) -> Iterator[None]:
    lock = db.with_name(db.name + ".lock")
    held = False
    try:
        with _flock(lock, fcntl.LOCK_EX, timeout) as fd:
            held = True
            os.ftruncate(fd, 0)
            os.pwrite(fd, str(os.getpid()).encode(), 0)
            yield
    except BlockingIOError:
        if held:  # raised by the work done under the lock (EAGAIN), not by a busy lock
            raise
        raise LockTimeout(
            f"another sync or rebuild of this index is running (pid {writer_pid(db)}); waited {timeout:g} s"
        ) from None


def writer_pid(db: Path) -> str:
    """The pid written by the last holder of `db`'s writer lock, for a message ("unknown" when none)."""
    try:
        return db.with_name(db.name + ".lock").read_text(errors="replace").strip() or "unknown"
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
