"""A server's search syncs the notes changed since the last sync first, as `memsift search` does, without a
stat of every note on every search of a large memory.

The watcher syncs a change only a debounce later (about 1.6 s), and until then a note just written was not
found and a deleted one was still a hit. Finding what changed takes a stat of each memory file (0.5 ms for
15 notes, 1.6 ms for 200, 5 ms for 500, 10 ms for 1,000, 84 ms for 10,000). Up to `LOOK_ALWAYS_FILES`
indexed files a search always looks: the watcher hears of a change only 50-100 ms after the write (inotify,
then watchfiles' `core.watching.SEEN_MS` steps), so a note written and searched for at once (an agent's
script, a test) was missed by every such search. Above that, while the server's watcher covers the agent, a
search looks only when the watcher has seen a change since the last look or has restarted its watches;
without a watcher (`sync.watch = false`, or the watching failed), on every search.
"""

from __future__ import annotations

from core import MemoryIndex, MemsiftError
from core.watching import MemoryWatching

#: Up to this many indexed files a search looks for changes itself, whatever the watcher saw: 1.6 ms a search
#: at 200 (median), 5 ms at 500 and 10 ms at 1,000, most of a 13 ms search.
LOOK_ALWAYS_FILES = 200


class CatchUps:
    def __init__(self) -> None:
        self.watching: MemoryWatching | None = None  # the server's file watcher, set by `serve`, `up`, `mcp`
        # agent: the watcher's `seen` at the last look, and the indexed files then (a sync changes it, and the
        # watcher sees the change), so a search the watcher covers asks the index nothing
        self._looked: dict[str, tuple[tuple[int, int], int]] = {}

    def before_search(self, index: MemoryIndex) -> str | None:
        """Sync what changed first; what that sync said, for the answer's `warning` (MemoryIndex.catch_up): its
        warnings, why the answer may not cover the notes as they are, or why the sync failed."""
        agent = index.config.agent
        token = self.watching.seen(agent) if self.watching is not None else None
        looked = self._looked.get(agent)
        if token is not None and looked is not None and looked[0] == token and looked[1] > LOOK_ALWAYS_FILES:
            return None  # trust the watcher: nothing seen since the last look
        try:
            said = index.catch_up()  # another sync running: it, or the watcher's next one, syncs the change
            if token is not None:
                self._looked[agent] = (token, index.store.file_count())
        except (MemsiftError, OSError) as exc:  # the search answers from the index as it is
            return f"changed memory files not synced: {exc}"
        return said
