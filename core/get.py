"""`get`: an exact line range of one memory file, and nothing else.

The path is checked as text first (no absolute path, no `..`, no backslash, no NUL), then against the
discovery rules (only MEMORY.md, memory.md, memory/**/*.md and extraPaths; a file of an entry outside the
workspace by its index name `extra/<h>/...`, and only once indexed), then on disk (no component may
be a symlink, and the file is opened with O_NOFOLLOW). A memory file that does not exist yet reads as
empty text, as OpenClaw's does. A transcript (`sessions/<name>.jsonl`, when sessions are a source) is read
from `sessions.dir` and returned as its rendering (core/sessions.py), line for line with the JSONL.
"""

from __future__ import annotations

import stat as statmod
from collections.abc import Callable
from typing import Any

from .chunking import split_lines
from .config import Config
from .extra import PREFIX as EXTERNAL
from .extra import external_file
from .indexer import read_memory_file
from .scan import has_symlink, is_memory_path
from .sessions import is_session_path, source_path, transcript_text


class GetError(Exception):
    """A refused or malformed `get`; `status` is the HTTP status the API answers with."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def check_path(config: Config, path: str, indexed: Callable[[str], bool] | None = None) -> str:
    """The workspace-relative path if `get` may read it; GetError otherwise. A file outside the workspace
    (an `extraPaths` entry's, `extra/<h>/...`) is read only once the index holds it, when `indexed` says."""
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
    if is_session_path(config, path):
        return path  # a transcript: read from sessions.dir, by name only (no '/' in it), never through a symlink
    if path.startswith(EXTERNAL) and external_file(config, path) is not None:
        # A file of an extraPaths entry outside the workspace, by the name the index gave it; external_file
        # refused symlinks, excluded folders and non-Markdown names inside the entry.
        if indexed is not None and not indexed(path):
            raise GetError(404, f"path {path!r}: not in the index (run `memsift index` after adding it)")
        return path
    if not is_memory_path(config, path):
        raise GetError(403, f"path {path!r}: not a memory file (MEMORY.md, memory.md, memory/**/*.md, extraPaths)")
    if has_symlink(config.workspace, path):
        raise GetError(403, f"path {path!r}: goes through a symlink")
    return path


def get_lines(
    config: Config, path: str, start: int = 1, count: int | None = None, indexed: Callable[[str], bool] | None = None
) -> dict[str, Any]:
    rel = check_path(config, path, indexed)
    if start < 1:
        raise GetError(400, f"from: must be 1 or more, got {start}")
    if count is not None and count < 0:
        raise GetError(400, f"lines: must be 0 or more, got {count}")
    full = source_path(config, rel)
    try:
        st = full.lstat()
    except (FileNotFoundError, NotADirectoryError):  # a parent may be a file: still "does not exist"
        return {"path": rel, "from": start, "lines": 0, "text": "", "totalLines": 0}
    if not statmod.S_ISREG(st.st_mode):
        raise GetError(403, f"path {rel!r}: not a regular file")
    try:
        _, text, problem = read_memory_file(full)
    except OSError as exc:
        raise GetError(404, f"path {rel!r}: cannot be read: {exc.strerror or exc}") from None
    if text is None:
        raise GetError(422, f"path {rel!r}: cannot be read as text: {problem}")
    if is_session_path(config, rel):
        text = transcript_text(text)[0]
    lines = split_lines(text)
    chosen = lines[start - 1 : None if count is None else start - 1 + count]
    return {"path": rel, "from": start, "lines": len(chosen), "text": "\n".join(chosen), "totalLines": len(lines)}
