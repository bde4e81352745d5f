"""One embedding cache for every agent and workspace under a MEMSIFT_HOME: `<home>/cache/embeddings.sqlite`.

Why it is not inside the index: a rebuild writes into a temp file that is deleted when the run fails, so a
cache there lost every vector a killed or failed run had paid for; and two agents holding the same text
embedded it twice. Here vectors are written the moment each embedding request returns (`put`, its own
transaction), so a rerun after a crash, an outage or Ctrl-C embeds only what was never embedded, and the
same text under the same model is embedded once per home. The index keeps its own copy of the vectors its
chunks use (vec0 and the numpy scan read it), so it never depends on this file to answer a search, and
pruning here can cost a re-embed, never a wrong answer.

Tables
  embeddings  vectors by (provider, model, fingerprint, text hash), with `used_at` (the last sync that
              wrote or read it) for pruning oldest first
  tokens      MaxSim token bits by (reranker fingerprint, text hash)
  indexes     the index files that draw on this cache (path, last seen): what "in use" means when pruning;
              the cache never cares what an index file is called, a path that vanished is forgotten
  throughput  measured embedding speed per (provider, model, fingerprint), for `memsift index --dry-run`
  state       `bound`'s memory: the size the entries in use alone kept the file at, and when

Several agents may sync at once: WAL mode, every write a short BEGIN IMMEDIATE transaction (one writer at
a time), and a bounded busy wait (`BUSY_TIMEOUT_MS`) before a write gives up with `apsw.BusyError`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import apsw
import numpy as np

from .errors import StoreError
from .store import Store

BUSY_TIMEOUT_MS = 30_000
#: A pass of `bound` drops entries down to this share of the bound.
LOW_WATER = 0.9
#: How long `bound` trusts a remembered floor of entries in use (see there).
FLOOR_SECONDS = 24 * 3600
SLICE = 500  # SQLite caps the number of bound parameters
Key = tuple[str, str, str]  # (provider, model, fingerprint)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS embeddings (
    provider TEXT NOT NULL,
    model TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    hash TEXT NOT NULL,
    embedding BLOB NOT NULL,
    created_at REAL NOT NULL,
    used_at REAL NOT NULL,
    UNIQUE (provider, model, fingerprint, hash)
);
CREATE INDEX IF NOT EXISTS embeddings_by_use ON embeddings(used_at);
CREATE INDEX IF NOT EXISTS embeddings_by_hash ON embeddings(hash);
CREATE TABLE IF NOT EXISTS tokens (
    fingerprint TEXT NOT NULL,
    hash TEXT NOT NULL,
    tokens BLOB NOT NULL,
    UNIQUE (fingerprint, hash)
);
-- an eviction's token bits by text alone (their reranker fingerprint aside): a scan read ~2 KB of page a row
CREATE INDEX IF NOT EXISTS tokens_by_hash ON tokens(hash);
CREATE TABLE IF NOT EXISTS indexes (path TEXT PRIMARY KEY, seen_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS throughput (
    provider TEXT NOT NULL,
    model TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    inputs INTEGER NOT NULL,
    chars INTEGER NOT NULL,
    requests INTEGER NOT NULL,
    seconds REAL NOT NULL,
    measured_at REAL NOT NULL,
    PRIMARY KEY (provider, model, fingerprint)
);
CREATE TABLE IF NOT EXISTS state (key TEXT PRIMARY KEY, value, at REAL NOT NULL);
"""


def cache_path(home: Path) -> Path:
    return home / "cache" / "embeddings.sqlite"


class SharedCache:
    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self.conn = apsw.Connection(str(path))
            self.conn.set_busy_timeout(BUSY_TIMEOUT_MS)
            self.conn.execute("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL")
            with self.writing():
                self.conn.execute(_SCHEMA)
            self._to_rowid_tables()
        except apsw.Error as exc:
            raise StoreError(f"cannot open the embedding cache {path}: {exc}") from exc

    def _to_rowid_tables(self) -> None:
        """Move a cache written before rowid tables (WITHOUT ROWID ones, the same columns) into them, once, then
        VACUUM. A WITHOUT ROWID row keeps at most ~1 KB on its b-tree page: each 1.5 KB vector spilled onto an
        overflow page of its own, mostly empty (measured: 5.2 MiB for 1.9 MiB of vectors, 2.5 MiB as rowid rows).
        The statements read and write either layout, so a VACUUM that fails (a full disk) loses nothing."""
        old = "SELECT 1 FROM sqlite_master WHERE name IN ('embeddings', 'tokens') AND sql LIKE '%WITHOUT ROWID%'"
        if self.conn.execute(old).fetchone() is None:
            return
        with self.writing():
            if self.conn.execute(old).fetchone() is None:  # another process moved them while we waited
                return
            self.conn.execute(
                "ALTER TABLE embeddings RENAME TO old_embeddings; ALTER TABLE tokens RENAME TO old_tokens; "
                "DROP INDEX IF EXISTS embeddings_by_use; DROP INDEX IF EXISTS embeddings_by_hash; "
                "DROP INDEX IF EXISTS tokens_by_hash;"
                f"{_SCHEMA}"
                "INSERT INTO embeddings SELECT * FROM old_embeddings; INSERT INTO tokens SELECT * FROM old_tokens; "
                "DROP TABLE old_embeddings; DROP TABLE old_tokens;"
            )
        with suppress(apsw.Error):
            self.conn.execute("VACUUM")

    @classmethod
    def open(cls, home: Path) -> SharedCache:
        return cls(cache_path(home))

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> SharedCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def writing(self) -> Iterator[None]:
        """One short write transaction, the write lock taken up front (so the busy wait applies to it)."""
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            yield
            self.conn.execute("COMMIT")
        except BaseException:
            if self.conn.in_transaction:  # a full disk: SQLite may have rolled back itself, or the COMMIT failed
                self.conn.execute("ROLLBACK")
            raise

    def _by_hash(self, sql: str, params: tuple[Any, ...], hashes: Iterable[str]) -> Iterator[tuple[Any, ...]]:
        hashes = list(dict.fromkeys(hashes))
        for i in range(0, len(hashes), SLICE):
            part = hashes[i : i + SLICE]
            yield from self.conn.execute(f"{sql} IN ({','.join('?' * len(part))})", (*params, *part))

    # -- vectors ---------------------------------------------------------------------------------------

    def get(self, key: Key, hashes: Iterable[str]) -> dict[str, np.ndarray]:
        """Cached vectors of `hashes`; those found are marked used now (they are kept longest by pruning). The mark
        is only pruning's: when it cannot be written (a full disk, another writer past the busy timeout) the vectors
        are returned all the same. Before, a sync on a full disk stopped here with `FullError: database or disk is
        full`, naming no file, where the next step's error names the index that could not be written."""
        sql = "SELECT hash, embedding FROM embeddings WHERE provider = ? AND model = ? AND fingerprint = ? AND hash"
        found = {h: np.frombuffer(blob, dtype=np.float32) for h, blob in self._by_hash(sql, key, hashes)}
        if found:
            now = time.time()
            with suppress(apsw.Error), self.writing():
                self.conn.executemany(
                    "UPDATE embeddings SET used_at = ? WHERE provider = ? AND model = ? AND fingerprint = ? "
                    "AND hash = ?",
                    [(now, *key, h) for h in found],
                )
        return found

    def known(self, key: Key, hashes: Iterable[str]) -> set[str]:
        """Which of `hashes` have a vector, without reading or marking them (a dry run changes nothing)."""
        sql = "SELECT hash FROM embeddings WHERE provider = ? AND model = ? AND fingerprint = ? AND hash"
        return {h for (h,) in self._by_hash(sql, key, hashes)}

    def put(self, key: Key, items: dict[str, np.ndarray]) -> None:
        now = time.time()
        with self.writing():
            self.conn.executemany(
                "INSERT OR REPLACE INTO embeddings(provider, model, fingerprint, hash, embedding, created_at, used_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                [(*key, h, np.asarray(v, dtype=np.float32).tobytes(), now, now) for h, v in items.items()],
            )

    def count(self) -> int:
        return self.conn.execute("SELECT count(*) FROM embeddings").fetchone()[0]

    # -- MaxSim token bits -----------------------------------------------------------------------------

    def tokens_get(self, fingerprint: str, hashes: Iterable[str]) -> dict[str, bytes]:
        sql = "SELECT hash, tokens FROM tokens WHERE fingerprint = ? AND hash"
        return dict(self._by_hash(sql, (fingerprint,), hashes))

    def tokens_put(self, fingerprint: str, items: dict[str, bytes]) -> None:
        with self.writing():
            self.conn.executemany(
                "INSERT OR REPLACE INTO tokens(fingerprint, hash, tokens) VALUES (?, ?, ?)",
                [(fingerprint, h, blob) for h, blob in items.items()],
            )

    # -- the indexes that use it -----------------------------------------------------------------------

    def register(self, index: Path) -> None:
        with self.writing():
            self.conn.execute(
                "INSERT OR REPLACE INTO indexes(path, seen_at) VALUES (?, ?)", (str(index.resolve()), time.time())
            )

    def adopt(self, store: Store) -> int:
        """Copy an index's own vectors and token bits in (an index from before this cache existed, or one
        copied from another machine); rows of vectors added. Cheap to repeat: existing rows are kept."""
        now = time.time()
        with self.writing():
            self.conn.executemany(
                "INSERT OR IGNORE INTO embeddings(provider, model, fingerprint, hash, embedding, created_at, used_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                [(*row, now) for row in store.conn.execute("SELECT * FROM embedding_cache")],
            )
            added = self.conn.changes()
            self.conn.executemany(
                "INSERT OR IGNORE INTO tokens(fingerprint, hash, tokens) VALUES (?, ?, ?)",
                store.conn.execute("SELECT fingerprint, hash, tokens FROM token_cache"),
            )
        return added

    def _in_use(self) -> list[tuple[str, str, str, str]]:
        """(provider, model, fingerprint, hash) of every chunk of every registered index that still exists."""
        used: list[tuple[str, str, str, str]] = []
        gone: list[str] = []
        for (path,) in self.conn.execute("SELECT path FROM indexes").fetchall():
            if not Path(path).exists():
                gone.append(path)
                continue
            try:
                with Store(path, use_vec=False, readonly=True) as store:
                    identity = store.identity() or {}
                    if identity.get("provider") in (None, "none"):
                        continue
                    key = (identity["provider"], identity["model"], identity["fingerprint"])
                    used.extend((*key, h) for (h,) in store.conn.execute("SELECT DISTINCT hash FROM chunks"))
            except (StoreError, apsw.Error):
                continue  # unreadable now: its entries are not protected this time; its own copy serves it
        if gone:
            with self.writing():
                self.conn.executemany("DELETE FROM indexes WHERE path = ?", [(p,) for p in gone])
        return used

    def prune(self, max_entries: int) -> int:
        """Drop entries no registered index uses, least recently used first, until at most `max_entries`
        remain (fewer are dropped when the rest are in use); token bits follow their text out."""
        return self._evict(self.count() - max_entries)

    def used_bytes(self) -> int:
        """Bytes of the file's pages in use (free pages left by deleted rows excluded): two PRAGMAs, no scan."""
        pages = self.conn.execute("PRAGMA page_count").fetchone()[0]
        free = self.conn.execute("PRAGMA freelist_count").fetchone()[0]
        return (pages - free) * self.conn.execute("PRAGMA page_size").fetchone()[0]

    def bound(self, max_bytes: int) -> int:
        """Keep the file's used pages within `max_bytes` (`cache.maxMiB`): over it, entries no registered index
        uses go, least recently used first, down to LOW_WATER of it (so a pass is not due again for a tenth of
        the bound's growth); entries dropped. Token bits are most of a local model's entries (10.8 KB a chunk
        against 1.5 KB of vector), so a size says what a count of entries cannot.

        Below the bound it costs two PRAGMAs. Over it, a pass reads the hashes of every registered index's
        chunks; when the entries those use alone keep the file over LOW_WATER (a large memory, a small bound),
        that floor is remembered for a day, or until the file grows by a tenth of the bound past it, so a
        sync does not pay for a pass that can drop nothing."""
        used = self.used_bytes()
        if used <= max_bytes:
            return 0
        floor = self.conn.execute("SELECT value, at FROM state WHERE key = 'live_floor'").fetchone()
        slack = max_bytes * (1 - LOW_WATER)
        if floor is not None and used <= floor[0] + slack and time.time() - floor[1] < FLOOR_SECONDS:
            return 0
        count = self.count()
        target = LOW_WATER * max_bytes
        dropped = self._evict(math.ceil((used - target) / (used / count))) if count else 0
        after = self.used_bytes()
        with self.writing():
            if after > target:  # what is left is (mostly) in use: remember it rather than pay this pass again
                self.conn.execute(
                    "INSERT OR REPLACE INTO state(key, value, at) VALUES ('live_floor', ?, ?)", (after, time.time())
                )
            else:
                self.conn.execute("DELETE FROM state WHERE key = 'live_floor'")
        return dropped

    def _evict(self, excess: int) -> int:
        """Drop up to `excess` entries no registered index uses, least recently used first, and the token bits of
        the texts left with no vector (looked up by hash: the statement before scanned every token row)."""
        if excess <= 0:
            return 0
        used = self._in_use()
        self.conn.execute(
            "CREATE TEMP TABLE IF NOT EXISTS used (provider, model, fingerprint, hash, "
            "PRIMARY KEY (provider, model, fingerprint, hash)) WITHOUT ROWID"
        )
        self.conn.execute("CREATE TEMP TABLE IF NOT EXISTS gone (id INTEGER PRIMARY KEY, hash)")
        with self.writing():
            self.conn.execute("DELETE FROM temp.used; DELETE FROM temp.gone")
            self.conn.executemany("INSERT OR IGNORE INTO temp.used VALUES (?, ?, ?, ?)", used)
            self.conn.execute(
                """
                INSERT INTO temp.gone(id, hash)
                SELECT e.rowid, e.hash FROM embeddings e
                WHERE NOT EXISTS (SELECT 1 FROM temp.used u WHERE u.provider = e.provider AND u.model = e.model
                                  AND u.fingerprint = e.fingerprint AND u.hash = e.hash)
                ORDER BY e.used_at LIMIT ?
                """,
                (excess,),
            )
            self.conn.execute("DELETE FROM embeddings WHERE rowid IN (SELECT id FROM temp.gone)")
            pruned = self.conn.changes()
            self.conn.execute(
                "DELETE FROM tokens WHERE hash IN (SELECT hash FROM temp.gone) "
                "AND NOT EXISTS (SELECT 1 FROM embeddings e WHERE e.hash = tokens.hash)"
            )
        return pruned

    # -- measured speed --------------------------------------------------------------------------------

    def record_throughput(self, key: Key, inputs: int, chars: int, requests: int, seconds: float) -> None:
        with self.writing():
            self.conn.execute(
                "INSERT OR REPLACE INTO throughput VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (*key, inputs, chars, requests, seconds, time.time()),
            )

    def throughput(self, key: Key) -> dict[str, float] | None:
        """The last measured run of this embedder: inputs, chars, requests and seconds spent embedding."""
        row = self.conn.execute(
            "SELECT inputs, chars, requests, seconds FROM throughput WHERE provider = ? AND model = ? "
            "AND fingerprint = ?",
            key,
        ).fetchone()
        return dict(zip(("inputs", "chars", "requests", "seconds"), row)) if row else None
