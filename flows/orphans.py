"""Flow runs left Running by a process that ended mid-run, marked Crashed.

Each run of memsift's flows records its process as `host:pid` (`infrastructure_pid`, flows.sync). A `memsift up`
killed with `kill -9`, or a machine that stops, takes the Runner with it, and nothing reports on the runs it ran:
they stayed Running in the UI for good. A run whose recorded process on this host no longer exists is over
for sure; one of another host (a shared server) or of a live process is left alone. A pid the system has since
given to another process reads as alive: that run stays as it is, never wrongly marked.

A `memsift-sync` run that rebuilds runs the `memsift-rebuild` flow as a subflow, in the same process. When only
that process is killed (`kill -9`, the out-of-memory killer), the Runner sees it exit and marks the sync run
Crashed, but nothing reports on the subflow. A subflow cannot outlive its parent (the parent's call waits for
it), so a subflow of ours that is not final under a parent that is final is an orphan for sure, whoever runs the
server and whatever else runs on it (a run recorded before runs recorded their process, too).

`up` marks both kinds Crashed at start, before its Runner starts a run (one query of the server, no result on a
clean start), and so does every `memsift index` (and `POST /v1/index`) that records its run on a server, before
that run: a `memsift index` killed while an `up` runs on for days was otherwise Running in the UI all that time.
A process that exits on purpose mid-run without unwinding the flow (`memsift serve` stopped during
an index run: it does not wait for an embedding request in flight) marks its own runs Crashed on the way out;
`up` stopped with runs in progress marks them Cancelled (`end_interrupted`).
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterable
from uuid import UUID

from prefect.client.orchestration import SyncPrefectClient, get_client
from prefect.client.schemas.filters import (
    FlowFilter,
    FlowFilterName,
    FlowRunFilter,
    FlowRunFilterId,
    FlowRunFilterParentFlowRunId,
    FlowRunFilterState,
    FlowRunFilterStateType,
)
from prefect.client.schemas.objects import FlowRun, State, StateType
from prefect.states import Crashed

from core import processes
from flows.sync import rebuild_flow, sync_flow

LIVE = [StateType.PENDING, StateType.RUNNING, StateType.CANCELLING, StateType.PAUSED]


def crash_orphans(say: Callable[[str], None], by: str = "memsift up") -> int:
    """Mark Crashed every live run of memsift's flows that nothing will finish: a subflow whose parent run has
    ended, a run whose process on this host no longer exists; say each; how many. `by`: who marks, in the
    state's message."""
    marked = 0
    with get_client(sync_client=True) as client:
        candidates = client.read_flow_runs(
            flow_filter=FlowFilter(name=FlowFilterName(any_=[sync_flow.name, rebuild_flow.name])),
            flow_run_filter=FlowRunFilter(state=FlowRunFilterState(type=FlowRunFilterStateType(any_=LIVE))),
        )
        # Every reason is read before any run is marked: a subflow listed after the parent marked here would
        # read "its parent run ended" instead of its own process, depending on the server's order.
        reasons = [(run, _parent_ended(client, run) or _process_gone(run)) for run in candidates]
        for run, why in reasons:
            if why is None:
                continue
            client.set_flow_run_state(run.id, Crashed(message=f"{why}; marked by {by}"), force=True)
            say(f"marked the orphaned run {run.name} Crashed: {why}")
            marked += 1
    return marked


def _parent_ended(client: SyncPrefectClient, run: FlowRun) -> str | None:
    if run.parent_task_run_id is None:
        return None
    parent = client.read_flow_run(client.read_task_run(run.parent_task_run_id).flow_run_id)
    if parent.state is None or not parent.state.is_final():
        return None
    return f"its parent run {parent.name} ended {parent.state.name} while it ran (its process was killed)"


def _process_gone(run: FlowRun) -> str | None:
    """Why the run's recorded process (`host:pid`) cannot be running it: on this host, and gone."""
    host, _, pid = (run.infrastructure_pid or "").rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return None  # not recorded (a run from before), or run elsewhere: not ours to judge
    if processes.ended(int(pid)):  # a zombie too: killed with its parent, not yet reaped by init
        return f"its process (pid {pid}) ended while it ran (killed, or the machine stopped)"
    return None


def crash_interrupted(run_ids: list[UUID], why: str) -> None:
    """Mark Crashed the runs of this process that it leaves mid-way (`memsift serve` stopping during an index
    run), and their live subflows."""
    end_interrupted(run_ids, Crashed, why)


def end_interrupted(run_ids: Iterable[UUID], state: Callable[..., State], why: str) -> list[str]:
    """Put `state(message=why)` on the runs among `run_ids` that have not ended, and on their live subflows; the
    names of those runs. A process that stops runs without their unwinding (`memsift serve` during an index
    run; `up`, whose Prefect Runner kills the processes of its runs in progress on the way out and reports on
    none of them) would leave them Running in the UI. A run that ended meanwhile keeps its state."""
    ids = list(run_ids)
    if not ids:
        return []
    live = FlowRunFilterState(type=FlowRunFilterStateType(any_=LIVE))
    with get_client(sync_client=True) as client:
        runs = client.read_flow_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=ids), state=live))
        children = client.read_flow_runs(
            flow_run_filter=FlowRunFilter(parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=ids), state=live)
        )
        for run in [*children, *runs]:
            client.set_flow_run_state(run.id, state(message=why), force=True)
    return [run.name for run in runs]
