"""A rebuild's embedding fanned out on a task runner (flows/fanout.py): threads, and a real Dask cluster.

Each runner rebuilds the same workspace into its own MEMSIFT_HOME (so nothing comes from a cache) and must
give the index the inline rebuild gives: the same chunks, the same vectors, the same report counts.
"""

from __future__ import annotations

from pathlib import Path

import apsw
import numpy as np
import pytest

from core import ConfigError, load_config
from flows import fanout
from flows.sync import run_sync
from tests.test_flows import Runs, task_counts
from tests.test_sessions import message

pytestmark = pytest.mark.usefixtures("prefect_harness")

FILES = {
    "MEMORY.md": "# Memory\n- Dana drinks a flat white every morning.\n",
    **{
        f"memory/2026-02-{i + 1:02d}.md": "".join(f"- day {i} item {j}: topic {j % 5} of {i * j}\n" for j in range(40))
        for i in range(4)
    },
}


def _index(home: Path) -> tuple[list[tuple], dict[str, np.ndarray]]:
    """(chunk rows, vector per chunk hash) of the agent main's index under `home`."""
    (db,) = (home / "memory").glob("main.*.sqlite")
    conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        chunks = list(conn.execute("SELECT path, start_line, end_line, hash, text FROM chunks ORDER BY id"))
        cache = conn.execute("SELECT hash, embedding FROM embedding_cache")
        vectors = {h: np.frombuffer(blob, dtype=np.float32) for h, blob in cache}
    finally:
        conn.close()
    return chunks, vectors


def _rebuild(ws: Path, home: Path, monkeypatch: pytest.MonkeyPatch, runner: str, address: str | None = None):
    monkeypatch.setenv("MEMSIFT_HOME", str(home))
    monkeypatch.setenv("MEMSIFT_SYNC_TASK_RUNNER", runner)
    monkeypatch.setenv("MEMSIFT_EMBEDDING_BATCH_MAX_INPUTS", "4")  # several embed-batch tasks from a few files
    if address:
        monkeypatch.setenv("MEMSIFT_SYNC_DASK_ADDRESS", address)
    runs = Runs()
    report = run_sync("main", workspace=str(ws), force=True)
    return report, task_counts(runs.one("memsift-rebuild"))


def _same_index(a: Path, b: Path) -> None:
    chunks_a, vectors_a = _index(a)
    chunks_b, vectors_b = _index(b)
    assert chunks_a == chunks_b and len(chunks_a) > 5
    assert vectors_a.keys() == vectors_b.keys() == {row[3] for row in chunks_a}
    for h, vector in vectors_a.items():
        np.testing.assert_allclose(vector, vectors_b[h], atol=1e-5)


def test_thread_and_dask_rebuilds_give_the_inline_index(
    workspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = workspace(FILES | {"memory/2026-02-07.md": "a line\n" * 3})
    inline, inline_tasks = _rebuild(ws, tmp_path / "inline", monkeypatch, "inline")
    assert "embed-batch" not in inline_tasks

    threaded, thread_tasks = _rebuild(ws, tmp_path / "thread", monkeypatch, "thread")
    _same_index(tmp_path / "inline", tmp_path / "thread")
    assert thread_tasks["embed-batch"] >= 2
    assert thread_tasks["index-batch"] == inline_tasks["index-batch"]

    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=":0") as cluster, Client(cluster) as client:
        on_dask, dask_tasks = _rebuild(ws, tmp_path / "dask", monkeypatch, "dask", cluster.scheduler_address)
        # The vectors were computed in the cluster's worker processes: each built its own embedder there.
        built = client.run(lambda: len(fanout._worker_embedders))
    assert sum(built.values()) >= 1
    _same_index(tmp_path / "inline", tmp_path / "dask")
    assert dask_tasks["embed-batch"] == thread_tasks["embed-batch"]

    for report in (threaded, on_dask):
        assert (report.added, report.chunksWritten, report.chunksEmbedded, report.embeddingCalls) == (
            inline.added, inline.chunksWritten, inline.chunksEmbedded, inline.embeddingCalls,
        )  # fmt: skip


def test_a_rebuild_fans_out_only_what_the_cache_lacks(workspace, tmp_path, monkeypatch) -> None:
    ws = workspace(FILES)
    first, _ = _rebuild(ws, tmp_path / "home", monkeypatch, "thread")
    (ws / "memory" / "2026-02-01.md").write_text("- one new fact about the staging cluster\n")
    second, tasks = _rebuild(ws, tmp_path / "home", monkeypatch, "thread")
    assert first.chunksEmbedded == first.chunksWritten == len(FILES)
    assert second.chunksEmbedded == 1 and tasks["embed-batch"] == 1  # one text, one batch
    assert second.cacheHits == second.chunksWritten - 1


def test_task_runner_is_validated(workspace, monkeypatch) -> None:
    ws = workspace({"MEMORY.md": "x\n"})
    monkeypatch.setenv("MEMSIFT_SYNC_TASK_RUNNER", "ray")
    with pytest.raises(ConfigError, match="sync.taskRunner"):
        load_config(workspace=ws)
    monkeypatch.setenv("MEMSIFT_SYNC_TASK_RUNNER", "dask")
    monkeypatch.setenv("MEMSIFT_SYNC_DASK_ADDRESS", "tcp://10.0.0.5:8786")
    config = load_config(workspace=ws)
    assert (config.sync.taskRunner, config.sync.daskAddress) == ("dask", "tcp://10.0.0.5:8786")
    runner = fanout.task_runner(config.sync)
    assert type(runner).__name__ == "DaskTaskRunner" and runner.address == "tcp://10.0.0.5:8786"
    assert fanout.task_runner(load_config(workspace=ws, overrides={"sync.taskRunner": "inline"}).sync) is None


def test_transcripts_fan_out_with_the_memory_files(workspace, tmp_path, monkeypatch, counting_embedder) -> None:
    """The fan-out reads every active source as the indexer does: a transcript's chunks (its rendering, not
    its JSON) are embedded by `embed-batch` tasks, not inline afterwards."""
    ws = workspace(FILES)
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    lines = [message("user", "Which database did we pick for the ledger?"), message("assistant", "PostgreSQL 15.")]
    (sessions / "s1.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    monkeypatch.setenv("MEMSIFT_SOURCES", "memory,sessions")
    monkeypatch.setenv("MEMSIFT_SESSIONS_DIR", str(sessions))

    fanned = set(fanout.texts_to_embed(load_config(workspace=ws), counting_embedder))
    assert "User: Which database did we pick for the ledger?\nAssistant: PostgreSQL 15." in fanned

    _rebuild(ws, tmp_path / "inline", monkeypatch, "inline")
    _, tasks = _rebuild(ws, tmp_path / "thread", monkeypatch, "thread")
    _same_index(tmp_path / "inline", tmp_path / "thread")
    chunks, _ = _index(tmp_path / "thread")
    transcript = {row[4] for row in chunks if row[0] == "sessions/s1.jsonl"}
    assert transcript and transcript <= fanned and tasks["embed-batch"] >= 2
