"""The sync flow: `core.indexer.sync` with its stages run as Prefect tasks, and a run report artifact.

Stages are coarse (scan-and-diff once, one task per batch of up to 64 files, one removal task), so the
Prefect bookkeeping of a task run (milliseconds) never dominates. Tasks keep no results and no cache:
their inputs are live objects (the store connection, the embedder, the whole sync plan) that run in this
process, and they are passed `quote`d, or Prefect walks every one of them for every task run (a forced
rebuild of 10,000 files took 74 s in the flow against 0.8 s in core before that; bench/README.md).
"""

from __future__ import annotations

import json
import os
import secrets
import socket
from collections.abc import Callable
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from prefect import flow, get_run_logger, task
from prefect.artifacts import (
    create_markdown_artifact,
    create_progress_artifact,
    create_table_artifact,
    update_progress_artifact,
)
from prefect.cache_policies import NO_CACHE
from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings
from prefect.utilities.annotations import quote

from core import EmbedderUnavailable, MemoryIndex, load_config
from core.embedders import EmbeddingError
from core.estimate import summary
from core.progress import Progress, ProgressEvent
from core.sync_plan import SyncReport
from flows.fanout import fan_out, task_runner
from flows.ratelimit import limited_embedder

_progress: ContextVar[Progress | None] = ContextVar("memsift_progress", default=None)
_on_start: ContextVar[Callable[[UUID], None] | None] = ContextVar("memsift_on_start", default=None)
_tasks: dict[str, Any] = {}


def _as_task(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    if name not in _tasks:
        _tasks[name] = task(fn, name=name, cache_policy=NO_CACHE, persist_result=False)
    prefect_task = _tasks[name]
    return lambda *args: prefect_task(*(quote(a) for a in args))


def _run_name(kind: str) -> Callable[[], str]:
    """`sync-main-2026-12-01T01:09:18-3fa2`: the UTC second the run started and four random hex digits, so
    runs started in the same second (the watcher's follow-ups, a second terminal) still read apart; a run
    started with a `reason` says it: `rebuild-main-config-change-...` (the engine renames every run by this
    template, so a name given at creation would not last)."""

    def name() -> str:
        from prefect.runtime import flow_run

        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S")
        reason = flow_run.parameters.get("reason")
        agent = flow_run.parameters.get("agent", "main")
        return f"{kind}-{agent}-{f'{reason}-' if reason else ''}{stamp}-{secrets.token_hex(2)}"

    return name


def _open(agent: str, workspace: str | None, config_path: str | None, fan_out_embedding: bool = False) -> MemoryIndex:
    """The agent's index with the flow's embedder; for a rebuild with `sync.taskRunner` set, one that answers
    from vectors computed beforehand on that runner (flows.fanout)."""
    config = load_config(config_path, workspace=workspace, agent=agent)
    try:
        embedder = limited_embedder(config)
    except (EmbedderUnavailable, EmbeddingError):  # the index raises it, or switches to embedding.fallback
        return MemoryIndex(config)
    runner = task_runner(config.sync) if fan_out_embedding else None
    if runner is not None and embedder is not None:
        try:
            embedder = fan_out(config, embedder, runner)
        except EmbeddingError as exc:  # inline, the indexer meets it again and may switch to the fallback
            get_run_logger().warning("embedding fan-out on %s failed: %s", config.sync.taskRunner, exc)
    return MemoryIndex(config, embedder=embedder)


@flow(name="memsift-sync", flow_run_name=_run_name("sync"), persist_result=False, log_prints=False)
def sync_flow(
    agent: str = "main", workspace: str | None = None, config_path: str | None = None, force: bool = False
) -> dict[str, Any]:
    """Index one agent's workspace incrementally; hands over to the rebuild flow when forced or when the
    index identity (model, chunking, tokenizer, sources) changed."""
    _record_process()
    if (started := _on_start.get()) is not None:
        from prefect.runtime import flow_run

        started(UUID(flow_run.id))
    with _open(agent, workspace, config_path) as index:
        rebuild_needed = force or index.needs_rebuild()
        if not rebuild_needed:
            report = index.sync(progress=_progress_for(agent, "sync"), stage=_as_task)
    if rebuild_needed:
        return rebuild_flow(agent=agent, workspace=workspace, config_path=config_path)
    _publish(agent, "sync", report)
    return report.to_dict()


@flow(name="memsift-rebuild", flow_run_name=_run_name("rebuild"), persist_result=False, log_prints=False)
def rebuild_flow(
    agent: str = "main", workspace: str | None = None, config_path: str | None = None, reason: str | None = None
) -> dict[str, Any]:
    """Re-index everything into a temp file (cached vectors reused) and swap it in atomically. `reason` (a
    slug such as `config-change`) only names the run."""
    _record_process()
    with _open(agent, workspace, config_path, fan_out_embedding=True) as index:
        report = index.rebuild(progress=_progress_for(agent, "rebuild"), stage=_as_task)
    _publish(agent, "rebuild", report)
    return report.to_dict()


def _record_process() -> None:
    """This process in the flow run's `infrastructure_pid`, as `host:pid` (the form Prefect's process worker
    gives it): a run left Running by a process killed mid-run (`kill -9` of `memsift up`, the machine stopping)
    is then known for one by the next `up`, which marks it Crashed (flows.orphans). One small request a run."""
    from prefect.context import FlowRunContext

    context = FlowRunContext.get()
    if context is not None and context.flow_run is not None:
        context.client.update_flow_run(context.flow_run.id, infrastructure_pid=f"{socket.gethostname()}:{os.getpid()}")


ARTIFACT_EVERY_SECONDS = 1.0  # a progress event comes per embedding request; the server hears at most this often


def _progress_for(agent: str, kind: str) -> Progress:
    """Progress to a Prefect progress artifact (the percentage, and its description: chunks embedded of
    chunks to embed, rate, ETA), and to the caller's callback (a terminal bar) if any."""
    artifact = create_progress_artifact(
        0.0, key=f"{kind}-progress-{artifact_key(agent)}", description=f"{kind} of {agent}: starting"
    )
    local = _progress.get()
    sent_at = [float("-inf")]

    def update(event: ProgressEvent) -> None:
        finished = event.fraction >= 1.0
        if finished or event.seconds - sent_at[0] >= ARTIFACT_EVERY_SECONDS:
            sent_at[0] = event.seconds
            update_progress_artifact(artifact, 100.0 * event.fraction, description=f"{kind} of {agent}: "
                                     + event.describe())  # fmt: skip
        if local:
            local(event)

    return update


def _publish(agent: str, kind: str, report: SyncReport) -> None:
    logger = get_run_logger()
    if report.plan:
        logger.info("plan: %s", summary(report.plan))
    logger.info(
        "%s of agent %s: %d files scanned, %d added, %d changed, %d removed, %d skipped; "
        "%d chunks embedded in %d requests, %d cache hits; %.2f s",
        kind, agent, report.filesScanned, report.added, report.changed, report.removed, report.skipped,
        report.chunksEmbedded, report.embeddingRequests, report.cacheHits, report.seconds,
    )  # fmt: skip
    for warning in report.warnings:
        logger.warning(warning)
    # The plan opens the report: what the run was about to embed and spend, then what it did.
    rows = [{"metric": f"plan.{k}", "value": v} for k, v in (report.plan or {}).items()]
    rows += [{"metric": k, "value": v} for k, v in report.to_dict().items() if k not in ("warnings", "plan")]
    table_key, warnings_key = report_keys(agent)
    create_table_artifact(key=table_key, table=rows, description=f"{kind} of {agent}")
    if report.warnings:
        lines = "\n".join(f"- {w}" for w in report.warnings)
        create_markdown_artifact(key=warnings_key, markdown=f"# Files skipped or repaired\n\n{lines}\n")


def report_keys(agent: str) -> tuple[str, str]:
    """The keys of a run's report artifacts: its table, and its list of warnings (only when there are some)."""
    return f"sync-report-{artifact_key(agent)}", f"sync-warnings-{artifact_key(agent)}"


def report_from_artifacts(artifacts: list[Any], agent: str) -> dict[str, Any] | None:
    """The report `_publish` left as artifacts, in the shape `SyncReport.to_dict()` gives (for a run read back
    from the server: the flow keeps no result); None when the table is not among `artifacts`."""
    table_key, warnings_key = report_keys(agent)
    table = next((a for a in artifacts if a.key == table_key), None)
    if table is None:
        return None
    report: dict[str, Any] = {}
    plan: dict[str, Any] = {}
    for row in json.loads(table.data):
        name = row["metric"]
        if name.startswith("plan."):
            plan[name.removeprefix("plan.")] = row["value"]
        else:
            report[name] = row["value"]
    report["plan"] = plan or None
    notes = [a for a in artifacts if a.key == warnings_key and a.flow_run_id == table.flow_run_id]
    report["warnings"] = [line[2:] for line in notes[0].data.splitlines() if line.startswith("- ")] if notes else []
    return report


def artifact_key(agent: str) -> str:
    """Artifact keys allow lower-case letters, digits and dashes only."""
    return "".join(c if c.isalnum() else "-" for c in agent.lower())


def run_sync(
    agent: str = "main",
    workspace: str | None = None,
    config_path: str | None = None,
    force: bool = False,
    progress: Progress | None = None,
) -> SyncReport:
    """Run the flow in this process, with an optional progress callback (not a flow parameter: it is code)."""
    return run_sync_recorded(agent, workspace, config_path, force, progress)[0]


def run_sync_recorded(
    agent: str = "main",
    workspace: str | None = None,
    config_path: str | None = None,
    force: bool = False,
    progress: Progress | None = None,
    on_start: Callable[[UUID], None] | None = None,
) -> tuple[SyncReport, UUID]:
    """`run_sync`, and the id of the flow run (for its address in the UI). The flow's error is raised.
    `on_start` is given that id as the run starts: a process that may exit mid-run can then mark it."""
    token, started = _progress.set(progress), _on_start.set(on_start)
    try:
        # A flow run's heartbeat thread sleeps in 1 s steps and is joined at the end: every short in-process
        # run would wait ~0.85 s for it (bench/README.md). Zombie detection is for worker-run flows.
        with temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}):
            state = sync_flow(agent=agent, workspace=workspace, config_path=config_path, force=force, return_state=True)
    finally:
        _progress.reset(token)
        _on_start.reset(started)
    return SyncReport(**state.result()), state.state_details.flow_run_id
