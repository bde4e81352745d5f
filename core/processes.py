"""What Linux's /proc says of a process: `os.kill(pid, 0)` alone reads a zombie (killed, not yet reaped by its
new parent) as running, and cannot tell when a pid was reused. None or False where there is no /proc."""

from __future__ import annotations

import os
from pathlib import Path

#: The states of a process that is over: a zombie (ended, not yet reaped) or dead.
_OVER = ("Z", "X")


def stat_fields(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name: [0] the state, [2] the process group, [19] the start
    time in clock ticks since boot. None when no such process (or no /proc)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def start_time(pid: int) -> int | None:
    """When process `pid` started (clock ticks since boot): with its pid it names one process for good. None when
    no such process runs (or no /proc); a zombie has ended."""
    fields = stat_fields(pid)
    return None if fields is None or fields[0] in _OVER else int(fields[19])


def ended(pid: int) -> bool:
    """Whether process `pid` is over: no such process, or a zombie. A process of another user reads as running;
    so does any where there is no /proc to tell a zombie by."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    fields = stat_fields(pid)
    return fields is not None and fields[0] in _OVER
