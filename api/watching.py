"""The file watcher of `memsift serve` and `memsift mcp`: what an agent writes is found without anyone asking
for a sync.

With `sync.watch` on (the default), a memory file written, changed, renamed or deleted is synced a debounce
after the change (`sync.watchDebounceMs`, core.watching), the way `POST /v1/index` syncs (api.runs: through a
deployment `memsift up` serves, else in this process, on the one index-run thread). At start, every watched
agent whose index exists gets one sync too, so files changed while no server ran are caught up, except the
agents whose first index the server starts itself (api.first_index: never indexed, or interrupted). When the
configuration changes (`memsift serve` follows its file), every agent whose settings changed is synced at once,
which rebuilds an index whose identity changed (local model). `memsift up` watches through its own deployments
(flows.watch); these servers do not need Prefect at all.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from api.runs import FINAL, IndexRuns, PrefectUnavailable, Run
from core import Config
from core.errors import LockTimeout
from core.watching import CoalescedRuns, Configs, MemoryWatching, Phase, reported


class WatchedSyncs(CoalescedRuns[Run]):
    """The watcher's syncs as index runs of `runs` (they show in `GET /v1/index/{runId}` too)."""

    def __init__(self, runs: IndexRuns, config: Callable[[str], Config], say: Callable[[str], None]) -> None:
        super().__init__()
        self._runs = runs
        self._config = config
        self._say = say
        self._waiting: set[str] = set()  # agents whose sync waits for another process's: said once
        self._held: dict[str, str] = {}  # agent: the reason its rebuild waits for `--force`, said once
        self._crashed: set[str] = set()  # agents whose last run crashed and was run again

    def request(self, agents: Iterable[str]) -> list[Run]:
        """As CoalescedRuns.request, for the agents indexed already: a first index is its first search's (a
        search meanwhile would wait on this sync's writer lock and give up after `sync.lockTimeoutSeconds`)."""
        return super().request(a for a in agents if self._config(a).db_path.exists())

    def _start(self, agent: str) -> Run:
        run = self._runs.start(self._config(agent), force=False)
        run.done.add_done_callback(lambda _: self._report(run))
        return run

    def poll(self) -> list[Run]:
        """As CoalescedRuns.poll, after asking the Prefect server how the runs through a deployment stand (a
        run here ends in this process; one there is known to have ended only when asked): an ended one is then
        reported as a run here is. Before, a rebuild held for `--force` or a failed sync through a worker's
        deployment was said nowhere."""
        with self._lock:
            elsewhere = [r for r in self._last.values() if r.deployment is not None and not r.done.done()]
        for run in elsewhere:
            try:
                self._runs.get(run.id)
            except PrefectUnavailable:
                pass  # asked again at the next tick, rather than a line a second while the server is away
        return super().poll()

    def _report(self, run: Run) -> None:
        """A line for a sync that failed, changed something or holds a rebuild back (a catch-up with nothing to
        do stays quiet); one that changed something is followed by its warnings, as `memsift index` prints them
        (a note written with invalid UTF-8, indexed with U+FFFD, was otherwise said nowhere). A held rebuild is
        said once per reason: an agent appending every few seconds while it waited for `--force` got the same
        400-character line after every sync (15 in 30 s); `status` and every search's `degraded` still say it."""
        s = run.summary
        if run.state == "FAILED" and (run.error or "").startswith(f"{LockTimeout.__name__}: "):
            self._wait_for_lock(run)
            return
        self._waiting.discard(run.agent)
        crashed_before = run.agent in self._crashed
        self._crashed.discard(run.agent)
        if run.state == "CRASHED" and not crashed_before:
            self._crash(run)
            return
        held_before = self._held.pop(run.agent, None)
        if run.state != "COMPLETED" or s is None:
            self._say(f"sync of {run.agent} {run.state.lower()}: {run.error}")
        elif s["rebuildHeld"]:
            self._held[run.agent] = s["rebuildHeld"]
            if s["rebuildHeld"] != held_before:
                held = next((w for w in s["warnings"] if w.startswith(s["rebuildHeld"])), s["rebuildHeld"])  # + cost
                self._say(f"sync of {run.agent}: {held}")
        elif s["added"] or s["changed"] or s["removed"] or s["rebuilt"]:
            chunks = s["chunksEmbedded"]
            kind = "first index" if s.get("firstIndex") else "rebuild" if s["rebuilt"] else "sync"
            self._say(
                f"{kind} of {run.agent} done: {s['added']} added, {s['changed']} "
                f"changed, {s['removed']} removed, {chunks} chunk{'' if chunks == 1 else 's'} embedded, "
                f"{s['seconds']:.1f} s"
            )
            for warning in s["warnings"]:
                self._say(f"sync of {run.agent}: warning: {warning}")

    def _crash(self, run: Run) -> None:
        """The run's process was killed (a worker's machine or pod, `kill -9`; through a worker's deployment the
        Prefect server says so once its heartbeats stop, infra/README.md): what it was started for is not
        indexed, and no change may come to start another run, so it runs once more. Before, the changed notes
        waited for the next change or the schedule (30 min), while every search's `degraded` said a sync was
        indexing them. A run that crashes again is said and left: a sync that kills its process every time (out
        of memory) is not started in a loop."""
        self._crashed.add(run.agent)
        self._say(f"sync of {run.agent} crashed: {run.error}; it runs again")
        self.again(run.agent)

    def _wait_for_lock(self, run: Run) -> None:
        """Another process syncs or rebuilds the agent (`memsift index --force`: minutes) and it may have scanned
        before the change: sync again once it ends, rather than fail and leave the change unsynced until the
        next one. Each try waits `sync.lockTimeoutSeconds` for the lock; it is said once."""
        if run.agent not in self._waiting:
            self._waiting.add(run.agent)
            error = run.error.removeprefix(f"{LockTimeout.__name__}: ")
            self._say(f"sync of {run.agent} waits: {error}; it runs again when that one ends")
        self.again(run.agent)

    def _phase(self, run: Run) -> Phase:
        current = self._runs.get(run.id)
        if current is None or current.state in FINAL:
            return "done"
        return "running" if current.state == "RUNNING" else "waiting"


class Watch:
    """The watcher and its syncs, following the configuration as the server does."""

    def __init__(
        self,
        configs: Configs,
        runs: IndexRuns,
        config: Callable[[str], Config],
        say: Callable[[str], None],
        first_indexes: Iterable[str] = (),
    ) -> None:
        """`first_indexes`: the agents whose first index the server runs at start-up (api.first_index), left
        out of the start-up catch-up: its sync would wait on that run's writer lock, then say it waits."""
        self.syncs = WatchedSyncs(runs, config, say)
        self.watching = MemoryWatching(
            reported("files changed", self.syncs.request, say, _started),
            reported("follow-up", self.syncs.poll, say, _started),
            say,
        )
        self._say = say
        self.watching.start(configs)
        skipped = set(first_indexes)
        self._catch_up("catch-up", {a: c for a, c in configs.items() if a not in skipped})

    def follow(self, old: Configs, new: Configs) -> None:
        """After the configuration changed: watch the new agent list, and sync every agent whose settings
        changed, at once: a new chunking, model or set of paths is then rebuilt or synced in the background, as
        `memsift up` does, rather than at the next change of a note (a sync that finds nothing is quiet)."""
        for agent in old.keys() - new.keys():
            self.syncs.forget(agent)
        self.watching.start(new)
        self._catch_up("configuration", {a: c for a, c in new.items() if old.get(a) != c})

    def _catch_up(self, why: str, configs: Configs) -> None:
        try:  # quiet: it may find nothing to do (`WatchedSyncs._report` speaks if it does)
            self.syncs.request(a for a, c in configs.items() if c.sync.watch)
        except Exception as exc:  # e.g. a Prefect server that answers its health check but nothing else
            self._say(f"{why}: could not start a sync: {type(exc).__name__}: {exc}")

    def stop(self) -> None:
        self.watching.stop()


def _started(run: Run) -> str:
    return f"sync of {run.agent} started {f'through {run.deployment}' if run.deployment else 'here'} (run {run.id})"
