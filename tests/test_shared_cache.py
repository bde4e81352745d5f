"""The shared embedding cache (core/shared_cache.py): nothing paid for is lost, the same text is embedded once.

Driven through the CLI against the fake OpenAI-compatible provider on 127.0.0.1 (tests/fake_provider.py),
which counts every text it embeds: a first index SIGKILLed at 80% of its requests reruns only what was never
embedded; a second agent holding the same text embeds only what the first did not; two agents syncing at
once in two processes both finish with complete indexes; an index from before the cache hands its vectors
over; `cache.maxEntries` prunes only what no index uses.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import apsw
import numpy as np
import pytest
from index_checks import chunks_without_vectors, integrity

from api.cli import main
from core.config import load_config
from core.config_home import db_path
from core.indexer import UNFINISHED
from core.query import FTS_TEXT_VERSION
from core.shared_cache import SharedCache, cache_path
from core.store import Store
from core.store_schema import SCHEMA_VERSION
from tests.fake_provider import FakeProvider

ROOT = Path(__file__).resolve().parent.parent
PROBE = "memsift probe"
SLICE = 4  # embedding.batchMaxInputs: one request per slice of four short chunks


def notes(prefix: str, count: int) -> dict[str, str]:
    """`count` one-chunk notes with distinct text."""
    return {
        f"memory/{prefix}-{n:03d}.md": f"# {prefix} {n}\n- The {prefix}{n} relay is in bay {n}.\n" for n in range(count)
    }


@pytest.fixture
def provider() -> Iterator[FakeProvider]:
    server = FakeProvider()
    yield server
    server.close()


def agent_workspace(workspace, provider: FakeProvider, files: dict[str, str], name: str) -> Path:
    ws = workspace(files, name=name)
    (ws / "memsift.toml").write_text(
        f'[embedding]\nprovider = "openai"\nbaseUrl = "{provider.url}"\nmodel = "fake-model"\n'
        f"batchMaxInputs = {SLICE}\nconcurrency = 1\nretries = 0\n"
    )
    return ws


def embedded(provider: FakeProvider) -> list[str]:
    return [t for t in provider.embedded if t != PROBE]


def index(capsys, ws: Path, agent: str = "main", *extra: str) -> dict:
    capsys.readouterr()
    code = main(["--agent", agent, "--workspace", str(ws), "index", "--no-prefect", "--json", *extra])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


def cli(ws: Path, agent: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "api.cli",
        "--agent",
        agent,
        "--workspace",
        str(ws),
        "index",
        "--no-prefect",
        "--json",
    ]


def child_env(home: Path) -> dict[str, str]:
    return os.environ | {"MEMSIFT_HOME": str(home), "PYTHONPATH": str(ROOT)}


def test_a_first_index_killed_at_80_percent_reruns_only_what_it_never_embedded(
    capsys, workspace, provider: FakeProvider, memsift_home: Path
) -> None:
    ws = agent_workspace(workspace, provider, notes("alpha", 60), "ws")
    # Request 1 is the start-up probe, 2..16 the fifteen slices; the 14th request is the 13th slice: 80%.
    provider.hold_at = 14
    with subprocess.Popen(cli(ws, "main"), env=child_env(memsift_home), cwd=ROOT) as child:
        assert provider.held.wait(120), "the child never reached 80%"
        child.send_signal(signal.SIGKILL)
        child.wait()
    before_kill = set(embedded(provider))
    assert len(before_kill) == 48
    db = db_path(memsift_home, "main", ws.resolve())
    with Store(db, readonly=True) as store:
        # a first index writes the live file batch by batch: its one batch (60 files) was never committed
        assert store.get_meta(UNFINISHED) and store.stats()["files"] == {}
    provider.embedded.clear()

    report = index(capsys, ws)
    again = embedded(provider)
    assert report["chunksEmbedded"] == len(again) == 12  # 20% of a full run
    assert report["cacheHits"] == 48 and not set(again) & before_kill
    assert integrity(db) == ["ok"] and chunks_without_vectors(db) == 0
    with Store(db, readonly=True) as store:
        assert store.conn.execute("SELECT count(*) FROM chunks").fetchone()[0] == 60


def test_a_second_agent_holding_half_the_same_text_embeds_only_the_other_half(
    capsys, workspace, provider: FakeProvider
) -> None:
    shared = notes("shared", 10)
    first = agent_workspace(workspace, provider, shared | notes("a", 10), "a")
    second = agent_workspace(workspace, provider, shared | notes("b", 10), "b")
    assert index(capsys, first, "a")["chunksEmbedded"] == 20
    provider.embedded.clear()
    report = index(capsys, second, "b")
    assert report["chunksEmbedded"] == len(embedded(provider)) == 10 and report["cacheHits"] == 10


def test_two_agents_syncing_at_once_in_two_processes_both_complete(
    workspace, provider: FakeProvider, memsift_home: Path
) -> None:
    provider.delay = 0.01  # so the two runs overlap
    shared = notes("shared", 24)
    spaces = {
        "a": agent_workspace(workspace, provider, shared | notes("a", 24), "a"),
        "b": agent_workspace(workspace, provider, shared | notes("b", 24), "b"),
    }
    children = {
        agent: subprocess.Popen(
            [*cli(ws, agent), "--json"], env=child_env(memsift_home), cwd=ROOT, stdout=subprocess.PIPE, text=True
        )
        for agent, ws in spaces.items()
    }
    reports = {}
    for agent, child in children.items():
        out, _ = child.communicate(timeout=300)
        assert child.returncode == 0
        reports[agent] = json.loads(out)
    for agent, report in reports.items():
        assert report["chunksWritten"] == 48 and not report["warnings"]
        db = db_path(memsift_home, agent, spaces[agent].resolve())
        assert integrity(db) == ["ok"] and chunks_without_vectors(db) == 0
    with SharedCache.open(memsift_home) as cache:
        assert cache.count() == 72  # 24 shared + 24 + 24, each once
    assert cache_path(memsift_home).stat().st_size > 0


def test_an_index_from_before_the_shared_cache_hands_its_vectors_over(
    capsys, workspace, provider: FakeProvider, memsift_home: Path
) -> None:
    ws = agent_workspace(workspace, provider, notes("old", 8), "ws")
    index(capsys, ws)
    db = db_path(memsift_home, "main", ws.resolve())
    with Store(db) as store, store.transaction():  # as an older memsift left it: its own cache, no shared one
        store.conn.execute("DELETE FROM meta WHERE key = 'shared_cache'")
    for suffix in ("", "-wal", "-shm"):
        Path(f"{cache_path(memsift_home)}{suffix}").unlink(missing_ok=True)
    provider.embedded.clear()
    report = index(capsys, ws, "main", "--force")
    assert report["chunksEmbedded"] == len(embedded(provider)) == 0 and report["cacheHits"] == 8
    with SharedCache.open(memsift_home) as cache:
        assert cache.count() == 8


def test_a_rebuild_takes_the_vectors_of_the_index_it_replaces_when_the_shared_cache_lost_them(
    capsys, workspace, provider: FakeProvider, memsift_home: Path
) -> None:
    """An upgrade that changes the index identity (a new ftsText) rebuilds at no cost from the cache; with the
    cache folder deleted (a "cache" looks disposable) the rebuild on a hosted provider was held, "it would
    embed: 8 chunks to embed (0 cached)", and `--force` paid for 8 vectors the live index holds."""
    ws = agent_workspace(workspace, provider, notes("old", 8), "ws")
    index(capsys, ws)
    with Store(db_path(memsift_home, "main", ws.resolve())) as store:  # as the release before this one left it
        store.set_identity({**store.identity(), "ftsText": FTS_TEXT_VERSION - 1})
    for suffix in ("", "-wal", "-shm"):
        Path(f"{cache_path(memsift_home)}{suffix}").unlink(missing_ok=True)
    provider.embedded.clear()
    report = index(capsys, ws)
    assert report["rebuildHeld"] is None and report["rebuilt"] is True
    assert report["chunksEmbedded"] == len(embedded(provider)) == 0 and report["cacheHits"] == 8


def test_max_entries_prunes_only_entries_no_index_uses_across_agents(
    capsys, workspace, provider: FakeProvider, memsift_home: Path
) -> None:
    a = agent_workspace(workspace, provider, notes("a", 6), "a")
    b = agent_workspace(workspace, provider, notes("b", 6), "b")
    index(capsys, b, "b")  # b's entries are the oldest, and in use
    index(capsys, a, "a")
    for path in sorted((a / "memory").glob("*.md"))[:3]:
        path.write_text(path.read_text() + "- revised\n")
    index(capsys, a, "a")  # 3 of a's old entries are now unused: 15 entries, 12 in use
    with (a / "memsift.toml").open("a") as fh:
        fh.write("[cache]\nmaxEntries = 10\n")
    report = index(capsys, a, "a")
    assert report["cachePruned"] == 3  # asked to drop 5, only 3 are unused
    with SharedCache.open(memsift_home) as cache:
        assert cache.count() == 12
        kept = {h for (h,) in cache.conn.execute("SELECT hash FROM embeddings")}
    for agent, ws in (("a", a), ("b", b)):
        with Store(db_path(memsift_home, agent, ws.resolve()), readonly=True) as store:
            assert {h for (h,) in store.conn.execute("SELECT hash FROM chunks")} <= kept


@pytest.mark.usefixtures("prefect_harness")
def test_a_first_index_flow_at_a_provider_outage_keeps_what_it_embedded(workspace, provider: FakeProvider) -> None:
    """The outage leaves the notes indexed for keyword search, their vectors pending (tests/test_provider_down.py);
    what the provider answered before it went down is kept, and the next run embeds only the rest."""
    from flows.sync import run_sync

    ws = agent_workspace(workspace, provider, notes("beta", 40), "ws")
    provider.fault = lambda n: "503" if n >= 8 else None  # the provider goes down after a few slices
    report = run_sync("main", workspace=str(ws))
    assert report.added == 40 and report.vectorsPending
    before = len(embedded(provider))
    assert 0 < before < 40 and before % SLICE == 0 and report.chunksEmbedded == before
    provider.fault = lambda n: None
    provider.embedded.clear()
    report = run_sync("main", workspace=str(ws))  # completes the vectors in place
    assert report.added == 0 and not report.vectorsPending
    assert report.chunksEmbedded == len(embedded(provider)) == 40 - before


def test_cached_vectors_are_read_when_their_use_cannot_be_marked(tmp_path: Path) -> None:
    """`get` marks the vectors it finds as used (pruning keeps them longest). On a full disk that write failed and
    stopped the sync with `FullError: database or disk is full`, naming no file, though the vectors had been read;
    another writer holding the cache past the busy timeout did the same. The mark is only pruning's: the vectors
    come back all the same, and the connection is left with no transaction open for the next write."""
    key = ("openai", "fake-model", "f")
    path = tmp_path / "embeddings.sqlite"
    with SharedCache(path) as cache:
        cache.put(key, {"a": np.ones(4, dtype=np.float32)})
        other = apsw.Connection(str(path))
        other.execute("BEGIN IMMEDIATE")  # another sync's write, held past our busy timeout
        cache.conn.set_busy_timeout(10)
        found = cache.get(key, ["a", "b"])
        assert list(found) == ["a"] and found["a"].tolist() == [1.0] * 4
        assert not cache.conn.in_transaction
        other.execute("ROLLBACK")
        cache.put(key, {"b": np.zeros(4, dtype=np.float32)})
        assert cache.count() == 2


def test_a_note_edited_many_times_leaves_no_stale_vectors_in_the_index(
    capsys, workspace, provider: FakeProvider, memsift_home: Path
) -> None:
    """Each edit's old text kept its vector in the index until a rebuild: 20 edits of one note left 20 stale
    rows (200 edits: the index grew from 4.0 to 6.5 MiB for 14 more chunks). The shared cache still holds
    them: going back to an old text embeds nothing."""
    ws = agent_workspace(workspace, provider, notes("n", 6), "ws")
    index(capsys, ws)
    note = ws / "memory" / "n-000.md"
    first = note.read_text()
    for n in range(20):
        note.write_text(f"{first}- revision {n} of the relay plan.\n")
        assert index(capsys, ws)["chunksEmbedded"] == 1
    db = db_path(memsift_home, "main", ws.resolve())
    with Store(db, readonly=True) as store:
        hashes = {h for (h,) in store.conn.execute("SELECT hash FROM chunks")}
        cached = [h for (h,) in store.conn.execute("SELECT hash FROM embedding_cache")]
    assert len(hashes) == 6 and sorted(cached) == sorted(hashes)
    provider.embedded.clear()
    note.write_text(first)
    report = index(capsys, ws)
    assert report["chunksEmbedded"] == len(embedded(provider)) == 0 and report["cacheHits"] == 1
    assert integrity(db) == ["ok"] and chunks_without_vectors(db) == 0


# The two caches of an index as schema 3 (memsift before rowid caches) wrote them.
SCHEMA_3_CACHES = """
CREATE TABLE old_vectors (provider TEXT NOT NULL, model TEXT NOT NULL, fingerprint TEXT NOT NULL,
    hash TEXT NOT NULL, embedding BLOB NOT NULL, created_at REAL NOT NULL,
    PRIMARY KEY (provider, model, fingerprint, hash)) WITHOUT ROWID;
INSERT INTO old_vectors SELECT * FROM embedding_cache;
DROP TABLE embedding_cache;
ALTER TABLE old_vectors RENAME TO embedding_cache;
CREATE TABLE old_tokens (fingerprint TEXT NOT NULL, hash TEXT NOT NULL, tokens BLOB NOT NULL,
    PRIMARY KEY (fingerprint, hash)) WITHOUT ROWID;
INSERT INTO old_tokens SELECT * FROM token_cache;
DROP TABLE token_cache;
ALTER TABLE old_tokens RENAME TO token_cache;
UPDATE meta SET value = '3' WHERE key = 'schema_version';
"""


def test_an_index_of_schema_3_answers_then_is_rebuilt_into_rowid_caches_embedding_nothing(
    capsys, workspace, provider: FakeProvider, memsift_home: Path
) -> None:
    """Schema 4 stores the caches in rowid tables (a 1.5 KB vector in a WITHOUT ROWID row spilled onto an
    overflow page of its own, mostly empty). An index written before keeps answering, and its first sync
    rebuilds it into the new layout from its own vectors: nothing embedded, not even with the shared cache gone."""
    ws = agent_workspace(workspace, provider, notes("old", 8), "ws")
    index(capsys, ws)
    db = db_path(memsift_home, "main", ws.resolve())
    with Store(db) as store, store.transaction():
        store.conn.execute(SCHEMA_3_CACHES)
        store.set_identity({**store.identity(), "schema": 3})
    for suffix in ("", "-wal", "-shm"):
        Path(f"{cache_path(memsift_home)}{suffix}").unlink(missing_ok=True)
    provider.embedded.clear()

    capsys.readouterr()
    assert main(["--workspace", str(ws), "search", "old3 relay bay 3", "--json"]) == 0
    hits = json.loads(capsys.readouterr().out)["results"]
    assert hits and hits[0]["path"] == "memory/old-003.md"
    provider.embedded.clear()  # the query's embedding
    report = index(capsys, ws)
    assert report["rebuilt"] is True and report["chunksEmbedded"] == 0 and report["cacheHits"] == 8
    assert embedded(provider) == [] and integrity(db) == ["ok"] and chunks_without_vectors(db) == 0
    with Store(db, readonly=True) as store:
        assert store.identity()["schema"] == SCHEMA_VERSION
        layouts = store.conn.execute("SELECT sql FROM sqlite_master WHERE name IN ('embedding_cache', 'token_cache')")
        assert [sql for (sql,) in layouts if "WITHOUT ROWID" in sql] == []
        assert store.conn.execute("SELECT count(*) FROM embedding_cache").fetchone()[0] == 8
    assert index(capsys, ws)["chunksEmbedded"] == 0


# An index's vec0 table as schema 4 wrote it: vec0's default chunks of 1,024 vectors.
SCHEMA_4_VEC0 = """
DROP TABLE chunks_vec;
CREATE VIRTUAL TABLE chunks_vec USING vec0(embedding float[384] distance_metric=cosine);
INSERT INTO chunks_vec(rowid, embedding)
    SELECT c.id, e.embedding FROM chunks c JOIN embedding_cache e ON e.hash = c.hash;
UPDATE meta SET value = '4' WHERE key = 'schema_version';
"""


def vec0_bytes(db: Path) -> int:
    conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return conn.execute("SELECT sum(pgsize) FROM dbstat WHERE name LIKE 'chunks_vec%'").fetchone()[0]
    finally:
        conn.close()


def test_an_index_of_schema_4_is_rebuilt_into_small_vec0_chunks_embedding_nothing(
    capsys, workspace, provider: FakeProvider, memsift_home: Path
) -> None:
    """Schema 5 writes vec0 in chunks of 256 vectors: vec0 allocates a whole chunk at its first vector, so at its
    default of 1,024 an index of 12 notes held 1.5 MiB of vec0 (a dev index of 90 chunks: 1.5 of its 2.35 MiB).
    An index written by schema 4 answers as before, and its next sync rebuilds it from its own vectors: nothing
    embedded, not even with the shared cache gone, the same hits, a smaller file."""
    ws = agent_workspace(workspace, provider, notes("vec", 12), "ws")
    with (ws / "memsift.toml").open("a") as fh:
        fh.write("dimensions = 384\n")
    index(capsys, ws)
    db = db_path(memsift_home, "main", ws.resolve())
    with Store(db) as store, store.transaction():
        store.conn.execute(SCHEMA_4_VEC0)
        store.set_identity({**store.identity(), "schema": 4})
    old = vec0_bytes(db)
    assert old > 1024 * 384 * 4
    for suffix in ("", "-wal", "-shm"):
        Path(f"{cache_path(memsift_home)}{suffix}").unlink(missing_ok=True)

    def hits() -> list:
        capsys.readouterr()
        assert main(["--workspace", str(ws), "search", "vec7 relay bay 7", "--json", "--min-score", "0"]) == 0
        return [(h["path"], h["score"]) for h in json.loads(capsys.readouterr().out)["results"]]

    before = hits()
    assert before[0][0] == "memory/vec-007.md"
    provider.embedded.clear()
    report = index(capsys, ws)
    assert report["rebuilt"] is True and report["chunksEmbedded"] == 0 and report["cacheHits"] == 12
    assert embedded(provider) == [] and integrity(db) == ["ok"] and chunks_without_vectors(db) == 0
    with Store(db, readonly=True) as store:
        assert store.identity()["schema"] == SCHEMA_VERSION == 5
        (sql,) = store.conn.execute("SELECT sql FROM sqlite_master WHERE name = 'chunks_vec'").fetchone()
        assert "chunk_size=256" in sql
    assert vec0_bytes(db) < old / 3
    assert hits() == before


def test_a_shared_cache_of_without_rowid_tables_moves_into_rowid_ones_and_shrinks(tmp_path: Path) -> None:
    """The cache's tables were WITHOUT ROWID: each 1.5 KB vector spilled onto an overflow page of its own."""
    path = tmp_path / "embeddings.sqlite"
    conn = apsw.Connection(str(path))
    conn.execute(
        "CREATE TABLE embeddings (provider TEXT NOT NULL, model TEXT NOT NULL, fingerprint TEXT NOT NULL, "
        "hash TEXT NOT NULL, embedding BLOB NOT NULL, created_at REAL NOT NULL, used_at REAL NOT NULL, "
        "PRIMARY KEY (provider, model, fingerprint, hash)) WITHOUT ROWID;"
        "CREATE INDEX embeddings_by_use ON embeddings(used_at);"
        "CREATE TABLE tokens (fingerprint TEXT NOT NULL, hash TEXT NOT NULL, tokens BLOB NOT NULL, "
        "PRIMARY KEY (fingerprint, hash)) WITHOUT ROWID;"
    )
    key = ("openai", "fake-model", "fp")
    vectors = {f"h{n:04d}": np.random.default_rng(n).standard_normal(384).astype(np.float32) for n in range(600)}
    rows = [(*key, h, v.tobytes(), float(n), float(n)) for n, (h, v) in enumerate(vectors.items())]
    conn.executemany("INSERT INTO embeddings VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
    conn.executemany("INSERT INTO tokens VALUES (?, ?, ?)", [("t", h, b"\x01" * 3000) for h in vectors])
    conn.close()
    before = path.stat().st_size

    with SharedCache(path) as cache:
        tables = "SELECT name, sql FROM sqlite_master WHERE type = 'table' ORDER BY name"
        assert [(n, "WITHOUT ROWID" in sql) for n, sql in cache.conn.execute(tables)] == [
            ("embeddings", False),
            ("indexes", False),
            ("state", False),
            ("throughput", False),
            ("tokens", False),
        ]
        got = cache.get(key, ["h0007", "h0599"])
        assert np.array_equal(got["h0007"], vectors["h0007"]) and np.array_equal(got["h0599"], vectors["h0599"])
        assert cache.count() == 600 and len(cache.tokens_get("t", list(vectors))) == 600
        plan = cache.conn.execute("EXPLAIN QUERY PLAN SELECT * FROM embeddings ORDER BY used_at").fetchall()
        assert "embeddings_by_use" in str(plan)
        cache.put(key, {"h0007": vectors["h0001"]})  # INSERT OR REPLACE still replaces by the key
        assert cache.count() == 600 and np.array_equal(cache.get(key, ["h0007"])["h0007"], vectors["h0001"])
        cache.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    assert path.stat().st_size < before * 0.75
    with SharedCache(path) as cache:  # once only: the second open finds the new tables
        assert cache.count() == 600


def stale(cache: SharedCache, count: int, dims: int, token_bytes: int, start: float = 1.0) -> list[str]:
    """`count` entries of a model used before (no index uses them), last used at `start`, `start` + 1...,
    each with its token bits: what a model switched away from, or old edits, leave behind."""
    key = ("local", "old-model", "old")
    hashes = [f"old{n:05d}" for n in range(count)]
    rng = np.random.default_rng(count)
    cache.put(key, {h: rng.standard_normal(dims).astype(np.float32) for h in hashes})
    cache.tokens_put("maxsim-bits-lines:old", {h: rng.bytes(token_bytes) for h in hashes})
    with cache.writing():
        cache.conn.executemany(
            "UPDATE embeddings SET used_at = ? WHERE hash = ?", [(start + n, h) for n, h in enumerate(hashes)]
        )
    return hashes


def test_the_shared_cache_is_bounded_by_size_dropping_only_what_no_index_uses(
    capsys, workspace, provider: FakeProvider, memsift_home: Path
) -> None:
    """`cache.maxMiB` (512 by default; before, nothing bounded the cache: 200 edits of one note left 876 entries for
    346 chunks). Over it, a run drops the least recently used entries no index uses, with their token bits, down to
    90% of it; the entries the indexes use stay, so a new agent holding the same notes embeds nothing."""
    a = agent_workspace(workspace, provider, notes("a", 6), "a")
    assert load_config(a / "memsift.toml", workspace=a, env={}).cache.maxMiB == 512
    b = agent_workspace(workspace, provider, notes("b", 6), "b")
    index(capsys, a, "a")
    with SharedCache.open(memsift_home) as cache:
        old = stale(cache, 300, 1536, 10_000)  # ~4.8 MiB of a model used before
        assert cache.used_bytes() > 4 * 2**20
    for ws in (a, b):
        with (ws / "memsift.toml").open("a") as fh:
            fh.write("[cache]\nmaxMiB = 2\n")
    report = index(capsys, b, "b")
    with SharedCache.open(memsift_home) as cache:
        assert cache.used_bytes() <= 0.9 * 2 * 2**20
        kept = {h for (h,) in cache.conn.execute("SELECT hash FROM embeddings")}
        tokens = {h for (h,) in cache.conn.execute("SELECT hash FROM tokens")}
    dropped = [h for h in old if h not in kept]
    assert report["cachePruned"] == len(dropped) > 150 and dropped == old[: len(dropped)]  # oldest first
    assert tokens == {h for h in old if h in kept}
    for agent, ws in (("a", a), ("b", b)):
        with Store(db_path(memsift_home, agent, ws.resolve()), readonly=True) as store:
            assert {h for (h,) in store.conn.execute("SELECT hash FROM chunks")} <= kept
    assert index(capsys, b, "b")["cachePruned"] == 0  # under the bound: two PRAGMAs

    provider.embedded.clear()
    c = agent_workspace(workspace, provider, notes("a", 6), "c")
    report = index(capsys, c, "c")
    assert report["chunksEmbedded"] == len(embedded(provider)) == 0 and report["cacheHits"] == 6


def test_a_bound_the_entries_in_use_exceed_is_not_passed_over_at_every_run(
    capsys, workspace, provider: FakeProvider, memsift_home: Path
) -> None:
    """When the entries the indexes use alone keep the cache over `cache.maxMiB`, a pass can drop nothing, and it
    reads every index's chunks: the size left is remembered and the next runs skip the pass until the cache grows
    by a tenth of the bound past it. Then unused entries go again, and the ones in use stay."""
    ws = agent_workspace(workspace, provider, notes("big", 60), "ws")
    with (ws / "memsift.toml").open("a") as fh:
        fh.write("dimensions = 4096\n[cache]\nmaxMiB = 1\n")  # 60 vectors of 16 KiB: over 1 MiB
    report = index(capsys, ws)
    assert report["chunksEmbedded"] == 60 and report["cachePruned"] == 0
    with SharedCache.open(memsift_home) as cache:
        assert cache.used_bytes() > 2**20
        floor = cache.conn.execute("SELECT value FROM state WHERE key = 'live_floor'").fetchone()[0]
        few = stale(cache, 3, 16, 100)  # far less than a tenth of the bound
    assert index(capsys, ws)["cachePruned"] == 0
    with SharedCache.open(memsift_home) as cache:
        assert cache.count() == 63
        more = stale(cache, 12, 4096, 0, start=100.0)[3:]  # the three above are replaced: 12 in all
        assert cache.used_bytes() > floor + 0.1 * 2**20
    assert index(capsys, ws)["cachePruned"] == 12
    with SharedCache.open(memsift_home) as cache:
        assert cache.count() == 60 and not {h for (h,) in cache.conn.execute("SELECT hash FROM embeddings")} & {
            *few,
            *more,
        }
    assert index(capsys, ws)["chunksEmbedded"] == 0
