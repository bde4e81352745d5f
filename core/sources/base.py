"""What every source shares: the `Source` protocol, the entry its discovery yields, the one way a file is read.

A source is one kind of file an index holds (the Markdown memory, session transcripts). The sync, `get` and
the fan-out of a rebuild ask a path's source how to find, read, chunk and show it, instead of knowing the
kinds; a file is always read by `read_memory_file`, which never follows a symlink.
"""

from __future__ import annotations

import codecs
import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ..chunking import Chunk, split_lines

MAX_FILE_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True)
class FileEntry:
    path: str  # workspace-relative, '/' separated
    size: int
    mtime_ns: int
    source: str = "memory"


class Source(Protocol):
    #: Its entry in `sources`, and the `source` of its files in the index.
    name: str

    def discover(self) -> tuple[list[FileEntry], list[str], list[str]]:
        """The source's files, found by `stat` only and sorted by path; warnings about what was skipped; and the
        index paths of folders that exist but could not be listed (the sync keeps what it indexed under them)."""
        ...

    def due(self, entry: FileEntry, indexed_size: int) -> bool:
        """Whether an indexed file whose stat changed is worth reading in this sync."""
        ...

    def path(self, rel: str) -> Path:
        """Where the file an index path names lives (read it with `read_memory_file`)."""
        ...

    def chunk(self, rel: str, text: str, warnings: list[str]) -> list[Chunk]:
        """The chunks of a file's text; problems worth telling go to `warnings`."""
        ...

    def owns(self, rel: str) -> bool:
        """Whether an index path names a file of this source by its naming rules (it may not exist)."""
        ...

    def resolve(self, rel: str) -> Path:
        """The file `get` reads for a path this source owns; GetError when `get` must refuse it."""
        ...

    def render(self, text: str) -> str:
        """A file's text as `get` returns it, line for line with its chunks' line numbers."""
        ...


def read_memory_file(path: Path) -> tuple[bytes, str | None, str | None]:
    """(raw bytes, text or None when unusable, warning or None). Never follows a symlink, and never waits on a
    FIFO or a device swapped in after the caller's `stat` (opening a FIFO blocks until a writer comes: a sync
    would hang holding the writer lock): O_NONBLOCK, then anything but a regular file is an OSError."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        raw = fh.read(MAX_FILE_BYTES + 1)
    if len(raw) > MAX_FILE_BYTES:
        return raw, None, f"larger than {MAX_FILE_BYTES // (1024 * 1024)} MiB"
    return (raw, *decode(raw))


def decode(raw: bytes) -> tuple[str | None, str | None]:
    if raw.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        try:
            return raw.decode("utf-16"), None
        except UnicodeDecodeError:
            return None, "not valid UTF-16"
    if b"\x00" in raw:
        return _with_nuls(raw)
    try:
        return raw.decode("utf-8-sig"), None
    except UnicodeDecodeError:
        return raw.decode(
            "utf-8-sig", errors="replace"
        ), f"invalid UTF-8 on {_bad_lines(raw)}, bad bytes replaced with U+FFFD"


#: Control bytes that text does not hold (all of C0 but tab, line feed, form feed, carriage return and escape).
_CONTROL = bytes(c for c in range(32) if c not in b"\t\n\f\r\x1b")


def _with_nuls(raw: bytes) -> tuple[str | None, str | None]:
    """A file holding NUL bytes: binary, unless it is UTF-8 with a stray NUL or two (under 1% of its bytes
    control bytes, an editor's or a crash's leftover in a note), whose every other line would otherwise be lost
    to search; each NUL is then replaced with U+FFFD, as invalid UTF-8 is, and the lines are named."""
    if (len(raw) - len(raw.translate(None, _CONTROL))) * 100 > len(raw):
        return None, "binary content (NUL bytes)"
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        return None, "binary content (NUL bytes)"
    return text.replace("\x00", "\ufffd"), f"NUL bytes on {_bad_lines(raw, nul=True)}, replaced with U+FFFD"


def _bad_lines(raw: bytes, named: int = 5, nul: bool = False) -> str:
    """`line 2`, `lines 2, 7`, `lines 2, 7, 9, 12, 15 and 40 more`: where a person finds the bytes to fix (bytes
    that are no UTF-8, or with `nul` NUL bytes). Line numbers as `split_lines` counts them: Latin-1 keeps each
    byte where it was (a CR or LF byte is never part of a UTF-8 sequence)."""
    lines = split_lines(raw.decode("latin-1"))
    bad = [n for n, line in enumerate(lines, 1) if ("\x00" in line if nul else _not_utf8(line))]
    more = f" and {len(bad) - named} more" if len(bad) > named else ""
    return f"line{'' if len(bad) == 1 else 's'} {', '.join(map(str, bad[:named]))}{more}"


def _not_utf8(latin1_line: str) -> bool:
    try:
        latin1_line.encode("latin-1").decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False
