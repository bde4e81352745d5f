"""Incremental sync (core/indexer.py via MemoryIndex.sync): embed only what changed, remove what vanished."""

from __future__ import annotations

import codecs
import os
import time

from core.chunking import chunk_text
from core.sources.base import MAX_FILE_BYTES

TOPICS = ["deploy", "budget", "puppy", "coffee", "garden", "travel", "concert", "dentist"]


def long_note(seed: str, n: int = 24) -> str:
    """A note of n distinct lines, several chunks at chunking.tokens = 32."""
    return "".join(f"{seed} {i:02d}: {TOPICS[i % len(TOPICS)]} notes.\n" for i in range(n))


def build_index(workspace, make_config, open_index, embedder):
    ws = workspace(
        {
            "MEMORY.md": long_note("root", 10),
            "memory/2026-11-20.md": long_note("daily"),
            "memory/people.md": long_note("people", 14),
        }
    )
    config = make_config(ws, **{"chunking.tokens": 32, "chunking.overlap": 8})
    return ws, config, open_index(config, embedder=embedder)


def chunk_texts(index) -> set[str]:
    return {r[0] for r in index.store.conn.execute("SELECT text FROM chunks")}


def test_first_sync_embeds_every_chunk_once(workspace, make_config, open_index, counting_embedder):
    ws, config, index = build_index(workspace, make_config, open_index, counting_embedder)
    report = index.sync()
    texts = chunk_texts(index)
    assert len(texts) > 8
    assert set(counting_embedder.documents) == texts
    assert len(counting_embedder.documents) == len(texts)  # no text embedded twice
    assert (report.filesScanned, report.added, report.changed, report.removed) == (3, 3, 0, 0)
    assert report.chunksEmbedded == len(texts) and report.cacheHits == 0 and report.rebuilt


def test_second_sync_with_nothing_changed_embeds_nothing(workspace, make_config, open_index, counting_embedder):
    ws, config, index = build_index(workspace, make_config, open_index, counting_embedder)
    index.sync()
    counting_embedder.documents.clear()
    report = index.sync()
    assert counting_embedder.documents == []
    assert report.unchanged == report.filesScanned == 3
    assert (report.added, report.changed, report.removed, report.chunksWritten) == (0, 0, 0, 0)
    assert not report.rebuilt


def test_editing_one_line_reembeds_only_the_changed_chunks(workspace, make_config, open_index, counting_embedder):
    ws, config, index = build_index(workspace, make_config, open_index, counting_embedder)
    index.sync()
    before = chunk_texts(index)
    path = ws / "memory/2026-11-20.md"
    lines = path.read_text().splitlines(keepends=True)
    lines[12] = lines[12].replace("notes", "NOTES")  # same length: chunk boundaries stay
    path.write_text("".join(lines))
    counting_embedder.documents.clear()

    report = index.sync()
    new_chunks = {c.text for c in chunk_text(path.read_text(), 32, 8)}
    changed = new_chunks - before
    assert 1 <= len(changed) <= 2  # the chunk holding line 13, and its overlap neighbour
    assert set(counting_embedder.documents) == changed
    assert len(counting_embedder.documents) == len(changed)
    assert all("NOTES" in t for t in counting_embedder.documents)
    assert (report.changed, report.unchanged, report.chunksEmbedded) == (1, 2, len(changed))
    assert report.cacheHits == len(new_chunks) - len(changed)
    assert chunk_texts(index) == (before - {t for t in before if "daily 12:" in t}) | new_chunks


def test_touching_mtime_embeds_nothing(workspace, make_config, open_index, counting_embedder):
    ws, config, index = build_index(workspace, make_config, open_index, counting_embedder)
    index.sync()
    counting_embedder.documents.clear()
    st = (ws / "MEMORY.md").stat()
    os.utime(ws / "MEMORY.md", ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))
    report = index.sync()
    assert counting_embedder.documents == []
    assert report.unchanged == 3 and report.changed == 0
    # the new mtime is recorded: the next sync does not even read the file
    assert index.store.file_rows()["MEMORY.md"][1] == st.st_mtime_ns + 5_000_000_000


def test_deleted_file_vanishes_from_search_and_chunks(workspace, make_config, open_index, counting_embedder):
    ws, config, index = build_index(workspace, make_config, open_index, counting_embedder)
    (ws / "memory/2026-11-21.md").write_text("Zanzibar trip planning with the whole family.\n")
    index.sync()
    assert index.search("Zanzibar trip").results[0].path == "memory/2026-11-21.md"
    (ws / "memory/2026-11-21.md").unlink()
    report = index.sync()
    assert report.removed == 1
    assert all(h.path != "memory/2026-11-21.md" for h in index.search("Zanzibar trip", min_score=0).results)
    assert index.store.conn.execute("SELECT count(*) FROM chunks WHERE path LIKE '%11-21%'").fetchone()[0] == 0


def test_force_rebuild_is_served_from_the_cache(workspace, make_config, open_index, counting_embedder):
    ws, config, index = build_index(workspace, make_config, open_index, counting_embedder)
    index.sync()
    before = chunk_texts(index)
    counting_embedder.documents.clear()
    report = index.sync(force=True)
    assert report.rebuilt
    assert counting_embedder.documents == []
    assert report.chunksEmbedded == 0 and report.cacheHits == len(before)
    assert report.added == 3
    assert chunk_texts(index) == before


def test_changed_chunking_config_rebuilds(workspace, make_config, open_index, counting_embedder):
    ws, config, index = build_index(workspace, make_config, open_index, counting_embedder)
    index.sync()
    index.close()
    counting_embedder.documents.clear()
    bigger = open_index(make_config(ws, **{"chunking.tokens": 64, "chunking.overlap": 0}), embedder=counting_embedder)
    report = bigger.sync()
    assert report.rebuilt and report.added == 3
    expected = {c.text for c in chunk_text((ws / "memory/people.md").read_text(), 64, 0)}
    rows = {r[0] for r in bigger.store.conn.execute("SELECT text FROM chunks WHERE path = 'memory/people.md'")}
    assert rows == expected
    assert bigger.store.identity()["chunking"] == {"tokens": 64, "overlap": 0}
    assert counting_embedder.documents  # new chunk texts needed vectors
    counting_embedder.documents.clear()
    assert not bigger.sync().rebuilt and counting_embedder.documents == []


def test_keyword_only_index_then_embedder_rebuilds(workspace, make_config, open_index, counting_embedder):
    ws, config, index = build_index(workspace, make_config, open_index, None)
    assert index.sync().rebuilt
    assert index.store.identity()["dims"] is None
    index.close()
    report = open_index(config, embedder=counting_embedder).sync()
    assert report.rebuilt and report.chunksEmbedded > 0


def test_bad_encodings_are_handled(workspace, make_config, open_index, counting_embedder):
    ws = workspace({"MEMORY.md": "fine\n"})
    (ws / "memory").mkdir()
    (ws / "memory/latin1.md").write_bytes("caf\xe9 au lait with croissant\n".encode("latin-1"))
    (ws / "memory/binary.md").write_bytes(b"\x00\x01\x02\xff binary blob")
    (ws / "memory/utf16.md").write_bytes(codecs.BOM_UTF16_LE + "hello sixteen bits world\n".encode("utf-16-le"))
    (ws / "memory/bom8.md").write_bytes(codecs.BOM_UTF8 + b"utf eight with a bom\n")
    index = open_index(make_config(ws), embedder=counting_embedder)
    report = index.sync()
    warnings = "\n".join(report.warnings)
    assert "memory/latin1.md" in warnings and "invalid UTF-8" in warnings
    assert "memory/binary.md" in warnings and "binary" in warnings
    assert "utf16" not in warnings and "bom8" not in warnings
    texts = {p: t for p, t in index.store.conn.execute("SELECT path, text FROM chunks")}
    assert "binary.md" not in " ".join(texts)
    assert texts["memory/latin1.md"] == "caf\ufffd au lait with croissant"
    assert texts["memory/utf16.md"] == "hello sixteen bits world"
    assert texts["memory/bom8.md"] == "utf eight with a bom"
    assert index.search("sixteen bits").results[0].path == "memory/utf16.md"
    assert index.search("croissant").results[0].path == "memory/latin1.md"
    assert report.skipped == 1
    again = index.sync()  # recorded without chunks: skipped by stat until it changes, not re-read, still said
    assert again.unchanged == 4 and again.skipped == 1
    assert again.warnings == ["skipped memory/binary.md: binary content (NUL bytes)"]


def test_a_skipped_file_is_said_by_every_sync_until_it_changes(workspace, make_config, open_index):
    """A note that cannot be read as text is in no search: the first sync said so and every later one was
    silent ("25 scanned, 0 skipped"), while a symlink's skip is said each time. Each sync now says it again,
    from the index (the file is not re-read), until the file changes, is readable or goes."""
    ws = workspace({"MEMORY.md": "The kestrel nests on the roof.\n"})
    (ws / "memory").mkdir()
    (ws / "memory/nul.md").write_bytes(b"The axolotl eats worms.\n\x00\x01 blob\n")
    (ws / "memory/huge.md").write_bytes(b"x" * (MAX_FILE_BYTES + 1))
    index = open_index(make_config(ws), embedder=None)
    binary = "skipped memory/nul.md: binary content (NUL bytes)"
    large = "skipped memory/huge.md: larger than 8 MiB"
    first = index.sync()
    assert (first.added, first.skipped, sorted(first.warnings)) == (1, 2, [large, binary])
    again = index.sync()
    assert (again.unchanged, again.skipped, sorted(again.warnings)) == (1, 2, [large, binary])
    os.utime(ws / "memory/nul.md", ns=(1, 1))  # a new mtime, the same bytes: read, still no text
    touched = index.sync()
    assert (touched.unchanged, touched.skipped, sorted(touched.warnings)) == (1, 2, [large, binary])
    (ws / "memory/nul.md").write_text("The axolotl eats worms.\n", encoding="utf-8")
    (ws / "memory/huge.md").unlink()
    fixed = index.sync()
    assert (fixed.changed, fixed.removed, fixed.skipped, fixed.warnings) == (1, 1, 0, [])
    assert [h.path for h in index.search("axolotl", min_score=0).results] == ["memory/nul.md"]
    assert index.sync().warnings == []


def test_an_index_made_before_skips_were_recorded_learns_them_by_one_read(workspace, make_config, open_index):
    """An index from before the sync recorded its skips has files without chunks and no word of why: each is
    read once (a blank note, a binary one), so that binary one is said from then on; the others stay quiet."""
    ws = workspace({"MEMORY.md": "The kestrel nests on the roof.\n", "memory/blank.md": "  \n\n"})
    (ws / "memory/nul.md").write_bytes(b"\x00\x01 blob\n")
    index = open_index(make_config(ws), embedder=None)
    index.sync()
    with index.store.transaction():
        index.store.conn.execute("DELETE FROM meta WHERE key = 'skipped_files'")  # as such an index has it
    binary = ["skipped memory/nul.md: binary content (NUL bytes)"]
    first = index.sync()
    assert (first.unchanged, first.skipped, first.chunksWritten, first.warnings) == (2, 1, 0, binary)
    assert (index.sync().unchanged, index.sync().warnings) == (2, binary)


def test_empty_and_blank_files_have_no_chunks(workspace, make_config, open_index, counting_embedder):
    ws = workspace({"MEMORY.md": "", "memory/blank.md": "\n\n   \n", "memory/real.md": "content\n"})
    index = open_index(make_config(ws), embedder=counting_embedder)
    report = index.sync()
    assert report.added == 3
    assert [r[0] for r in index.store.conn.execute("SELECT path FROM chunks")] == ["memory/real.md"]
    assert counting_embedder.documents == ["content"]


def test_file_that_turns_binary_loses_its_old_chunks(workspace, make_config, open_index):
    ws = workspace({"memory/a.md": "Zanzibar trip planning.\n", "memory/b.md": "other\n"})
    index = open_index(make_config(ws), embedder=None)
    index.sync()
    (ws / "memory/a.md").write_bytes(b"\x00\x01 now a binary blob")
    report = index.sync()
    assert any("memory/a.md" in w and "binary" in w for w in report.warnings)
    assert index.search("Zanzibar").results == []
    assert report.skipped == 1 and "memory/a.md" in index.store.file_rows()
    assert index.store.conn.execute("SELECT count(*) FROM chunks WHERE path = 'memory/a.md'").fetchone()[0] == 0


def test_renamed_file_is_served_from_the_cache(workspace, make_config, open_index, counting_embedder):
    ws = workspace({"memory/old-name.md": "Notes on the kitchen renovation budget.\n"})
    index = open_index(make_config(ws), embedder=counting_embedder)
    index.sync()
    counting_embedder.documents.clear()
    (ws / "memory/old-name.md").rename(ws / "memory/new-name.md")
    report = index.sync()
    assert (report.added, report.removed, report.chunksEmbedded) == (1, 1, 0)
    assert counting_embedder.documents == []
    assert [h.path for h in index.search("kitchen renovation").results] == ["memory/new-name.md"]


def test_a_stray_nul_in_a_text_note_loses_only_itself(workspace, make_config, open_index):
    """A note that is UTF-8 but for a stray NUL (an editor's or a crash's leftover) was skipped whole as binary:
    none of its lines could be found. Now the NUL reads as U+FFFD, its line is named, and the note is searched
    and read as the file holds it; a file with many control bytes is still binary."""
    ws = workspace({"MEMORY.md": "The kestrel nests on the roof.\n"})
    (ws / "memory").mkdir()
    note = "The axolotl eats worms every morning.\n" * 4 + "A\x00stray byte here.\n" + "Feed it at noon.\n" * 3
    (ws / "memory/stray.md").write_bytes(note.encode())
    (ws / "memory/blob.md").write_bytes(b"The axolotl\n\x00\x01\x02\x03 blob\n")
    index = open_index(make_config(ws), embedder=None)
    report = index.sync()
    assert (report.added, report.skipped) == (2, 1)
    assert sorted(report.warnings) == [
        "memory/stray.md: NUL bytes on line 5, replaced with U+FFFD",
        "skipped memory/blob.md: binary content (NUL bytes)",
    ]
    assert [h.path for h in index.search("axolotl", min_score=0).results] == ["memory/stray.md"]
    assert index.get("memory/stray.md", 5, 1)["text"] == "A\ufffdstray byte here."


def test_a_same_size_rewrite_within_the_timestamp_tick_is_not_missed(workspace, make_config, open_index):
    """Size and mtime decide what a sync reads. A note rewritten with the same size within the file system's
    timestamp tick of the sync that read it (ext4: milliseconds; FAT: 2 s) kept its recorded stat, and the old
    text was served until the next edit. Such a racily clean file is read again by the next sync; once its
    mtime is older than the scan, size and mtime are trusted again."""
    ws = workspace({"MEMORY.md": "The heron fishes at dawn.\n"})
    note = ws / "MEMORY.md"
    stamp = note.stat().st_mtime_ns
    index = open_index(make_config(ws), embedder=None)
    assert index.sync().added == 1
    note.write_text("The otter fishes at dawn.\n")  # the same size
    os.utime(note, ns=(stamp, stamp))  # within the same tick: the stat is as recorded
    second = index.sync()
    assert (second.changed, second.unchanged) == (1, 0)
    assert [h.path for h in index.search("otter", min_score=0).results] == ["MEMORY.md"]
    assert index.status()["dirty"] is False  # racily clean is not dirty: status and search judge by stat
    old = time.time() - 60
    os.utime(note, (old, old))  # an mtime well before the scan that read it
    index.sync()
    assert (index.sync().unchanged, index.sync().changed) == (1, 0)
    with index.store.transaction():
        index.store.conn.execute("UPDATE files SET hash = 'stale'")  # a read would see the hash differ
    assert index.sync().changed == 0  # trusted by stat: not read
