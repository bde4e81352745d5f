"""The file watcher of `memsift up`: memory-file changes become debounced sync runs of the agents concerned.

`watch` turns file events (watchfiles, inotify on Linux) into sets of agents to sync. Only events that name a
memory file by the discovery rules (`core.sources.memory.is_memory_path`: not in an `exclude` folder, Markdown, under
`memory/` or an `extraPaths` entry, or a root `MEMORY.md`) count, plus events on folders that could hold
memory files, because renaming or moving a folder reports the folder alone. The debounce is watchfiles' own:
a batch is handed over once no new change arrived for `debounce_ms` (and at the latest `MAX_DELAY_FACTOR`
times that after its first change, so a file written to without pause still gets synced).

`SyncRuns` starts the runs through the agents' sync deployments. It coalesces: a change while a run is still
waiting to start needs nothing more (that run will see it); a change while a run is running marks the agent,
and one more run starts when that one has finished, instead of a second sync queueing on the writer lock.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from uuid import UUID

import watchfiles
from prefect.client.orchestration import get_client
from prefect.client.schemas.objects import FlowRun, State
from prefect.deployments import run_deployment

from core.config import Config
from core.sources.memory import is_memory_path
from flows.deployments import sync_deployment_name

MAX_DELAY_FACTOR = 10
TICK_MS = 1000  # how often `on_tick` runs while nothing changes


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
    """A folder (or, once deleted, a name that was perhaps one) under which memory files would be found."""
    if change == watchfiles.Change.deleted:
        if os.path.splitext(rel)[1]:  # a deleted file with an extension (an editor's .swp) was no folder
            return False
    elif not os.path.isdir(path) or os.path.islink(path):
        return False
    return is_memory_path(config, f"{rel}/x.md")


def watch(
    configs: Mapping[str, Config],
    on_changes: Callable[[set[str]], None],
    stop: threading.Event,
    debounce_ms: int,
    on_tick: Callable[[], None] | None = None,
    ready: threading.Event | None = None,
    tick_ms: int = TICK_MS,
) -> None:
    """Call `on_changes(agents)` for every debounced batch of memory-file changes until `stop` is set.

    `configs` maps agent ids to their configurations (their workspaces are watched recursively). `on_tick`
    runs after every batch and every `tick_ms` without change; `ready` is set once the watches are in place.
    """
    roots = sorted({str(c.workspace) for c in configs.values()})
    step = max(debounce_ms, 50)  # watchfiles' quiet period; 0 would spin
    for changes in watchfiles.watch(
        *roots,
        watch_filter=lambda change, path: bool(changed_agents(configs.values(), change, path)),
        step=step,
        debounce=step * MAX_DELAY_FACTOR,
        rust_timeout=tick_ms,
        yield_on_timeout=True,
        stop_event=stop,
        raise_interrupt=False,
    ):
        if ready is not None:
            ready.set()
        if changes:
            agents: set[str] = set()
            for change, path in changes:
                agents |= changed_agents(configs.values(), change, path)
            on_changes(agents)
        if on_tick is not None:
            on_tick()


class SyncRuns:
    """Sync runs through the deployments `memsift-sync/<agent>`, at most one running and one waiting per agent."""

    def __init__(self) -> None:
        self._last: dict[str, UUID] = {}
        self._dirty: set[str] = set()
        self._lock = threading.Lock()

    def request(self, agents: Iterable[str]) -> list[FlowRun]:
        """Sync these agents; the runs started now (none for an agent whose run is pending or running)."""
        started = []
        with self._lock:
            for agent in sorted(agents):
                state = self._state(agent)
                if state is None or state.is_final():
                    started.append(self._start(agent))
                elif not (state.is_scheduled() or state.is_pending()):
                    self._dirty.add(agent)  # running: it may have scanned before the change
        return started

    def poll(self) -> list[FlowRun]:
        """Start the follow-up run of every marked agent whose run has finished."""
        started = []
        with self._lock:
            for agent in sorted(self._dirty):
                state = self._state(agent)
                if state is None or state.is_final():
                    self._dirty.discard(agent)
                    started.append(self._start(agent))
        return started

    def _state(self, agent: str) -> State | None:
        run_id = self._last.get(agent)
        if run_id is None:
            return None
        with get_client(sync_client=True) as client:
            return client.read_flow_run(run_id).state

    def _start(self, agent: str) -> FlowRun:
        run = run_deployment(sync_deployment_name(agent), timeout=0, as_subflow=False)
        self._last[agent] = run.id
        return run
