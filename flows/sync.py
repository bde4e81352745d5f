"""The sync flow: `core.indexer.sync` with its stages run as Prefect tasks, and a run report artifact.

Stages are coarse (scan-and-diff once, one task per batch of up to 64 files, one removal task), so the
Prefect bookkeeping of a task run (milliseconds) never dominates. Tasks keep no results and no cache:
their inputs are live objects (the store connection, the embedder, the whole sync plan) that run in this
process, and they are passed `quote`d, or Prefect walks every one of them for every task run (a forced
rebuild of 10,000 files took 74 s in the flow against 0.8 s in core before that; bench/README.md).
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE
from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings
from prefect.utilities.annotations import quote

from core import MemoryIndex, load_config
from core.indexer import Progress, SyncReport

_progress: ContextVar[Progress | None] = ContextVar("memsift_progress", default=None)
_tasks: dict[str, Any] = {}


def _as_task(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    if name not in _tasks:
        _tasks[name] = task(fn, name=name, cache_policy=NO_CACHE, persist_result=False)
    prefect_task = _tasks[name]
    return lambda *args: prefect_task(*(quote(a) for a in args))


def _run_name() -> str:
    from prefect.runtime import flow_run

    params = flow_run.parameters
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M")
    return f"{'rebuild' if params.get('force') else 'sync'}-{params.get('agent', 'main')}-{stamp}"


@flow(name="memsift-sync", flow_run_name=_run_name, persist_result=False, log_prints=False)
def sync_flow(
    agent: str = "main", workspace: str | None = None, config_path: str | None = None, force: bool = False
) -> dict[str, Any]:
    """Index one agent's workspace incrementally (or rebuild it all with `force`)."""
    logger = get_run_logger()
    config = load_config(config_path, workspace=workspace, agent=agent)
    with MemoryIndex(config) as index:
        report = index.sync(force=force, progress=_progress.get(), stage=_as_task)
    _publish(agent, report)
    logger.info(
        "agent %s: %d files scanned, %d added, %d changed, %d removed; %d chunks embedded, %d cache hits; %.2f s",
        agent, report.filesScanned, report.added, report.changed, report.removed,
        report.chunksEmbedded, report.cacheHits, report.seconds,
    )  # fmt: skip
    for warning in report.warnings:
        logger.warning(warning)
    return report.to_dict()


def _publish(agent: str, report: SyncReport) -> None:
    rows = [{"metric": k, "value": v} for k, v in report.to_dict().items() if k != "warnings"]
    create_table_artifact(key=f"sync-report-{_artifact_key(agent)}", table=rows, description=f"sync of {agent}")
    if report.warnings:
        lines = "\n".join(f"- {w}" for w in report.warnings)
        create_markdown_artifact(
            key=f"sync-warnings-{_artifact_key(agent)}", markdown=f"# Files skipped or repaired\n\n{lines}\n"
        )


def _artifact_key(agent: str) -> str:
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
    token = _progress.set(progress)
    try:
        # A flow run's heartbeat thread sleeps in 1 s steps and is joined at the end: every short in-process
        # run would wait ~0.85 s for it (bench/README.md). Zombie detection is for worker-run flows.
        with temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}):
            result = sync_flow(agent=agent, workspace=workspace, config_path=config_path, force=force)
    finally:
        _progress.reset(token)
    return SyncReport(**result)
