"""Discovery of an agent's memory files.

`MEMORY.md`, `memory.md`, `memory/**/*.md` and the `extraPaths` inside the workspace (those outside it:
core/extra.py). Symlinks are
never followed (neither files nor folders), `exclude` names are never walked, and a file reachable twice
(hard link, case-insensitive file system) is kept once. Only `stat` is called here: a sync that finds
nothing changed reads no file contents.
"""

from __future__ import annotations

import os
import stat as statmod
from dataclasses import dataclass
from pathlib import Path

from .config import Config

ROOT_FILES = ("MEMORY.md", "memory.md")
MEMORY_DIR = "memory"
LOOKED_FOR = "MEMORY.md, memory.md, memory/**/*.md and the extraPaths entries"


@dataclass(frozen=True)
class FileEntry:
    path: str  # workspace-relative, '/' separated
    size: int
    mtime_ns: int
    source: str = "memory"


@dataclass
class ScanResult:
    files: list[FileEntry]
    warnings: list[str]


def scan(config: Config) -> ScanResult:
    ws = config.workspace
    seen: set[tuple[int, int]] = set()
    files: list[FileEntry] = []
    warnings: list[str] = []
    exclude = set(config.exclude)

    def add(rel: str, st: os.stat_result) -> None:
        key = (st.st_dev, st.st_ino)
        if key in seen:
            return
        try:
            rel.encode("utf-8")
        except UnicodeEncodeError:
            warnings.append(f"skipped {rel!r}: the file name is not valid UTF-8")
            return
        seen.add(key)
        files.append(FileEntry(rel, st.st_size, st.st_mtime_ns))

    for name in ROOT_FILES:
        st = lstat(ws / name)
        if st is not None and statmod.S_ISREG(st.st_mode):
            add(name, st)
        elif st is not None:
            warnings.append(_not_regular(name, st.st_mode))
    st = lstat(ws / MEMORY_DIR)
    if st is not None and statmod.S_ISDIR(st.st_mode):
        walk(ws, MEMORY_DIR, exclude, add, warnings)
    elif st is not None and statmod.S_ISLNK(st.st_mode):
        warnings.append(_not_regular(MEMORY_DIR, st.st_mode))

    for extra in config.extra_paths:
        rel = extra_relpath(ws, extra)
        if rel is None:
            continue  # outside the workspace: core.extra indexes it under extra/<h>/
        if has_symlink(ws, rel):
            warnings.append(f"skipped extraPaths entry {extra!r}: it goes through a symlink")
            continue
        st = lstat(ws / rel)
        if st is None:
            warnings.append(f"skipped extraPaths entry {extra!r}: it does not exist")
        elif statmod.S_ISDIR(st.st_mode):
            walk(ws, rel, exclude, add, warnings)
        elif statmod.S_ISREG(st.st_mode) and rel.lower().endswith(".md"):
            add(rel, st)
        else:
            warnings.append(f"skipped extraPaths entry {extra!r}: not a folder or a .md file")
    files.sort(key=lambda f: f.path)
    return ScanResult(files, warnings)


def nothing_found(workspace: Path) -> str:
    """The warning for a workspace without memory files: most often a mistyped --workspace, which would
    otherwise index nothing and answer "No matches." in silence."""
    return f"no memory files in {workspace}: memsift looks for {LOOKED_FOR}"


def walk(ws: Path, rel_dir: str, exclude: set[str], add, warnings: list[str]) -> None:
    stack = [rel_dir]
    while stack:
        rel = stack.pop()
        try:
            entries = list(os.scandir(ws / rel))
        except OSError as exc:
            warnings.append(f"skipped folder {rel}: {exc.strerror or exc}")
            continue
        for entry in entries:
            child = f"{rel}/{entry.name}" if rel else entry.name
            try:
                if entry.is_dir(follow_symlinks=False):
                    if entry.name not in exclude:
                        stack.append(child)
                elif entry.name.lower().endswith(".md") and entry.is_file(follow_symlinks=False):
                    add(child, entry.stat(follow_symlinks=False))
                elif entry.name not in exclude and (entry.name.lower().endswith(".md") or entry.is_symlink()):
                    warnings.append(_not_regular(child, entry.stat(follow_symlinks=False).st_mode))
            except OSError as exc:  # vanished between listing and stat
                warnings.append(f"skipped {child}: {exc.strerror or exc}")


def _not_regular(rel: str, mode: int) -> str:
    """The warning for a memory-file name that is not a plain file: a user who put it there wants to know."""
    if statmod.S_ISLNK(mode):
        return f"skipped {rel!r}: a symlink (symlinks are never followed)"
    return f"skipped {rel!r}: not a regular file"


def lstat(path: Path) -> os.stat_result | None:
    try:
        return path.lstat()
    except OSError:
        return None


def extra_relpath(ws: Path, extra: str) -> str | None:
    """The workspace-relative form of an extraPaths entry, or None when it leaves the workspace."""
    joined = os.path.normpath(os.path.join(ws, os.path.expanduser(extra)))
    rel = os.path.relpath(joined, ws)
    if rel == ".":
        return ""
    if rel == os.pardir or rel.startswith(os.pardir + os.sep):  # not a name like "..notes"
        return None
    return rel.replace(os.sep, "/")


def has_symlink(ws: Path, rel: str) -> bool:
    """True when any component of `rel` below the workspace is a symlink."""
    current = ws
    for part in [p for p in rel.split("/") if p]:
        current = current / part
        st = lstat(current)
        if st is not None and statmod.S_ISLNK(st.st_mode):
            return True
    return False


def is_memory_path(config: Config, rel: str) -> bool:
    """Whether a workspace-relative path names a memory file by the discovery rules (it may not exist yet)."""
    if rel in ROOT_FILES:
        return True
    if not rel.lower().endswith(".md"):
        return False

    def walked_from(root: str) -> bool:
        # As `walk` does: `exclude` applies to the folders below the walk's root, not to the root itself.
        if root and not rel.startswith(root + "/"):
            return False
        inner = rel[len(root) + 1 :] if root else rel
        return not any(p in config.exclude for p in inner.split("/")[:-1])

    if walked_from(MEMORY_DIR):
        return True
    for extra in config.extra_paths:
        base = extra_relpath(config.workspace, extra)
        if base is not None and (rel == base or walked_from(base)):
            return True
    return False
