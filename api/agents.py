"""The agents the API answers for, each with a small pool of open indexes, and the embedder they share.

An apsw connection must not be used by two threads at once, and opening one per request costs a few
milliseconds (sqlite-vec, schema check). So each agent keeps the MemoryIndex objects that are not in use;
a request leases one (or opens one if all are busy) and gives it back. The pool never holds more indexes
than were ever in use at once, which the server's thread limit bounds. Readers never block the one writer
(the sync, elsewhere): the index is in WAL mode, and a rebuild that swaps a new file in is picked up by
`MemoryIndex.store` on its next access.

The embedder is loaded once per process (`LocalEmbedder.shared`) by `warm_up`, which the app runs in a
thread at start so that liveness answers at once and readiness waits for the model.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from core import Config, EmbedderUnavailable, MemoryIndex, MemsiftError, load_config
from core.embedders import Embedder, create_embedder

DEFAULT_AGENT = "main"


class UnknownAgent(MemsiftError, LookupError):
    """The request names an agent the configuration does not have (404)."""

    status = 404


class Agents:
    def __init__(self, config: Config, wrap_embedder: Callable[[Embedder], Embedder]) -> None:
        """`config` is the main agent's; the others come from its `agents.<id>.workspace` keys, read from the
        same file as `memsift --agent ID` would. `wrap_embedder` decorates the shared embedder (metrics)."""
        self.configs: dict[str, Config] = {DEFAULT_AGENT: config}
        for agent in sorted(config.agents):
            if agent != DEFAULT_AGENT:
                self.configs[agent] = load_config(config.source, agent=agent)
        self._wrap = wrap_embedder
        self._idle: dict[str, list[MemoryIndex]] = {agent: [] for agent in self.configs}
        self._lock = threading.Lock()
        self._closed = False
        self.ready = threading.Event()
        self.embedder_state = "loading"

    @property
    def names(self) -> list[str]:
        return list(self.configs)

    def config(self, agent: str | None) -> Config:
        name = agent or DEFAULT_AGENT
        try:
            return self.configs[name]
        except KeyError:
            known = ", ".join(self.configs)
            raise UnknownAgent(f"agent {name!r} is not configured (known: {known})") from None

    @contextmanager
    def lease(self, agent: str | None) -> Iterator[MemoryIndex]:
        """An index of `agent` for this thread alone until the block ends."""
        config = self.config(agent)
        idle = self._idle[config.agent]
        with self._lock:
            index = idle.pop() if idle else None
        if index is None:
            index = self._open(config)
        try:
            yield index
        finally:
            with self._lock:
                keep = not self._closed
                if keep:
                    idle.append(index)
            if not keep:
                index.close()

    def _open(self, config: Config) -> MemoryIndex:
        try:
            embedder = create_embedder(config.embedding)  # the process-wide instance once loaded
        except EmbedderUnavailable:
            return MemoryIndex(config)  # it meets the same error, keeps the reason and searches say it
        return MemoryIndex(config, embedder=self._wrap(embedder) if embedder is not None else None)

    def warm_up(self) -> None:
        """Load the embedder and run it once (the first call sizes the ONNX session's buffers)."""
        try:
            embedder = create_embedder(self.configs[DEFAULT_AGENT].embedding)
            if embedder is None:
                self.embedder_state = "none"
            else:
                embedder.embed_query("memsift warm-up")
                self.embedder_state = "loaded"
        except Exception as exc:  # searches degrade to keywords; readiness reports why
            self.embedder_state = f"unavailable: {type(exc).__name__}: {exc}"
        finally:
            self.ready.set()

    def check(self) -> dict[str, str]:
        """Per agent: 'ok' when its index opens and answers, else why not."""
        found = {}
        for agent in self.configs:
            try:
                with self.lease(agent) as index:
                    index.store.identity()
                found[agent] = "ok"
            except Exception as exc:
                found[agent] = f"{type(exc).__name__}: {exc}"
        return found

    def close(self) -> None:
        with self._lock:
            self._closed = True
            indexes = [index for idle in self._idle.values() for index in idle]
            for idle in self._idle.values():
                idle.clear()
        for index in indexes:
            index.close()
