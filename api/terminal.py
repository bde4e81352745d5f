"""Whole lines from a terminal on stdin, for `memsift mcp` over stdio.

A terminal's line discipline in its usual (canonical) mode holds at most 4,095 bytes of a line and drops the
rest: a JSON-RPC request over that, such as a `memory_search` with a long query typed or pasted by hand, or
sent by a client that talks through a pseudo-terminal, reached the server cut, was answered with a parse error
with a null id, and the client waited for an answer that never came. While the server runs, the terminal is
switched to non-canonical mode, where bytes pass as they arrive, whatever the line length; Ctrl-C still
interrupts (ISIG is kept), and Ctrl-D at the start of a line still ends the input, as it did (`TerminalInput`
does what the line discipline no longer does). The settings are restored on the way out. A pipe, as MCP
clients use, is left as it is.
"""

from __future__ import annotations

import io
import os
import termios
from collections.abc import Iterator
from contextlib import contextmanager

EOF_KEY = 0x04  # Ctrl-D


class TerminalInput(io.RawIOBase):
    """The bytes of a non-canonical terminal, ending at a Ctrl-D typed at the start of a line."""

    def __init__(self, fd: int) -> None:
        super().__init__()
        self._fd = fd
        self._line_start = True
        self._ended = False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        if self._ended:
            return 0
        data = os.read(self._fd, len(buffer))
        for at, byte in enumerate(data):
            if byte == EOF_KEY and (data[at - 1] == ord("\n") if at else self._line_start):
                data, self._ended = data[:at], True
                break
        if data:
            self._line_start = data.endswith(b"\n")
        buffer[: len(data)] = data
        return len(data)


@contextmanager
def whole_lines(fd: int = 0) -> Iterator[io.TextIOBase | None]:
    """The text stream to read requests from when `fd` is a terminal (switched to non-canonical mode until
    the block ends), or None for anything else: the caller reads it as it always did."""
    if not os.isatty(fd):
        yield None
        return
    own = os.dup(fd)  # the `mcp` package points fd 0 elsewhere while it serves; the terminal stays here
    saved = termios.tcgetattr(own)
    raw = termios.tcgetattr(own)
    raw[3] &= ~termios.ICANON
    raw[6][termios.VMIN], raw[6][termios.VTIME] = 1, 0
    termios.tcsetattr(own, termios.TCSANOW, raw)
    try:
        yield io.TextIOWrapper(io.BufferedReader(TerminalInput(own)), encoding="utf-8", errors="replace")
    finally:  # `own` stays open: the reading thread may still be blocked on it (as the `mcp` package keeps its)
        termios.tcsetattr(own, termios.TCSANOW, saved)
