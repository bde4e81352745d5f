"""The Prefect sync flow (flows/sync.py): real flow runs against the session's Prefect test server.

Every test here runs a flow, so every test takes `prefect_harness`; the runs, task runs and artifacts are
read back with Prefect's own client.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from uuid import UUID

import pytest
from conftest import stop_process, wait_for
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import (
    ArtifactFilter,
    ArtifactFilterFlowRunId,
    FlowFilter,
    FlowFilterName,
    FlowRunFilter,
    FlowRunFilterId,
)
from prefect.client.schemas.objects import FlowRun, TaskRun

from api.cli import main
from core import ConfigError, SyncReport, processes
from core.config_home import db_path
from core.progress import ProgressEvent
from flows.orphans import crash_orphans
from flows.sync import run_sync
from tests.fake_provider import FakeProvider
from tests.index_checks import written_earlier

pytestmark = pytest.mark.usefixtures("prefect_harness")

MEMSIFT = Path(sys.executable).parent / "memsift"
RUN_NAME = re.compile(r"^sync-main-(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)-[0-9a-f]{4}$")


def _flow_run_ids(flow: str) -> set[UUID]:
    with get_client(sync_client=True) as client:
        runs = client.read_flow_runs(flow_filter=FlowFilter(name=FlowFilterName(any_=[flow])))
    return {r.id for r in runs}


class Runs:
    """The flow runs started since this object was made."""

    FLOWS = ("memsift-sync", "memsift-rebuild")

    def __init__(self) -> None:
        self.before = {f: _flow_run_ids(f) for f in self.FLOWS}

    def new(self, flow: str = "memsift-sync") -> list[FlowRun]:
        fresh = _flow_run_ids(flow) - self.before[flow]
        if not fresh:
            return []
        with get_client(sync_client=True) as client:
            return client.read_flow_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=list(fresh))))

    def one(self, flow: str = "memsift-sync") -> FlowRun:
        runs = self.new(flow)
        assert len(runs) == 1, [r.name for r in runs]
        return runs[0]

    def worker(self) -> FlowRun:
        """The run that indexed: the rebuild subflow (a changed identity, --force), else the sync."""
        rebuilds = self.new("memsift-rebuild")
        return self.one("memsift-rebuild") if rebuilds else self.one()


def task_runs(flow_run: FlowRun) -> list[TaskRun]:
    with get_client(sync_client=True) as client:
        return client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run.id])))


def task_counts(flow_run: FlowRun) -> dict[str, int]:
    counts: dict[str, int] = {}
    for t in task_runs(flow_run):
        base = t.name.rsplit("-", 1)[0]  # Prefect names a task run '<task name>-<3 hex>'
        counts[base] = counts.get(base, 0) + 1
    return counts


def artifacts(flow_run: FlowRun) -> dict[str, object]:
    with get_client(sync_client=True) as client:
        found = client.read_artifacts(
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run.id]))
        )
    return {a.key: a for a in found if a.key}  # a failed run also stores its exception, without a key


def notes(n: int) -> dict[str, str]:
    return {
        f"memory/2026-01-{i % 28 + 1:02d}-n{i:03d}.md": f"# note {i}\n- fact number {i} about topic {i % 7}\n"
        for i in range(n)
    }


# ---------------------------------------------------------------- counts


def test_run_sync_counts_second_run_embeds_nothing_force_rebuilds(workspace) -> None:
    ws = workspace(notes(5) | {"MEMORY.md": "# Memory\n- evergreen fact\n"})
    written_earlier(ws)  # not during the first run's scan, which the second would read again (core.sync_plan)
    first = run_sync("main", workspace=str(ws))
    assert isinstance(first, SyncReport)
    assert (first.filesScanned, first.added, first.changed, first.removed) == (6, 6, 0, 0)
    assert first.chunksWritten == first.chunksEmbedded == 6
    assert first.embeddingCalls >= 1 and first.rebuilt is True and first.warnings == []

    runs = Runs()
    second = run_sync("main", workspace=str(ws))
    assert (second.filesScanned, second.added, second.changed, second.removed, second.unchanged) == (6, 0, 0, 0, 6)
    assert second.chunksEmbedded == second.embeddingCalls == second.chunksWritten == 0
    assert second.rebuilt is False
    assert not runs.new("memsift-rebuild")
    assert task_counts(runs.one()) == {"scan-and-diff": 1}  # nothing to read: no estimate or index-batch task

    (ws / "memory" / "2026-01-01-n000.md").write_text("# note 0\n- rewritten fact\n")
    (ws / "MEMORY.md").unlink()
    runs = Runs()
    third = run_sync("main", workspace=str(ws))
    assert (third.filesScanned, third.added, third.changed, third.removed, third.unchanged) == (5, 0, 1, 1, 4)
    assert third.chunksEmbedded == 1
    assert task_counts(runs.one()) == {"scan-and-diff": 1, "estimate": 1, "index-batch": 1, "remove-vanished": 1}

    runs = Runs()
    forced = run_sync("main", workspace=str(ws), force=True)
    assert forced.rebuilt is True
    assert forced.added == 5 and forced.chunksWritten == 5
    assert forced.chunksEmbedded == 0 and forced.cacheHits == 5 and forced.embeddingCalls == 0  # the cache serves
    run = runs.one()
    assert run.name.startswith("sync-main-") and run.parameters["force"] is True
    assert run.state.is_completed()
    rebuild = runs.worker()  # the sync handed over to the rebuild flow, as a subflow
    assert rebuild.name.startswith("rebuild-main-") and rebuild.state.is_completed()
    assert rebuild.parent_task_run_id is not None


# ---------------------------------------------------------------- the flow run, its tasks and artifacts


def test_flow_run_is_named_completed_coarse_and_reported(workspace) -> None:
    ws = workspace(notes(100))
    runs = Runs()
    seen: list[ProgressEvent] = []
    report = run_sync("main", workspace=str(ws), progress=seen.append)
    assert report.added == 100 and report.chunksEmbedded == 100
    # an event per embedding request and per batch written (64 + 36 files), then the end
    assert [(e.chunksDone, e.filesDone) for e in seen] == [(0, 0), (64, 0), (64, 64), (100, 64), (100, 100)] + [
        (100, 100)
    ]
    assert {(e.chunksTotal, e.filesTotal) for e in seen} == {(100, 100)}  # the flow's events reach the caller

    run = runs.one()
    assert run.state is not None and run.state.is_completed() and run.state_name == "Completed"
    m = RUN_NAME.match(run.name)
    assert m, run.name
    stamp = datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC)
    assert abs(run.start_time - stamp) < timedelta(minutes=2)
    assert run.parameters == {"agent": "main", "workspace": str(ws), "config_path": None, "force": False}

    worker = runs.worker()  # a first index is the sync flow's own work, in the live file: no rebuild subflow
    assert worker.id == run.id and not runs.new("memsift-rebuild")
    tasks = task_runs(worker)
    assert all(t.state is not None and t.state.is_completed() for t in tasks)
    assert task_counts(worker) == {"scan-and-diff": 1, "estimate": 1, "index-batch": 2}  # 64 + 36 files

    found = {k: v for k, v in artifacts(worker).items() if "progress" not in k}
    assert set(found) == {"sync-report-main"}  # no warnings: no markdown artifact
    table = found["sync-report-main"]
    assert table.type == "table"
    rows = json.loads(table.data) if isinstance(table.data, str) else table.data
    expected = report.to_dict()
    del expected["warnings"]
    expected |= {f"plan.{k}": v for k, v in expected.pop("plan").items()}
    assert {r["metric"]: r["value"] for r in rows} == expected
    assert rows[0]["metric"] == "plan.provider"  # the plan opens the report


def test_warnings_make_a_markdown_artifact(workspace) -> None:
    ws = workspace({"MEMORY.md": "# Memory\n- fine\n"})
    (ws / "memory").mkdir()
    (ws / "memory" / "blob.md").write_bytes(b"PK\x03\x04\x00\x00binary")
    runs = Runs()
    report = run_sync("main", workspace=str(ws))
    assert report.added == 1
    assert report.warnings == ["skipped memory/blob.md: binary content (NUL bytes)"]

    run = runs.worker()
    assert run.state.is_completed()  # a skipped file is a warning, not a failure
    found = artifacts(run)
    assert set(found) == {"sync-report-main", "sync-warnings-main", "sync-progress-main"}
    md = found["sync-warnings-main"]
    assert md.type == "markdown"
    assert "- skipped memory/blob.md: binary content (NUL bytes)" in md.data


def test_other_agent_from_a_config_file(workspace, memsift_home: Path) -> None:
    main_ws = workspace({"MEMORY.md": "main\n"}, name="main-ws")
    side = workspace(notes(3), name="side-ws")
    cfg = main_ws / "memsift.toml"
    cfg.write_text('[agents.Side_2]\nworkspace = "../side-ws"\n')
    runs = Runs()
    report = run_sync("Side_2", config_path=str(cfg))
    assert report.added == 3
    assert db_path(memsift_home, "Side_2", side.resolve()).is_file()
    run = runs.one()
    assert re.match(r"^sync-Side_2-\d{4}-", run.name)
    assert "sync-report-side-2" in artifacts(runs.worker())  # artifact keys: lower case, digits, dashes
    assert side.is_dir()


def test_bad_configuration_fails_the_run(workspace) -> None:
    ws = workspace({"MEMORY.md": "x\n", "memsift.toml": '[search]\nmode = "fuzzy"\n'})
    runs = Runs()
    with pytest.raises(ConfigError, match=f"^{re.escape(str(ws / 'memsift.toml'))}: search\\.mode"):
        run_sync("main", workspace=str(ws))
    run = runs.one()
    assert run.state.is_failed()
    assert "sync-report-main" not in artifacts(run)


# ---------------------------------------------------------------- `memsift index` through the flow


def _api_url() -> str:
    from prefect.settings import PREFECT_API_URL

    url = PREFECT_API_URL.value()
    assert url and url.startswith("http")
    return url


def test_rest_answers_for_a_sync_run_another_process_started(workspace, capsys, monkeypatch) -> None:
    """`memsift index` under `up` prints its flow run (and so do `up`'s watcher and schedules), but `GET
    /v1/index/{runId}` knew only the runs its own `POST /v1/index` started: 404 "runs are kept in memory"
    for a sync the Prefect server holds. Any other id is still unknown."""
    from api.runs import IndexRuns

    monkeypatch.setenv("PREFECT_API_URL", _api_url())
    runs = Runs()
    assert main(["--workspace", str(workspace(notes(3))), "index"]) == 0
    capsys.readouterr()
    recorded = str(runs.one().id)
    rest = IndexRuns()
    try:
        run = rest.get(recorded)
        assert run is not None and (run.id, run.agent, run.state) == (recorded, "main", "COMPLETED"), run
        assert run.summary is not None and run.summary["added"] == 3, run.summary
        assert rest.get("00000000-0000-0000-0000-000000000000") is None and rest.get("not-a-uuid") is None
    finally:
        rest.close()


def test_rest_answers_for_a_rebuild_run(workspace, monkeypatch) -> None:
    """`up` prints a link to each rebuild it starts (a configuration change), and the UI lists them with the
    syncs, but `GET /v1/index/{runId}` of one was a 404 saying runs are kept in memory: only `memsift-sync`
    runs were read from the server. A rebuild run answers as a sync run does, its report as summary."""
    from api.runs import IndexRuns
    from flows.sync import rebuild_flow

    monkeypatch.setenv("PREFECT_API_URL", _api_url())
    ws = workspace(notes(2))
    state = rebuild_flow(agent="main", workspace=str(ws), return_state=True)
    rest = IndexRuns()
    try:
        run = rest.get(str(state.state_details.flow_run_id))
        assert run is not None and (run.agent, run.state) == ("main", "COMPLETED"), run
        assert run.summary is not None and run.summary["added"] == 2 and run.summary["rebuilt"], run.summary
    finally:
        rest.close()


def test_cli_index_runs_the_flow(workspace, capsys, monkeypatch) -> None:
    monkeypatch.setenv("PREFECT_API_URL", _api_url())
    ws = workspace(notes(3))
    runs = Runs()
    assert main(["--workspace", str(ws), "index", "--json"]) == 0
    out = capsys.readouterr().out
    report = json.loads(out)
    assert report["added"] == 3 and report["rebuilt"] is True
    run = runs.one()
    assert RUN_NAME.match(run.name) and run.state.is_completed()
    assert run.parameters["workspace"] == str(ws.resolve())
    rows = json.loads(artifacts(runs.worker())["sync-report-main"].data)
    assert {r["metric"]: r["value"] for r in rows}["added"] == 3
    # The plan opens the report: what the run was about to embed, then what it did.
    assert rows[0]["metric"].startswith("plan.")
    assert {r["metric"]: r["value"] for r in rows}["plan.chunksToEmbed"] == report["chunksEmbedded"] == 3

    runs = Runs()
    assert main(["--workspace", str(ws), "index", "--force"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("plan: 0 chunks to embed (3 cached), ~0 tokens in 0 requests")
    assert f"\nrebuilt agent main ({ws.resolve()})\n" in out
    assert "files: 3 scanned, 3 added, 0 changed, 0 removed\n" in out
    assert "chunks: 0 embedded, 3 cache hits, 3 written\n" in out
    assert runs.worker().name.startswith("rebuild-main-")


def test_cli_index_process_json_is_one_document(workspace, memsift_home: Path) -> None:
    """A real `memsift index --json` against the harness server: Prefect's chatter never reaches stdout."""
    ws = workspace(notes(2))
    (ws / "memory" / "blob.md").write_bytes(b"\x00binary")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSIFT_")}
    env.update(MEMSIFT_HOME=str(memsift_home), PREFECT_API_URL=_api_url())
    runs = Runs()
    proc = subprocess.run(
        [MEMSIFT, "--workspace", ws, "index", "--json"], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["added"] == 2 and report["warnings"] == ["skipped memory/blob.md: binary content (NUL bytes)"]
    assert "Traceback" not in proc.stderr
    run = runs.worker()
    assert run.state.is_completed()
    # where to see the run, as without --json (it was printed only then: a script could not find its run)
    # and its warnings, as search --json gives them: on stderr, each on a line
    lines = proc.stderr.splitlines()
    assert lines == ["warning: skipped memory/blob.md: binary content (NUL bytes)", lines[-1]], proc.stderr
    assert lines[-1].startswith("flow run: ") and lines[-1].endswith(f"/runs/flow-run/{run.id}"), proc.stderr
    assert set(artifacts(run)) == {"sync-report-main", "sync-warnings-main", "sync-progress-main"}


def test_the_progress_artifact_counts_chunks_with_rate_and_eta(workspace, monkeypatch) -> None:
    """The flow's progress artifact carries what the terminal bar shows: chunks embedded of chunks to embed,
    the rate and the time left, updated per embedding request (10 chunks each here), not per 64 files."""
    monkeypatch.setenv("MEMSIFT_EMBEDDING_BATCHMAXINPUTS", "10")
    ws = workspace(notes(40))
    runs = Runs()
    seen: list[ProgressEvent] = []
    run_sync("main", workspace=str(ws), progress=seen.append)
    embedded = [e.chunksDone for e in seen]
    assert sorted(set(embedded)) == [0, 10, 20, 30, 40]  # one batch of 40 files, four requests
    middle = next(e for e in seen if e.chunksDone == 20)
    assert middle.rate is not None and middle.eta is not None
    assert re.fullmatch(r"20/40 chunks embedded, [\d.]+ chunks/s, ETA \d+ (s|min \d\d s)", middle.describe())

    artifact = artifacts(runs.worker())["sync-progress-main"]  # a first index: the sync flow's own
    assert artifact.type == "progress" and float(artifact.data) == 100.0
    assert re.fullmatch(r"sync of main: 40/40 chunks embedded, [\d.]+ chunks/s", artifact.description)


def test_runs_started_in_the_same_minute_have_distinct_names(workspace) -> None:
    ws = workspace(notes(2))
    run_sync("main", workspace=str(ws))
    runs = Runs()
    run_sync("main", workspace=str(ws))  # two no-op syncs, seconds apart at most
    run_sync("main", workspace=str(ws))
    names = [r.name for r in runs.new()]
    assert len(names) == 2 and len(set(names)) == 2, names
    assert all(RUN_NAME.match(n) for n in names), names


# ---------------------------------------------------------------- runs of a killed process


def _held_index(workspace, memsift_home: Path) -> tuple[FakeProvider, Path, dict[str, str]]:
    """A workspace of three notes on a hosted provider whose second request (the run's embedding, after its
    start-up probe) is held, and the environment of a `memsift index` that records its run on the server."""
    provider = FakeProvider(hold_at=2)
    toml = f'[embedding]\nprovider = "openai"\nbaseUrl = "{provider.url}"\nmodel = "fake-model"\nretries = 0\n'
    ws = workspace(notes(3) | {"memsift.toml": toml})
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSIFT_")}
    env.update(MEMSIFT_HOME=str(memsift_home), PREFECT_API_URL=_api_url(), OPENAI_API_KEY="sk-test")
    return provider, ws, env


def test_a_run_whose_process_was_killed_is_marked_crashed_and_a_live_one_is_not(workspace, memsift_home: Path) -> None:
    """`kill -9` of the process running a sync (`memsift up` with its Runner, or `memsift index`), or a machine
    that stops: nothing reported on the run, Running in the UI for good. Each run records its process (`host:pid`),
    and the next `up` (flows.orphans.crash_orphans, at its start) marks it Crashed once that process is gone."""
    provider, ws, env = _held_index(workspace, memsift_home)
    runs = Runs()
    proc = subprocess.Popen(
        [MEMSIFT, "--workspace", ws, "index"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env
    )
    try:
        assert provider.held.wait(120), proc.stderr
        run = wait_for(
            lambda: (r := runs.new()) and r[0].infrastructure_pid and r[0], 30, "the run to record its process"
        )
        assert run.state.is_running() and run.infrastructure_pid == f"{socket.gethostname()}:{proc.pid}"
        said: list[str] = []
        assert crash_orphans(said.append) == 0 and said == []  # its process is alive: still running it
        proc.kill()
        # Not reaped yet, a zombie, as a killed `up`'s children are until init reaps them: os.kill(pid, 0) reads
        # it as running, and the run stayed Running.
        wait_for(lambda: (processes.stat_fields(proc.pid) or ["?"])[0] == "Z", 30, "the killed process to be a zombie")
        assert runs.one().state.is_running()  # what the killed process left
        assert crash_orphans(said.append) == 1
        proc.wait(30)
    finally:
        provider.close()
        stop_process(proc)
    marked = runs.one()
    assert marked.state.is_crashed(), marked.state
    assert (
        marked.state.message
        == f"its process (pid {proc.pid}) ended while it ran (killed, or the machine stopped); marked by memsift up"
    )
    assert said == [
        f"marked the orphaned run {marked.name} Crashed: {marked.state.message.removesuffix('; marked by memsift up')}"
    ]


def test_the_next_memsift_index_marks_the_run_of_a_killed_one_crashed(workspace, memsift_home: Path) -> None:
    """`memsift index` recording its run on a server (PREFECT_API_URL, or a running `up`'s) and killed with
    `kill -9`: its run stayed Running in the UI until the next `up` started, which while an `up` runs on means
    for days. The next `memsift index` marks it Crashed before its own run, says so, and completes the index
    with what the killed run had embedded."""
    provider, ws, env = _held_index(workspace, memsift_home)
    runs = Runs()
    args = [MEMSIFT, "--workspace", ws, "index"]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    try:
        assert provider.held.wait(120), proc.stderr
        killed = wait_for(
            lambda: (r := runs.new()) and r[0].infrastructure_pid and r[0], 30, "the run to record its process"
        )
        proc.kill()
        proc.wait(30)
        provider.release()
        done = subprocess.run(args, capture_output=True, text=True, env=env, timeout=300)
    finally:
        provider.close()
        stop_process(proc)
    assert done.returncode == 0, done.stderr
    by_id = {r.id: r for r in runs.new()}
    assert len(by_id) == 2 and by_id.pop(killed.id).state.is_crashed()
    assert next(iter(by_id.values())).state.is_completed()
    why = f"its process (pid {proc.pid}) ended while it ran (killed, or the machine stopped)"
    assert f"warning: marked the orphaned run {killed.name} Crashed: {why}\n" in done.stderr
    assert "files: 3 scanned, 3 added" in done.stdout
