"""What a configuration change means in Prefect for `memsift up` (api.config_reload follows the file).

- An agent added gets its two deployments, applied and served by the running Runner; an agent removed loses
  them (deleted from the server and no longer polled); a changed agent's are applied again (its schedule,
  workspace or file may have changed). Its index file stays where it is.
- An agent whose index identity (model, chunking, tokenizer, sources...) no longer matches its settings is
  rebuilt through `memsift-rebuild/<agent>` in a run named `rebuild-<agent>-config-change-<time>`, when a
  rebuild costs nothing but time (the local model, Ollama, no embedder). On a hosted provider the rebuild is
  announced with what it would embed and left to the user (issue 16: no silent spend); the manual triggers
  are the ones of every day (`prefect deployment run`, `memsift index --force`, `POST /v1/index`).
- Every re-read's outcome goes to the Prefect UI's event feed: `memsift.config.applied` or
  `memsift.config.invalid` (its payload names the key). Not an artifact: Prefect 3 deprecates artifacts made
  outside a flow run.

Code rather than a Prefect automation (a "config changed" event whose trigger runs the rebuild deployment):
whether to rebuild depends on the index's stored identity and on the provider's cost, which a trigger cannot
see; the run is started here directly, without the automation service's evaluation in between.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from prefect.client.orchestration import get_client
from prefect.events import emit_event
from prefect.exceptions import ObjectNotFound
from prefect.runner import Runner

from core import Config, MemoryIndex
from core.identity import identity_changes, identity_matches, index_identity
from core.words import counted
from flows.deployments import agent_deployments, forced_index_command, rebuild_deployment_name, sync_deployment_name
from flows.watch import SyncRuns

CONFIG_CHANGE = "config-change"  # the rebuild run's reason: `rebuild-<agent>-config-change-<time>`
FREE_PROVIDERS = ("local", "ollama", "none")  # a rebuild costs time, not money


def config_rebuilds() -> SyncRuns:
    """Rebuild runs of a configuration change, coalesced per agent like the watcher's syncs: a change while a
    rebuild runs starts one more when it ends (it may have read the file before the change)."""
    return SyncRuns(rebuild_deployment_name, {"reason": CONFIG_CHANGE})


class ServedDeployments:
    """The agents' deployments on the server and in the Runner that serves them."""

    def __init__(self, runner: Runner) -> None:
        self.runner = runner

    def add(self, config: Config) -> None:
        """Apply (create or update) the agent's deployments and have the Runner poll for their runs."""
        for deployment in agent_deployments(config):
            self.runner.add_deployment(deployment)

    def remove(self, agent: str) -> None:
        """Delete the agent's deployments (their schedules go with them) and stop polling for them."""
        with get_client(sync_client=True) as client:
            for name in (sync_deployment_name(agent), rebuild_deployment_name(agent)):
                try:
                    deployment = client.read_deployment_by_name(name)
                except ObjectNotFound:
                    continue
                client.delete_deployment(deployment.id)
                # The Runner has no public way to drop a deployment; left in, it would try to pause the deleted
                # deployment's schedule when it stops, and fail there.
                self.runner._deployment_registry._deployment_ids.discard(deployment.id)


def rebuild_if_stale(config: Config, rebuilds: SyncRuns, say: Callable[[str], None], ui: str) -> bool:
    """After a change of `config`: rebuild its index when the identity changed and that is free; announce it
    otherwise. False when the identity still holds (or cannot be known: a never-indexed agent is left to its
    sync, an embedder that cannot start is reported)."""
    agent = config.agent
    with MemoryIndex(config) as index:
        stored = index.store.identity()
        if stored is None:
            return False
        embedder = index.embedder()
        if index.embedder_error:
            say(f"agent {agent}: not checking for a rebuild, the embedder cannot start: {index.embedder_error}")
            return False
        wanted = index_identity(config, embedder)
        if identity_matches(stored, wanted):
            return False
        chunks = sum(index.store.stats()["chunks"].values())
    what = identity_changes(stored, wanted)
    provider = embedder.provider if embedder is not None else "none"
    if provider not in FREE_PROVIDERS:
        say(
            f"agent {agent}: the index identity changed ({what}); a rebuild on the hosted provider {provider} "
            f"embeds up to {counted(chunks, 'chunk')} again (texts already in its cache are free) and is NOT started: "
            f"`{_prefect_env()}prefect deployment run '{rebuild_deployment_name(agent)}'` or "
            f"`{forced_index_command(config)}`"
        )
        return True
    started = rebuilds.request([agent])
    if started:
        say(f"agent {agent}: the index identity changed ({what}); rebuild started, {ui}/runs/flow-run/{started[0].id}")
    else:
        say(f"agent {agent}: the index identity changed ({what}); a rebuild follows the one running")
    return True


def _prefect_env() -> str:
    """`PREFECT_API_URL=... ` for a `prefect` command typed in another terminal, which knows no server (a bare
    `prefect deployment run` there started a temporary one and answered "Deployment ... not found!")."""
    url = os.environ.get("PREFECT_API_URL")
    return f"PREFECT_API_URL={url} " if url else ""


def publish_state(state: dict[str, Any]) -> None:
    """The configuration state (api.config_reload) as a Prefect event."""
    emit_event(
        event="memsift.config.invalid" if state["error"] else "memsift.config.applied",
        resource={"prefect.resource.id": f"memsift.config.{state['file']}", "prefect.resource.name": state["file"]},
        payload=state,
    )
