"""The syncs `memsift up`'s file watcher (core.watching) starts: runs of the agents' Prefect deployments.

`SyncRuns` starts the runs through the agents' sync deployments (or, given another name, their rebuild
deployments: a configuration change's rebuilds coalesce the same way), coalesced as core.watching says.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from prefect.client.orchestration import get_client
from prefect.client.schemas.objects import FlowRun
from prefect.deployments import run_deployment

from core.watching import CoalescedRuns, Phase
from flows.deployments import sync_deployment_name


class SyncRuns(CoalescedRuns[FlowRun]):
    """Runs of the deployments `memsift-sync/<agent>` (or `deployment(agent)`, with these `parameters`), at most
    one running and one waiting per agent."""

    def __init__(
        self, deployment: Callable[[str], str] = sync_deployment_name, parameters: dict[str, Any] | None = None
    ) -> None:
        super().__init__()
        self._deployment = deployment
        self._parameters = parameters

    def _phase(self, run: FlowRun) -> Phase:
        with get_client(sync_client=True) as client:
            state = client.read_flow_run(run.id).state
        if state is None or state.is_scheduled() or state.is_pending():
            return "waiting"
        return "done" if state.is_final() else "running"

    def _start(self, agent: str) -> FlowRun:
        return run_deployment(self._deployment(agent), parameters=self._parameters, timeout=0, as_subflow=False)
