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

While the watcher covers the agent, a search syncs inline only up to `CATCH_UP_BYTES` of changed files (or one
file, whatever its size: the note an agent just wrote): past that it answers from the index as it is, its
`degraded` names what it does not search yet, and the watcher's sync (it saw the changes) indexes them. A burst
of 100 rewritten notes (280 KiB) held the first search after it 9-18 s while it embedded them all.
"""

from __future__ import annotations

from dataclasses import dataclass

from core import MemoryIndex, MemsiftError
from core.search_response import SearchResponse
from core.watching import MemoryWatching

#: Up to this many indexed files a search looks for changes itself, whatever the watcher saw: 1.6 ms a search
#: at 200 (median), 5 ms at 500 and 10 ms at 1,000, most of a 13 ms search.
LOOK_ALWAYS_FILES = 200
#: Changed text a search covered by a watcher embeds itself before answering: about a second of the local
#: model on 2 busy cores (~30 KiB/s); what is more waits for the watcher's sync, and the answer says so.
CATCH_UP_BYTES = 32 * 1024


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
        # agent: the watcher's `seen` at the last look, and the indexed files then (a sync changes it, and the
        # watcher sees the change), so a search the watcher covers asks the index nothing
        self._looked: dict[str, tuple[tuple[int, int], int]] = {}

    def before_search(self, index: MemoryIndex) -> CaughtUp:
        """Sync what changed first, as much as a search waits for; what that sync said, for the answer's `warning`
        (MemoryIndex.catch_up): its warnings, why the answer may not cover the notes as they are, or why the sync
        failed; and what the answer does not search yet, for its `degraded`."""
        agent = index.config.agent
        token = self.watching.seen(agent) if self.watching is not None else None
        looked = self._looked.get(agent)
        if token is not None and looked is not None and looked[0] == token and looked[1] > LOOK_ALWAYS_FILES:
            return CaughtUp()  # trust the watcher: nothing seen since the last look
        try:  # another sync running, or too much for a search: it, or the watcher's next one, syncs the change
            said, unsearched = index.catch_up(most_bytes=None if token is None else CATCH_UP_BYTES)
            if token is not None:
                self._looked[agent] = (token, index.store.file_count())
        except (MemsiftError, OSError) as exc:  # the search answers from the index as it is
            return CaughtUp(f"changed memory files not synced: {exc}")
        return CaughtUp(said, unsearched)
