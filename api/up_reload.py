"""`memsift up` while its configuration changes: the memory watcher it restarts and what a change applies.

A valid change is applied in this order (api.config_reload calls `UpApply`): the REST API first, so search
settings hold from the next search on; then the deployments of agents added, removed or moved; the
embedding rate limit; the memory watcher, restarted when the set of watched folders changed; for every
agent changed, a rebuild where its index identity changed (flows.reload: started for the local model,
announced for a hosted provider); and a sync of every agent added or moved to other files (workspace,
exclude) with its identity unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from api.agents import Agents
from api.config_reload import ConfigFollower, Configs, api_apply, changed_keys
from core import Config
from core.watching import MemoryWatching
from flows.deployments import flow_parameters, rebuild_deployment_name, sync_deployment_name
from flows.ratelimit import ensure_limit
from flows.reload import ServedDeployments, publish_state, rebuild_if_stale
from flows.watch import SyncRuns


def describe(config: Config) -> str:
    """`agent main (/ws): deployments 'memsift-sync/main', every 30 min, 'memsift-rebuild/main'`."""
    every = f", every {config.sync.intervalMinutes:g} min" if config.sync.intervalMinutes > 0 else ""
    names = f"'{sync_deployment_name(config.agent)}'{every}, '{rebuild_deployment_name(config.agent)}'"
    return f"agent {config.agent} ({config.workspace}): deployments {names}"


class UpApply:
    """The `apply` of up's configuration follower (see the module docstring for the order)."""

    def __init__(
        self,
        *,
        deployments: ServedDeployments,
        watching: MemoryWatching,
        runs: SyncRuns,
        rebuilds: SyncRuns,
        start_syncs: Callable[[Iterable[str]], None],
        agents: Agents | None,
        ui: str,
        say: Callable[[str], None],
    ) -> None:
        self.deployments = deployments
        self.watching = watching
        self.runs = runs
        self.rebuilds = rebuilds
        self.start_syncs = start_syncs
        self.agents = agents
        self.ui = ui
        self.say = say

    def __call__(self, old: Configs, new: Configs) -> None:
        if self.agents is not None:
            api_apply(self.agents, self.say)(old, new)
        for agent in sorted(old.keys() - new.keys()):
            self.deployments.remove(agent)
            self.runs.forget(agent)
            self.rebuilds.forget(agent)
            self.say(f"agent {agent} removed: deployments deleted, files no longer watched ({old[agent].db_path} kept)")
        for agent, config in new.items():
            before = old.get(agent)
            if before is None or _deployed_differently(before, config):
                self.deployments.add(config)
                self.say(("added " if before is None else "") + describe(config))
        rpm = new["main"].embedding.requestsPerMinute
        if rpm is not None and rpm != old["main"].embedding.requestsPerMinute:
            limit = ensure_limit(rpm)
            self.say(
                f"embedding rate limit: limit {limit['limit']}, {limit['slotDecayPerSecond']:g} slots freed per second"
            )
        self.watching.start(new)
        to_sync = [agent for agent in new if agent not in old]
        for agent, config in new.items():
            before = old.get(agent)
            if before is None or before == config:
                continue
            keys = changed_keys(before, config)
            stale = any(k.split(".")[0] not in _NOT_IN_IDENTITY for k in keys)  # a hosted provider's probe costs a call
            if not (stale and rebuild_if_stale(config, self.rebuilds, self.say, self.ui)) and any(
                k in ("workspace", "exclude") for k in keys
            ):
                to_sync.append(agent)  # other files, same identity: a sync brings the index in line
        if to_sync:
            self.start_syncs(to_sync)


# Config fields no index identity depends on (core.identity.index_identity): changing them needs no check.
_NOT_IN_IDENTITY = {"search", "api", "sync", "cache", "workspace", "exclude", "agents", "source"}


def _deployed_differently(old: Config, new: Config) -> bool:
    return flow_parameters(old) != flow_parameters(new) or old.sync.intervalMinutes != new.sync.intervalMinutes


def follow_up(
    load: Callable[[], Mapping[str, Config]],
    configs: Configs,
    apply: UpApply,
    on_tick: Callable[[], None],
) -> ConfigFollower:
    """The follower of `up`: its state in the API's `status` and `/readyz`, and in the Prefect UI."""
    agents = apply.agents

    def publish(state: dict[str, Any]) -> None:
        if agents is not None:
            agents.config_state = state
        try:
            publish_state(state)
        except Exception as exc:  # the UI misses one state; the output line and the API still have it
            apply.say(f"configuration: could not publish its state to Prefect: {type(exc).__name__}: {exc}")

    default = agents.default if agents is not None else "main"
    return ConfigFollower(load, configs, apply, apply.say, publish, on_tick, default=default)
