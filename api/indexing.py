"""One sync of an agent, as a Prefect flow run when a Prefect server answers, else the same sync without one.

A flow run without a server makes Prefect start a temporary one in the process: 7-12 s before any work,
its runs written under `~/.prefect` where no UI the user starts shows them. So a run is a flow run only
when there is a server to record it: `PREFECT_API_URL`, else the server a `memsift up` on this MEMSIFT_HOME
advertises. Otherwise `MemoryIndex.sync` runs directly (the code the flow's tasks run) and Prefect is not
even imported (~1.5 s of imports). `Where` says which it was, in words for the user.

This module imports no Prefect itself: `PREFECT_API_URL` must be set before Prefect is first imported.
The CLI's `memsift index` and the REST API's `POST /v1/index` (without a served deployment) both run here.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from uuid import UUID

from api.prefect_server import advertised_api_url, answers
from core import Config, MemoryIndex
from core.indexer import Progress
from core.sync_plan import SyncReport


@dataclass(frozen=True)
class Where:
    """Where a sync ran: the flow run's page in the Prefect UI, or why it ran without Prefect."""

    flow_run_url: str | None
    note: str


def prefect_api(config: Config) -> tuple[str | None, str]:
    """(the API address of a Prefect server that answers now, or None; why not, when None)."""
    explicit = os.environ.get("PREFECT_API_URL")
    if explicit:
        if answers(explicit):
            return explicit, ""
        return None, f"the Prefect server at {explicit} (PREFECT_API_URL) did not answer"
    advertised = advertised_api_url(config.home)
    if advertised:
        return advertised, ""
    return None, "no Prefect server is running (`memsift up` starts one, or set PREFECT_API_URL)"


def sync_agent(
    config: Config,
    *,
    force: bool = False,
    progress: Progress | None = None,
    on_start: Callable[[UUID], None] | None = None,
) -> tuple[SyncReport, Where]:
    """Sync (or rebuild) one agent: a recorded flow run when a server answers (its id to `on_start` as it
    starts), else in-process."""
    api_url, why_not = prefect_api(config)
    with MemoryIndex(config) as index:
        index.require_embedder()  # a provider that cannot start is an error before any flow run
        if api_url is None:
            report = index.sync(force=force, progress=progress)
            return report, Where(None, f"not recorded as a Prefect flow run: {why_not}")
    os.environ["PREFECT_API_URL"] = api_url  # before Prefect is imported: it reads its settings once
    from flows.sync import run_sync_recorded

    said = _crash_orphans()
    report, run_id = run_sync_recorded(
        agent=config.agent,
        workspace=str(config.workspace),
        config_path=str(config.source) if config.source else None,
        force=force,
        progress=progress,
        on_start=on_start,
    )
    report.warnings[:0] = said
    url = f"{api_url.rstrip('/').removesuffix('/api')}/runs/flow-run/{run_id}"
    return report, Where(url, f"flow run: {url}")


def _crash_orphans() -> list[str]:
    """Mark Crashed the runs a killed `memsift index` (or `up`) left Running (flows.orphans); what was marked, for
    the report's warnings. A server that fails the query only costs this note: the sync runs all the same."""
    from flows.orphans import crash_orphans

    said: list[str] = []
    try:
        crash_orphans(said.append, by="memsift index")
    except Exception as exc:  # the Prefect client's errors are many (HTTP, validation): none stops the sync
        said.append(f"could not look for orphaned runs: {type(exc).__name__}: {exc}")
    return said
