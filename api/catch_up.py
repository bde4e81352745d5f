"""A server's search syncs the notes changed since the last sync first, as `memsift search` does, without a
stat of every note on every search.

The watcher syncs a change only a debounce later (about 1.6 s), and until then a note just written was not
found and a deleted one was still a hit. Finding what changed takes a stat of each memory file (2 ms for 300
notes, 84 ms for 10,000), so while the server's watcher covers the agent a search looks only when the watcher
has seen a change since the last look (within `core.watching.SEEN_MS` of it) or has restarted its watches;
without a watcher (`sync.watch = false`, or the watching failed), on every search.
"""

from __future__ import annotations

from core import MemoryIndex, MemsiftError
from core.watching import MemoryWatching


class CatchUps:
    def __init__(self) -> None:
        self.watching: MemoryWatching | None = None  # the server's file watcher, set by `serve`, `up`, `mcp`
        self._looked: dict[str, tuple[int, int]] = {}  # agent: the watcher's `seen` at the last look

    def before_search(self, index: MemoryIndex) -> str | None:
        """Sync what changed first; what that sync said, for the answer's `warning` (MemoryIndex.catch_up): its
        warnings, why the answer may not cover the notes as they are, or why the sync failed."""
        agent = index.config.agent
        token = self.watching.seen(agent) if self.watching is not None else None
        if token is not None and self._looked.get(agent) == token:
            return None
        try:
            said = index.catch_up()  # another sync running: it, or the watcher's next one, syncs the change
        except (MemsiftError, OSError) as exc:  # the search answers from the index as it is
            return f"changed memory files not synced: {exc}"
        if token is not None:
            self._looked[agent] = token
        return said
