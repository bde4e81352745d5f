"""Crash consistency: a sync and a forced rebuild SIGKILLed at many points, in a process of their own.

`crash_driver.py` runs the real sync (the real local model, two files a batch) and stops at a named point,
the parent kills it there: between batches, inside a batch's open write transaction, before and after the
rename that swaps a rebuilt file in. Afterwards the index must pass `PRAGMA integrity_check`, answer a
hybrid search, and after the next sync hold exactly what an uninterrupted sync gives, vectors included,
with no temp file of the killed rebuild left.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from index_checks import chunks_without_vectors, content, integrity

from core import MemoryIndex, load_config
from core.config_types import Config
from core.shared_cache import SharedCache

pytestmark = pytest.mark.reliability

DRIVER = Path(__file__).with_name("crash_driver.py")
RUN_SECONDS = 120


def day(n: int, version: str = "") -> str:
    return f"# 2026-01-{n:02d}\n- Note {n}{version}: the quorum{n} service moved to rack {n * 7}.\n- Owner: team {n}.\n"


BEFORE = {"MEMORY.md": "# Memory\n- Dana drinks a flat white.\n"} | {
    f"memory/2026-01-{n:02d}.md": day(n) for n in range(1, 10)
}
# What the killed sync was bringing in: three files changed, three new, two deleted.
AFTER = (
    {p: t for p, t in BEFORE.items() if p not in ("memory/2026-01-02.md", "memory/2026-01-07.md")}
    | {f"memory/2026-01-{n:02d}.md": day(n, " (revised)") for n in (1, 5, 9)}
    | {f"memory/2026-01-{n:02d}.md": day(n) for n in (10, 11, 12)}
)


def write_state(ws: Path, files: dict[str, str]) -> None:
    """Make the workspace's .md files exactly `files`, touching only those that differ."""
    for old in ws.rglob("*.md"):
        if str(old.relative_to(ws)) not in files:
            old.unlink()
    for rel, text in files.items():
        path = ws / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists() or path.read_text() != text:
            path.write_text(text)


def config_in(ws: Path, home: Path, files: dict[str, str]) -> Config:
    write_state(ws, files)
    return load_config(workspace=ws, overrides={"embedding.provider": "local"}, env={"MEMSIFT_HOME": str(home)})


def synced(config: Config, *, force: bool = False) -> Config:
    with MemoryIndex(config) as index:
        index.sync(force=force)
    return config


@pytest.fixture(scope="module")
def expected(tmp_path_factory: pytest.TempPathFactory):
    """The content an uninterrupted sync gives for AFTER."""
    root = tmp_path_factory.mktemp("reference")
    return content(synced(config_in(root / "ws", root / "home", AFTER)).db_path)


def run_and_kill(config: Config, mode: str, at: str, **env_extra: str) -> list[str]:
    """Run the driver until it stops at `at`, SIGKILL it there; the points it passed. `env_extra`: more of the
    child's environment (a `MEMSIFT_<SECTION>_<KEY>` setting)."""
    env = os.environ | {"MEMSIFT_HOME": str(config.home)} | env_extra
    args = [sys.executable, str(DRIVER), str(config.workspace), mode, at]
    with subprocess.Popen(args, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as child:
        passed = []
        for line in child.stdout:
            passed.append(line.strip())
            if passed[-1] in (at, "done"):
                break
        os.kill(child.pid, signal.SIGKILL)
        assert child.wait(RUN_SECONDS) == -signal.SIGKILL
    assert passed[-1] == at, f"the run never reached {at!r}: {passed}"
    return passed


def assert_sound_and_completed_by_the_next_sync(config: Config, expected) -> None:
    db = config.db_path
    assert integrity(db) == ["ok"]
    with MemoryIndex(config) as index:
        answer = index.search("which rack did the quorum3 service move to", min_score=0).to_dict()
        assert "degraded" not in answer and answer["mode"] == "hybrid"
        assert any(hit["path"] == "memory/2026-01-03.md" for hit in answer["results"])
        index.sync()
    assert integrity(db) == ["ok"]
    assert content(db) == expected
    assert chunks_without_vectors(db) == 0
    assert sorted(p.name for p in db.parent.iterdir()) == sorted(
        db.name + s for s in ("", ".lock", ".swap", "-wal", "-shm") if (db.parent / (db.name + s)).exists()
    ), "a temp file of the killed run is left"


SYNC_POINTS = [
    "scanned",
    "write memory/2026-01-01.md",  # inside the first batch's transaction
    "batch 1",
    "write memory/2026-01-10.md",  # inside a later batch's transaction, after an earlier batch committed
    "batch 3",
    "removed",
]


@pytest.mark.parametrize("at", SYNC_POINTS)
def test_a_sync_killed_at_any_point_leaves_a_sound_index_the_next_sync_completes(tmp_path, expected, at) -> None:
    config = synced(config_in(tmp_path / "ws", tmp_path / "home", BEFORE))
    write_state(config.workspace, AFTER)
    passed = run_and_kill(config, "sync", at)
    assert "swap" not in passed  # an incremental sync, not a rebuild
    assert_sound_and_completed_by_the_next_sync(config, expected)


REBUILD_POINTS = ["write memory/2026-01-01.md", "batch 3", "batch 6", "swap", "renamed", "swapped"]


@pytest.mark.parametrize("at", REBUILD_POINTS)
def test_a_rebuild_killed_at_any_point_leaves_a_sound_index_the_next_sync_completes(tmp_path, expected, at) -> None:
    config = synced(config_in(tmp_path / "ws", tmp_path / "home", BEFORE))
    write_state(config.workspace, AFTER)
    run_and_kill(config, "rebuild", at)
    if at != "swapped":  # before the rename the temp file is the killed run's only trace
        assert list(config.db_path.parent.glob(f"{config.db_path.name}.tmp-*"))
    assert_sound_and_completed_by_the_next_sync(config, expected)


# A server's connection to the index, held open: while it is, the file's WAL keeps the frames of later syncs.
READER = (
    "import sys; from core.store import Store; store = Store(sys.argv[1]); "
    "store.conn.execute('SELECT count(*) FROM chunks').fetchone(); print('open', flush=True); sys.stdin.readline()"
)


def test_a_rebuild_killed_between_its_rename_and_deleting_the_old_wal_never_pairs_the_new_file_with_it(
    tmp_path, expected
) -> None:
    """The rebuilt file replaces the live one, then the old file's -wal and -shm are deleted. Killed between the
    two while a server had the old index open (its WAL holding frames), the new file was left beside the old
    WAL: the next writer's switch to WAL mode replayed those frames into it (`database disk image is
    malformed` on every search and sync) until someone deleted the -wal by hand."""
    config = synced(config_in(tmp_path / "ws", tmp_path / "home", BEFORE))
    wal = Path(f"{config.db_path}-wal")
    with subprocess.Popen(
        [sys.executable, "-c", READER, str(config.db_path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as reader:
        assert reader.stdout.readline().strip() == "open"
        write_state(config.workspace, AFTER)
        synced(config)  # its frames stay in the WAL: the reader keeps the file open
        assert wal.stat().st_size > 0
        run_and_kill(config, "rebuild", "renamed")
        reader.kill()
    assert wal.stat().st_size > 0, "the old WAL should still be there"
    assert_sound_and_completed_by_the_next_sync(config, expected)


def test_a_rebuild_for_a_new_chunking_killed_after_embedding_embeds_only_the_rest_next_time(tmp_path) -> None:
    """A chunking change rebuilds on its own (the local model) and reuses the vectors of unchanged chunk texts.
    Killed after its first batch's embedding requests returned and before that batch was written, the next run
    embeds exactly what the plan said less what the killed run had embedded: those are cache hits."""
    config = synced(config_in(tmp_path / "ws", tmp_path / "home", AFTER))
    finer = load_config(
        workspace=config.workspace,
        overrides={"embedding.provider": "local", "chunking.tokens": 16, "chunking.overlap": 0},
        env={"MEMSIFT_HOME": str(config.home)},
    )
    with MemoryIndex(finer) as index:
        plan = index.plan()
    assert plan.rebuild and plan.chunksToEmbed > 0 and plan.cacheHits > 0  # some chunk texts are unchanged
    with SharedCache.open(config.home) as cache:
        before = cache.count()
    passed = run_and_kill(config, "sync", "embedded 1", MEMSIFT_CHUNKING_TOKENS="16", MEMSIFT_CHUNKING_OVERLAP="0")
    assert not any(p.startswith("batch") for p in passed)  # killed before the rebuild wrote its first batch
    with SharedCache.open(config.home) as cache:
        paid = cache.count() - before
    assert 0 < paid < plan.chunksToEmbed

    with MemoryIndex(finer) as index:
        report = index.sync()
    assert report.rebuilt and report.chunksEmbedded == plan.chunksToEmbed - paid
    assert report.cacheHits == plan.cacheHits + paid
    assert integrity(finer.db_path) == ["ok"] and chunks_without_vectors(finer.db_path) == 0
    assert not list(finer.db_path.parent.glob(f"{finer.db_path.name}.tmp-*"))
