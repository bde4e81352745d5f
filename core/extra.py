"""`extraPaths` entries outside the workspace (absolute, or `../` relative), as OpenClaw allows them.

Such an entry's files are indexed under a stable path that looks like any other workspace-relative path:
`extra/<h>/<path inside the entry>`, where `<h>` is the first 8 hex digits of the SHA-256 of the entry's
absolute path (normalised, symlinks not resolved); a single-file entry's file is `extra/<h>/<its name>`.
The path depends only on where the entry is, so it survives re-indexing and moving the workspace, and
`get` maps it back to exactly that file. The rules inside an entry are the workspace's: Markdown files only,
`exclude` folders never walked, symlinks never followed (the entry itself may not be one; the folders above
it are the user's own choice).
"""

from __future__ import annotations

import hashlib
import os
import stat as statmod
from dataclasses import dataclass
from pathlib import Path

from .config import Config
from .scan import FileEntry, extra_relpath, has_symlink, lstat, walk

PREFIX = "extra/"


@dataclass(frozen=True)
class ExternalRoot:
    entry: str  # as configured
    path: Path  # absolute, normalised
    prefix: str  # "extra/<h>"


def external_roots(config: Config) -> list[ExternalRoot]:
    roots = []
    for extra in config.extra_paths:
        if extra_relpath(config.workspace, extra) is not None:
            continue  # inside the workspace: core.scan indexes it under its own path
        path = Path(os.path.normpath(os.path.join(config.workspace, os.path.expanduser(extra))))
        roots.append(ExternalRoot(extra, path, PREFIX + hashlib.sha256(str(path).encode()).hexdigest()[:8]))
    return roots


def scan_external(config: Config) -> tuple[list[FileEntry], list[str]]:
    """The Markdown files of the external entries, named `extra/<h>/...`, and warnings."""
    files: list[FileEntry] = []
    warnings: list[str] = []
    exclude = set(config.exclude)
    for root in external_roots(config):
        st = lstat(root.path)
        inside: list[str] = []  # warnings about files in the entry, named relative to it
        if st is None:
            warnings.append(f"skipped extraPaths entry {root.entry!r}: it does not exist")
        elif statmod.S_ISLNK(st.st_mode):
            warnings.append(f"skipped extraPaths entry {root.entry!r}: a symlink (symlinks are never followed)")
        elif statmod.S_ISDIR(st.st_mode):

            def add(rel: str, found: os.stat_result, root: ExternalRoot = root) -> None:
                files.append(FileEntry(f"{root.prefix}/{rel}", found.st_size, found.st_mtime_ns))

            walk(root.path, "", exclude, add, inside)
        elif statmod.S_ISREG(st.st_mode) and root.path.name.lower().endswith(".md"):
            files.append(FileEntry(f"{root.prefix}/{root.path.name}", st.st_size, st.st_mtime_ns))
        else:
            warnings.append(f"skipped extraPaths entry {root.entry!r}: not a folder or a .md file")
        warnings.extend(f"{w} (in extraPaths entry {root.entry!r})" for w in inside)
    return files, warnings


def external_file(config: Config, rel: str) -> Path | None:
    """The file outside the workspace that an index path `extra/<h>/...` names by the rules above, or None
    (no such entry, not Markdown, in an `exclude` folder, or through a symlink)."""
    if not rel.startswith(PREFIX):
        return None
    for root in external_roots(config):
        if not rel.startswith(root.prefix + "/"):
            continue
        inner = rel[len(root.prefix) + 1 :]
        st = lstat(root.path)
        if st is None or statmod.S_ISLNK(st.st_mode) or not inner.lower().endswith(".md"):
            return None
        if statmod.S_ISREG(st.st_mode):
            return root.path if inner == root.path.name else None
        parts = inner.split("/")
        if any(p in config.exclude for p in parts[:-1]) or has_symlink(root.path, inner):
            return None
        return root.path / inner
    return None

