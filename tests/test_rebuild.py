"""Rebuilds into a temp file with an atomic swap, the writer lock, and searches that go on meanwhile."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import apsw
import pytest
from conftest import CountingEmbedder, FailingEmbedder, file_digest

from core import MemoryIndex
from core.locking import LockTimeout, writer_lock

NOTES = {
    "MEMORY.md": "# Memory\n- Dana drinks a flat white every morning.\n- The ledger runs on PostgreSQL 15.\n",
    "memory/2026-11-24.md": "# 2026-11-24\n- The deploy failed with ERR_SSL_PROTOCOL.\n- PR #17 pins OpenSSL.\n",
    "memory/2026-11-26.md": "# 2026-11-26\n- Priya wants offline mode in Q1.\n- Conflicts: last writer wins.\n",
    "memory/2026-11-28.md": "# 2026-11-28\n- Replication lag reached 40 s.\n- Missing index on settlements.\n",
}


def temp_files(config) -> list[Path]:
    return sorted(config.db_path.parent.glob(f"{config.db_path.name}.tmp-*"))


def chunk_set(index: MemoryIndex) -> set[tuple[str, int, int, str]]:
    return set(index.store.conn.execute("SELECT path, start_line, end_line, hash FROM chunks"))


@pytest.fixture
def ws(workspace):
    return workspace(NOTES)


# ---------------------------------------------------------------- identity


@pytest.mark.parametrize(
    "override",
    [
        {"chunking.tokens": 64, "chunking.overlap": 8},
        {"store.fts.stemmer": "none"},
        {"store.fts.tokenizer": "trigram"},
        {"extraPaths": ["notes"]},
        {"embedding.provider": "none"},
    ],
)
def test_identity_changes_rebuild(ws, make_config, open_index, counting_embedder, override):
    open_index(make_config(ws), embedder=counting_embedder).sync()
    embedder = None if override.get("embedding.provider") == "none" else counting_embedder
    index = open_index(make_config(ws, **override), embedder=embedder)
    assert index.needs_rebuild()
    report = index.sync()
    assert report.rebuilt
    assert not index.needs_rebuild()


@pytest.mark.parametrize(
    "override",
    [
        {"search.maxResults": 20},
        {"search.fusion": "rrf"},
        {"search.minScore": 0.1},
        {"search.temporalDecay.enabled": True},
        {"embedding.batchMaxInputs": 8},
        {"cache.maxEntries": 100},
    ],
)
def test_search_and_batching_settings_do_not_rebuild(ws, make_config, open_index, counting_embedder, override):
    open_index(make_config(ws), embedder=counting_embedder).sync()
    index = open_index(make_config(ws, **override), embedder=counting_embedder)
    assert not index.needs_rebuild()
    assert not index.sync().rebuilt


def test_rebuild_reuses_cached_vectors_of_texts_that_stay_identical(
    workspace, make_config, open_index, counting_embedder
):
    notes = dict(NOTES)
    notes["memory/long.md"] = "".join(f"- fact {i}: the quick brown fox number {i} jumps.\n" for i in range(60))
    ws = workspace(notes)
    open_index(make_config(ws), embedder=counting_embedder).sync()
    counting_embedder.documents.clear()

    index = open_index(make_config(ws, **{"chunking.tokens": 200, "chunking.overlap": 40}), embedder=counting_embedder)
    report = index.sync()
    assert report.rebuilt
    # The four short notes are one chunk each under both budgets: served from the cache.
    assert all("quick brown fox" in text for text in counting_embedder.documents)  # only long.md re-chunked
    assert report.cacheHits >= 4 and report.chunksEmbedded == len(counting_embedder.documents) > 0


# ---------------------------------------------------------------- failure leaves the old index as it was


@pytest.mark.parametrize("fail_on_call", [1, 9])  # in the first batch of files, in the second
def test_failed_rebuild_leaves_the_old_index_untouched(ws, make_config, open_index, fail_on_call):
    for i in range(70):  # two batches of files; each file one chunk now, two under the smaller budget
        lines = "".join(f"- fact {i}.{j}: a numbered line about topic {j}\n" for j in range(12))
        (ws / "memory" / f"extra-{i:03d}.md").write_text(f"# extra {i}\n{lines}")
    config = make_config(ws)
    first = open_index(config, embedder=CountingEmbedder())
    first.sync()
    before_hits = first.search("ERR_SSL_PROTOCOL").to_dict()["results"]
    before_chunks = chunk_set(first)
    first.close()
    before = file_digest(config.db_path)

    changed = make_config(ws, **{"chunking.tokens": 100, "chunking.overlap": 10, "embedding.batchMaxInputs": 16})
    failing = open_index(changed, embedder=FailingEmbedder(fail_on_call, RuntimeError("embedding service fell over")))
    with pytest.raises(RuntimeError, match="fell over"):
        failing.sync()
    failing.close()

    assert file_digest(config.db_path) == before
    assert temp_files(config) == []
    after = open_index(config, embedder=CountingEmbedder())
    assert chunk_set(after) == before_chunks
    assert after.search("ERR_SSL_PROTOCOL").to_dict()["results"] == before_hits
    assert after.store.conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)


def test_orphaned_temp_files_are_removed_at_the_next_sync(ws, make_config, open_index, counting_embedder):
    config = make_config(ws)
    index = open_index(config, embedder=counting_embedder)
    index.sync()
    orphan = config.db_path.with_name(config.db_path.name + ".tmp-deadbeef")
    orphan.write_bytes(b"half a database")
    Path(f"{orphan}-wal").write_bytes(b"half a wal")
    index.sync()
    assert temp_files(config) == []


# ---------------------------------------------------------------- the writer lock


def test_two_rebuilds_of_one_agent_do_not_overlap(ws, make_config, open_index, counting_embedder):
    config = make_config(ws, **{"sync.lockTimeoutSeconds": 0})
    open_index(config, embedder=counting_embedder).sync()
    with writer_lock(config.db_path):
        with pytest.raises(LockTimeout, match=f"pid {os.getpid()}"):
            open_index(config, embedder=counting_embedder).sync(force=True)
    report = open_index(config, embedder=counting_embedder).sync(force=True)
    assert report.rebuilt


def test_concurrent_rebuilds_wait_for_each_other(ws, make_config, counting_embedder):
    config = make_config(ws)
    MemoryIndex(config, embedder=counting_embedder).sync()
    errors: list[BaseException] = []

    def rebuild() -> None:
        try:
            with MemoryIndex(config, embedder=counting_embedder) as index:
                index.sync(force=True)
        except BaseException as exc:  # noqa: BLE001 - the test reports any failure
            errors.append(exc)

    threads = [threading.Thread(target=rebuild) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert errors == []
    with MemoryIndex(config, embedder=counting_embedder) as index:
        assert index.store.conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        assert len(chunk_set(index)) == 4
    assert temp_files(config) == []


def test_a_lock_left_by_a_killed_process_is_taken_over(ws, make_config, open_index, counting_embedder):
    config = make_config(ws, **{"sync.lockTimeoutSeconds": 5})
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from pathlib import Path; from core.locking import writer_lock\n"
            "with writer_lock(Path(sys.argv[1])):\n    print('held', flush=True); sys.stdin.read()",
            str(config.db_path),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[1],
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(timeout=30)
    finally:
        holder.kill()
    assert open_index(config, embedder=counting_embedder).sync().rebuilt  # no LockTimeout


def test_an_eagain_inside_the_writer_lock_is_not_taken_for_a_busy_lock(tmp_path):
    """BlockingIOError is also what a non-blocking read with nothing to give raises: one raised by the work
    done under the lock is that error, not "another sync or rebuild of this index is running (pid <ours>)"."""
    with pytest.raises(BlockingIOError, match="nothing to read yet"):
        with writer_lock(tmp_path / "index.sqlite", timeout=0):
            raise BlockingIOError(errno.EAGAIN, "nothing to read yet")


# ---------------------------------------------------------------- readers during a rebuild


def test_searches_go_on_during_rebuilds(ws, make_config, counting_embedder):
    config = make_config(ws)
    MemoryIndex(config, embedder=counting_embedder).sync()
    stop = threading.Event()
    answers: list[int] = []
    errors: list[BaseException] = []

    def reader() -> None:
        with MemoryIndex(config, embedder=counting_embedder) as index:
            while not stop.is_set():
                try:
                    hits = index.search("deploy failed ERR_SSL_PROTOCOL").results
                    answers.append(len(hits))
                except BaseException as exc:  # noqa: BLE001 - any error fails the test
                    errors.append(exc)
                    return

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for tokens in (300, 200, 400):
            before = config.db_path.stat().st_ino
            with MemoryIndex(make_config(ws, **{"chunking.tokens": tokens}), embedder=counting_embedder) as index:
                assert index.sync().rebuilt
            assert config.db_path.stat().st_ino != before  # a new file was swapped in
    finally:
        stop.set()
        thread.join(timeout=60)
    assert errors == []
    assert answers and all(n >= 1 for n in answers)  # every search found the note, old index or new


def test_a_reader_picks_up_the_swapped_file(ws, make_config, counting_embedder):
    config = make_config(ws)
    reader = MemoryIndex(config, embedder=counting_embedder)
    reader.search("flat white")
    (ws / "memory" / "2026-11-29.md").write_text("# 2026-11-29\n- Zanzibar offsite booked.\n")
    with MemoryIndex(config, embedder=counting_embedder) as writer:
        writer.sync(force=True)
    assert [h.path for h in reader.search("Zanzibar offsite").results][:1] == ["memory/2026-11-29.md"]
    reader.close()


def test_swapped_in_file_is_not_in_wal_mode_and_has_no_stale_side_files(ws, make_config, counting_embedder):
    config = make_config(ws)
    with MemoryIndex(config, embedder=counting_embedder) as index:
        index.sync()
        index.sync(force=True)
    assert not Path(f"{config.db_path}-wal").exists() or Path(f"{config.db_path}-wal").stat().st_size == 0
    conn = apsw.Connection(str(config.db_path), flags=apsw.SQLITE_OPEN_READONLY)
    assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    conn.close()


class SwappingEmbedder(CountingEmbedder):
    """The real model; the first query it embeds is preceded by a forced rebuild of `config`'s index through
    another MemoryIndex, i.e. a swap in the middle of a search (after the search took its store)."""

    def __init__(self, config) -> None:
        super().__init__()
        self.config = config
        self.swapped = False

    def embed_query(self, text: str):
        if not self.swapped:
            self.swapped = True
            with MemoryIndex(self.config, embedder=CountingEmbedder()) as writer:
                assert writer.sync(force=True).rebuilt
        return super().embed_query(text)


def test_a_swap_during_a_search_does_not_close_the_store_it_reads(ws, make_config, counting_embedder):
    """The reranker is built during the first search; building it must not reopen the index (closing the
    connection the search reads) when a rebuild swapped a new file in meanwhile."""
    config = make_config(ws, **{"rerank.enabled": True})
    MemoryIndex(config, embedder=counting_embedder).sync()
    embedder = SwappingEmbedder(config)
    with MemoryIndex(config, embedder=embedder) as reader:
        before = config.db_path.stat().st_ino
        hits = reader.search("deploy failed ERR_SSL_PROTOCOL", rerank=True).results
        assert embedder.swapped and config.db_path.stat().st_ino != before
        assert hits[0].path == "memory/2026-11-24.md"
        assert reader.search("flat white").results[0].path == "MEMORY.md"  # and the next one reads the new file
