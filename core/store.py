"""The per-agent index: one SQLite file opened with apsw, FTS5 for BM25, sqlite-vec for KNN.

Tables
  meta             key/value: schema version, index identity (JSON), last sync
  files            one row per indexed memory file: stat fingerprint and content hash
  chunks           line ranges and text; rowid shared with chunks_fts and chunks_vec
  chunks_fts       FTS5, contentless (the text lives in chunks), rows deletable
  chunks_vec       vec0 cosine index, created once the embedder's dimensions are known
  embedding_cache  this index's vectors by (provider, model, fingerprint, text hash): those its chunks use
                   (and, until the next rebuild, those of text it held before); vec0 is refilled from it and
                   the numpy scan reads it. Embeddings shared across indexes and runs live in
                   core.shared_cache, which a sync consults before embedding.

One writer (the sync), many readers: WAL mode and a busy timeout.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from collections.abc import Collection, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import apsw
import numpy as np

from .chunk_cache import CHUNK_ROWS, TOKEN_BITS
from .errors import StoreError
from .keyword_cache import CACHE_MIN_CHUNKS, KEYWORD_CACHES
from .locking import swap_lock
from .query import fts_text
from .vector_matrix import MATRICES, MATRIX_MIN_CHUNKS, top_k

SCHEMA_VERSION = 3  # 2: index chunks(hash); 3: token_cache
BUSY_TIMEOUT_MS = 10_000

# Each chunk with its vector from the cache of one (provider, model, fingerprint). CROSS JOIN makes chunks the
# outer loop (SQLite's own choice was to walk every cache row of the model and probe chunks(hash): 50-100 ms
# per hybrid search at 10,000 chunks for a couple of dozen ids, instead of 0.6 ms).
_CHUNK_VECTORS = (
    "SELECT c.id, e.embedding FROM chunks c CROSS JOIN embedding_cache e ON e.hash = c.hash "
    "AND e.provider = ? AND e.model = ? AND e.fingerprint = ?"
)


# The chunks with no vector in the index's cache under one (provider, model, fingerprint).
_WITHOUT_VECTORS = (
    "FROM chunks c WHERE NOT EXISTS (SELECT 1 FROM embedding_cache e "
    "WHERE e.provider = ? AND e.model = ? AND e.fingerprint = ? AND e.hash = c.hash)"
)

# A JSON array of strings bound as one parameter: no cap on the number of paths (SQLite caps bound parameters).
_JSON_LIST = "(SELECT value FROM json_each(?))"


@dataclass(frozen=True)
class ChunkRow:
    id: int
    path: str
    source: str
    start_line: int
    end_line: int
    text: str
    hash: str


def _load_vec(conn: apsw.Connection) -> str | None:
    """Load sqlite-vec; returns None on success, else why it could not be loaded."""
    try:
        import sqlite_vec

        conn.enable_load_extension(True)
        try:
            conn.load_extension(sqlite_vec.loadable_path())
        finally:
            conn.enable_load_extension(False)
        return None
    except Exception as exc:  # ImportError, apsw.ExtensionLoadingError, missing file
        return f"{type(exc).__name__}: {exc}"


class UnreadableIndex(StoreError):
    """The file at the index's path is no SQLite database, or a damaged one. An index is derived data (the
    memory files and the shared embedding cache rebuild it), so a forced run replaces it (`set_aside`)."""


def set_aside(path: Path) -> Path:
    """Rename an unreadable index (and its -wal and -shm) out of the way, under the swap lock so no reader
    opens it meanwhile; the name it now has. Kept, not deleted: it is the user's file to inspect or remove."""
    aside = path.with_name(f"{path.name}.unreadable-{time.strftime('%Y%m%dT%H%M%S')}")
    with swap_lock(path, exclusive=True):
        for suffix in ("-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
        path.rename(aside)
    return aside


def drop_foreign_wal(path: Path) -> None:
    """Delete a -wal and -shm that belong to another database. A rebuild renames its file (in rollback-journal
    mode) over the live one, then deletes the old file's -wal and -shm; killed between the two while a reader
    kept the old file open, it leaves the old WAL's frames beside the new file, and SQLite would replay them
    into it ("database disk image is malformed"). A file in rollback-journal mode has no WAL of its own (it
    leaves WAL mode only once its WAL is checkpointed), so they go, under the exclusive swap lock as in the
    swap itself."""
    if not Path(f"{path}-wal").exists() or not _rollback_journal(path):
        return
    with swap_lock(path, exclusive=True):
        if _rollback_journal(path):  # not swapped and switched back to WAL meanwhile
            for suffix in ("-wal", "-shm"):
                Path(f"{path}{suffix}").unlink(missing_ok=True)


def _rollback_journal(path: Path) -> bool:
    """Whether the SQLite file at `path` is in rollback-journal mode (header byte 18 is 1; 2 in WAL mode).

    Read through SQLite's own file layer, not `open()`: closing any descriptor of a file drops every POSIX
    lock the process holds on it, so a plain open and close released the SHARED lock of this process's other
    connections, the lock that tells another process closing its last connection not to checkpoint and
    delete the WAL under them. SQLite's unix layer keeps such a descriptor open until those locks go."""
    try:
        file = apsw.VFSFile("", str(path), [apsw.SQLITE_OPEN_MAIN_DB | apsw.SQLITE_OPEN_READONLY, 0])
    except apsw.Error:
        return False
    try:
        header = file.xRead(19, 0)
    except apsw.Error:
        return False
    finally:
        file.xClose()
    return len(header) == 19 and header.startswith(b"SQLite format 3\x00") and header[18] == 1


class Store:
    def __init__(self, path: str | Path, *, use_vec: bool = True, readonly: bool = False) -> None:
        self.path = Path(path)
        if not readonly:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        drop_foreign_wal(self.path)
        flags = apsw.SQLITE_OPEN_READONLY if readonly else apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE
        try:
            # Opening (which reads the schema, and so opens -wal and -shm) never overlaps a swap.
            with swap_lock(self.path, exclusive=False):
                self.conn = apsw.Connection(str(self.path), flags=flags)
                self.conn.set_busy_timeout(BUSY_TIMEOUT_MS)
                self.vec_error = _load_vec(self.conn) if use_vec else "disabled"
                if not readonly:
                    self.conn.execute("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL")
                    self._migrate()
                else:
                    self._check_version()
                self._inode = os.stat(self.path).st_ino
        except (apsw.NotADBError, apsw.CorruptError) as exc:
            raise UnreadableIndex(
                f"cannot open the index {self.path}: {exc}; it holds nothing the memory files do not: "
                "`memsift index --force` sets it aside and rebuilds it"
            ) from exc
        except apsw.Error as exc:
            raise StoreError(f"cannot open the index {self.path}: {exc}") from exc

    @classmethod
    def empty(cls, *, use_vec: bool = True) -> Store:
        """An index with nothing in it, held in memory: what status reads for an agent never indexed, so that
        asking writes no file (no database, no lock file). Closed by the caller, as any Store."""
        store = cls.__new__(cls)
        store.path = Path(":memory:")
        store.conn = apsw.Connection(":memory:")
        store.vec_error = _load_vec(store.conn) if use_vec else "disabled"
        store._migrate()
        store._inode = 0
        return store

    def is_current(self) -> bool:
        """False once a rebuild has swapped another file in at this path: the caller should reopen."""
        try:
            return os.stat(self.path).st_ino == self._inode
        except FileNotFoundError:
            return False

    @property
    def vec_available(self) -> bool:
        return self.vec_error is None

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- schema -------------------------------------------------------------------------------------

    def _check_version(self) -> int:
        if not self._has_table("meta"):
            return 0
        row = self.conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        version = int(row[0]) if row else 0
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"the index {self.path} was written by a newer memsift (schema {version}, this one reads "
                f"{SCHEMA_VERSION}); upgrade memsift or delete the file to rebuild it"
            )
        return version

    def _migrate(self) -> None:
        if self._check_version() == SCHEMA_VERSION:
            return
        with self.transaction():
            self.conn.execute(
                """
                CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
                CREATE TABLE IF NOT EXISTS files (
                    path TEXT PRIMARY KEY,
                    source TEXT NOT NULL,
                    size INTEGER NOT NULL,
                    mtime_ns INTEGER NOT NULL,
                    hash TEXT NOT NULL,
                    indexed_at REAL NOT NULL
                );
                CREATE TABLE IF NOT EXISTS chunks (
                    id INTEGER PRIMARY KEY,
                    path TEXT NOT NULL,
                    source TEXT NOT NULL,
                    start_line INTEGER NOT NULL,
                    end_line INTEGER NOT NULL,
                    hash TEXT NOT NULL,
                    text TEXT NOT NULL
                );
                CREATE INDEX IF NOT EXISTS chunks_by_path ON chunks(path);
                -- joins with embedding_cache (vectors_for, the numpy scan, rebuild_vec) go chunk -> cache
                CREATE INDEX IF NOT EXISTS chunks_by_hash ON chunks(hash);
                CREATE TABLE IF NOT EXISTS embedding_cache (
                    provider TEXT NOT NULL,
                    model TEXT NOT NULL,
                    fingerprint TEXT NOT NULL,
                    hash TEXT NOT NULL,
                    embedding BLOB NOT NULL,
                    created_at REAL NOT NULL,
                    PRIMARY KEY (provider, model, fingerprint, hash)
                ) WITHOUT ROWID;
                -- token bits for the MaxSim reranker (core/rerankers/maxsim.py), by reranker fingerprint and text hash
                CREATE TABLE IF NOT EXISTS token_cache (
                    fingerprint TEXT NOT NULL,
                    hash TEXT NOT NULL,
                    tokens BLOB NOT NULL,
                    PRIMARY KEY (fingerprint, hash)
                ) WITHOUT ROWID;
                """
            )
            self.set_meta("schema_version", str(SCHEMA_VERSION))

    def _has_table(self, name: str) -> bool:
        return self.conn.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (name,)).fetchone() is not None

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """BEGIN IMMEDIATE (the writer takes its lock up front), or a savepoint inside one. After a full disk
        or an I/O error SQLite may have rolled the transaction back itself: the ROLLBACK is skipped then (its
        own error would hide the cause), and a COMMIT that fails rolls back too. A file that cannot be written
        (full, read-only) is a StoreError naming it."""
        if self.conn.in_transaction:
            with self.conn:
                yield
            return
        try:
            self.conn.execute("BEGIN IMMEDIATE")
            try:
                yield
                self.conn.execute("COMMIT")
            except BaseException:
                if self.conn.in_transaction:
                    self.conn.execute("ROLLBACK")
                raise
        except (apsw.FullError, apsw.ReadOnlyError) as exc:
            raise StoreError(f"cannot write the index {self.path}: {exc}") from exc

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        """A read transaction: every query inside sees the index as of the first one, whatever the writer
        commits meanwhile (WAL), so a search never takes chunk ids from one state and their rows from the next."""
        if self.conn.in_transaction:
            yield
            return
        self.conn.execute("BEGIN")
        try:
            yield
        finally:
            if self.conn.in_transaction:  # an I/O error may have ended it: its error, not COMMIT's, is the news
                self.conn.execute("COMMIT")

    def leave_wal(self) -> None:
        """Checkpoint and switch to rollback journal mode, so the file can be swapped in on its own."""
        self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        self.conn.execute("PRAGMA journal_mode=DELETE")

    # -- meta and identity ---------------------------------------------------------------------------

    def get_meta(self, key: str) -> str | None:
        row = self.conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    def set_meta(self, key: str, value: str) -> None:
        self.conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", (key, value))

    def identity(self) -> dict[str, Any] | None:
        raw = self.get_meta("identity")
        return json.loads(raw) if raw else None

    def set_identity(self, identity: dict[str, Any]) -> None:
        self.set_meta("identity", json.dumps(identity, sort_keys=True))

    def reset(self, identity: dict[str, Any], tokenize: str) -> None:
        """Drop every file and chunk and start over under a new identity; the embedding cache stays."""
        with self.transaction():
            self.conn.execute("DROP TABLE IF EXISTS chunks_fts; DELETE FROM chunks; DELETE FROM files")
            if self.vec_available:
                self.conn.execute("DROP TABLE IF EXISTS chunks_vec")
            self.conn.execute(
                f"CREATE VIRTUAL TABLE chunks_fts USING fts5(text, content='', contentless_delete=1, "
                f"tokenize={_sql_str(tokenize)})"
            )
            dims = identity.get("dims")
            if dims and self.vec_available:
                self._create_vec(dims)
            self.set_identity(identity)
            self._vectors_changed()
            # Without sqlite-vec an old chunks_vec could not be dropped: its rows no longer match the chunks.
            self.set_meta("vec_stale", "0" if self.vec_available or not self.has_vec_table() else "1")

    def _create_vec(self, dims: int) -> None:
        self.conn.execute(
            f"CREATE VIRTUAL TABLE IF NOT EXISTS chunks_vec USING vec0(embedding float[{int(dims)}] "
            "distance_metric=cosine)"
        )

    def has_vec_table(self) -> bool:
        return self._has_table("chunks_vec")

    # -- files and chunks ----------------------------------------------------------------------------

    def file_rows(self) -> dict[str, tuple[int, int, str]]:
        return {p: (s, m, h) for p, s, m, h in self.conn.execute("SELECT path, size, mtime_ns, hash FROM files")}

    def file_count(self) -> int:
        return self.conn.execute("SELECT count(*) FROM files").fetchone()[0]

    def touch_file(self, path: str, size: int, mtime_ns: int) -> None:
        self.conn.execute("UPDATE files SET size = ?, mtime_ns = ? WHERE path = ?", (size, mtime_ns, path))

    def remove_file(self, path: str) -> int:
        ids = [r[0] for r in self.conn.execute("SELECT id FROM chunks WHERE path = ?", (path,))]
        self._delete_chunks(ids)
        self.conn.execute("DELETE FROM files WHERE path = ?", (path,))
        return len(ids)

    def _delete_chunks(self, ids: list[int]) -> None:
        if not ids:
            return
        rows = [(i,) for i in ids]
        self.conn.executemany("DELETE FROM chunks_fts WHERE rowid = ?", rows)
        if self.has_vec_table():
            if self.vec_available:
                self.conn.executemany("DELETE FROM chunks_vec WHERE rowid = ?", rows)
            else:  # vec0 cannot be touched without sqlite-vec: its rows are orphans until rebuild_vec
                self.set_meta("vec_stale", "1")
        self.conn.executemany("DELETE FROM chunks WHERE id = ?", rows)
        self._vectors_changed()

    def replace_file(
        self,
        path: str,
        source: str,
        size: int,
        mtime_ns: int,
        file_hash: str,
        chunks: list[tuple[int, int, str, str]],
        vectors: np.ndarray | list[np.ndarray | None] | None,
    ) -> None:
        """Swap a file's chunks for new ones: `chunks` are (start, end, text, hash), `vectors` aligned (a None
        row: a chunk the provider refused, which gets no vector row)."""
        old = [r[0] for r in self.conn.execute("SELECT id FROM chunks WHERE path = ?", (path,))]
        self._delete_chunks(old)
        write_vec = (
            vectors is not None
            and self.vec_available
            and self.has_vec_table()
            and self.get_meta("vec_stale") != "1"  # stale rows may hold these rowids; rebuild_vec refills
        )
        for i, (start, end, text, h) in enumerate(chunks):
            self.conn.execute(
                "INSERT INTO chunks(path, source, start_line, end_line, hash, text) VALUES (?, ?, ?, ?, ?, ?)",
                (path, source, start, end, h, text),
            )
            rowid = self.conn.last_insert_rowid()
            self.conn.execute("INSERT INTO chunks_fts(rowid, text) VALUES (?, ?)", (rowid, fts_text(text)))
            if write_vec and vectors[i] is not None:
                self.conn.execute(
                    "INSERT INTO chunks_vec(rowid, embedding) VALUES (?, ?)", (rowid, vectors[i].tobytes())
                )
        if vectors is not None and not write_vec:
            self.set_meta("vec_stale", "1")
        self._vectors_changed()
        self.conn.execute(
            "INSERT OR REPLACE INTO files(path, source, size, mtime_ns, hash, indexed_at) VALUES (?, ?, ?, ?, ?, ?)",
            (path, source, size, mtime_ns, file_hash, time.time()),
        )

    def chunks_by_ids(self, ids: Iterable[int]) -> dict[int, ChunkRow]:
        """Rows of some chunks, through the process's copy of the recently read ones (core.chunk_cache)."""
        ids = list(ids)
        if not ids:
            return {}

        def read(wanted: list[int]) -> dict[int, ChunkRow]:
            marks = ",".join("?" * len(wanted))
            rows = self.conn.execute(
                f"SELECT id, path, source, start_line, end_line, text, hash FROM chunks WHERE id IN ({marks})", wanted
            )
            return {r[0]: ChunkRow(*r) for r in rows}

        return CHUNK_ROWS.get(str(self.path), (self._inode, self.get_meta("vectors_version")), ids, read)

    def file_mtimes(self, paths: Iterable[str] | None = None) -> dict[str, int]:
        """mtime_ns by path of some files, or of every file (None)."""
        if paths is None:
            return dict(self.conn.execute("SELECT path, mtime_ns FROM files"))
        paths = list(paths)
        marks = ",".join("?" * len(paths))
        return dict(self.conn.execute(f"SELECT path, mtime_ns FROM files WHERE path IN ({marks})", paths))

    # -- embedding cache -----------------------------------------------------------------------------

    def cache_get(self, key: tuple[str, str, str], hashes: Iterable[str]) -> dict[str, np.ndarray]:
        sql = (
            "SELECT hash, embedding FROM embedding_cache WHERE provider = ? AND model = ? AND fingerprint = ? AND hash"
        )
        return {h: np.frombuffer(blob, dtype=np.float32) for h, blob in self._by_hash(sql, key, hashes)}

    def has_file(self, path: str) -> bool:
        return self.conn.execute("SELECT 1 FROM files WHERE path = ?", (path,)).fetchone() is not None

    def cache_known(self, key: tuple[str, str, str], hashes: Iterable[str]) -> set[str]:
        """Which of `hashes` the cache holds a vector for under `key` (without loading the vectors)."""
        sql = "SELECT hash FROM embedding_cache WHERE provider = ? AND model = ? AND fingerprint = ? AND hash"
        return {h for (h,) in self._by_hash(sql, key, hashes)}

    def _by_hash(self, sql: str, params: tuple[Any, ...], hashes: Iterable[str]) -> Iterator[tuple[Any, ...]]:
        """Rows of `sql ... IN (hashes)`, in slices of 500 (SQLite caps the number of bound parameters)."""
        hashes = list(dict.fromkeys(hashes))
        for i in range(0, len(hashes), 500):
            part = hashes[i : i + 500]
            yield from self.conn.execute(f"{sql} IN ({','.join('?' * len(part))})", (*params, *part))

    def cache_put(self, key: tuple[str, str, str], items: dict[str, np.ndarray]) -> None:
        now = time.time()
        self.conn.executemany(
            "INSERT OR REPLACE INTO embedding_cache(provider, model, fingerprint, hash, embedding, created_at) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            [(*key, h, np.asarray(v, dtype=np.float32).tobytes(), now) for h, v in items.items()],
        )
        self._vectors_changed()

    # -- token cache (MaxSim reranker) ----------------------------------------------------------------

    def tokens_put(self, fingerprint: str, items: dict[str, bytes]) -> None:
        self.conn.executemany(
            "INSERT OR REPLACE INTO token_cache(fingerprint, hash, tokens) VALUES (?, ?, ?)",
            [(fingerprint, h, blob) for h, blob in items.items()],
        )
        self._vectors_changed()

    def tokens_known(self, fingerprint: str, hashes: Iterable[str]) -> set[str]:
        sql = "SELECT hash FROM token_cache WHERE fingerprint = ? AND hash"
        return {h for (h,) in self._by_hash(sql, (fingerprint,), hashes)}

    def tokens_count(self, fingerprint: str) -> int:
        return self.conn.execute("SELECT count(*) FROM token_cache WHERE fingerprint = ?", (fingerprint,)).fetchone()[0]

    def tokens_for(self, ids: Iterable[int], fingerprint: str) -> dict[int, bytes]:
        """Stored token bits of some chunks (those indexed with them), through the process's copy of the recently
        read ones (core.chunk_cache)."""
        ids = list(ids)
        if not ids:
            return {}

        def read(wanted: list[int]) -> dict[int, bytes]:
            marks = ",".join("?" * len(wanted))
            sql = (
                "SELECT c.id, t.tokens FROM chunks c CROSS JOIN token_cache t "
                f"ON t.hash = c.hash AND t.fingerprint = ? WHERE c.id IN ({marks})"
            )
            return {int(i): blob for i, blob in self.conn.execute(sql, (fingerprint, *wanted))}

        tag = (self._inode, fingerprint, self.get_meta("vectors_version"))
        return TOKEN_BITS.get(str(self.path), tag, ids, read)

    def chunks_without_cached_vectors(self, key: tuple[str, str, str]) -> dict[str, str]:
        """hash -> text of the chunks whose vector the cache lacks under `key` (a sync the embedder failed)."""
        return dict(self.conn.execute(f"SELECT c.hash, c.text {_WITHOUT_VECTORS}", key).fetchall())

    def count_without_vectors(
        self, key: tuple[str | None, str | None, str | None], among: list[str] | None = None
    ) -> int:
        """How many chunks have no vector under `key` (all of them under a provisional identity's, whose
        fingerprint is None: what `status` and a search say while vectors are pending), or how many of those
        whose hash is `among`."""
        if among is None:
            return self.conn.execute(f"SELECT count(*) {_WITHOUT_VECTORS}", key).fetchone()[0]
        sql = f"SELECT count(*) {_WITHOUT_VECTORS} AND c.hash IN {_JSON_LIST}"
        return self.conn.execute(sql, (*key, json.dumps(among))).fetchone()[0]

    # -- the vec0 table ------------------------------------------------------------------------------

    def vec_needs_refill(self) -> bool:
        """sqlite-vec is here now, but the vectors were written (or deleted) while it could not load."""
        return self.vec_available and (self.get_meta("vec_stale") == "1" or not self.has_vec_table())

    def rebuild_vec(self, key: tuple[str, str, str], dims: int) -> None:
        """Create and refill chunks_vec from the cache after writes made while sqlite-vec could not load."""
        if not self.vec_available:
            return
        with self.transaction():
            self._create_vec(dims)
            self.conn.execute("DELETE FROM chunks_vec")
            rows = self.conn.execute(_CHUNK_VECTORS, key).fetchall()
            self.conn.executemany("INSERT INTO chunks_vec(rowid, embedding) VALUES (?, ?)", rows)
            self.set_meta("vec_stale", "0")

    # -- search legs ---------------------------------------------------------------------------------

    def fts_search(self, match: str, limit: int, paths: Collection[str] | None = None) -> list[tuple[int, float]]:
        """(chunk id, bm25) best first; bm25 is negative, lower is better. `paths`: only chunks of these files
        (a search's filters), applied before the LIMIT so a filtered search still gets `limit` candidates."""
        if paths is not None:
            # FTS5 runs first, whatever the planner thinks of the chunks table: the MATCH as a materialised CTE.
            sql = (
                "WITH hits AS MATERIALIZED (SELECT rowid AS id, bm25(chunks_fts) AS s FROM chunks_fts "
                "WHERE chunks_fts MATCH ?) "
                f"SELECT h.id, h.s FROM hits h JOIN chunks c ON c.id = h.id WHERE c.path IN {_JSON_LIST} "
                "ORDER BY h.s LIMIT ?"
            )
            args: tuple[Any, ...] = (match, json.dumps(list(paths)), limit)
        else:
            sql = "SELECT rowid, bm25(chunks_fts) AS s FROM chunks_fts WHERE chunks_fts MATCH ? ORDER BY s LIMIT ?"
            args = (match, limit)
        return [(int(r), float(s)) for r, s in self.conn.execute(sql, args)]

    def keyword_search(
        self, phrases: list[str], limit: int, paths: Collection[str] | None = None, positive_idf: bool = False
    ) -> list[tuple[int, float]]:
        """`fts_search` of the OR of `phrases` (each quoted, core.query.fts_phrases), the same ids, order and
        scores: from the cached scores of each phrase in large indexes (core.keyword_cache), else FTS5's.
        `positive_idf` (keyword-only searches): each phrase's idf Lucene's rather than FTS5's, whose floor at
        1e-6 scored every hit of a tiny index about 0; always from the cached phrases, whatever the size."""
        match = " OR ".join(phrases)
        # A small index's FTS5 scores never reach the process-wide cache (nor its lock): its largest chunk id
        # bounds its chunk count from above, one index lookup, so FTS5 answers it as before.
        small = (self.conn.execute("SELECT max(id) FROM chunks").fetchone()[0] or 0) < CACHE_MIN_CHUNKS
        if small and not positive_idf:
            return self.fts_search(match, limit, paths)
        listed = None if paths is None else json.dumps(list(paths))
        found = KEYWORD_CACHES.search(
            str(self.path),
            (self._inode, self.get_meta("vectors_version")),
            chunk_ids=self._chunk_ids,
            phrases=phrases,
            phrase_scores=lambda phrase: self.conn.execute(
                "SELECT rowid, bm25(chunks_fts) FROM chunks_fts WHERE chunks_fts MATCH ?", (phrase,)
            ),
            limit=limit,
            allowed=None if listed is None else lambda: self._ids_of(listed),
            min_chunks=0 if positive_idf else CACHE_MIN_CHUNKS,
            positive_idf=positive_idf,
        )
        return self.fts_search(match, limit, paths) if found is None else found

    def phrase_counts(self, phrases: list[str]) -> list[int]:
        """How many chunks each FTS5 phrase matches (core.calibration's document frequency of a query term): the
        rows of the keyword leg's cached scores of that phrase when a large index has them (the same search
        just read them), else an FTS5 count (0.5 ms for a common term at 10,000 chunks)."""
        cached = KEYWORD_CACHES.counts(str(self.path), (self._inode, self.get_meta("vectors_version")), phrases)
        sql = "SELECT count(*) FROM chunks_fts WHERE chunks_fts MATCH ?"
        return [int(self.conn.execute(sql, (p,)).fetchone()[0]) if n is None else n for p, n in zip(phrases, cached)]

    def _vectors_changed(self) -> None:
        """Bump the counter that tells in-memory copies of this index (core.vector_matrix, core.keyword_cache,
        core.chunk_cache) to reload. A new file's counter starts at a random number: a rebuild's file can get
        the inode of one swapped out before it, and with both counters starting at 1 it could match a stale
        copy's tag."""
        self.conn.execute(
            "INSERT INTO meta(key, value) VALUES ('vectors_version', ?) "
            "ON CONFLICT(key) DO UPDATE SET value = CAST(value AS INTEGER) + 1",
            (str(secrets.randbits(62)),),
        )

    def vec_search(
        self, query: np.ndarray, limit: int, key: tuple[str, str, str], paths: Collection[str] | None = None
    ) -> list[tuple[int, float]]:
        """(chunk id, cosine similarity) best first: vec0 KNN for small indexes, else the in-memory matrix
        of every cached vector (core.vector_matrix), which is also the way without sqlite-vec. `paths`: only
        chunks of these files, inside the KNN (not after it), so a filtered search still gets `limit`."""
        query = np.asarray(query, dtype=np.float32)
        vec0 = self.vec_available and self.has_vec_table() and self.get_meta("vec_stale") != "1"
        found = MATRICES.get(
            str(self.path),
            self._matrix_tag(key),
            count=lambda: self.conn.execute("SELECT count(*) FROM chunks").fetchone()[0],
            rows=lambda: self.conn.execute(_CHUNK_VECTORS, key),
            dims=len(query),
            min_chunks=MATRIX_MIN_CHUNKS if vec0 else 0,
        )
        listed = None if paths is None else json.dumps(list(paths))
        if found is not None:
            allowed = None
            if listed is not None:
                allowed = np.isin(found[0], self._ids_of(listed))
            return top_k(*found, query, limit, allowed)
        sql = "SELECT rowid, distance FROM chunks_vec WHERE embedding MATCH ? AND k = ?"
        args: tuple[Any, ...] = (query.tobytes(), limit)
        if listed is not None:
            sql += f" AND rowid IN (SELECT id FROM chunks WHERE path IN {_JSON_LIST})"
            args += (listed,)
        return [(int(r), 1.0 - float(d)) for r, d in self.conn.execute(sql, args)]

    def _chunk_ids(self) -> np.ndarray:
        """Every chunk id, ascending: one string from SQLite rather than a Python row per id (5 times faster)."""
        joined = self.conn.execute("SELECT group_concat(id) FROM chunks").fetchone()[0]
        return np.sort(np.array(joined.split(","), dtype=np.int64)) if joined else np.empty(0, dtype=np.int64)

    def _ids_of(self, listed: str) -> list[int]:
        """The chunk ids of the files in `listed` (a JSON array of paths): a search's filters."""
        return [r[0] for r in self.conn.execute(f"SELECT id FROM chunks WHERE path IN {_JSON_LIST}", (listed,))]

    def _matrix_tag(self, key: tuple[str, str, str]) -> tuple[Any, ...]:
        """What an in-memory matrix of this index must match to be current (core.vector_matrix)."""
        return (self._inode, key, self.get_meta("vectors_version"))

    def vectors_for(self, ids: Iterable[int], key: tuple[str, str, str]) -> dict[int, np.ndarray]:
        """Stored vectors of some chunks, to score candidates the KNN cut left out: from the in-memory matrix
        when the vector leg has one loaded, else from SQLite."""
        ids = list(ids)
        if not ids:
            return {}
        entry = MATRICES.loaded(str(self.path), self._matrix_tag(key))
        if entry is not None:
            return entry.vectors_of(ids)
        marks = ",".join("?" * len(ids))
        rows = self.conn.execute(f"{_CHUNK_VECTORS} WHERE c.id IN ({marks})", (*key, *ids))
        return {int(i): np.frombuffer(b, dtype=np.float32) for i, b in rows}

    # -- status --------------------------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        files = dict(self.conn.execute("SELECT source, count(*) FROM files GROUP BY source").fetchall())
        chunks = dict(self.conn.execute("SELECT source, count(*) FROM chunks GROUP BY source").fetchall())
        cache = self.conn.execute("SELECT count(*) FROM embedding_cache").fetchone()[0]
        return {"files": files, "chunks": chunks, "cacheEntries": cache}


def _sql_str(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"
