"""core/chunk_cache.py: the chunk rows and MaxSim token bits a process keeps, bounded, never stale after a sync."""

from __future__ import annotations

import core.store_caches
import core.store_search
from core.chunk_cache import CHUNK_ROWS, TOKEN_BITS, ChunkCache
from core.rerankers.maxsim import MaxSimReranker
from core.rerankers.shortlist import SCORES


def reader(store: dict[int, bytes], asked: list[list[int]]):
    def read(ids: list[int]) -> dict[int, bytes]:
        asked.append(ids)
        return {i: store[i] for i in ids if i in store}

    return read


def test_reads_only_what_it_lacks_and_stays_under_its_capacity() -> None:
    blobs = {i: bytes([i]) * 100 for i in range(10)}
    asked: list[list[int]] = []
    bits = ChunkCache(500, len)
    read = reader(blobs, asked)
    assert bits.get("a.sqlite", 1, [1, 2, 3], read) == {i: blobs[i] for i in (1, 2, 3)}
    assert bits.get("a.sqlite", 1, [2, 3, 4, 99], read) == {i: blobs[i] for i in (2, 3, 4)}
    assert asked == [[1, 2, 3], [4, 99]]  # 99 has no bits: absent, and asked again next time
    bits.get("a.sqlite", 1, [5, 6, 7], read)
    assert bits.size <= 500
    bits.get("a.sqlite", 1, [1, 7], read)
    assert asked[-1] == [1]  # the least recently used went first; 7 was just read
    bits.get("b.sqlite", 1, [1], read)  # another file: its own entries under the same capacity
    assert asked[-1] == [1] and bits.size <= 500


def test_a_new_tag_drops_the_file_s_bits() -> None:
    asked: list[list[int]] = []
    bits = ChunkCache(1000, len)
    bits.get("a.sqlite", 1, [1], reader({1: b"old"}, asked))
    assert bits.get("a.sqlite", 2, [1], reader({1: b"new"}, asked)) == {1: b"new"}
    assert bits.get("a.sqlite", 2, [1], reader({1: b"newer"}, asked)) == {1: b"new"}
    assert len(asked) == 2


def test_bits_after_a_sync_rewrote_a_chunk_are_the_new_ones(workspace, make_config, open_index) -> None:
    # One file, one chunk: rewriting it deletes chunk 1 and SQLite gives the new chunk the same id.
    ws = workspace({"MEMORY.md": "# Memory\n- Dana Whitfield drinks a flat white every morning.\n"})
    index = open_index(make_config(ws, **{"rerank.enabled": True}))
    index.sync()
    fingerprint = MaxSimReranker.shared().fingerprint
    store = index.store
    (chunk_id,) = [r[0] for r in store.conn.execute("SELECT id FROM chunks")]
    before = store.tokens_for([chunk_id], fingerprint)[chunk_id]
    assert TOKEN_BITS.size >= len(before)

    (ws / "MEMORY.md").write_text("# Memory\n- The Berlin trip is booked: train on the 3rd, back on the 9th.\n")
    index.sync()
    store = index.store
    assert [r[0] for r in store.conn.execute("SELECT id FROM chunks")] == [chunk_id]
    sql = "SELECT t.tokens FROM chunks c JOIN token_cache t ON t.hash = c.hash AND t.fingerprint = ? WHERE c.id = ?"
    stored = store.conn.execute(sql, (fingerprint, chunk_id)).fetchone()[0]
    assert stored != before
    assert store.tokens_for([chunk_id], fingerprint) == {chunk_id: stored}


def test_rows_after_a_sync_rewrote_a_chunk_are_the_new_ones(workspace, make_config, open_index) -> None:
    ws = workspace({"MEMORY.md": "# Memory\n- Dana Whitfield drinks a flat white every morning.\n"})
    index = open_index(make_config(ws, **{"rerank.enabled": False}))
    index.sync()
    (chunk_id,) = [r[0] for r in index.store.conn.execute("SELECT id FROM chunks")]
    assert "flat white" in index.store.chunks_by_ids([chunk_id])[chunk_id].text
    assert CHUNK_ROWS.size > 0

    (ws / "MEMORY.md").write_text("# Memory\n- The Berlin trip is booked: train on the 3rd, back on the 9th.\n")
    index.sync()
    assert [r[0] for r in index.store.conn.execute("SELECT id FROM chunks")] == [chunk_id]
    assert "Berlin" in index.store.chunks_by_ids([chunk_id])[chunk_id].text
    assert index.search("Berlin trip", rerank=False).results[0].snippet.count("Berlin") >= 1


def test_searches_answer_the_same_with_kept_rows_and_bits(workspace, make_config, open_index, monkeypatch) -> None:
    notes = {f"memory/2026-05-{d:02d}.md": f"# 2026-05-{d:02d}\n- {text}\n" for d, text in enumerate(TEXTS, 1)}
    index = open_index(make_config(workspace(notes), **{"rerank.enabled": True}))
    index.sync()
    queries = ["what does Dana drink", "deploy certificate error", "trip to Berlin", "database choice billing"]

    def answers() -> list[list[tuple[str, float, str]]]:
        SCORES.__init__()  # no rerank score from an earlier search: MaxSim reads the bits each time
        return [[(h.path, h.score, h.snippet) for h in index.search(q).results] for q in queries]

    kept = answers()
    assert kept == answers()  # now from the kept rows and bits
    assert TOKEN_BITS.size > 0 and CHUNK_ROWS.size > 0
    none: ChunkCache = ChunkCache(0, lambda _: 1)
    monkeypatch.setattr(core.store_search, "CHUNK_ROWS", none)
    monkeypatch.setattr(core.store_caches, "TOKEN_BITS", none)
    assert answers() == kept and none.size == 0


TEXTS = [
    "Dana Whitfield drinks a flat white every morning, no sugar.",
    "The deploy failed: the certificate on the staging proxy expired.",
    "Booked the Berlin trip: train on the 3rd, back on the 9th.",
    "We picked PostgreSQL over MySQL for the billing service.",
    "Dana switched to oat milk in her flat white last week.",
]
