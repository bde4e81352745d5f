"""The memory-file watcher of the long-running servers: file changes become debounced syncs of the agents
concerned (`memsift up` syncs through its Prefect deployments, flows.watch; `memsift serve` and `memsift mcp`
in their own process, api.watching).

`watch` turns file events (watchfiles, inotify on Linux) into sets of agents to sync. Only events that name a
memory file by the discovery rules (`core.sources.memory.is_memory_path`: not in an `exclude` folder, Markdown, under
`memory/` or an `extraPaths` entry, or a root `MEMORY.md`) count, plus events on folders that could hold
memory files, because renaming or moving a folder reports the folder alone. A batch is handed over once no new
change arrived for `debounce_ms` (and at the latest `MAX_DELAY_FACTOR` times that after its first change, so a
file written to without pause still gets synced). Each change is also counted at once (`MemoryWatching.seen`),
so a server's search syncs first only when a change is waiting for that debounce (api.catch_up).

`CoalescedRuns` starts the runs and coalesces them: a change while an agent's run is still waiting to start
needs nothing more (that run will see it); a change while a run is running marks the agent, and one more run
starts when that one has finished, instead of a second sync queueing on the writer lock.
"""

from __future__ import annotations

import os
import stat
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Generic, Literal, TypeVar

import watchfiles

from .config_types import Config
from .sources.memory import is_memory_path

MAX_DELAY_FACTOR = 10
TICK_MS = 1000  # how often `on_tick` runs while nothing changes
SEEN_MS = 50  # a change reaches `on_seen` this soon (plus inotify's own delay)

Configs = Mapping[str, Config]
Phase = Literal["waiting", "running", "done"]
R = TypeVar("R")


def changed_agents(configs: Iterable[Config], change: watchfiles.Change, path: str) -> set[str]:
    """The agents whose memory a file event concerns (empty for events to ignore)."""
    found: set[str] = set()
    for config in configs:
        try:
            rel = Path(path).relative_to(config.workspace).as_posix()
        except ValueError:
            continue
        if is_memory_path(config, rel) or _may_hold_memory(config, change, path, rel):
            found.add(config.agent)
    return found


def _may_hold_memory(config: Config, change: watchfiles.Change, path: str, rel: str) -> bool:
    """A folder (or, once deleted, a name that was perhaps one) under which memory files would be found.

    A deleted name counts whatever it looks like: the event does not say whether it was a folder, and a folder
    moved out of the workspace (to the trash, elsewhere) reports its own name alone. Deleted names with an
    extension were taken for files, so `memory/acme.com/` or `memory/2026.q4/` moved away stayed hits until
    some other change. Editors' droppings stay ignored by the discovery rules (`.x.md.swp` is hidden); another
    file deleted in `memory/` costs a sync that finds nothing (a stat of each note)."""
    if change != watchfiles.Change.deleted and (not os.path.isdir(path) or os.path.islink(path)):
        return False
    return is_memory_path(config, f"{rel}/x.md")


def folder_id(path: str | Path) -> tuple[int, int] | None:
    """A folder's (device, inode), None when no folder is there: inotify watches the folder, not its name."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino) if stat.S_ISDIR(st.st_mode) else None


def watch(
    configs: Configs,
    on_changes: Callable[[set[str]], None],
    stop: threading.Event,
    debounce_ms: int,
    on_tick: Callable[[], None] | None = None,
    ready: threading.Event | None = None,
    tick_ms: int = TICK_MS,
    on_seen: Callable[[set[str]], None] | None = None,
) -> bool:
    """Call `on_changes(agents)` for every debounced batch of memory-file changes until `stop` is set (False),
    or until a workspace folder is deleted, replaced or comes back (True: watch again).

    `configs` maps agent ids to their configurations (their workspaces are watched recursively). `on_seen`
    gets the agents of every change at once, within `SEEN_MS` of it, long before the debounced batch: a
    search can then tell whether its index may be behind the files without a stat of each file. `on_tick`
    runs after every batch and every `tick_ms` without change; `ready` is set once the watches are in place.
    inotify watches a folder, not its name: a workspace deleted and made again (`rm -rf`, a fresh clone, a
    restore) was watched no more, in silence, and the searches that trust the watcher answered from the old
    notes. Its (device, inode) is therefore checked at every step (a `stat` per workspace, every 50 ms).
    """
    roots = sorted({str(c.workspace) for c in configs.values()})
    folders = {root: folder_id(root) for root in roots}
    present = [root for root in roots if folders[root] is not None] or roots  # none: watchfiles names it
    quiet = max(debounce_ms, 50) / 1000
    pending: set[str] = set()
    first = last = 0.0
    next_tick = time.monotonic() + tick_ms / 1000
    for changes in watchfiles.watch(
        *present,
        watch_filter=lambda change, path: bool(changed_agents(configs.values(), change, path)),
        step=SEEN_MS,  # watchfiles hands changes over this soon; the debounce is counted here
        debounce=SEEN_MS * 4,  # and this soon under a stream of changes
        rust_timeout=SEEN_MS,  # and wakes this often without change, to end a quiet period on time
        yield_on_timeout=True,
        stop_event=stop,
        raise_interrupt=False,
    ):
        if ready is not None:
            ready.set()
        now = time.monotonic()
        agents = {a for change, path in changes for a in changed_agents(configs.values(), change, path)}
        if agents:
            if on_seen is not None:
                on_seen(agents)
            first = first if pending else now
            pending |= agents
            last = now
        handed = bool(pending) and (now - last >= quiet or now - first >= quiet * MAX_DELAY_FACTOR)
        if handed:
            batch, pending = pending, set()
            on_changes(batch)
        if on_tick is not None and (handed or now >= next_tick):
            on_tick()
            next_tick = now + tick_ms / 1000
        if any(folder_id(root) != folders[root] for root in roots):
            if pending:
                on_changes(pending)
            return True
    return False


class MemoryWatching:
    """The watcher thread (`watch`) over the agents with `sync.watch` on, restartable with new configurations.

    `seen(agent)` tells a search whether a change may be waiting for its debounced sync: a token that changes
    with every change of the agent's files (and with every start of the watches), None when no watch in
    place covers the agent (not yet, not watched, or the watching failed): then only a stat of each file can
    tell."""

    def __init__(
        self, on_changes: Callable[[set[str]], None], on_tick: Callable[[], None], say: Callable[[str], None]
    ) -> None:
        self._on_changes = on_changes
        self._on_tick = on_tick
        self._say = say
        self._key: object = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._watched: frozenset[str] = frozenset()
        self._epoch = 0
        self._seen: dict[str, int] = {}
        self._seen_lock = threading.Lock()

    def seen(self, agent: str) -> tuple[int, int] | None:
        thread = self._thread
        if thread is None or not thread.is_alive() or not self._ready.is_set() or agent not in self._watched:
            return None
        with self._seen_lock:
            return self._epoch, self._seen.get(agent, 0)

    def _count(self, agents: set[str]) -> None:
        with self._seen_lock:
            for agent in agents:
                self._seen[agent] = self._seen.get(agent, 0) + 1

    def start(self, configs: Configs) -> None:
        """Watch these agents; a no-op when the watched folders and rules are the ones watched already."""
        watched = {agent: config for agent, config in configs.items() if config.sync.watch}
        debounce = min((c.sync.watchDebounceMs for c in watched.values()), default=0)  # the shortest asked for
        key = (debounce, sorted((a, c.workspace, c.extra_paths, c.exclude) for a, c in watched.items()))
        if key == self._key:
            return
        self.stop()
        self._key = key
        if not watched:
            self._say("not watching files (sync.watch = false)")
            return
        self._stop, self._ready = threading.Event(), threading.Event()
        with self._seen_lock:
            self._epoch += 1  # a change between two watches was seen by neither
        self._watched = frozenset(watched)
        self._thread = threading.Thread(
            target=self._watch, args=(watched, self._stop, self._ready, debounce), name="memsift-watch", daemon=True
        )
        self._thread.start()
        self._say(f"watching {', '.join(sorted(watched))} (debounce {debounce} ms)")

    def _watch(self, watched: Configs, stop: threading.Event, ready: threading.Event, debounce: int) -> None:
        """`watch`, again after a workspace folder was replaced, saying why it ended if it failed (a workspace
        missing at start, the inotify watch limit reached) rather than a thread's traceback: the server goes on
        serving, and syncing on request."""
        try:
            while watch(
                watched, self._on_changes, stop, debounce, on_tick=self._on_tick, ready=ready, on_seen=self._count
            ):
                with self._seen_lock:
                    self._epoch += 1  # its changes meanwhile were seen by no watch: a search looks again
                while not any(c.workspace.is_dir() for c in watched.values()) and not stop.wait(TICK_MS / 1000):
                    pass  # every workspace gone: wait for one to come back
                if stop.is_set():
                    return
                back = {agent for agent, config in watched.items() if config.workspace.is_dir()}
                gone = (
                    f"; {', '.join(sorted(watched.keys() - back))} when its folder is back"
                    if len(back) < len(watched)
                    else ""
                )
                self._say(
                    f"a workspace folder was deleted, replaced or made again: watching {', '.join(sorted(back))}{gone}"
                )
                self._on_changes(back)  # what the folder holds now may differ from the index
        except Exception as exc:
            self._say(
                f"file watching stopped ({type(exc).__name__}: {exc}); the index is synced only on request now "
                "(POST /v1/index, memsift index, schedules) until the next start"
            )

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
            self._thread = None


class CoalescedRuns(Generic[R]):
    """Sync runs per agent, at most one waiting and one running each. Subclasses say how a run of an agent
    starts (`_start`) and where it stands (`_phase`)."""

    def __init__(self) -> None:
        self._last: dict[str, R] = {}
        self._dirty: set[str] = set()
        self._lock = threading.RLock()  # `again` may be called from `_start`, when a run ends before it returns

    def _start(self, agent: str) -> R:
        raise NotImplementedError

    def _phase(self, run: R) -> Phase:
        raise NotImplementedError

    def forget(self, agent: str) -> None:
        """An agent removed from the configuration: no follow-up run for it."""
        with self._lock:
            self._dirty.discard(agent)
            self._last.pop(agent, None)

    def request(self, agents: Iterable[str]) -> list[R]:
        """Sync these agents; the runs started now (none for an agent whose run is waiting or running)."""
        started = []
        with self._lock:
            for agent in sorted(agents):
                phase = self._phase_of(agent)
                if phase == "done":
                    started.append(self._begin(agent))
                elif phase == "running":
                    self._dirty.add(agent)  # it may have scanned before the change
        return started

    def again(self, agent: str) -> None:
        """Run this agent once more after its run ends (`poll` starts it): the run could not do its work yet."""
        with self._lock:
            self._dirty.add(agent)

    def poll(self) -> list[R]:
        """Start the follow-up run of every marked agent whose run has finished."""
        started = []
        with self._lock:
            for agent in sorted(self._dirty):
                if self._phase_of(agent) == "done":
                    self._dirty.discard(agent)
                    started.append(self._begin(agent))
        return started

    def _phase_of(self, agent: str) -> Phase:
        run = self._last.get(agent)
        return "done" if run is None else self._phase(run)

    def _begin(self, agent: str) -> R:
        run = self._start(agent)
        self._last[agent] = run
        return run


def reported(
    why: str, start: Callable[..., list[R]], say: Callable[[str], None], started: Callable[[R], str], kind: str = "sync"
) -> Callable[..., None]:
    """Wrap a run-starting call for the watcher thread: say what it started (`started(run)`), and say (not
    raise) a failure, so one unreachable moment of a server does not end the watching."""

    def call(*args: object) -> None:
        try:
            runs = start(*args)
        except Exception as exc:
            say(f"{why}: could not start a {kind} run: {type(exc).__name__}: {exc}")
            return
        for run in runs:
            say(f"{why}: {started(run)}")

    return call
