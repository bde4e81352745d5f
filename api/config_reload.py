"""Following the configuration of a long-running server (`memsift serve`, `memsift up`) while it runs.

The file followed is the one the configuration came from (`--config`, `$MEMSIFT_CONFIG`, the workspace's
`memsift.toml`), or the workspace's `memsift.toml` that would be read once created. Its folder is watched, not
the file: editors save by writing a new file and renaming it over the old one, and a Kubernetes ConfigMap
swaps a symlinked folder, events a watch on the file itself would miss. Any event there (or SIGHUP) re-reads
and validates every agent's configuration the way the command did at start, then:

- invalid: reported once per distinct error (a line on the server's output and `config.error` in `status`
  and `/readyz`, naming the key); the settings in force stay in force. `/readyz` stays 200: the server still
  serves, with the last valid settings, and a load balancer should not drop it over a typo.
- valid and different from the settings in force: `apply(old, new)` runs, then the new ones are in force.
- valid and the same (another file of the folder changed, an editor's swap file): nothing.

Re-reads never overlap (one lock), so `apply` sees every change in order.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Mapping
from dataclasses import fields, is_dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import watchfiles

from api.agents import Agents
from core import Config, ConfigError
from core.watching import folder_id

QUIET_MS = 100  # a save is one write or one rename; wait this long for the folder to settle
TICK_MS = 1000

Configs = Mapping[str, Config]
Apply = Callable[[Configs, Configs], None]


def followed_file(main: Config) -> Path:
    """The file `main` came from, else the workspace's `memsift.toml` (absent until someone writes it)."""
    return Path(os.path.abspath(main.source)) if main.source is not None else main.workspace / "memsift.toml"


def changed_keys(old: Config, new: Config, prefix: str = "") -> list[str]:
    """The settings that differ, as dotted names of the Config fields (`chunking.tokens`, `search.vectorWeight`);
    names only, never values: some are secrets."""
    found = []
    for f in fields(old):
        a, b = getattr(old, f.name), getattr(new, f.name)
        if a == b:
            continue
        if is_dataclass(a) and is_dataclass(b):
            found += changed_keys(a, b, f"{prefix}{f.name}.")  # type: ignore[arg-type]
        else:
            found.append(f"{prefix}{f.name}")
    return found


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


class ConfigFollower:
    """Re-reads the configuration on request (`reload`), on file events (`follow`) and on SIGHUP."""

    def __init__(
        self,
        load: Callable[[], Configs],
        configs: Configs,
        apply: Apply,
        say: Callable[[str], None],
        publish: Callable[[dict[str, Any]], None] | None = None,
        on_tick: Callable[[], None] | None = None,
        default: str = "main",
    ) -> None:
        """`load` reads every agent's configuration (raising ConfigError); `configs` are the ones in force;
        `say` prints a line where the operator looks; `publish` gets the state after every change of it;
        `on_tick` runs in the watching thread about every second; `default` is the agent a request naming
        none is answered for (`--agent`), which a valid configuration keeps."""
        self._load = load
        self._default = default
        self.configs = configs
        self.file = followed_file(configs["main"])
        self._apply = apply
        self._say = say
        self._publish = publish or (lambda state: None)
        self._on_tick = on_tick
        self._lock = threading.Lock()
        self.state: dict[str, Any] = {"file": str(self.file), "appliedAt": _now(), "error": None, "errorAt": None}
        self._publish(self.state)

    def reload(self, why: str, say_unchanged: bool = False) -> bool:
        """Re-read the configuration; True when new settings were applied. `say_unchanged`: answer a request
        (SIGHUP) that changes nothing with a line too."""
        with self._lock:
            try:
                new = self._load()
                if self._default not in new:  # refused at start; applied, every request naming no agent was a 404
                    raise ConfigError(
                        f"agents.{self._default}.workspace: --agent {self._default} is the agent of requests naming "
                        "none: keep it configured, or restart without --agent"
                    )
            except ConfigError as exc:
                if str(exc) != self.state["error"]:
                    self._set(error=str(exc), errorAt=_now())
                    self._say(
                        f"configuration ({why}): invalid, the settings applied at {self.state['appliedAt']} stay "
                        f"in force: {exc}"
                    )
                return False
            old = self.configs
            if dict(new) == dict(old):
                if self.state["error"] is not None:
                    self._set(error=None, errorAt=None)
                    self._say(f"configuration ({why}): valid again, the settings in force are unchanged")
                elif say_unchanged:
                    self._say(f"configuration ({why}): unchanged")
                return False
            self._say(f"configuration ({why}): applying {', '.join(_changes(old, new))}")
            self.configs = new
            try:
                self._apply(old, new)
            except Exception as exc:  # a failure of Prefect, say: the server goes on; the line and status say it
                self._set(appliedAt=_now(), error=f"applying failed: {type(exc).__name__}: {exc}", errorAt=_now())
                self._say(f"configuration: applying failed: {type(exc).__name__}: {exc}")
                return True
            self._set(appliedAt=_now(), error=None, errorAt=None)
            return True

    def _set(self, **changes: Any) -> None:
        self.state = {**self.state, **changes}  # a new dict: readers in other threads see one or the other
        self._publish(self.state)

    def follow(self, stop: threading.Event, ready: threading.Event | None = None) -> None:
        """Re-read after every settled batch of events in the file's folder until `stop` is set. A folder
        deleted and made again, or replaced by a copy renamed over it, is watched again (inotify watches the
        folder, not its name: its new file was followed no more) and the file re-read."""
        while self._follow(stop, ready):
            while folder_id(self.file.parent) is None and not stop.wait(TICK_MS / 1000):
                pass  # the folder is gone: wait for it to come back
            if stop.is_set():
                return
            self.reload("folder replaced")

    def _follow(self, stop: threading.Event, ready: threading.Event | None) -> bool:
        """True when the folder was replaced or deleted: watch again."""
        folder = folder_id(self.file.parent)
        for changes in watchfiles.watch(
            self.file.parent,
            recursive=False,
            step=QUIET_MS,
            debounce=QUIET_MS * 20,
            rust_timeout=TICK_MS,
            yield_on_timeout=True,
            stop_event=stop,
            raise_interrupt=False,
        ):
            if ready is not None:
                ready.set()
            if folder_id(self.file.parent) != folder:
                return True
            if changes:
                self.reload("file changed")
            if self._on_tick is not None:
                self._on_tick()
        return False

    def start(self, stop: threading.Event) -> threading.Thread:
        """`follow` in a daemon thread, and SIGHUP (from the main thread only) as a re-read; returns once the
        watch is in place."""
        ready = threading.Event()
        thread = threading.Thread(target=self.follow, args=(stop, ready), name="memsift-config", daemon=True)
        thread.start()
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGHUP, self._on_sighup)
        while not ready.wait(0.1) and thread.is_alive():
            pass
        return thread

    def _on_sighup(self, signum: int, frame: Any) -> None:
        # A signal handler interrupts the main thread's event loop anywhere: the re-read runs in a thread.
        threading.Thread(target=self.reload, args=("SIGHUP", True), name="memsift-sighup", daemon=True).start()


def api_apply(agents: Agents, say: Callable[[str], None]) -> Apply:
    """What the REST API takes at once: every agent's settings (search, rerank, embedder for queries) and the
    agent list. Where it listens and its key are fixed when the server starts."""

    def apply(old: Configs, new: Configs) -> None:
        agents.replace(new)
        if old["main"].api != new["main"].api:
            say("configuration: api.host, api.port and api.key take effect at the next start")

    return apply


def follow_api(
    agents: Agents, load: Callable[[], Configs], say: Callable[[str], None], also: Apply | None = None
) -> ConfigFollower:
    """A follower whose state shows in the API's `status` and `/readyz` (`memsift serve`); `also` applies a
    change after the API has taken it (the file watcher)."""
    apply = api_apply(agents, say)

    def apply_all(old: Configs, new: Configs) -> None:
        apply(old, new)
        if also is not None:
            also(old, new)

    def publish(state: dict[str, Any]) -> None:
        agents.config_state = state

    return ConfigFollower(load, agents.configs, apply_all, say, publish, default=agents.default)


def _changes(old: Configs, new: Configs) -> list[str]:
    """`agent x added`, `agent y removed`, `main: chunking.tokens, search.vectorWeight`."""
    lines = [f"agent {a} added" for a in new if a not in old]
    lines += [f"agent {a} removed" for a in old if a not in new]
    for agent in new:
        if agent in old and old[agent] != new[agent]:
            keys = [k for k in changed_keys(old[agent], new[agent]) if k != "agents"]
            if keys:
                lines.append(f"{agent}: {', '.join(keys)}")
    return lines or ["no setting of any agent (agent list only)"]
