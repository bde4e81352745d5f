"""`get` (core/get.py through MemoryIndex.get): exact line ranges of memory files, and refusals."""

from __future__ import annotations

import pytest

from core import GetError

TEXT = "".join(f"line {i}\n" for i in range(1, 11))  # ten lines


@pytest.fixture
def index(workspace, make_config, open_index):
    outside = workspace({"secret.md": "outside secret\n", "dir/x.md": "outside dir\n"}, name="outside")
    ws = workspace(
        {
            "MEMORY.md": "root one\nroot two\n",
            "memory/2026-05-14.md": TEXT,
            "memory/crlf.md": "a\r\nb\r\nc\r\n",
            "notes.txt": "not memory\n",
            "src/x.md": "not memory either\n",
            "memory/.git/x.md": "excluded\n",
            "memory/.trash/2024-01-01.md": "hidden\n",
            "memory/.draft.md": "hidden\n",
            "extra/e.md": "extra line\n",
        }
    )
    (ws / "memory/link.md").symlink_to(ws / "memory/2026-05-14.md")
    (ws / "memory/secret.md").symlink_to(outside / "secret.md")
    (ws / "memory/linkdir").symlink_to(outside / "dir", target_is_directory=True)
    (ws / "extra/linked.md").symlink_to(outside / "secret.md")
    return open_index(make_config(ws, extraPaths=["extra"]), embedder=None)


def refused(index, path: str, **kw) -> int:
    with pytest.raises(GetError) as info:
        index.get(path, **kw)
    return info.value.status


def test_whole_file(index):
    doc = index.get("memory/2026-05-14.md")
    assert doc == {"path": "memory/2026-05-14.md", "from": 1, "lines": 10, "text": TEXT.rstrip("\n"), "totalLines": 10}


def test_exact_line_slice(index):
    doc = index.get("memory/2026-05-14.md", start=3, count=4)
    assert doc["text"] == "line 3\nline 4\nline 5\nline 6"
    assert (doc["from"], doc["lines"], doc["totalLines"]) == (3, 4, 10)


def test_slice_running_past_the_end_is_cut(index):
    doc = index.get("memory/2026-05-14.md", start=9, count=5)
    assert (doc["text"], doc["lines"], doc["totalLines"]) == ("line 9\nline 10", 2, 10)


def test_from_past_the_end_is_empty(index):
    doc = index.get("memory/2026-05-14.md", start=11)
    assert (doc["text"], doc["lines"], doc["totalLines"]) == ("", 0, 10)
    assert index.get("MEMORY.md", start=50, count=3)["text"] == ""


def test_zero_lines_is_empty(index):
    assert index.get("MEMORY.md", start=1, count=0)["text"] == ""


def test_crlf_file_lines_have_no_carriage_return(index):
    doc = index.get("memory/crlf.md", start=2, count=1)
    assert (doc["text"], doc["totalLines"]) == ("b", 3)


def test_a_file_of_lone_carriage_returns_is_read_line_by_line(workspace, make_config, open_index):
    """An old Mac file (CR only) read as one line: its hit spanned line 1 and `get` of line 2 was empty. Its
    lines are what an editor shows, in the hit, in `get`, and in the lines a bad byte is said to be on."""
    ws = workspace({"MEMORY.md": "clean\n"})
    (ws / "memory").mkdir()
    (ws / "memory/oldmac.md").write_bytes(b"# Old Mac\r- caf\xe9 with the okapi\r- second\r- na\xefve okapi\r")
    index = open_index(make_config(ws), embedder=None)
    assert "memory/oldmac.md: invalid UTF-8 on lines 2, 4, bad bytes replaced with U+FFFD" in index.sync().warnings
    [hit] = [h for h in index.search("okapi", min_score=0).results if h.path == "memory/oldmac.md"]
    assert (hit.startLine, hit.endLine) == (1, 4)
    doc = index.get("memory/oldmac.md", start=3, count=1)
    assert (doc["text"], doc["totalLines"]) == ("- second", 4)


def test_extra_path_file_is_readable(index):
    assert index.get("extra/e.md")["text"] == "extra line"


def test_extra_path_inside_an_excluded_folder_is_readable(workspace, make_config, open_index):
    ws = workspace({"node_modules/docs/d.md": "vendored docs\n"})
    index = open_index(make_config(ws, extraPaths=["node_modules/docs"]), embedder=None)
    [hit] = index.search("vendored").results
    assert index.get(hit.path)["text"] == "vendored docs"


def test_missing_memory_file_is_empty(index):
    assert index.get("memory/2030-01-01.md") == {
        "path": "memory/2030-01-01.md",
        "from": 1,
        "lines": 0,
        "text": "",
        "totalLines": 0,
    }
    assert index.get("memory/new/folder/note.md")["text"] == ""


def test_missing_file_under_a_file_is_empty_not_a_crash(index):
    # memory/2026-05-14.md is a file, so this path cannot exist (lstat raises NotADirectoryError).
    assert index.get("memory/2026-05-14.md/x.md")["text"] == ""


@pytest.mark.parametrize(
    "path",
    [
        "../outside/secret.md",
        "memory/../../outside/secret.md",
        "memory/../MEMORY.md",
        "memory/./2026-05-14.md",
        ".//MEMORY.md",
        "./../outside/secret.md",
        "memory//2026-05-14.md",
    ],
)
def test_dot_components_are_refused(index, path):
    assert refused(index, path) == 403


def test_a_leading_dot_slash_is_the_workspace(index):
    """`memsift get ./MEMORY.md`, as a shell completes a path, reads MEMORY.md and answers its own path."""
    answer = index.get("././MEMORY.md", 1, 1)
    assert answer["path"] == "MEMORY.md" and answer == index.get("MEMORY.md", 1, 1) and answer["lines"] == 1


def test_absolute_paths_are_refused(index):
    ws = index.config.workspace
    assert refused(index, str(ws / "MEMORY.md")) == 403  # absolute, even inside the workspace
    assert refused(index, str(ws.parent / "outside" / "secret.md")) == 403
    assert refused(index, "/etc/passwd") == 403
    assert refused(index, "~/MEMORY.md") == 403
    assert refused(index, "C:/MEMORY.md") == 403


def test_backslash_path_is_refused(index):
    assert refused(index, "memory\\2026-05-14.md") == 403
    assert refused(index, "..\\outside\\secret.md") == 403


def test_symlinked_memory_file_is_refused(index):
    assert refused(index, "memory/link.md") == 403
    assert refused(index, "memory/secret.md") == 403
    assert refused(index, "extra/linked.md") == 403


def test_symlinked_memory_folder_is_refused(index):
    assert refused(index, "memory/linkdir/x.md") == 403


def test_non_memory_files_are_refused(index):
    for path in ("notes.txt", "src/x.md", "memory/.git/x.md", "memory/notes.txt", "memory", "README.md"):
        assert refused(index, path) == 403, path


def test_hidden_files_are_refused(index):
    """Not indexed (`memory/**/*.md` matches no hidden name), so not read: `get` read a trashed note."""
    for path in ("memory/.trash/2024-01-01.md", "memory/.draft.md"):
        assert refused(index, path) == 403, path


def test_nul_and_blank_are_bad_requests(index):
    assert refused(index, "MEMORY.md\x00.txt") == 400
    assert refused(index, "memory/\x00") == 400
    assert refused(index, "  ") == 400


def test_bad_line_numbers_are_bad_requests(index):
    assert refused(index, "MEMORY.md", start=0) == 400
    assert refused(index, "MEMORY.md", count=-1) == 400


def test_a_memory_folder_named_like_a_file_is_refused(workspace, make_config, open_index):
    ws = workspace({"memory/dir.md/inner.md": "x\n"})
    index = open_index(make_config(ws), embedder=None)
    assert refused(index, "memory/dir.md") == 403


def test_binary_memory_file_is_refused_not_dumped(workspace, make_config, open_index):
    ws = workspace({})
    (ws / "memory").mkdir()
    (ws / "memory/blob.md").write_bytes(b"\x00\x01\x02binary")
    index = open_index(make_config(ws), embedder=None)
    assert refused(index, "memory/blob.md") == 422


def test_invalid_utf8_reads_as_indexed_and_says_so(workspace, make_config, open_index):
    """A note with Latin-1 bytes in it read back with U+FFFD and nothing saying so: the answer's `warning` names
    the lines, in the words of the sync's warning for the same file; a clean file has no `warning`."""
    ws = workspace({"MEMORY.md": "clean\n"})
    (ws / "memory").mkdir()
    (ws / "memory/latin1.md").write_bytes(b"# Notes\ncaf\xe9 au lait\nfine\nna\xefve\n")
    index = open_index(make_config(ws), embedder=None)
    doc = index.get("memory/latin1.md", start=2, count=1)
    assert doc["text"] == "caf\ufffd au lait"
    assert doc["warning"] == "invalid UTF-8 on lines 2, 4, bad bytes replaced with U+FFFD"
    assert f"memory/latin1.md: {doc['warning']}" in index.sync().warnings  # what indexing said about it
    assert "warning" not in index.get("MEMORY.md")


def test_a_name_given_in_another_unicode_normal_form_reads_the_file_search_cites(workspace, make_config, open_index):
    """Linux keeps names byte for byte: `memory/café.md` typed in NFD (e + U+0301, as macOS or a keyboard may
    give it) for a file named in NFC read as a missing file, empty text in silence. Both forms, in a folder
    name too, find the file, and the answer names it as search cites it."""
    nfc, nfd = "caf\u00e9", "cafe\u0301"
    ws = workspace({f"memory/{nfc}.md": "- The croissant order is due Friday.\n", f"memory/{nfd}/x.md": "- Ok.\n"})
    index = open_index(make_config(ws), embedder=None)
    index.sync()
    [hit] = index.search("croissant", min_score=0).results
    assert hit.path == f"memory/{nfc}.md"
    for asked in (f"memory/{nfd}.md", f"memory/{nfc}.md"):
        doc = index.get(asked)
        assert (doc["path"], doc["text"]) == (hit.path, "- The croissant order is due Friday."), asked
    assert index.get(f"memory/{nfc}/x.md")["path"] == f"memory/{nfd}/x.md"
    assert index.get("memory/cafe.md")["totalLines"] == 0  # no accent at all: another name, a missing file


def test_a_path_prefix_in_another_unicode_normal_form_finds_the_files(workspace, make_config, open_index):
    """`pathPrefix` as `get` takes a path: `memory/café` typed as NFD found nothing under an NFC folder."""
    nfc, nfd = "caf\u00e9", "cafe\u0301"
    ws = workspace({f"memory/{nfc}/menu.md": "- The croissant order is due Friday.\n", "MEMORY.md": "- croissant\n"})
    index = open_index(make_config(ws), embedder=None)
    index.sync()
    for prefix in (f"memory/{nfd}", f"memory/{nfc}/"):
        hits = index.search("croissant", min_score=0, path_prefix=prefix).results
        assert [h.path for h in hits] == [f"memory/{nfc}/menu.md"], prefix
