"""A server's search syncs the notes changed since the last sync first, as `memsift search` does, without a
stat of every note on every search of a large memory.

The watcher syncs a change only a debounce later (about 1.6 s), and until then a note just written was not
found and a deleted one was still a hit. Finding what changed takes a stat of each memory file (0.5 ms for
15 notes, 1.6 ms for 200, 5 ms for 500, 10 ms for 1,000, 84 ms for 10,000). Up to `LOOK_ALWAYS_FILES`
indexed files a search always looks: the watcher hears of a change only 50-100 ms after the write (inotify,
then watchfiles' `core.watching.SEEN_MS` steps), so a note written and searched for at once (an agent's
script, a test) was missed by every such search. Above that, while the server's watcher covers the agent, a
search looks only when the watcher has seen a change since the last look or has restarted its watches;
without a watcher (`sync.watch = false`, or the watching failed), on every search. Trusting the watcher, a
search still stats the few files an agent writes and searches for at once (`written_files`: `MEMORY.md`,
`memory.md`, the daily notes of yesterday, today and tomorrow, indexed yet or not; and the `RECENT_FILES` memory
files modified last, compared with their rows as the last look left them): when one differs, it looks as above
(the whole catch-up: its sync is the ordinary one, and nothing of its scan is repeated here). Before, a note
appended to and searched for at once on `memsift serve` over 551 notes was missed by 29 searches in 30; the
stats cost 0.14 ms a search (median, p95 0.3 ms, at 500 and at 5,000 notes). It also stats the memory folders
(`memory_folders`: `memory/`, the extraPaths folders and every folder below them): a note created, renamed
or deleted anywhere changes its folder's mtime, so a new `memory/projects/x.md` searched for at once is found
(bench/new_note.py, `memsift serve` over 300 notes: 0 of 15 first searches found it, now 15 of 15). What is
left to the watcher: an old note edited in place that is not among the `RECENT_FILES`, and a file created in
the same clock tick (a few ms) as the folder's last change before a look.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

from core import MemoryIndex, MemsiftError
from core.config_types import Config
from core.search_response import SearchResponse
from core.sources.memory import MEMORY_DIR, ROOT_FILES, MemorySource, extra_relpath
from core.watching import MemoryWatching

#: Up to this many indexed files a search looks for changes itself, whatever the watcher saw: 1.6 ms a search
#: at 200 (median), 5 ms at 500 and 10 ms at 1,000, most of a 13 ms search.
LOOK_ALWAYS_FILES = 200
#: Changed text a search covered by a watcher embeds itself before answering: about a second of the local
#: model on 2 busy cores (~30 KiB/s); what is more waits for the watcher's sync, and the answer says so.
CATCH_UP_BYTES = 32 * 1024
#: Indexed files modified last that a search the watcher covers still stats (`written_files`).
RECENT_FILES = 8

Stats = tuple[tuple[int, int] | None, ...]


@dataclass
class CaughtUp:
    """What the catch-up before a search said (`warning`), and what the answer does not search yet (`degraded`)."""

    said: str | None = None
    unsearched: str | None = None

    def tell(self, response: SearchResponse) -> None:
        response.warn(self.said)
        if self.unsearched:
            response.degrade(self.unsearched, "unsynced")


class CatchUps:
    def __init__(self) -> None:
        self.watching: MemoryWatching | None = None  # the server's file watcher, set by `serve`, `up`, `mcp`
        # agent: the watcher's `seen` at the last look, the indexed files then (a sync changes it, and the
        # watcher sees the change), so a search the watcher covers asks the index nothing, the memory files
        # modified last after it, and the (size, mtime) of `written_files` before it and of those after it
        self._looked: dict[str, tuple[tuple[int, int], int, list[Path], Stats]] = {}

    def before_search(self, index: MemoryIndex) -> CaughtUp:
        """Sync what changed first, as much as a search waits for; what that sync said, for the answer's `warning`
        (MemoryIndex.catch_up): its warnings, why the answer may not cover the notes as they are, or why the sync
        failed; and what the answer does not search yet, for its `degraded`."""
        agent = index.config.agent
        token = self.watching.seen(agent) if self.watching is not None else None
        looked = self._looked.get(agent)
        if token is not None and looked is not None and looked[0] == token and looked[1] > LOOK_ALWAYS_FILES:
            if _stats([*written_files(index.config), *looked[2]]) == looked[3]:
                return CaughtUp()  # trust the watcher: nothing seen since the last look, nor just written
        try:  # another sync running, or too much for a search: it, or the watcher's next one, syncs the change
            folders = memory_folders(index.config) if token is not None else []
            # before the look: a write during it differs
            before = _stats([*written_files(index.config), *folders]) if token is not None else ()
            said, unsearched = index.catch_up(most_bytes=None if token is None else CATCH_UP_BYTES)
            if token is not None:
                recent = _recent(index)  # as the look left them: a write since differs from its row
                self._looked[agent] = (
                    token,
                    index.store.file_count(),
                    [*folders, *(p for p, _ in recent)],
                    before + tuple(s for _, s in recent),
                )
        except (MemsiftError, OSError) as exc:  # the search answers from the index as it is
            return CaughtUp(f"changed memory files not synced: {exc}")
        return CaughtUp(said, unsearched)


def written_files(config: Config) -> list[Path]:
    """The files an agent writes and searches for at once, besides the indexed files it modified last: the
    root notes and the daily notes of yesterday, today and tomorrow (by the server's clock and by UTC: the
    agent's may be either), indexed yet or not."""
    ws = config.workspace
    now = date.today()
    days = sorted({now, now - timedelta(days=1), now + timedelta(days=1), datetime.now(UTC).date()})
    return [*(ws / name for name in ROOT_FILES), *(ws / MEMORY_DIR / f"{day}.md" for day in days)]


def memory_folders(config: Config) -> list[Path]:
    """The folders that list the agent's memory files: `memory/`, the extraPaths folders, and every folder below
    them that the scan walks (not hidden, not excluded, no symlink). A note created, renamed or deleted in one
    changes that folder's mtime, which a search compares (a new `memory/projects/x.md` is none of
    `written_files`): one `os.scandir` per folder at a look, one `stat` per folder at a search."""
    ws = config.workspace
    roots = [ws / MEMORY_DIR]
    for extra in config.extra_paths:
        rel = extra_relpath(ws, extra)
        roots.append(ws / rel if rel is not None else Path(os.path.normpath(ws / os.path.expanduser(extra))))
    exclude = set(config.exclude)
    found: list[Path] = []
    stack = [root for root in dict.fromkeys(roots) if root.is_dir() and not root.is_symlink()]
    while stack:
        folder = stack.pop()
        found.append(folder)
        try:
            with os.scandir(folder) as entries:
                stack.extend(
                    Path(e.path)
                    for e in entries
                    if not e.name.startswith(".") and e.name not in exclude and e.is_dir(follow_symlinks=False)
                )
        except OSError:  # unreadable or gone: its own stat says so at the next search
            continue
    return list(dict.fromkeys(found))


def _recent(index: MemoryIndex) -> list[tuple[Path, tuple[int, int]]]:
    """The `RECENT_FILES` memory files modified last as the index holds them: where each is (an extraPaths file
    outside the workspace too), and its (size, mtime) as last synced, which a write since makes differ."""
    source = MemorySource(index.config)
    return [(source.path(rel), stat) for rel, stat in index.store.recent_files(source.name, RECENT_FILES)]


def _stats(paths: list[Path]) -> Stats:
    """(size, mtime) of each path, None where none can be read: what a sync would compare."""
    found: list[tuple[int, int] | None] = []
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            found.append(None)
        else:
            found.append((st.st_size, st.st_mtime_ns))
    return tuple(found)
