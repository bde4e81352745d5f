"""`get`: an exact line range of one memory file, and nothing else.

The path is checked as text first (no absolute path, no `..`, no backslash, no NUL), then against the
discovery rules (only MEMORY.md, memory.md, memory/**/*.md and extraPaths; a file of an entry outside the
workspace by its index name `extra/<h>/...`, and only once indexed), then on disk (no component may
be a symlink, and the file is opened with O_NOFOLLOW). A memory file that does not exist yet reads as
empty text, as OpenClaw's does; one whose name on disk differs from the path given only by Unicode
normalisation (NFC and NFD) is that file. A file with invalid UTF-8 reads as the index holds it, bad bytes as
U+FFFD, and the answer's `warning` says so. A transcript (`sessions/<name>.jsonl`, when sessions are a source) is read
from `sessions.dir` and returned as its rendering (core/sources/sessions.py), line for line with the JSONL.
The path's source (`core.sources`) says which rules apply.
"""

from __future__ import annotations

import errno
import os
import stat as statmod
import unicodedata
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .chunking import split_lines
from .config_types import Config
from .errors import GetError
from .sources import Source, as_typed, owner, read_memory_file
from .sources.memory import external_file


def check_path(config: Config, path: str, indexed: Callable[[str], bool] | None = None) -> tuple[Source, Path, str]:
    """The source of a path `get` may read, the file it names and the path as that file is spelled on disk;
    GetError otherwise. A file outside the workspace (an `extraPaths` entry's, `extra/<h>/...`) is read only
    once the index holds it, when `indexed` says so."""
    if not isinstance(path, str) or not path.strip():
        raise GetError(400, "path: must not be blank")
    if "\x00" in path:
        raise GetError(400, "path: contains a NUL character")
    if "\\" in path:
        raise GetError(403, f"path {path!r}: backslashes are refused; use '/'")
    if path.startswith("/") or (len(path) > 1 and path[1] == ":") or path.startswith("~"):
        raise GetError(403, f"path {path!r}: absolute paths are refused; give a workspace-relative path")
    parts = path.split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise GetError(403, f"path {path!r}: '.', '..' and empty components are refused")
    source = owner(config, path)
    if source is None:
        raise GetError(403, f"path {path!r}: not a memory file (MEMORY.md, memory.md, memory/**/*.md, extraPaths)")
    full = source.resolve(path)
    if not os.path.lexists(full) and (spelled := _spelled(path, full)) is not None:
        return check_path(config, spelled, indexed)  # every rule again, for the name on disk
    if indexed is not None and external_file(config, path) is not None and not indexed(path):
        raise GetError(
            404,
            f"path {path!r}: not in the index (new since the last `memsift index`, or indexed under the name of "
            "an earlier extraPaths entry that reaches the same file)",
        )
    return source, full, path


def _spelled(path: str, full: Path) -> str | None:
    """`path` with each component as the folder spells it, when the two differ only by Unicode normalisation
    (`café` typed as NFD, `e` + U+0301, for a file named in NFC, as Linux keeps names byte for byte and macOS
    or a keyboard may give either), or None when no single file matches. Search cites the name on disk."""
    parts = path.split("/")
    if len(full.parents) < len(parts) or all(
        unicodedata.is_normalized("NFC", p) and unicodedata.is_normalized("NFD", p) for p in parts
    ):
        return None  # nothing to normalise (ASCII, most text): the file simply does not exist
    folder, spelled = full.parents[len(parts) - 1], []
    for part in parts:
        try:
            names = os.listdir(folder)
        except OSError:
            return None
        matches = [part] if part in names else [n for n in names if _same(n, part)]
        if len(matches) != 1:
            return None
        spelled.append(matches[0])
        folder = folder / matches[0]
    return "/".join(spelled)


def _same(a: str, b: str) -> bool:
    return unicodedata.normalize("NFC", a) == unicodedata.normalize("NFC", b)


def get_lines(
    config: Config, path: str, start: int = 1, count: int | None = None, indexed: Callable[[str], bool] | None = None
) -> dict[str, Any]:
    if isinstance(path, str):
        path = as_typed(path)  # `get ./MEMORY.md`, as a shell completes it
    source, full, path = check_path(config, path, indexed)
    if start < 1:
        raise GetError(400, f"from: must be 1 or more, got {start}")
    if count is not None and count < 0:
        raise GetError(400, f"lines: must be 0 or more, got {count}")
    try:
        st = full.lstat()
    except OSError as exc:
        # A parent that is a file, or a name over the file system's 255 bytes (a 500 before): no such file
        # exists, or can. Anything else (a folder it may not enter) is said as a read that failed is.
        if isinstance(exc, FileNotFoundError | NotADirectoryError) or exc.errno == errno.ENAMETOOLONG:
            return {"path": path, "from": start, "lines": 0, "text": "", "totalLines": 0}
        raise GetError(404, f"path {path!r}: cannot be read: {exc.strerror or exc}") from None
    if not statmod.S_ISREG(st.st_mode):
        raise GetError(403, f"path {path!r}: not a regular file")
    try:
        _, text, problem = read_memory_file(full)
    except OSError as exc:
        raise GetError(404, f"path {path!r}: cannot be read: {exc.strerror or exc}") from None
    if text is None:
        raise GetError(422, f"path {path!r}: cannot be read as text: {problem}")
    lines = split_lines(source.render(text))
    chosen = lines[start - 1 : None if count is None else start - 1 + count]
    doc = {"path": path, "from": start, "lines": len(chosen), "text": "\n".join(chosen), "totalLines": len(lines)}
    if problem is not None:  # text read with a repair (invalid UTF-8 as U+FFFD): said, as the sync says it
        doc["warning"] = problem
    return doc
