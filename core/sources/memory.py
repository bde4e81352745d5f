"""The `memory` source: an agent's Markdown memory files, always indexed.

`MEMORY.md`, `memory.md`, `memory/**/*.md` and the `extraPaths`. Symlinks are never followed (neither files
nor folders), `exclude` names are never walked, hidden names (a leading `.`) are not matched, as a `**/*.md`
glob does not match them (an editor's state in `.obsidian/`, a `.trash/`, macOS's `._note.md`), and a file
reachable twice (hard link, case-insensitive file system) is kept once. Only `stat` is called here: a sync
that finds nothing changed reads no file contents.

An `extraPaths` entry outside the workspace (absolute, or `../` relative), as OpenClaw allows, is indexed
under a stable path that looks like any other: `extra/<h>/<path inside the entry>`, where `<h>` is the first
8 hex digits of the SHA-256 of the entry's absolute path (normalised, symlinks not resolved); a single-file
entry's file is `extra/<h>/<its name>`. The name depends only on where the entry is, so it survives rebuilds,
and `get` maps it back to exactly that file. Inside an entry the workspace's rules apply; the entry itself may
not be a symlink (the folders above it are the user's own choice).
"""

from __future__ import annotations

import hashlib
import os
import stat as statmod
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path

from ..chunking import Chunk, chunk_text
from ..config_types import Config
from ..errors import GetError
from ..ranking import false_date
from .base import FileEntry

ROOT_FILES = ("MEMORY.md", "memory.md")
MEMORY_DIR = "memory"
LOOKED_FOR = "MEMORY.md, memory.md, memory/**/*.md and the extraPaths entries"
EXTERNAL = "extra/"  # the prefix of the index paths of files outside the workspace


class MemorySource:
    """Markdown files in the workspace, chunked as they are; `get` refuses a path through a symlink."""

    name = "memory"

    def __init__(self, config: Config) -> None:
        self.config = config

    def discover(self) -> tuple[list[FileEntry], list[str], list[str]]:
        seen: set[tuple[int, int]] = set()  # a file reachable twice is indexed once, under its first name
        result = scan(self.config, seen)
        external = scan_external(self.config, seen)
        files = sorted(result.files + external.files, key=lambda f: f.path)
        # Each once: entries that overlap (`memory` and `memory/sub`, `docs` and `..`) walk a folder twice, and
        # a symlink in it was "skipped" once per walk, in every sync's report and on stderr.
        warnings = list(dict.fromkeys(result.warnings + external.warnings))
        return files, warnings, result.unlisted + external.unlisted

    def due(self, entry: FileEntry, indexed_size: int) -> bool:
        return True

    def path(self, rel: str) -> Path:
        return external_file(self.config, rel) or self.config.workspace / rel

    def chunk(self, rel: str, text: str, warnings: list[str]) -> list[Chunk]:
        if wrong := false_date(rel):  # a typo in a daily note's name: said when the note is read, not left to guess
            warnings.append(
                f"{rel}: {wrong}: the note is undated (evergreen: kept by "
                "--after and --before, dropped by --no-evergreen, never decayed); rename it to date it"
            )
        return chunk_text(text, self.config.chunking.tokens, self.config.chunking.overlap)

    def owns(self, rel: str) -> bool:
        return is_memory_path(self.config, rel) or external_file(self.config, rel) is not None

    def resolve(self, rel: str) -> Path:
        external = external_file(self.config, rel)  # it refused symlinks, excluded folders, other names
        if external is not None:
            return external
        if has_symlink(self.config.workspace, rel):
            raise GetError(403, f"path {rel!r}: goes through a symlink")
        return self.path(rel)

    def render(self, text: str) -> str:
        return text


@dataclass
class ScanResult:
    files: list[FileEntry]
    warnings: list[str]
    #: index paths of the folders that exist but could not be listed: what they held is not known to be gone
    unlisted: list[str] = field(default_factory=list)


def scan(config: Config, seen: set[tuple[int, int]] | None = None) -> ScanResult:
    """The workspace's memory files; `seen` holds the (device, inode) of the files already listed."""
    ws = config.workspace
    seen = set() if seen is None else seen
    files: list[FileEntry] = []
    warnings: list[str] = []
    unlisted: list[str] = []
    exclude = set(config.exclude)

    def add(rel: str, st: os.stat_result) -> None:
        problem = _name_problem(rel)
        if problem:
            warnings.append(f"skipped {rel!r}: {problem}")
        elif _first_sight(seen, st):
            files.append(FileEntry(rel, st.st_size, st.st_mtime_ns))

    if not ws.is_dir():  # moved, deleted, or on a volume not mounted now: its notes are not known to be gone
        return ScanResult([], [workspace_gone(ws)], [""])
    try:  # a workspace that cannot be searched (chmod 000) hides its files: they are not gone
        tops = {name: _present(ws / name) for name in (*ROOT_FILES, MEMORY_DIR)}
    except OSError as exc:
        problem = f"skipped the workspace {ws}: {exc.strerror or exc}; the files indexed there are kept"
        return ScanResult([], [problem], [""])
    for name in ROOT_FILES:
        st = tops[name]
        if st is not None and statmod.S_ISREG(st.st_mode):
            add(name, st)
        elif st is not None:
            warnings.append(_not_regular(name, st.st_mode))
    st = tops[MEMORY_DIR]
    if st is not None and statmod.S_ISDIR(st.st_mode):
        walk(ws, MEMORY_DIR, exclude, add, warnings, unlisted.append)
    elif st is not None and statmod.S_ISLNK(st.st_mode):
        warnings.append(_not_regular(MEMORY_DIR, st.st_mode))

    for extra in config.extra_paths:
        rel = extra_relpath(ws, extra)
        if rel is None:
            continue  # outside the workspace: scan_external indexes it under extra/<h>/
        if has_symlink(ws, rel):
            warnings.append(f"skipped extraPaths entry {extra!r}: it goes through a symlink")
            continue
        st = lstat(ws / rel)
        if st is None:
            warnings.append(f"skipped extraPaths entry {extra!r}: it does not exist")
        elif statmod.S_ISDIR(st.st_mode):
            walk(ws, rel, exclude, add, warnings, unlisted.append)
        elif statmod.S_ISREG(st.st_mode) and rel.lower().endswith(".md"):
            add(rel, st)
        else:
            warnings.append(f"skipped extraPaths entry {extra!r}: not a folder or a .md file")
    files.sort(key=lambda f: f.path)
    return ScanResult(files, warnings, unlisted)


def workspace_gone(workspace: Path) -> str:
    """Why a sync of a workspace that is not there keeps its rows, and a search answers from them."""
    return (
        f"the workspace {workspace} is not a folder (moved, deleted or not mounted?): the files indexed there are kept"
    )


def nothing_found(workspace: Path) -> str:
    """The warning for a workspace without memory files: most often a mistyped --workspace, which would
    otherwise index nothing and answer "No matches." in silence."""
    return f"no memory files in {workspace}: memsift looks for {LOOKED_FOR}"


def walk(ws: Path, rel_dir: str, exclude: set[str], add, warnings: list[str], unlisted: Callable[[str], None]) -> None:
    """Add the Markdown files below `rel_dir`. A folder that exists but cannot be listed (permissions, an I/O
    error, too many open files) goes to `unlisted`: the sync keeps the files it indexed there as they were,
    rather than deleting them as if they had gone."""
    stack = [rel_dir]
    while stack:
        rel = stack.pop()
        try:
            entries = list(os.scandir(ws / rel))
        except (FileNotFoundError, NotADirectoryError) as exc:  # gone since its parent was listed: it is gone
            warnings.append(f"skipped folder {rel}: {exc.strerror or exc}")
            continue
        except OSError as exc:
            unlisted(rel)
            warnings.append(f"skipped folder {rel or '.'}: {exc.strerror or exc}; the files indexed there are kept")
            continue
        for entry in entries:
            if entry.name.startswith("."):  # hidden: never matched, and not a warning (an editor's lock symlink)
                continue
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


def _first_sight(seen: set[tuple[int, int]], st: os.stat_result) -> bool:
    """True the first time a file is met: a file reachable twice (a hard link, a case-insensitive file system,
    overlapping extraPaths entries) is listed once, under the first name found."""
    key = (st.st_dev, st.st_ino)
    if key in seen:
        return False
    seen.add(key)
    return True


def _name_problem(rel: str) -> str | None:
    """Why a file cannot be indexed under this name: its path must be one `get` reads back (core/get.py)."""
    try:
        rel.encode("utf-8")
    except UnicodeEncodeError:
        return "the file name is not valid UTF-8"
    if "\\" in rel:  # legal on Linux and macOS, but `get` refuses it (a way out on Windows)
        return "a backslash in the name (get could not read it back; rename it)"
    return None


def _not_regular(rel: str, mode: int) -> str:
    """The warning for a memory-file name that is not a plain file: a user who put it there wants to know."""
    if statmod.S_ISLNK(mode):
        return f"skipped {rel!r}: a symlink (symlinks are never followed)"
    return f"skipped {rel!r}: not a regular file"


def _present(path: Path) -> os.stat_result | None:
    """`lstat`, None when nothing is there; any other error (permissions, I/O) is raised."""
    try:
        return path.lstat()
    except (FileNotFoundError, NotADirectoryError):
        return None


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


def walked(inner: str, exclude: Collection[str]) -> bool:
    """Whether `walk` reaches the file at `inner`, a path below the walk's root: no hidden name on the way, the
    file's own included, and no `exclude` folder. The root itself is the user's choice (`extraPaths = [".notes"]`)."""
    parts = inner.split("/")
    return not any(p.startswith(".") for p in parts) and not any(p in exclude for p in parts[:-1])


def is_memory_path(config: Config, rel: str) -> bool:
    """Whether a workspace-relative path names a memory file by the discovery rules (it may not exist yet)."""
    if rel in ROOT_FILES:
        return True
    if not rel.lower().endswith(".md"):
        return False

    def walked_from(root: str) -> bool:
        if root and not rel.startswith(root + "/"):
            return False
        return walked(rel[len(root) + 1 :] if root else rel, config.exclude)

    if walked_from(MEMORY_DIR):
        return True
    for extra in config.extra_paths:
        base = extra_relpath(config.workspace, extra)
        if base is not None and (rel == base or walked_from(base)):
            return True
    return False


@dataclass(frozen=True)
class ExternalRoot:
    entry: str  # as configured
    path: Path  # absolute, normalised
    prefix: str  # "extra/<h>"


def external_roots(config: Config) -> list[ExternalRoot]:
    roots = []
    for extra in config.extra_paths:
        if extra_relpath(config.workspace, extra) is not None:
            continue  # inside the workspace: scan() indexes it under its own path
        path = Path(os.path.normpath(os.path.join(config.workspace, os.path.expanduser(extra))))
        roots.append(ExternalRoot(extra, path, EXTERNAL + hashlib.sha256(str(path).encode()).hexdigest()[:8]))
    return roots


def scan_external(config: Config, seen: set[tuple[int, int]] | None = None) -> ScanResult:
    """The Markdown files of the external entries, named `extra/<h>/...`, warnings, folders not listed. A file
    in `seen` (the workspace's, or one an earlier entry reaches: `~/notes` and `~/notes/a.md`, or the same folder
    written twice) is left out: indexed once per entry, it came back as the same hit twice."""
    seen = set() if seen is None else seen
    files: list[FileEntry] = []
    warnings: list[str] = []
    unlisted: list[str] = []
    exclude = set(config.exclude)
    for root in external_roots(config):
        st = lstat(root.path)
        inside: list[str] = []  # warnings about files in the entry, named relative to it
        if st is None:
            warnings.append(f"skipped extraPaths entry {root.entry!r}: it does not exist")
        elif statmod.S_ISLNK(st.st_mode):
            warnings.append(f"skipped extraPaths entry {root.entry!r}: a symlink (symlinks are never followed)")
        elif statmod.S_ISDIR(st.st_mode):

            def add(rel: str, found: os.stat_result, root: ExternalRoot = root, inside: list[str] = inside) -> None:
                problem = _name_problem(rel)
                if problem:
                    inside.append(f"skipped {rel!r}: {problem}")
                elif _first_sight(seen, found):
                    files.append(FileEntry(f"{root.prefix}/{rel}", found.st_size, found.st_mtime_ns))

            prefix = root.prefix
            walk(root.path, "", exclude, add, inside, lambda rel, p=prefix: unlisted.append(f"{p}/{rel}".rstrip("/")))
        elif statmod.S_ISREG(st.st_mode) and root.path.name.lower().endswith(".md"):
            if problem := _name_problem(root.path.name):
                warnings.append(f"skipped extraPaths entry {root.entry!r}: {problem}")
            elif _first_sight(seen, st):
                files.append(FileEntry(f"{root.prefix}/{root.path.name}", st.st_size, st.st_mtime_ns))
        else:
            warnings.append(f"skipped extraPaths entry {root.entry!r}: not a folder or a .md file")
        warnings.extend(f"{w} (in extraPaths entry {root.entry!r})" for w in inside)
    return ScanResult(files, warnings, unlisted)


def external_file(config: Config, rel: str) -> Path | None:
    """The file outside the workspace that an index path `extra/<h>/...` names by the rules above, or None
    (no such entry, not Markdown, hidden, in an `exclude` folder, or through a symlink). An entry gone since it was
    indexed still names its files (`get` reads them only while the index holds them, as empty text)."""
    if not rel.startswith(EXTERNAL):
        return None
    for root in external_roots(config):
        if not rel.startswith(root.prefix + "/"):
            continue
        inner = rel[len(root.prefix) + 1 :]
        st = lstat(root.path)
        if (st is not None and statmod.S_ISLNK(st.st_mode)) or not inner.lower().endswith(".md"):
            return None
        if st is None and inner == root.path.name:
            return root.path  # a single-file entry deleted (a folder entry's file of its name: gone as well)
        if st is not None and statmod.S_ISREG(st.st_mode):
            return root.path if inner == root.path.name else None
        if not walked(inner, config.exclude) or has_symlink(root.path, inner):
            return None
        return root.path / inner
    return None
