"""The in-memory vector matrix of large indexes: the same answers as vec0, shared by the stores of one index
file, and never stale (a sync or a rebuild is seen by the next search)."""

from __future__ import annotations

import numpy as np
import pytest

from core import MemoryIndex
from core.identity import cache_key
from core.store import Store
from core.vector_matrix import LOAD_BLOCK, MATRICES, load_matrix

NOTES = {
    "MEMORY.md": "# Facts\n\nDana drinks green tea every morning before the standup.\n",
    "memory/2026-01-05.md": "# Monday\n\nThe deploy failed with ERR_SSL_PROTOCOL because the proxy stripped SNI.\n",
    "memory/2026-01-06.md": "# Tuesday\n\nBooked the dentist for Friday; the car needs new tyres.\n",
}


@pytest.fixture
def large_threshold(monkeypatch: pytest.MonkeyPatch) -> None:
    """Treat every index as large, so the matrix answers (building 20,000 real chunks would take minutes)."""
    monkeypatch.setattr("core.store_search.MATRIX_MIN_CHUNKS", 1)


def _legs(index: MemoryIndex, query: str) -> list[tuple[int, float]]:
    embedder = index.embedder()
    return index.store.vec_search(embedder.embed_query(query), 5, cache_key(embedder))


def test_matrix_answers_as_vec0_does(workspace, make_config, monkeypatch: pytest.MonkeyPatch) -> None:
    config = make_config(workspace(NOTES))
    with MemoryIndex(config) as index:
        index.sync()
        by_vec0 = _legs(index, "what does Dana drink")
        monkeypatch.setattr("core.store_search.MATRIX_MIN_CHUNKS", 1)
        by_matrix = _legs(index, "what does Dana drink")
    assert [c for c, _ in by_matrix] == [c for c, _ in by_vec0] and len(by_matrix) == 3
    assert np.allclose([s for _, s in by_matrix], [s for _, s in by_vec0], atol=1e-5)


def test_stores_of_one_file_share_one_matrix(workspace, make_config, large_threshold) -> None:
    config = make_config(workspace(NOTES))
    with MemoryIndex(config) as index:
        index.sync()
        _legs(index, "tea")
        key = cache_key(index.embedder())
        first = MATRICES._entries[str(config.db_path)].matrix
        with Store(config.db_path, readonly=True) as other:
            other.vec_search(index.embedder().embed_query("tea"), 3, key)
        assert MATRICES._entries[str(config.db_path)].matrix is first and first.shape == (3, 384)


def test_a_sync_and_a_rebuild_are_seen_by_the_next_search(workspace, make_config, large_threshold) -> None:
    ws = workspace(NOTES)
    config = make_config(ws)
    with MemoryIndex(config) as index:
        index.sync()
        assert len(_legs(index, "where is the violin lesson")) == 3
        (ws / "memory" / "2026-01-07.md").write_text("# Wednesday\n\nViolin lesson moved to the music school.\n")
        index.sync()
        ids = [c for c, _ in _legs(index, "where is the violin lesson")]
        assert index.store.chunks_by_ids(ids[:1])[ids[0]].path == "memory/2026-01-07.md" and len(ids) == 4
        (ws / "memory" / "2026-01-06.md").unlink()
        index.sync(force=True)  # a rebuilt file is swapped in: another inode
        ids = [c for c, _ in _legs(index, "dentist appointment")]
        rows = index.store.chunks_by_ids(ids)
        assert len(ids) == 3 and all(rows[c].path != "memory/2026-01-06.md" for c in ids)


@pytest.mark.parametrize("count", [1, LOAD_BLOCK, 2 * LOAD_BLOCK + 3])
def test_load_reads_rows_in_blocks_and_stops_at_the_count(count: int) -> None:
    vectors = np.random.default_rng(count).standard_normal((count + 2, 8)).astype(np.float32)
    rows = [(100 + i, v.tobytes()) for i, v in enumerate(vectors)]
    ids, matrix = load_matrix(iter(rows), count, 8)  # two rows more than counted: left for the next reload
    assert ids.tolist() == list(range(100, 100 + count)) and np.array_equal(matrix, vectors[:count])
    ids, matrix = load_matrix(iter(rows[: count - 1]), count, 8)  # fewer: a chunk without a cached vector
    assert ids.tolist() == list(range(100, 99 + count)) and np.array_equal(matrix, vectors[: count - 1])


def test_keyword_hits_vectors_come_from_the_loaded_matrix_and_match_sqlite(
    workspace, make_config, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = make_config(workspace(NOTES))
    with MemoryIndex(config) as index:
        index.sync()
        key = cache_key(index.embedder())
        ids = [cid for (cid,) in index.store.conn.execute("SELECT id FROM chunks ORDER BY id DESC")]
        MATRICES._entries.pop(str(config.db_path), None)
        from_sqlite = index.store.vectors_for([*ids, 10_000], key)  # 10,000: no such chunk
        assert MATRICES.loaded(str(config.db_path), index.store._matrix_tag(key)) is None
        monkeypatch.setattr("core.store_search.MATRIX_MIN_CHUNKS", 1)
        _legs(index, "tea")  # the vector leg loads the matrix
        entry = MATRICES.loaded(str(config.db_path), index.store._matrix_tag(key))
        assert entry is not None
        from_matrix = index.store.vectors_for([*ids, 10_000], key)
    assert sorted(from_matrix) == sorted(from_sqlite) == sorted(ids)
    assert all(np.array_equal(from_matrix[c], from_sqlite[c]) for c in ids)
