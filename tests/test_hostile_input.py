"""Hostile and broken input: files no one should have to index, and queries no one should have to parse.

Each file is indexed sensibly or skipped with a warning that names it; nothing is read from outside the
workspace (the index file's bytes are searched for the outside text); every query is plain text.
"""

from __future__ import annotations

import codecs
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from index_checks import content, integrity

from core import GetError
from core.sources.base import MAX_FILE_BYTES

OUTSIDE_SECRET = "kestrel-outside-7f3a9c"
DEEP = "memory/" + "d/" * 300 + "deep.md"  # deeper trees break shutil.rmtree (and pytest cleanup) on 3.11
NEWLINE_NAME = "memory/line\nbreak.md"
ODD_NAME = "memory/r\u202eversed \u200bzero 名前 e\u0301 🦉.md"


def index_bytes(db: Path) -> bytes:
    """The index file with its WAL: everything a reader of the disk would see."""
    return b"".join(p.read_bytes() for p in db.parent.iterdir() if p.name.startswith(db.name) and p.is_file())


@pytest.fixture
def hostile(workspace, tmp_path: Path) -> Path:
    outside = workspace({"secret.md": f"- {OUTSIDE_SECRET}\n", "dir/inner.md": f"- {OUTSIDE_SECRET}\n"}, name="out")
    ws = workspace(
        {
            "MEMORY.md": "# Memory\n- An ordinary note about the ordinary wombat.\n",
            "memory/crlf.md": "# Windows\r\n- The quetzal line ends in CRLF.\r\n",
            NEWLINE_NAME: "- A file named with a newline mentions the narwhal.\n",
            ODD_NAME: "- Bidi, zero-width and combining marks in the name; the axolotl note.\n",
        }
    )
    memory = ws / "memory"
    folder = str(memory)
    for _ in range(DEEP.count("/") - 1):  # pathlib and os.makedirs recurse once per folder
        folder += "/d"
        os.mkdir(folder)
    (ws / DEEP).write_text("- The bathyscaphe note sits three hundred folders down.\n")
    (memory / "binary.md").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)))
    (memory / "latin1.md").write_bytes("- Caf\u00e9 au lait for the zanzibar team.\n".encode("latin-1"))
    (memory / "utf16.md").write_bytes(codecs.BOM_UTF16_LE + "- A UTF-16 note about the quokka.\n".encode("utf-16-le"))
    with open(memory / "huge.md", "wb") as fh:  # one 50 MB line
        fh.write(b"x" * (50 * 1024 * 1024))
    (memory / "loop").symlink_to(memory, target_is_directory=True)
    (memory / "a.md").symlink_to(memory / "b.md")
    (memory / "b.md").symlink_to(memory / "a.md")
    (memory / "passwd.md").symlink_to("/etc/passwd")
    (memory / "outside.md").symlink_to(outside / "secret.md")
    (memory / "outdir").symlink_to(outside / "dir", target_is_directory=True)
    os.mkfifo(memory / "fifo.md")  # a read would block forever
    (memory / os.fsdecode(b"bad-\xff\xfe.md")).write_text("- A name that is not UTF-8.\n")
    return ws


def test_each_hostile_file_is_indexed_sensibly_or_skipped_with_a_warning_naming_it(
    hostile: Path, make_config, open_index
) -> None:
    config = make_config(hostile)
    index = open_index(config)
    report = index.sync()
    warnings = "\n".join(report.warnings)

    indexed = {path for path, _ in content(config.db_path)[1]}
    assert indexed == {
        "MEMORY.md",
        "memory/crlf.md",
        DEEP,
        NEWLINE_NAME,
        ODD_NAME,
        "memory/latin1.md",
        "memory/utf16.md",
        "memory/binary.md",  # recorded without chunks, so the next sync does not read it again
        "memory/huge.md",
    }
    assert "skipped memory/binary.md: binary content" in warnings
    assert "memory/latin1.md: invalid UTF-8" in warnings
    assert f"skipped memory/huge.md: larger than {MAX_FILE_BYTES // (1024 * 1024)} MiB" in warnings
    for name in ("loop", "a.md", "b.md", "passwd.md", "outside.md", "outdir"):
        assert f"skipped 'memory/{name}': a symlink" in warnings
    assert "skipped 'memory/fifo.md': not a regular file" in warnings
    assert "skipped 'memory/bad-\\udcff\\udcfe.md': the file name is not valid UTF-8" in warnings

    def top(query: str) -> dict[str, Any]:
        return index.search(query, min_score=0).to_dict()["results"][0]

    assert top("zanzibar team café")["path"] == "memory/latin1.md"
    assert top("UTF-16 quokka")["path"] == "memory/utf16.md"
    crlf = top("quetzal CRLF")
    assert crlf["path"] == "memory/crlf.md" and "\r" not in crlf["snippet"]
    assert top("bathyscaphe hundred folders")["path"] == DEEP
    assert top("newline narwhal")["path"] == NEWLINE_NAME
    assert top("axolotl combining marks")["path"] == ODD_NAME
    assert index.get(NEWLINE_NAME)["text"] == "- A file named with a newline mentions the narwhal."
    assert index.get("memory/crlf.md")["text"] == "# Windows\n- The quetzal line ends in CRLF."
    assert index.get(ODD_NAME)["totalLines"] == 1

    stored = index_bytes(config.db_path)
    assert OUTSIDE_SECRET.encode() not in stored
    assert Path("/etc/passwd").read_bytes().split(b"\n")[0] not in stored
    assert integrity(config.db_path) == ["ok"]
    again = index.sync()
    assert again.chunksWritten == 0 and again.unchanged == len(indexed) - 2  # nothing read twice, nothing lost
    assert again.skipped == 2 and {w for w in again.warnings if not w.startswith("skipped '")} == {
        "skipped memory/binary.md: binary content (NUL bytes)",  # still in no search: said again, not read again
        f"skipped memory/huge.md: larger than {MAX_FILE_BYTES // (1024 * 1024)} MiB",
    }


@pytest.mark.parametrize(
    ("path", "status"),
    [
        ("memory/passwd.md", 403),
        ("memory/outside.md", 403),
        ("memory/outdir/inner.md", 403),
        ("memory/fifo.md", 403),
        ("memory/loop/loop/a.md", 403),
        ("memory/binary.md", 422),
    ],
)
def test_get_refuses_what_the_sync_skipped(hostile: Path, make_config, open_index, path: str, status: int) -> None:
    with pytest.raises(GetError) as refused:
        open_index(make_config(hostile)).get(path)
    assert refused.value.status == status
    assert OUTSIDE_SECRET not in str(refused.value) and "root:" not in str(refused.value)


def between_scan_and_read(action: Callable[[], None]) -> Callable[[str, Callable[..., Any]], Callable[..., Any]]:
    """A sync stage hook that runs `action` before each batch reads its files: after the scan saw them."""

    def stage(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        if name != "index-batch":
            return fn

        def run(*args: Any) -> Any:
            action()
            return fn(*args)

        return run

    return stage


def test_a_file_deleted_between_scan_and_read_is_skipped_with_a_warning(workspace, make_config, open_index) -> None:
    ws = workspace({"MEMORY.md": "- The stable note about herons.\n", "memory/gone.md": "- First version.\n"})
    index = open_index(make_config(ws))
    index.sync()
    (ws / "memory/gone.md").write_text("- Second version, longer than the first.\n")
    (ws / "memory/new.md").write_text("- A note that vanishes before it is read.\n")

    def delete() -> None:
        for name in ("gone.md", "new.md"):
            (ws / "memory" / name).unlink(missing_ok=True)

    report = index.sync(stage=between_scan_and_read(delete))
    assert "skipped memory/gone.md: No such file or directory" in report.warnings
    assert "skipped memory/new.md: No such file or directory" in report.warnings
    assert report.skipped == 2  # `memsift index` printed "0 skipped" (nothing) beside these warnings
    assert index.search("stable herons").results[0].path == "MEMORY.md"
    report = index.sync()  # the next sync sees the deletions
    assert report.removed == 1
    assert [path for path, _ in content(index.config.db_path)[1]] == ["MEMORY.md"]


def test_a_file_swapped_for_a_fifo_between_scan_and_read_is_skipped_not_waited_on(
    workspace, make_config, open_index
) -> None:
    """Opening a FIFO for reading blocks until a writer comes: a sync (or a watcher's, in `serve`) must not
    hang there holding the writer lock, which would make every later sync time out."""
    ws = workspace({"MEMORY.md": "- The stable note about herons.\n", "memory/pipe.md": "- First version.\n"})
    index = open_index(make_config(ws, **{"embedding.provider": "none"}))
    index.sync()
    fifo = ws / "memory/pipe.md"
    fifo.write_text("- Second version, longer than the first.\n")

    def swap() -> None:
        fifo.unlink()
        os.mkfifo(fifo)

    outcome: list[Any] = []
    run = threading.Thread(target=lambda: outcome.append(index.sync(stage=between_scan_and_read(swap))))
    run.start()
    run.join(timeout=30)  # a bound on a hang, not a synchronisation: an unfixed sync never returns
    if run.is_alive():
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))  # the writer it waits for: the thread goes on
        run.join()
        pytest.fail("the sync blocked opening a FIFO")
    [report] = outcome
    assert "skipped memory/pipe.md: not a regular file" in report.warnings
    assert index.search("stable herons", mode="keyword").results[0].path == "MEMORY.md"


def test_a_file_rewritten_between_scan_and_read_is_indexed_as_read_and_settles(
    workspace, make_config, open_index
) -> None:
    ws = workspace({"memory/r.md": "- Version one about the ibis.\n"})
    index = open_index(make_config(ws))
    index.sync()
    (ws / "memory/r.md").write_text("- Version two about the ibis.\n")

    def rewrite() -> None:
        (ws / "memory/r.md").write_text(
            "- Version three, rewritten while the sync ran, about the ibis and the egret.\n"
        )

    report = index.sync(stage=between_scan_and_read(rewrite))
    assert report.changed == 1
    [hit] = index.search("ibis egret", mode="keyword").results
    assert hit.snippet.startswith("- Version three")
    before = content(index.config.db_path)
    settled = index.sync()  # the stored stat is the scan's: the file is read again, found identical
    assert settled.chunksWritten == 0 and content(index.config.db_path) == before


@pytest.mark.reliability
def test_100000_tiny_files_are_indexed_keyword_only(tmp_path: Path, make_config, open_index) -> None:
    ws = tmp_path / "many"
    for d in range(100):
        folder = ws / "memory" / f"d{d:02d}"
        folder.mkdir(parents=True)
        for i in range(1000):
            fd = os.open(folder / f"n{i:03d}.md", os.O_WRONLY | os.O_CREAT, 0o644)
            os.write(fd, f"- tiny note {d}-{i} word{d}x{i}\n".encode())
            os.close(fd)
    index = open_index(make_config(ws), embedder=None)
    report = index.sync()
    assert report.filesScanned == report.chunksWritten == 100_000 and report.warnings == []
    [hit] = index.search("word42x420", max_results=1).results
    assert hit.path == "memory/d42/n420.md"
    assert index.sync().unchanged == 100_000  # the next sync stats, reads nothing


HOSTILE_QUERIES = [
    "NEAR(wombat ordinary, 2)",
    "wombat AND OR NOT",
    '"unbalanced quote',
    "text:wombat",
    "wom* ^ordinary",
    "'; DROP TABLE chunks; --",
    "SELECT * FROM chunks WHERE 1=1 UNION SELECT sql FROM sqlite_master",
    "null\x00byte wombat",
    "🦉" * 1024,  # 4 KiB of emoji
    "((( ))) {a b} - + : * \" '",
    "chunks_fts MATCH 'x' OR 1=1",
]


@pytest.mark.parametrize("query", HOSTILE_QUERIES)
@pytest.mark.parametrize("mode", ["hybrid", "keyword"])
def test_hostile_queries_are_plain_text(workspace, make_config, open_index, query: str, mode: str) -> None:
    index = open_index(make_config(workspace({"MEMORY.md": "- An ordinary note about the ordinary wombat.\n"})))
    index.sync()
    answer = index.search(query, mode=mode, min_score=0).to_dict()
    assert answer["mode"] == mode and "degraded" not in answer
    if "wombat" in query:
        assert answer["results"][0]["path"] == "MEMORY.md"
    assert index.status()["chunks"] == {"memory": 1}  # nothing was run as SQL


# Root lists any folder: as root, the run drops to an unprivileged user for chmod 000 to mean what it means.
AS_USER = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] if os.geteuid() == 0 else []
#: The code that user runs: the checkout and the environment, which it must be able to reach.
CODE = [Path(__file__).resolve().parent.parent, Path(sys.prefix).resolve()]


def _reachable_by_others(path: Path) -> bool:
    """Whether a user who owns nothing can reach `path`: every folder up to it lets others through (a clone
    under a 0700 folder such as /root, or `mktemp -d`, does not)."""
    return all(folder.stat().st_mode & 0o001 for folder in [path, *path.parents])


@pytest.mark.skipif(bool(AS_USER) and not shutil.which("setpriv"), reason="as root this needs setpriv")
@pytest.mark.skipif(
    bool(AS_USER) and not all(map(_reachable_by_others, CODE)),
    reason="as root this runs memsift as an unprivileged user, who cannot reach this checkout (a 0700 folder)",
)
def test_a_memory_folder_that_cannot_be_listed_keeps_the_files_indexed_there() -> None:
    """A folder the sync cannot list (permissions, an I/O error, too many open files) is not a folder whose
    files were deleted: before, every file indexed under it was removed from the index, and searches lost them
    until the folder was readable again (a cache cap could then drop their vectors, paid again on re-index)."""
    root = Path(tempfile.mkdtemp(prefix="memsift-unlisted-"))
    try:
        ws = root / "ws"
        for rel, text in {
            "MEMORY.md": "- The stable note about herons.\n",
            "memory/2026-01-01.md": "- A daily note about egrets.\n",
            "memory/people/dana.md": "- Dana keeps the okapi ledger.\n",
            "memory/people/omar.md": "- Omar feeds the ibis on Fridays.\n",
        }.items():
            (ws / rel).parent.mkdir(parents=True, exist_ok=True)
            (ws / rel).write_text(text)
        (root / "memsift.toml").write_text('[embedding]\nprovider = "none"\n')  # readable with ws at chmod 000
        root.chmod(0o755)
        if AS_USER:
            for path in [root, *root.rglob("*")]:
                os.chown(path, 65534, 65534)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMSIFT_", "PREFECT_"))}
        env |= {"HOME": str(root), "MEMSIFT_HOME": str(root / "home"), "PREFECT_HOME": str(root / "prefect")}
        run = [*AS_USER, sys.executable, "-c", "import sys; from api.cli import main; sys.exit(main())"]
        run += ["--config", str(root / "memsift.toml")]

        def index() -> dict[str, Any]:
            done = subprocess.run([*run, "--workspace", str(ws), "index", "--no-prefect", "--json"], env=env,
                                  capture_output=True, text=True, timeout=120)  # fmt: skip
            assert done.returncode == 0, done.stderr
            return json.loads(done.stdout)

        assert index()["added"] == 4
        (ws / "memory/people").chmod(0)
        report = index()
        assert report["removed"] == 0
        assert "skipped folder memory/people: Permission denied; the files indexed there are kept" in report["warnings"]
        found = subprocess.run([*run, "--workspace", str(ws), "search", "okapi ledger", "--json"], env=env,
                               capture_output=True, text=True, timeout=120)  # fmt: skip
        assert [hit["path"] for hit in json.loads(found.stdout)["results"]] == ["memory/people/dana.md"], found.stderr
        (ws / "memory/people").chmod(0o755)
        report = index()
        assert (report["removed"], report["added"], report["changed"]) == (0, 0, 0)
        ws.chmod(0)  # the workspace itself: nothing in it can be seen
        report = index()
        assert report["removed"] == 0 and any(w.startswith("skipped the workspace") for w in report["warnings"])
        ws.chmod(0o755)
        assert index()["removed"] == 0
    finally:
        for folder in (root / "ws", root / "ws/memory/people"):
            folder.chmod(0o755)
        shutil.rmtree(root)
