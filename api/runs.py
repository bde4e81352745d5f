"""`POST /v1/index`: each request starts a Prefect flow run of `memsift-sync` and answers at once.

When a Prefect server answers at PREFECT_API_URL and serves a deployment of the flow (`memsift up` serves
`memsift-sync/<name>`; served means a runner or worker polled for its runs within `SERVED_WITHIN` seconds: a
deployment left on the server by an `up` that has stopped would hold the run Scheduled forever), the run goes
through it, so it runs in that deployment's process and shows in the UI
like a scheduled one; the run id is the flow run's id and its state is read back from the server. Otherwise
the sync runs in a worker thread of this process, as `memsift index` runs it (`api.indexing.sync_agent`: a flow
run when a Prefect server answers, else without Prefect, which would start a temporary server of its own, 7-12 s
before any work, and fail the run when that server is slow to start); the run id is then one we make, and its
state is kept here. One worker thread: a sync is the index's one writer
(the agent's writer lock would serialise two anyway), and runs queue behind it as PENDING.

Runs are kept in memory, the newest `MAX_KEPT`: after a restart their ids are unknown (404), unless the Prefect
server has them. A `memsift-sync` or `memsift-rebuild` flow run this process did not start (`memsift index`
prints its id, and so do `up`'s watcher, schedules and configuration changes) is read from that server, so its
id answers here too.
"""

from __future__ import annotations

import functools
import threading
import uuid
from collections import OrderedDict
from concurrent.futures import Future, InvalidStateError, ThreadPoolExecutor
from contextlib import suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import httpx

from core import Config, MemsiftError, load_config

MAX_KEPT = 1000
PROBE_SECONDS = 2.0  # a Prefect server that does not answer this fast is treated as absent
FLOW_RUN_FAILED = "Flow run encountered an exception: "  # how Prefect's engine opens a failed run's message
SERVED_WITHIN = 60.0  # Prefect's own bound before it marks a deployment not ready; runners poll every 10 s


class PrefectUnavailable(MemsiftError, RuntimeError):
    """The Prefect server that holds the deployment does not answer about a run (503)."""

    status = 503


@dataclass
class Run:
    id: str
    agent: str
    state: str
    deployment: str | None = None  # set when its state is Prefect's: the served deployment, "" if started elsewhere
    flow_run: UUID | None = None  # a run of this process's worker recorded in Prefect, once it started
    summary: dict[str, Any] | None = None
    error: str | None = None
    done: Future[None] = field(default_factory=Future, repr=False)


class Stopping(Exception):
    """The server is stopping: a sync of its worker stops at its next step (after an embedding request or a
    batch written). What it wrote stays; the next sync goes on from there (a rebuild's file is dropped)."""


class IndexRuns:
    def __init__(self) -> None:
        self._runs: OrderedDict[str, Run] = OrderedDict()
        self._lock = threading.Lock()
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="memsift-index")
        self._stopping = threading.Event()

    def start(self, config: Config, force: bool) -> Run:
        from flows.deployments import flow_parameters

        parameters = flow_parameters(config) | {"force": force}
        deployment = served_deployment(config.agent)
        if deployment is not None:
            from prefect.deployments import run_deployment

            try:
                flow_run = run_deployment(deployment, parameters=parameters, timeout=0)
            except httpx.HTTPError as exc:
                raise PrefectUnavailable(f"{deployment}: the Prefect server did not start the run ({exc})") from exc
            run = Run(id=str(flow_run.id), agent=config.agent, state=_state_of(flow_run), deployment=deployment)
        else:
            run = Run(id=str(uuid.uuid4()), agent=config.agent, state="PENDING")
            self._worker.submit(self._run_here, run, parameters, self._stopping)
        with self._lock:
            self._runs[run.id] = run
            while len(self._runs) > MAX_KEPT:
                self._runs.popitem(last=False)
        return run

    def get(self, run_id: str) -> Run | None:
        with self._lock:
            run = self._runs.get(run_id)
        if run is None and (run := _started_elsewhere(run_id)) is not None:
            with self._lock:
                run = self._runs.setdefault(run.id, run)
                while len(self._runs) > MAX_KEPT:
                    self._runs.popitem(last=False)
        if run is not None and run.deployment is not None and run.state not in FINAL:
            if not _refresh_from_prefect(run):
                return None  # deleted on the server
            if run.state in FINAL:
                _set_done(run)  # its end is known when asked: whoever waits on `done` (the watcher's report) hears
        return run

    def wait(self, run_id: str, timeout: float) -> Run:
        """Block until a run of this process's worker has ended (for `up`, tests and scripts)."""
        with self._lock:
            run = self._runs[run_id]
        run.done.result(timeout)
        return run

    def close(self) -> None:
        """Drop queued runs and stop the one running at its next step: the process exits only once this
        worker thread has ended, and a first index or a rebuild can take minutes (measured: Ctrl-C on a
        server catching up 1,500 notes waited 391 s for it)."""
        self._stopping.set()
        self._worker.shutdown(wait=False, cancel_futures=True)

    def stopped(self, timeout: float) -> bool:
        """After `close`: whether the run of this process's worker, if any, has ended within `timeout` s."""
        try:
            for run in self._running_here():
                run.done.result(timeout)
        except TimeoutError:
            return False
        return True

    def recorded_in_progress(self) -> list[UUID]:
        """The Prefect flow runs of this process's worker that have not ended (a stopping server marks them)."""
        return [r.flow_run for r in self._running_here() if r.flow_run is not None]

    def _running_here(self) -> list[Run]:
        with self._lock:
            return [r for r in self._runs.values() if r.deployment is None and r.state == "RUNNING"]

    @staticmethod
    def _run_here(run: Run, parameters: dict[str, Any], stopping: threading.Event) -> None:
        """The configuration is loaded again, as the flow's runs load it: a workspace gone since fails the run."""
        from api.indexing import sync_agent

        def progress(event: object) -> None:
            if stopping.is_set():
                raise Stopping("the server is stopping")

        run.state = "RUNNING"
        try:
            agent, workspace, config_path = parameters["agent"], parameters["workspace"], parameters["config_path"]
            config = load_config(config_path, workspace=workspace, agent=agent)
            started = functools.partial(setattr, run, "flow_run")
            report, _ = sync_agent(config, force=parameters["force"], progress=progress, on_start=started)
            run.summary = report.to_dict()
            run.state = "COMPLETED"
        except Stopping as exc:
            run.error = str(exc)
            run.state = "CANCELLED"
        except Exception as exc:
            run.error = f"{type(exc).__name__}: {exc}"
            run.state = "FAILED"
        finally:
            run.done.set_result(None)


FINAL = {"COMPLETED", "FAILED", "CANCELLED", "CRASHED"}


def _set_done(run: Run) -> None:
    """Resolve `run.done` once, whichever of two requests reading the run's end comes first."""
    with suppress(InvalidStateError):  # the other one did
        run.done.set_result(None)


def served_deployment(agent: str) -> str | None:
    """`memsift-sync/<name>` when a Prefect server answers and serves a deployment of the flow (the one named
    after the agent if there is one, else the first by name); None otherwise. Served: polled by its runner or
    worker within `SERVED_WITHIN` seconds (the server's UTC timestamp against this machine's clock)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowFilter, FlowFilterName

    from flows.sync import sync_flow

    url = _answering_prefect()
    if url is None:
        return None
    try:
        with get_client(sync_client=True) as client:
            found = client.read_deployments(flow_filter=FlowFilter(name=FlowFilterName(any_=[sync_flow.name])))
    except httpx.HTTPError as exc:
        raise PrefectUnavailable(f"the Prefect server at {url} answers, but not about deployments ({exc})") from exc
    names = sorted(d.name for d in found if _polled_recently(d))
    if not names:
        return None
    return f"{sync_flow.name}/{agent if agent in names else names[0]}"


def _answering_prefect() -> str | None:
    """PREFECT_API_URL when that server answers within `PROBE_SECONDS` (asked without the client's retries,
    which would hold the request for tens of seconds), else None."""
    from prefect.settings import PREFECT_API_URL

    url = PREFECT_API_URL.value()
    if not url:
        return None
    try:
        httpx.get(f"{url.rstrip('/')}/health", timeout=PROBE_SECONDS)
    except httpx.HTTPError:
        return None
    return url


def _started_elsewhere(run_id: str) -> Run | None:
    """The `memsift-sync` (or `memsift-rebuild`) flow run of this id on the Prefect server, started by another
    process (`memsift index`, `up`'s watcher, schedules or configuration changes); None when no server answers
    or it has no such run."""
    from prefect.client.orchestration import get_client
    from prefect.exceptions import ObjectNotFound

    from flows.sync import rebuild_flow, sync_flow

    try:
        flow_run_id = UUID(run_id)
    except ValueError:
        return None
    if _answering_prefect() is None:
        return None
    try:
        with get_client(sync_client=True) as client:
            flow_run = client.read_flow_run(flow_run_id)
            flow = client.read_flow(flow_run.flow_id)
    except ObjectNotFound:
        return None
    except httpx.HTTPError as exc:
        raise PrefectUnavailable(f"run {run_id}: the Prefect server does not answer ({exc})") from exc
    agent = flow_run.parameters.get("agent")
    if flow.name not in (sync_flow.name, rebuild_flow.name) or not isinstance(agent, str):
        return None
    return Run(id=str(flow_run.id), agent=agent, state="SCHEDULED", deployment="")


def _polled_recently(deployment: Any) -> bool:
    last = deployment.last_polled
    return last is not None and (datetime.now(UTC) - last).total_seconds() <= SERVED_WITHIN


def _state_of(flow_run: Any) -> str:
    return flow_run.state.type.value if flow_run.state else "SCHEDULED"


def _refresh_from_prefect(run: Run) -> bool:
    """The flow run's state, and once it completed, its report: the `sync-report-<agent>` table artifact of
    the run or of its rebuild subflow (the flow keeps no result). False when the server no longer has it."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        ArtifactFilter,
        ArtifactFilterFlowRunId,
        ArtifactFilterKey,
        FlowRunFilter,
        FlowRunFilterParentFlowRunId,
    )
    from prefect.exceptions import ObjectNotFound

    from flows.sync import report_from_artifacts, report_keys

    flow_run_id = UUID(run.id)
    try:
        with get_client(sync_client=True) as client:
            flow_run = client.read_flow_run(flow_run_id)
            state = _state_of(flow_run)
            if state == "COMPLETED":
                children = client.read_flow_runs(
                    flow_run_filter=FlowRunFilter(parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[flow_run_id]))
                )
                artifacts = client.read_artifacts(
                    artifact_filter=ArtifactFilter(
                        key=ArtifactFilterKey(any_=list(report_keys(run.agent))),
                        flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id, *(c.id for c in children)]),
                    )
                )
                run.summary = report_from_artifacts(artifacts, run.agent)
    except ObjectNotFound:
        return False
    except httpx.HTTPError as exc:
        raise PrefectUnavailable(f"run {run.id}: the Prefect server does not answer ({exc})") from exc
    if state in ("FAILED", "CRASHED", "CANCELLED") and flow_run.state and flow_run.state.message:
        run.error = flow_run.state.message.removeprefix(FLOW_RUN_FAILED)  # `LockTimeout: ...`, as a run here says
    run.state = state
    return True
