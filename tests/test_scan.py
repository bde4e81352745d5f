"""Discovery of memory files (core/sources/memory.py): which files a sync sees, and which it never reads."""

from __future__ import annotations

import json
import os
import re

import pytest

from core.config import ConfigError, load_config
from core.sources.memory import MemorySource, external_roots, is_memory_path, scan, scan_external


def paths(config) -> list[str]:
    return [f.path for f in scan(config).files]


def test_root_files_and_recursive_memory_folder(workspace, make_config):
    ws = workspace(
        {
            "MEMORY.md": "root upper",
            "memory.md": "root lower",
            "memory/2026-05-14.md": "daily",
            "memory/people/dana.md": "nested",
            "memory/deep/er/still.md": "deeper",
            "memory/notes.txt": "not markdown",
            "memory/image.png": "binary-ish",
            "README.md": "not memory",
            "src/x.md": "not memory either",
        }
    )
    if not (ws / "memory.md").exists() or (ws / "MEMORY.md").samefile(ws / "memory.md"):
        expected_root = ["MEMORY.md"]  # a case-insensitive file system holds one of the two
    else:
        expected_root = ["MEMORY.md", "memory.md"]
    assert paths(make_config(ws)) == sorted(
        expected_root + ["memory/2026-05-14.md", "memory/deep/er/still.md", "memory/people/dana.md"]
    )


def test_entries_carry_stat_and_relative_slash_paths(workspace, make_config):
    ws = workspace({"memory/a/b.md": "twelve bytes"})
    [entry] = scan(make_config(ws)).files
    st = (ws / "memory/a/b.md").stat()
    assert (entry.path, entry.size, entry.mtime_ns) == ("memory/a/b.md", st.st_size, st.st_mtime_ns)
    assert not os.path.isabs(entry.path) and "\\" not in entry.path


def test_symlinks_are_never_followed(workspace, make_config, tmp_path):
    outside = workspace({"secret.md": "outside the workspace"}, name="outside")
    ws = workspace({"memory/real.md": "real", "memory/sub/inner.md": "inner"})
    (ws / "memory/link.md").symlink_to(ws / "memory/real.md")
    (ws / "memory/passwd.md").symlink_to("/etc/passwd")
    (ws / "memory/outdir").symlink_to(outside, target_is_directory=True)
    (ws / "memory/loop").symlink_to(ws / "memory", target_is_directory=True)
    (ws / "memory/sub/self").symlink_to("..", target_is_directory=True)
    (ws / "memory/dangling.md").symlink_to(ws / "nowhere.md")
    (ws / "MEMORY.md").symlink_to(outside / "secret.md")
    result = scan(make_config(ws))
    assert [f.path for f in result.files] == ["memory/real.md", "memory/sub/inner.md"]


def test_symlinked_memory_folder_is_not_walked(workspace, make_config):
    outside = workspace({"notes/a.md": "outside"}, name="outside")
    ws = workspace({"MEMORY.md": "root"})
    (ws / "memory").symlink_to(outside / "notes", target_is_directory=True)
    assert paths(make_config(ws)) == ["MEMORY.md"]


def test_excluded_folder_names_are_skipped(workspace, make_config):
    files = {
        "memory/keep.md": "k",
        "memory/.git/x.md": "g",
        "memory/node_modules/pkg/y.md": "n",
        "memory/a/__pycache__/z.md": "p",
        "memory/archive/old.md": "a",
    }
    ws = workspace(files)
    assert paths(make_config(ws)) == ["memory/archive/old.md", "memory/keep.md"]
    assert paths(make_config(ws, exclude=["archive"])) == [  # .git stays out: hidden (below)
        "memory/a/__pycache__/z.md",
        "memory/keep.md",
        "memory/node_modules/pkg/y.md",
    ]


@pytest.mark.parametrize(
    "entry, hint",
    [
        ("memory/private", "'private'"),  # a path
        ("private/", "'private'"),
        ("drafts/**", "'drafts'"),  # glob patterns, as .gitignore writes them
        ("**/private", "'private'"),
        ("*.tmp.md", None),
    ],
)
def test_an_exclude_entry_that_is_no_folder_name_is_refused(workspace, entry, hint):
    """`exclude` holds folder names, matched against each folder's name: a path or a glob pattern never matched
    one, and the notes the user meant to keep out (`memory/private/`) were indexed and served in silence."""
    ws = workspace({"MEMORY.md": "root", "memory/private/p.md": "the safe code is 4711", "memory/x.tmp.md": "x"})
    (ws / "memsift.toml").write_text(f"exclude = [{json.dumps(entry)}]\n", encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        load_config(workspace=ws)
    message = str(err.value)
    assert "exclude:" in message and repr(entry) in message and "folder name" in message
    assert hint is None or f"write {hint}" in message
    with pytest.raises(
        ConfigError, match=r"MEMSIFT_EXCLUDE \(exclude\): .* is not a folder name"
    ):  # the environment's list is read by the same rule
        load_config(workspace=ws / "memory", env={"MEMSIFT_EXCLUDE": f"node_modules,{entry}"})
    (ws / "memsift.toml").write_text('exclude = ["private"]\n', encoding="utf-8")
    assert paths(load_config(workspace=ws)) == ["MEMORY.md", "memory/x.tmp.md"]


def test_hidden_files_and_folders_are_skipped(workspace, make_config):
    """`memory/**/*.md` matches no hidden name, as the glob does not: an Obsidian vault's `.obsidian/` and
    `.trash/`, a draft `.x.md` and macOS's `._x.md` were indexed, found by search and read by `get`. The same
    below an `extraPaths` folder, inside the workspace or out; an entry the user names is walked, hidden or not."""
    hidden = {".obsidian/x.md": "h", ".trash/2024-01-01.md": "h", ".draft.md": "h", "._a.md": "h", "a/.b/c.md": "h"}
    workspace({"notes/a.md": "a", **{f"notes/{k}": v for k, v in hidden.items()}}, name="outside")
    files = {
        "memory/a.md": "a",
        ".notes/a.md": "a",
        **{f"{d}/{k}": v for d in ("memory", ".notes") for k, v in hidden.items()},
    }
    ws = workspace(files)
    (ws / "memory" / ".#a.md").symlink_to("user@host.1234")  # an editor's lock: not even a warning
    config = make_config(ws, extraPaths=[".notes", "../outside/notes", ".notes/.draft.md"])
    result = scan(config)
    assert [f.path for f in result.files] == [".notes/.draft.md", ".notes/a.md", "memory/a.md"]
    assert result.warnings == []
    [root] = external_roots(config)
    assert [f.path for f in scan_external(config).files] == [f"{root.prefix}/a.md"]
    for name in hidden:
        for rel in (f"memory/{name}", f".notes/{name}", f"{root.prefix}/{name}"):
            assert not MemorySource(config).owns(rel) or rel == ".notes/.draft.md", rel
    assert is_memory_path(config, ".notes/a.md") and is_memory_path(config, ".notes/.draft.md")


def test_extra_paths_folder_file_missing_and_outside(workspace, make_config):
    workspace({"elsewhere.md": "outside"}, name="outside")
    ws = workspace(
        {
            "notes/a.md": "a",
            "notes/sub/b.md": "b",
            "notes/c.txt": "not md",
            "notes/.git/d.md": "excluded",
            "docs/one.md": "one",
            "docs/two.md": "not listed",
            "docs/plain.txt": "not md",
        }
    )
    config = make_config(
        ws, extraPaths=["notes", "docs/one.md", "missing", "../outside/elsewhere.md", "../outside", "docs/plain.txt"]
    )
    result = scan(config)
    assert [f.path for f in result.files] == ["docs/one.md", "notes/a.md", "notes/sub/b.md"]
    warnings = "\n".join(result.warnings)
    assert "'missing'" in warnings and "does not exist" in warnings
    assert "'docs/plain.txt'" in warnings
    assert len(result.warnings) == 2
    # the entries outside the workspace are indexed under extra/<h>/, a file two entries reach under the first
    found = scan_external(config)
    external, problems = found.files, found.warnings
    [file_root, folder_root] = external_roots(config)
    assert file_root.path == (ws.parent / "outside" / "elsewhere.md") and folder_root.path == ws.parent / "outside"
    assert [f.path for f in external] == [f"{file_root.prefix}/elsewhere.md"]
    assert re.fullmatch(r"extra/[0-9a-f]{8}", file_root.prefix) and file_root.prefix != folder_root.prefix
    assert problems == []


def test_extra_path_through_a_symlink_is_skipped_with_a_warning(workspace, make_config):
    outside = workspace({"notes/a.md": "outside"}, name="outside")
    ws = workspace({"MEMORY.md": "root"})
    (ws / "linked").symlink_to(outside / "notes", target_is_directory=True)
    result = scan(make_config(ws, extraPaths=["linked", "linked/a.md"]))
    assert [f.path for f in result.files] == ["MEMORY.md"]
    assert len(result.warnings) == 2 and all("symlink" in w for w in result.warnings)


def test_extra_path_whose_name_starts_with_two_dots_is_inside(workspace, make_config):
    # "..notes" is a folder inside the workspace, not a way out of it.
    ws = workspace({"..notes/a.md": "dotted"})
    result = scan(make_config(ws, extraPaths=["..notes"]))
    assert [f.path for f in result.files] == ["..notes/a.md"]
    assert result.warnings == []


def test_hard_link_is_listed_once(workspace, make_config):
    ws = workspace({"memory/a.md": "same inode", "notes/other.md": "x"})
    os.link(ws / "memory/a.md", ws / "memory/b.md")
    os.link(ws / "memory/a.md", ws / "notes/c.md")
    found = paths(make_config(ws, extraPaths=["notes"]))
    linked = [p for p in found if p in ("memory/a.md", "memory/b.md", "notes/c.md")]
    assert len(linked) == 1
    assert "notes/other.md" in found


def test_a_file_two_extra_paths_reach_is_indexed_once(workspace, make_config):
    """Outside the workspace each entry listed its files: `~/notes` with `~/notes/a.md`, or the same folder
    written with and without a trailing slash, indexed a note twice, and a search answered it twice (two of
    its 6 hits). An entry that holds the workspace listed the workspace's files a second time."""
    outside = workspace({"notes/a.md": "a", "notes/sub/b.md": "b"}, name="outside")
    ws = workspace({"MEMORY.md": "root", "memory/2026-01-02.md": "daily"})
    entries = [str(outside / "notes" / "a.md"), str(outside / "notes"), f"{outside / 'notes'}/", "..", "../outside"]
    files, warnings, _ = MemorySource(make_config(ws, extraPaths=entries)).discover()
    named = {f.path.rsplit("/", 1)[-1]: f.path for f in files}
    assert len(files) == len(named) == 4, [f.path for f in files]
    assert named["MEMORY.md"] == "MEMORY.md" and named["2026-01-02.md"] == "memory/2026-01-02.md"
    [file_root, *_] = external_roots(make_config(ws, extraPaths=entries))
    assert named["a.md"] == f"{file_root.prefix}/a.md"  # the first entry that reaches it names it
    assert warnings == []


def test_extra_path_overlapping_memory_folder_is_not_duplicated(workspace, make_config):
    ws = workspace({"memory/a.md": "a", "memory/sub/b.md": "b"})
    assert paths(make_config(ws, extraPaths=["memory/sub", "memory/a.md"])) == ["memory/a.md", "memory/sub/b.md"]


def test_a_symlink_two_overlapping_entries_walk_is_one_warning(workspace, make_config, tmp_path):
    """`extraPaths = ["docs", "docs/sub"]` walked docs/sub twice and said "skipped 'docs/sub/link'" twice."""
    ws = workspace({"MEMORY.md": "root", "memory/sub/a.md": "a", "docs/sub/b.md": "b"})
    (ws / "docs/sub/link").symlink_to(tmp_path, target_is_directory=True)
    (ws / "memory/sub/link.md").symlink_to(ws / "memory/sub/a.md")
    config = make_config(ws, extraPaths=["docs", "docs/sub", "memory/sub", "../" + ws.name])
    files, warnings, _ = MemorySource(config).discover()
    assert [f.path for f in files] == ["MEMORY.md", "docs/sub/b.md", "memory/sub/a.md"]
    assert len(warnings) == len(set(warnings)) == 2, warnings  # '../<ws>' is the workspace: a third walk
    assert sum("'docs/sub/link'" in w for w in warnings) == 1


def test_is_memory_path_follows_the_discovery_rules(workspace, make_config):
    config = make_config(workspace({}), extraPaths=["notes", "docs/one.md"])
    for yes in ("MEMORY.md", "memory.md", "memory/x.md", "memory/a/b/c.md", "notes/n.md", "docs/one.md"):
        assert is_memory_path(config, yes), yes
    for no in ("README.md", "memory/x.txt", "memory/.git/x.md", "src/x.md", "docs/two.md", "Memory.md", "memory"):
        assert not is_memory_path(config, no), no


def test_every_scanned_file_passes_is_memory_path(workspace, make_config):
    # What search returns, get must be willing to read: both follow the same rules, exclude included.
    ws = workspace(
        {
            "MEMORY.md": "r",
            "memory/a.md": "a",
            "memory/archive/b.md": "b",
            "node_modules/docs/c.md": "vendored docs, listed explicitly",
            "node_modules/docs/.git/d.md": "excluded below the listed folder",
            "vendor/one.md": "single file in an excluded folder",
        }
    )
    config = make_config(
        ws, extraPaths=["node_modules/docs", "vendor/one.md"], exclude=["node_modules", "vendor", ".git", "archive"]
    )
    found = paths(config)
    assert found == ["MEMORY.md", "memory/a.md", "node_modules/docs/c.md", "vendor/one.md"]
    assert all(is_memory_path(config, p) for p in found)
    assert not is_memory_path(config, "node_modules/docs/.git/d.md")
    assert not is_memory_path(config, "memory/archive/b.md")


def test_a_name_with_a_backslash_is_skipped_with_a_warning(workspace, make_config):
    """`get` refuses a path with a backslash (a way out on Windows), so such a file, legal on Linux and macOS,
    was found by search under a path its citation could not be read by: skipped and said, as a name that is
    not UTF-8 is. Outside the workspace too."""
    outside = workspace({"notes/a\\b.md": "outside", "notes/ok.md": "fine"}, name="outside")
    ws = workspace({"memory/a\\b.md": "back", "memory/c\\d/e.md": "folder", "memory/ok.md": "fine"})
    result = scan(make_config(ws))
    assert [f.path for f in result.files] == ["memory/ok.md"]
    assert len(result.warnings) == 2 and all("backslash" in w for w in result.warnings), result.warnings
    entries = [str(outside / "notes"), str(outside / "notes" / "a\\b.md")]
    found = scan_external(make_config(ws, extraPaths=entries))
    external, warnings = found.files, found.warnings
    assert [f.path.rsplit("/", 1)[1] for f in external] == ["ok.md"]
    assert len(warnings) == 2 and all("backslash" in w for w in warnings), warnings
