"""A server's first index of its agents, started at start-up (`memsift serve`, `memsift mcp`).

An agent never indexed (or whose first index was interrupted) was indexed by its first search, so the server
sat idle until a client asked, and that search then waited for the whole index with no bound (88 s for the 19
notes of locomo-dev's conv-26 on 2 busy cores; minutes for hundreds). Now the server starts it as it starts, in
a thread of its own, one agent at a time, the default agent first (the one readiness waits for): the work the
first search would have done, begun before anyone asks, with the same lines on stderr (api.progress). A search
meanwhile waits for it at most `sync.lockTimeoutSeconds` (10 s, the wait for another sync of the agent), then
answers from the batches committed so far and says so in `degraded` (core.memory `index_first=False`); a run
that fails leaves the index to the first search, as before. `/readyz` says not ready until the default agent's
first index is complete (api.agents `first_index_states`). `memsift up` starts none here: its initial syncs
run through its Prefect deployments.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from api.agents import Agents, open_index
from api.progress import FirstIndexLines
from api.runs import Stopping
from core import MemoryIndex
from core.progress import Progress, ProgressEvent


class StartupIndexing:
    def __init__(self, agents: Agents, say: Callable[[str], None]) -> None:
        """Which agents are due is decided here, before the server answers: a search that comes first knows
        whether to wait. An index that cannot be read is left to the search, which says why."""
        self._agents = agents
        self._say = say
        order = [agents.default, *(a for a in agents.names if a != agents.default)]
        #: agent: set once its start-up index has ended, whatever the outcome (only the agents due)
        self.due: dict[str, threading.Event] = {a: threading.Event() for a in order if _due(agents, a)}
        self._running: dict[str, str] = {}  # agent: how far its run is, or why it stopped
        self._last: dict[str, ProgressEvent] = {}  # agent: its run's latest progress event
        self._changed = threading.Condition()  # a progress event, or a run's end
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="memsift-first-index", daemon=True)
        agents.startup = self

    def start(self) -> None:
        if self.due:
            self._thread.start()

    def wait(self, agent: str, timeout: float, progress: Progress | None = None) -> bool:
        """Whether `agent` has no start-up index running or queued, waiting for it `timeout` s at most. The
        run's progress events meanwhile go to `progress` (an MCP call's `notifications/progress`), called on
        this thread: the call that waits is the one its client gave a progress token."""
        done = self.due.get(agent)
        if done is None:
            return True
        deadline = time.monotonic() + timeout
        told: ProgressEvent | None = None
        while True:
            with self._changed:
                last = self._last.get(agent)
                if not done.is_set() and (progress is None or last is told):
                    self._changed.wait(deadline - time.monotonic())
                    last = self._last.get(agent)
            if progress is not None and last is not None and last is not told:
                told = last
                progress(last)
            if done.is_set():
                return True
            if time.monotonic() >= deadline:
                return False

    def state(self, agent: str) -> str | None:
        """What readiness says of the agent's start-up index: how far it is, or why it stopped; None if none."""
        return self._running.get(agent)

    def stop(self) -> None:
        """Stop the run at its next step (an embedding request, a batch written): what it wrote stays."""
        self._stop.set()

    def stopped(self, timeout: float) -> bool:
        """After `stop`: whether the thread has ended within `timeout` s."""
        if self._thread.is_alive():
            self._thread.join(timeout)
        return not self._thread.is_alive()

    def _run(self) -> None:
        for agent, done in self.due.items():
            try:
                if not self._stop.is_set():
                    self._index(agent)
            finally:
                with self._changed:
                    done.set()
                    self._changed.notify_all()

    def _index(self, agent: str) -> None:
        config = self._agents.configs.get(agent)
        if config is None:  # dropped by a configuration reload meanwhile
            return
        index = open_index(config)
        lines = FirstIndexLines(self._say, agent, when="at start-up")
        lines.attach(index)
        self._running[agent] = "indexing since start-up"

        def progress(event: ProgressEvent) -> None:
            if self._stop.is_set():
                raise Stopping("the server is stopping")
            self._running[agent] = f"indexing since start-up: {event.describe()}"
            with self._changed:
                self._last[agent] = event
                self._changed.notify_all()
            lines.progress(event)

        index.first_index_progress = progress
        try:
            report = index.complete_first_index()
        except Stopping:
            self._running[agent] = "stopped: the server is stopping"
            return
        except Exception as exc:  # the first search runs it again, and answers the error if it recurs
            self._running[agent] = f"its start-up run stopped ({type(exc).__name__}: {exc}); the first search runs it"
            return
        finally:
            index.close()
        self._running.pop(agent, None)
        for warning in report.warnings if report is not None else []:
            self._say(f"first index of {agent}: warning: {warning}")


def _due(agents: Agents, agent: str) -> bool:
    index = MemoryIndex(agents.configs[agent], embedder=None)
    try:
        return index.first_index_due()
    except Exception:  # an unreadable index, a workspace of another agent: the search says why
        return False
    finally:
        index.close()
