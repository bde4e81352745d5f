"""The agents the API answers for, each with a small pool of open indexes, and the embedder they share.

An apsw connection must not be used by two threads at once, and opening one per request costs a few
milliseconds (sqlite-vec, schema check). So each agent keeps the MemoryIndex objects that are not in use;
a request leases one (or opens one if all are busy) and gives it back. The pool never holds more indexes
than were ever in use at once, which the server's thread limit bounds. Readers never block the one writer
(the sync, elsewhere): the index is in WAL mode, and a rebuild that swaps a new file in is picked up by
`MemoryIndex.store` on its next access.

The embedder is loaded once per process (`LocalEmbedder.shared`) by `warm_up`, which the app runs in a
thread at start so that liveness answers at once and readiness waits for the model.

A configuration reload (`replace`) swaps the frozen Config objects: a lease taken afterwards gets an index
with the new settings, a search already running finishes with the index (and settings) it leased, and that
index is closed rather than pooled when it is given back.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Protocol

from api.catch_up import CatchUps
from api.progress import REQUEST_PROGRESS, FirstIndexLines
from core import Config, EmbedderUnavailable, MemoryIndex, MemsiftError, SearchResponse
from core.config import every_agent
from core.config_home import agent_id_problem, home_problem
from core.embedders import create_embedder, warm_up
from core.errors import UnknownAgent
from core.progress import Progress


class StartupIndexing(Protocol):
    """What the agents ask of the server's start-up index (api.first_index, which imports this module)."""

    def wait(self, agent: str, timeout: float, progress: Progress | None = None) -> bool: ...
    def state(self, agent: str) -> str | None: ...


class SearchPool(Protocol):
    """What the agents ask of api.search_pool's worker processes (a protocol: that module imports this one)."""

    def search(self, config: Config, query: str, options: dict[str, Any]) -> SearchResponse: ...
    def warm_up(self) -> None: ...
    def close(self) -> None: ...


DEFAULT_AGENT = "main"


class InvalidAgent(MemsiftError, ValueError):
    """The request names an agent no configuration can have (`" "`, `"a b"`): a client's bug, as `""` is (400)."""

    status = 400


class Agents:
    def __init__(
        self, config: Config, default: str = DEFAULT_AGENT, configs: Mapping[str, Config] | None = None
    ) -> None:
        """`config` is the main agent's; the others come from its `agents.<id>.workspace` keys, read from the
        same file as `memsift --agent ID` would, unless `configs` says which agents to serve (`memsift mcp` for an
        agent no file names). `default` answers a request that names no agent (`memsift --agent ID serve`); it
        must be one of them."""
        self.configs: dict[str, Config] = every_agent(config) if configs is None else dict(configs)
        if default not in self.configs:
            known = ", ".join(self.configs)
            raise UnknownAgent(
                f"--agent: unknown agent {default!r} (known: {known}; configure agents.{default}.workspace)"
            )
        self.default = default
        self._idle: dict[str, list[MemoryIndex]] = {agent: [] for agent in self.configs}
        self._lock = threading.Lock()
        self._closed = False
        self.ready = threading.Event()
        self.embedder_state = "loading"
        self.config_state: dict[str, Any] | None = None  # set by a configuration reloader (api.config_reload)
        self.pool: SearchPool | None = None  # worker processes for searches (api.workers > 0), set by the app
        self.catch_ups = CatchUps()
        #: Where the server writes its lines (stderr): set, a search that runs an agent's first index says so there,
        #: as it goes (api.progress.FirstIndexLines). Set by `serve`, `mcp` and `up`.
        self.say: Callable[[str], None] | None = None
        #: The server's first index of its agents, begun at start-up (api.first_index; `serve`, `mcp`): a search
        #: of an agent it runs or has queued waits for it, `sync.lockTimeoutSeconds` at most.
        self.startup: StartupIndexing | None = None

    @property
    def names(self) -> list[str]:
        return list(self.configs)

    def config(self, agent: str | None) -> Config:
        name = self.default if agent is None else agent  # "" names no agent: not the default
        if why := agent_id_problem(name):
            raise InvalidAgent(f"agent: {why}")
        try:
            return self.configs[name]
        except KeyError:
            known = ", ".join(self.configs)
            raise UnknownAgent(f"agent {name!r} is not configured (known: {known})") from None

    def replace(self, configs: Mapping[str, Config]) -> None:
        """Serve these agents with these settings from now on. An agent whose configuration is unchanged keeps
        its Config object and its pooled indexes; the pooled indexes of the others are closed."""
        with self._lock:
            current = {}
            for agent, config in configs.items():
                old = self.configs.get(agent)
                current[agent] = old if old == config else config
            stale = [i for a, idle in self._idle.items() if current.get(a) is not self.configs[a] for i in idle]
            self._idle = {a: self._idle[a] if current[a] is self.configs.get(a) else [] for a in current}
            self.configs = current
        for index in stale:
            index.close()

    @contextmanager
    def lease(self, agent: str | None) -> Iterator[MemoryIndex]:
        """An index of `agent` for this thread alone until the block ends."""
        with self._lock:
            config = self.config(agent)
            idle = self._idle[config.agent]
            index = idle.pop() if idle else None
        if index is None:
            index = open_index(config)
            if self.say is not None:
                FirstIndexLines(self.say, config.agent).attach(index)
        try:
            yield index
        finally:
            with self._lock:
                keep = not self._closed and self.configs.get(config.agent) is config  # not replaced meanwhile
                if keep:
                    self._idle[config.agent].append(index)
            if not keep:
                index.close()

    def search(self, agent: str | None, query: str, options: dict[str, Any]) -> tuple[str, SearchResponse]:
        """(agent, answer): in a worker process when there is a pool, else in this thread with a leased index.
        The notes changed since the last sync are synced first (api.catch_up), here: the one writer stays in
        this process. While the server's start-up index of the agent runs (or waits for another agent's), the
        search waits for it `sync.lockTimeoutSeconds` at most, then answers from what it has committed and says
        so in `degraded`, rather than run the first index itself for minutes."""
        index_first = True
        if self.startup is not None:
            named = self.config(agent)
            # its progress meanwhile to the client, if it asked for progress (MCP)
            index_first = self.startup.wait(named.agent, named.sync.lockTimeoutSeconds, REQUEST_PROGRESS.get())
        with self.lease(agent) as index:
            caught = self.catch_ups.before_search(index)
            config = index.config
            # an agent's first index runs here, not in a worker: the server's lines about it are said here
            here = self.pool is None or index.needs_first_index()
            response = index.search(query, index_first=index_first, **options) if here else None
        if response is None:
            response = self.pool.search(config, query, options)
        caught.tell(response)
        return config.agent, response

    def warm_up(self) -> None:
        """Load the embedder and run it once (the first call sizes the ONNX session's buffers), then start the
        search workers, if any; `ready` is set when all of it is done. A hosted provider's warm-up is its
        start-up probe (`core.embedders.warm_up`); the indexes open their own client."""
        try:
            embedder = create_embedder(self.configs[DEFAULT_AGENT].embedding)
            if embedder is None:
                self.embedder_state = "none"
            else:
                warm_up(embedder)
                self.embedder_state = "loaded"
        except Exception as exc:  # searches degrade to keywords; readiness reports why
            self.embedder_state = f"unavailable: {type(exc).__name__}: {exc}"
        finally:
            if self.pool is not None:
                self.pool.warm_up()
            self.ready.set()

    def check(self) -> dict[str, str]:
        """Per agent: 'ok' when its index opens and answers, else why not. An agent never indexed is 'ok' when
        its home can hold the index its first search builds: opening it would create an empty file, which the
        watcher then took for an index and synced on the next edit, not at the first search (and asking must
        write nothing)."""
        found = {}
        for agent, config in self.configs.items():
            if not config.db_path.exists():
                why = home_problem(config.home)
                found[agent] = "ok" if why is None else f"MEMSIFT_HOME: {config.home} {why}"
                continue
            try:
                with self.lease(agent) as index:
                    index.store.identity()
                found[agent] = "ok"
            except Exception as exc:
                found[agent] = f"{type(exc).__name__}: {exc}"
        return found

    def first_index_states(self) -> dict[str, str]:
        """Per agent whose first index is not complete: how far it is (`not indexed yet`, `12 of 70 files
        indexed`, or the server's start-up run's figures), for readiness. Reads only: an agent never indexed
        gets no index file from being asked."""
        found = {}
        for agent, config in self.configs.items():
            running = None if self.startup is None else self.startup.state(agent)
            try:
                if not config.db_path.exists():
                    state = "not indexed yet"
                else:
                    with self.lease(agent) as index:
                        state = index.first_index_state()
            except Exception:  # an index that cannot be opened: `check` says why
                continue
            if state is not None:
                found[agent] = state if running is None else f"{state}; {running}"
        return found

    def close(self) -> None:
        with self._lock:
            self._closed = True
            indexes = [index for idle in self._idle.values() for index in idle]
            for idle in self._idle.values():
                idle.clear()
        for index in indexes:
            index.close()
        if self.pool is not None:
            self.pool.close()


def open_index(config: Config) -> MemoryIndex:
    """An index of `config` with the process-wide embedder, or without one when it cannot start: the index
    meets the same error, keeps the reason and its searches say it."""
    try:
        embedder = create_embedder(config.embedding)  # the process-wide instance once loaded
    except EmbedderUnavailable:
        return MemoryIndex(config)
    return MemoryIndex(config, embedder=embedder)
