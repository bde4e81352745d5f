"""Runs whose process died with its machine, marked Crashed by the Prefect server: the zombie-run automation.

A run that a process worker started stays Running for good when the worker's machine (or pod, or both
processes) is killed: nothing is left to report on it, a restarted worker does not look back, and
flows.orphans only helps on the host that ran it, when a `memsift up` or `memsift index` starts there. The
Running run then blocked what waits on it: `memsift serve`'s watcher started no further sync of that agent (it
waits for the run it started to end, and a note written meanwhile stayed unsearched, `degraded` saying a sync
indexes it), and the UI showed a sync in progress that was not.

Flow runs started from a deployment send a heartbeat event every `PREFECT_FLOWS_HEARTBEAT_FREQUENCY` seconds
(infra/prefect.yaml sets 30). This automation, Prefect's own recipe for "zombie flows", marks Crashed a run whose
heartbeats stopped for `within` seconds without a final state: the Prefect server does it, whichever host ran
the run. It is created or updated by name, so running it again (every `docker compose up`, a re-run deploy
Job) leaves one automation:

    python -m flows.zombies          # with PREFECT_API_URL set; prints what it did
"""

from __future__ import annotations

import sys
from datetime import timedelta

NAME = "memsift-crash-zombie-runs"
#: seconds without a heartbeat or final state before a run is marked Crashed: three heartbeats of 30 s missed
WITHIN_SECONDS = 90
FINAL_EVENTS = ("Completed", "Failed", "Cancelled", "Crashed")


def zombie_automation(within_seconds: float = WITHIN_SECONDS):  # -> AutomationCore
    """The automation: after a run's heartbeat, expect another one (or a final state) within `within_seconds`;
    if none comes, change that run's state to Crashed."""
    from prefect.client.schemas.objects import StateType
    from prefect.events.actions import ChangeFlowRunState
    from prefect.events.schemas.automations import AutomationCore, EventTrigger, Posture
    from prefect.events.schemas.events import ResourceSpecification

    return AutomationCore(
        name=NAME,
        description="memsift: a flow run whose heartbeats stopped (its machine or worker was killed) is Crashed.",
        trigger=EventTrigger(
            after={"prefect.flow-run.heartbeat"},
            expect={"prefect.flow-run.heartbeat", *(f"prefect.flow-run.{s}" for s in FINAL_EVENTS)},
            match=ResourceSpecification({"prefect.resource.id": ["prefect.flow-run.*"]}),
            for_each={"prefect.resource.id"},
            posture=Posture.Proactive,
            threshold=1,
            within=timedelta(seconds=within_seconds),
        ),
        actions=[
            ChangeFlowRunState(
                state=StateType.CRASHED,
                message=f"no heartbeat for {within_seconds:g} s: the process running it ended (killed, or its "
                "machine stopped) without reporting",
            )
        ],
    )


def ensure_zombie_automation(within_seconds: float = WITHIN_SECONDS) -> str:
    """Create the automation, or update the one of that name (and delete extra copies); what was done."""
    from prefect.client.orchestration import get_client

    automation = zombie_automation(within_seconds)
    with get_client(sync_client=True) as client:
        existing = client.read_automations_by_name(NAME)
        if not existing:
            client.create_automation(automation)
            return f"created the automation {NAME} (a run without a heartbeat for {within_seconds:g} s is Crashed)"
        first, *extra = existing
        client.update_automation(first.id, automation)
        for duplicate in extra:
            client.delete_automation(duplicate.id)
        return f"updated the automation {NAME} (a run without a heartbeat for {within_seconds:g} s is Crashed)"


if __name__ == "__main__":
    print(ensure_zombie_automation())
    sys.exit(0)
