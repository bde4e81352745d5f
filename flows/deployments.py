"""The Prefect deployments of one agent: `memsift-sync/<agent>` and `memsift-rebuild/<agent>`.

Deployment names are the agent ids, so `prefect deployment run 'memsift-sync/<agent>'` reads like the CLI.
Their parameters pin the agent's resolved workspace and config file: a run started from the UI, a schedule
or the watcher indexes the same folder `memsift up` was started for, whatever the runner's working folder.
Entrypoints are module paths (`flows.sync.sync_flow`), importable wherever memsift is installed.
"""

from __future__ import annotations

import shlex
from datetime import timedelta
from typing import Any

from prefect.deployments.runner import RunnerDeployment
from prefect.types.entrypoint import EntrypointType

from core.config_types import Config
from flows.sync import rebuild_flow, sync_flow


def flow_parameters(config: Config) -> dict[str, Any]:
    """The parameters every run of this agent gets (the flows load the configuration from them). The file by
    its absolute path, as the workspace: a run may start in a process of another folder (a `memsift serve`
    starting a run of `up`'s deployment). Not resolved: a Kubernetes ConfigMap's `..data` symlink is swapped
    on every update, and the path it pointed to goes."""
    return {
        "agent": config.agent,
        "workspace": str(config.workspace),
        "config_path": str(config.source.absolute()) if config.source else None,
    }


def forced_index_command(config: Config) -> str:
    """`memsift index --force` for this agent as a command that works in another terminal, from any folder: with
    the workspace and, unless it is the workspace's own `memsift.toml`, the file its deployments pin (a bare
    `memsift --agent main index --force` indexed the folder it was typed in)."""
    words = ["memsift", "--workspace", str(config.workspace)]
    if config.source is not None and config.source.resolve() != (config.workspace / "memsift.toml").resolve():
        words += ["--config", str(config.source.absolute())]
    if config.agent != "main":
        words += ["--agent", config.agent]
    return shlex.join([*words, "index", "--force"])


def sync_deployment_name(agent: str) -> str:
    return f"{sync_flow.name}/{agent}"


def rebuild_deployment_name(agent: str) -> str:
    return f"{rebuild_flow.name}/{agent}"


def agent_deployments(config: Config) -> list[RunnerDeployment]:
    """Sync on demand and, when `sync.intervalMinutes` > 0, on an interval schedule; rebuild on demand."""
    parameters = flow_parameters(config)
    minutes = config.sync.intervalMinutes
    sync = sync_flow.to_deployment(
        name=config.agent,
        interval=timedelta(minutes=minutes) if minutes > 0 else None,
        parameters=parameters,
        description=f"Incremental sync of agent {config.agent} ({config.workspace}).",
        tags=["memsift"],
        entrypoint_type=EntrypointType.MODULE_PATH,
    )
    rebuild = rebuild_flow.to_deployment(
        name=config.agent,
        parameters=parameters,
        description=f"Full rebuild of agent {config.agent} ({config.workspace}), swapped in atomically.",
        tags=["memsift"],
        entrypoint_type=EntrypointType.MODULE_PATH,
    )
    return [sync, rebuild]
