"""The index file (core/store.py): schema guard, vector backends, rows removed with their file."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from core import StoreError
from core.store import Store
from core.store_schema import SCHEMA_VERSION

NOTES = {
    "MEMORY.md": "Dana is the team lead and drinks a flat white every morning.\n",
    "memory/2026-11-20.md": "The deploy failed: the load balancer certificate expired.\n",
    "memory/2026-11-21.md": "We adopted a golden retriever puppy named Biscuit.\n",
    "memory/2026-11-22.md": "Quarterly budget review moved to the second Thursday.\n",
}


def count(store: Store, sql: str, *args) -> int:
    return store.conn.execute(sql, args).fetchone()[0]


def test_new_file_gets_the_current_schema_and_reopens(tmp_path):
    path = tmp_path / "idx.sqlite"
    with Store(path) as store:
        assert store.get_meta("schema_version") == str(SCHEMA_VERSION)
        store.set_meta("custom", "kept")
    with Store(path) as store:
        assert store.get_meta("custom") == "kept"


@pytest.mark.parametrize("readonly", [False, True])
def test_newer_schema_is_refused_with_a_clear_message(tmp_path, readonly):
    path = tmp_path / "idx.sqlite"
    with Store(path) as store:
        store.set_meta("schema_version", str(SCHEMA_VERSION + 1))
    with pytest.raises(StoreError) as info:
        Store(path, readonly=readonly)
    message = str(info.value)
    assert f"schema {SCHEMA_VERSION + 1}" in message and "newer memsift" in message
    assert "upgrade memsift or delete the file" in message


def test_newer_schema_through_memory_index(workspace, make_config, open_index):
    config = make_config(workspace({"MEMORY.md": "x\n"}))
    open_index(config, embedder=None).sync()
    with Store(config.db_path) as store:
        store.set_meta("schema_version", "99")
    with pytest.raises(StoreError, match="newer memsift"):
        open_index(config, embedder=None).search("x")


def test_not_an_index_file_is_a_store_error(tmp_path):
    path = tmp_path / "junk.sqlite"
    path.write_bytes(b"this is not a database file at all" * 200)
    with pytest.raises(StoreError, match="cannot open the index"):
        Store(path)


def test_embedding_cache_round_trip_survives_reset(tmp_path):
    key = ("local", "m", "fp")
    vec = np.arange(4, dtype=np.float32)
    with Store(tmp_path / "idx.sqlite") as store:
        with store.transaction():
            store.cache_put(key, {"h1": vec})
        store.reset({"dims": 4}, "unicode61")
        got = store.cache_get(key, ["h1", "h2"])
        assert list(got) == ["h1"] and np.array_equal(got["h1"], vec)
        assert store.cache_get(("local", "m", "other"), ["h1"]) == {}


def test_two_new_files_never_share_a_version_of_their_chunks(tmp_path):
    """In-memory copies of an index (vector matrix, keyword cache) are tagged with the file's inode and its
    `vectors_version`. A rebuild's new file may get the inode of a file swapped out before it; the counter
    must then differ, so it starts anywhere but at a fixed number, and every write still moves it on."""
    versions = []
    for name in ("a.sqlite", "b.sqlite", "c.sqlite"):
        with Store(tmp_path / name) as store:
            store.reset({}, "unicode61")
            first = store.get_meta("vectors_version")
            with store.transaction():
                store.replace_file("memory/a.md", "memory", 1, 1, "h", [(1, 1, "t", "h1")], None)
            assert int(store.get_meta("vectors_version")) == int(first) + 1
            versions.append(first)
    assert len(set(versions)) == 3


def test_numpy_fallback_matches_sqlite_vec(workspace, make_config, open_index, counting_embedder):
    config = make_config(workspace(NOTES))
    with_vec = open_index(config, embedder=counting_embedder)
    with_vec.sync()
    assert with_vec.store.vec_available and with_vec.store.has_vec_table()
    without = open_index(config, embedder=counting_embedder, use_vec=False)
    assert not without.store.vec_available
    for query in ("which beverage does she enjoy at breakfast", "what dog did they get"):
        a = with_vec.search(query, mode="vector", min_score=0.0)
        b = without.search(query, mode="vector", min_score=0.0)
        assert a.results and a.results[0].path == b.results[0].path
        assert [h.path for h in a.results] == [h.path for h in b.results]
        assert [h.score for h in a.results] == pytest.approx([h.score for h in b.results], abs=1e-4)


def test_index_built_without_sqlite_vec_serves_vectors(workspace, make_config, open_index, counting_embedder):
    index = open_index(make_config(workspace(NOTES)), embedder=counting_embedder, use_vec=False)
    index.sync()
    assert not index.store.has_vec_table()
    top = index.search("what dog did they get", mode="vector")
    assert top.results[0].path == "memory/2026-11-21.md"


def test_fts_and_vec_rows_go_with_their_file(workspace, make_config, open_index, counting_embedder):
    ws = workspace(NOTES)
    index = open_index(make_config(ws), embedder=counting_embedder)
    index.sync()
    store = index.store
    before = count(store, "SELECT count(*) FROM chunks")
    assert count(store, "SELECT count(*) FROM chunks_vec") == before == 4
    assert store.fts_search('"biscuit"', 10)
    (ws / "memory/2026-11-21.md").unlink()
    assert index.sync().removed == 1
    assert count(store, "SELECT count(*) FROM chunks WHERE path = 'memory/2026-11-21.md'") == 0
    assert count(store, "SELECT count(*) FROM files WHERE path = 'memory/2026-11-21.md'") == 0
    assert store.fts_search('"biscuit"', 10) == []
    ids = {r[0] for r in store.conn.execute("SELECT id FROM chunks")}
    assert {r[0] for r in store.conn.execute("SELECT rowid FROM chunks_vec")} == ids
    assert {r[0] for r in store.conn.execute("SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH 'the'")} <= ids


def test_deleting_while_sqlite_vec_is_unavailable_does_not_corrupt_the_index(
    workspace, make_config, open_index, counting_embedder
):
    # vec0 rows cannot be deleted without the extension; they must not outlive their chunks.
    ws = workspace(NOTES)
    config = make_config(ws)
    index = open_index(config, embedder=counting_embedder)
    index.sync()
    index.close()
    (ws / "memory/2026-11-22.md").unlink()
    index = open_index(config, embedder=counting_embedder, use_vec=False)
    index.sync()
    index.sync(force=True)  # a rebuild cannot drop chunks_vec either
    index.close()
    index = open_index(config, embedder=counting_embedder)
    hits = index.search("quarterly budget review thursday", mode="vector", min_score=0.0)  # no KeyError
    assert "memory/2026-11-22.md" not in [h.path for h in hits.results]
    (ws / "memory/2026-11-23.md").write_text("A new note about the budget spreadsheet.\n")
    index.sync()  # no UNIQUE constraint failure on chunks_vec
    ids = {r[0] for r in index.store.conn.execute("SELECT id FROM chunks")}
    assert {r[0] for r in index.store.conn.execute("SELECT rowid FROM chunks_vec")} == ids
    assert index.store.get_meta("vec_stale") == "0"


def test_keyword_path_prefix_is_case_sensitive_like_the_vector_leg(workspace, make_config, open_index):
    ws = workspace({"MEMORY.md": "shared keyword\n", "memory/a.md": "shared keyword\n"})
    index = open_index(make_config(ws), embedder=None)
    index.sync()
    assert [h.path for h in index.search("shared keyword", path_prefix="memory").results] == ["memory/a.md"]
    assert [h.path for h in index.search("shared keyword", path_prefix="MEMORY").results] == ["MEMORY.md"]
    assert index.search("shared keyword", path_prefix="mem%").results == []
    assert index.search("shared keyword", path_prefix="memory_").results == []


def test_vectors_for_looks_chunks_up_by_id_not_the_whole_cache(tmp_path):
    """The plan of `vectors_for` with a hybrid search's couple of dozen ids: a rowid lookup per chunk, then
    its cache row; not a walk over every cached vector of the model (50-100 ms at 10,000 chunks)."""
    key = ("local", "m", "f")
    with Store(tmp_path / "idx.sqlite") as store:
        store.reset({}, "unicode61")
        with store.transaction():
            store.replace_file("memory/a.md", "memory", 1, 1, "h", [(i, i, f"t{i}", f"h{i}") for i in range(40)], None)
            store.cache_put(key, {f"h{i}": np.ones(4, dtype=np.float32) for i in range(40)})
        statements: list[tuple[str, tuple]] = []

        def trace(cursor, sql, bindings):
            statements.append((sql, bindings))
            return True

        store.conn.exec_trace = trace
        assert len(store.vectors_for(range(1, 25), key)) == 24
        store.conn.exec_trace = None
        (sql, bindings) = next((s, b) for s, b in statements if "embedding_cache" in s)  # no matrix is loaded
        plan = [row[3] for row in store.conn.execute("EXPLAIN QUERY PLAN " + sql, bindings)]
        assert plan[0].startswith("SEARCH c USING INTEGER PRIMARY KEY"), plan


def test_a_full_disk_mid_batch_is_said_naming_the_index_and_the_next_sync_completes(workspace, make_config, open_index):
    """SQLite rolls a transaction back on its own when the disk fills (SQLITE_FULL; `max_page_count` makes the
    same error without filling a disk): the ROLLBACK that followed failed too and its error ("cannot rollback -
    no transaction is active") was the one the user saw. Now the error names the file and the cause, the
    batch leaves nothing behind, and once there is room the next sync on the same connection completes."""
    ws = workspace(NOTES)
    index = open_index(make_config(ws, **{"embedding.provider": "none"}))
    index.sync()
    before = count(index.store, "SELECT count(*) FROM chunks")
    pages = count(index.store, "PRAGMA page_count")
    index.store.conn.execute(f"PRAGMA max_page_count = {pages + 2}")
    for n in range(40):
        text = "".join(f"- Line {j} of note {n} about the okapi census.\n" for j in range(200))
        (ws / f"memory/okapi-{n:02d}.md").write_text(text)
    with pytest.raises(StoreError, match="cannot write the index .*: database or disk is full"):
        index.sync()
    assert not index.store.conn.in_transaction
    assert count(index.store, "SELECT count(*) FROM chunks") == before
    index.store.conn.execute("PRAGMA max_page_count = 1073741823")
    report = index.sync()
    assert report.added == 40 and count(index.store, "PRAGMA integrity_check") == "ok"
    assert index.search("okapi census", mode="keyword").results


def _locks_held(path) -> set[int]:
    """The pids holding a POSIX lock on the file (Linux's /proc/locks: `... pid major:minor:inode ...`)."""
    inode = f":{os.stat(path).st_ino} "
    return {int(line.split()[4]) for line in Path("/proc/locks").read_text().splitlines() if inode in line}


@pytest.mark.skipif(not Path("/proc/locks").exists(), reason="reads Linux's /proc/locks")
def test_opening_a_second_store_keeps_the_first_ones_lock_on_the_file(tmp_path):
    """A WAL-mode connection holds a SHARED lock on the database file for its whole life: another process that
    closes its last connection checkpoints and deletes the WAL only if it can lock the file exclusively. The
    check for a foreign WAL read the file's header with `open()`, whose close dropped this process's lock."""
    path = tmp_path / "index.db"
    with Store(path, use_vec=False) as first:
        first.conn.execute("SELECT count(*) FROM chunks").fetchone()
        assert Path(f"{path}-wal").exists() and os.getpid() in _locks_held(path)
        Store(path, use_vec=False).close()  # a second reader, as a server opens per request
        assert os.getpid() in _locks_held(path)
