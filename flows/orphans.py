"""Flow runs left Running by a process that ended mid-run, marked Crashed.

A `memsift-sync` run that rebuilds runs the `memsift-rebuild` flow as a subflow, in the same process. When that
process is killed (`kill -9`, the out-of-memory killer), the Runner sees it exit and marks the sync run
Crashed, but nothing reports on the subflow: it stayed Running in the UI for good, its progress artifact
frozen mid-way. A subflow cannot outlive its parent (the parent's call waits for it), so a subflow of ours
that is not final under a parent that is final is an orphan for sure, whoever runs the server and whatever
else runs on it; `up` marks those Crashed at start, before its Runner starts a run (one query of the server,
no result on a clean start).

A process that exits on purpose mid-run without unwinding the flow (`memsift serve` stopped during an index
run: it does not wait for an embedding request in flight) marks its own runs Crashed on the way out.
"""

from __future__ import annotations

from collections.abc import Callable
from uuid import UUID

from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import (
    FlowFilter,
    FlowFilterName,
    FlowRunFilter,
    FlowRunFilterParentFlowRunId,
    FlowRunFilterParentTaskRunId,
    FlowRunFilterState,
    FlowRunFilterStateType,
)
from prefect.client.schemas.objects import StateType
from prefect.states import Crashed

from flows.sync import rebuild_flow, sync_flow

LIVE = [StateType.PENDING, StateType.RUNNING, StateType.CANCELLING, StateType.PAUSED]


def crash_orphans(say: Callable[[str], None]) -> int:
    """Mark Crashed every subflow run of memsift's flows whose parent run has ended; say each; how many."""
    marked = 0
    with get_client(sync_client=True) as client:
        candidates = client.read_flow_runs(
            flow_filter=FlowFilter(name=FlowFilterName(any_=[sync_flow.name, rebuild_flow.name])),
            flow_run_filter=FlowRunFilter(
                parent_task_run_id=FlowRunFilterParentTaskRunId(is_null_=False),
                state=FlowRunFilterState(type=FlowRunFilterStateType(any_=LIVE)),
            ),
        )
        for run in candidates:
            parent = client.read_flow_run(client.read_task_run(run.parent_task_run_id).flow_run_id)
            if parent.state is None or not parent.state.is_final():
                continue
            why = f"its parent run {parent.name} ended {parent.state.name} while it ran (its process was killed)"
            client.set_flow_run_state(run.id, Crashed(message=f"{why}; marked by memsift up"), force=True)
            say(f"marked the orphaned run {run.name} Crashed: {why}")
            marked += 1
    return marked


def crash_interrupted(run_ids: list[UUID], why: str) -> None:
    """Mark Crashed the runs of this process that it leaves mid-way, and their live subflows: a process that
    exits without unwinding them (`memsift serve` stopping during an index run) would leave them Running."""
    with get_client(sync_client=True) as client:
        children = client.read_flow_runs(
            flow_run_filter=FlowRunFilter(
                parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=run_ids),
                state=FlowRunFilterState(type=FlowRunFilterStateType(any_=LIVE)),
            )
        )
        for run_id in [*(c.id for c in children), *run_ids]:
            client.set_flow_run_state(run_id, Crashed(message=why), force=True)
