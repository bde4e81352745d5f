"""What a search reads from an index: the keyword and vector legs (FTS5 and vec0 for small indexes, the
process's cached scores and vector matrix for large ones), the stored vectors of candidates and their rows.
Apart from core.store_files because these only read, through the in-memory copies a search keeps warm."""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Any

import apsw
import numpy as np

from .chunk_cache import CHUNK_ROWS
from .keyword_cache import CACHE_MIN_CHUNKS, KEYWORD_CACHES
from .store_schema import CHUNK_VECTORS, JSON_LIST, StoreSchema
from .vector_matrix import MATRICES, MATRIX_MIN_CHUNKS, top_k


@dataclass(frozen=True)
class ChunkRow:
    id: int
    path: str
    source: str
    start_line: int
    end_line: int
    text: str
    hash: str


class StoreSearch(StoreSchema):
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

    # -- search legs ---------------------------------------------------------------------------------

    def fts_search(self, match: str, limit: int, paths: Collection[str] | None = None) -> list[tuple[int, float]]:
        """(chunk id, bm25) best first; bm25 is negative, lower is better. `paths`: only chunks of these files
        (a search's filters), applied before the LIMIT so a filtered search still gets `limit` candidates."""
        if paths is not None:
            # FTS5 runs first, whatever the planner thinks of the chunks table: the MATCH as a materialised CTE.
            sql = (
                "WITH hits AS MATERIALIZED (SELECT rowid AS id, bm25(chunks_fts) AS s FROM chunks_fts "
                "WHERE chunks_fts MATCH ?) "
                f"SELECT h.id, h.s FROM hits h JOIN chunks c ON c.id = h.id WHERE c.path IN {JSON_LIST} "
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
            phrase_hits=self._phrase_hits,
            lengths=self._fts_lengths,
        )
        return self.fts_search(match, limit, paths) if found is None else found

    def phrase_counts(self, phrases: list[str]) -> list[int]:
        """How many chunks each FTS5 phrase matches (core.calibration's document frequency of a query term): the
        rows of the keyword leg's cached scores of that phrase when a large index has them (the same search
        just read them), else an FTS5 count (0.5 ms for a common term at 10,000 chunks)."""
        cached = KEYWORD_CACHES.counts(str(self.path), (self._inode, self.get_meta("vectors_version")), phrases)
        sql = "SELECT count(*) FROM chunks_fts WHERE chunks_fts MATCH ?"
        return [int(self.conn.execute(sql, (p,)).fetchone()[0]) if n is None else n for p, n in zip(phrases, cached)]

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
            rows=lambda: self.conn.execute(CHUNK_VECTORS, key),
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
            sql += f" AND rowid IN (SELECT id FROM chunks WHERE path IN {JSON_LIST})"
            args += (listed,)
        return [(int(r), 1.0 - float(d)) for r, d in self.conn.execute(sql, args)]

    def _chunk_ids(self) -> np.ndarray:
        """Every chunk id, ascending: one string from SQLite rather than a Python row per id (5 times faster)."""
        return np.sort(_integers(self.conn.execute("SELECT group_concat(id) FROM chunks").fetchone()[0]))

    def _fts_lengths(self) -> tuple[np.ndarray, np.ndarray, int, int] | None:
        """Every FTS5 row id (the chunk ids), its length in tokens, and FTS5's row and token totals, read as
        `bm25()` reads them (the docsize table, the averages record) but in one scan: bm25() searched the docsize
        table once a row. None when a table is not laid out so (a length missing, an unreadable record): the chunk
        ids are then read from the chunks and bm25() scores."""
        joined, sizes = self.conn.execute(
            "SELECT group_concat(id), CAST(group_concat(sz, '') AS BLOB) FROM chunks_fts_docsize"
        ).fetchone()
        record = self.conn.execute("SELECT block FROM chunks_fts_data WHERE id = 1").fetchone()  # the averages
        if not joined or not sizes or record is None or not record[0]:
            return None
        ids = _integers(joined)
        lengths, totals = _varints(sizes), _varints(record[0])
        if len(lengths) != len(ids) or len(totals) < 2 or not np.all(ids[1:] > ids[:-1]):
            return None  # one varint a row (one column): else the layout is not the one this reads
        return ids, lengths, int(totals[0]), int(totals[1])

    def _phrase_hits(self, phrase: str) -> tuple[np.ndarray, np.ndarray] | None:
        """The rows a quoted phrase (core.query) matches and its occurrences in each, when FTS5's tokenizer makes
        one token of it (not a prefix `"..."*`): from an `fts5vocab` instance table, one row per occurrence, read
        as one string; None otherwise (several tokens, a phrase FTS5 matches by position)."""
        if len(phrase) < 2 or phrase[0] != '"' or phrase[-1] != '"':
            return None
        tokens = self._query_tokens(phrase[1:-1].replace('""', '"'))
        if tokens is None or len(tokens) != 1:
            return None
        self.conn.execute(
            "CREATE VIRTUAL TABLE IF NOT EXISTS temp.chunks_fts_instance USING fts5vocab(main, chunks_fts, instance)"
        )
        sql = "SELECT group_concat(doc) FROM temp.chunks_fts_instance WHERE term = ?"
        docs = _integers(self.conn.execute(sql, tokens).fetchone()[0])
        if len(docs) > 1 and not np.all(docs[1:] >= docs[:-1]):  # fts5vocab walks a term's rows in order
            docs = np.sort(docs)
        first = np.flatnonzero(np.concatenate(([True], docs[1:] != docs[:-1]))) if len(docs) else docs
        return docs[first], np.diff(np.append(first, len(docs)))

    def _query_tokens(self, text: str) -> list[str] | None:
        """`text` as FTS5 tokenizes a query phrase under this index's tokenizer (its identity's `tokenizer`, the
        table's `tokenize=`), or None when that tokenizer cannot be had or gives colocated tokens."""
        spec = (self.identity() or {}).get("tokenizer")
        if not isinstance(spec, str) or not spec.split():
            return None
        cached = getattr(self, "_tokenizer", None)
        if cached is None or cached[0] != spec:
            name, *args = spec.split()
            try:
                cached = self._tokenizer = (spec, self.conn.fts5_tokenizer(name, args))
            except apsw.Error:
                return None
        found = cached[1](text.encode(), apsw.FTS5_TOKENIZE_QUERY, None, include_offsets=False)
        # Each token with its colocated ones (synonyms): FTS5 would match any of them, so only single ones here.
        return [token[0] for token in found] if all(len(token) == 1 for token in found) else None

    def _ids_of(self, listed: str) -> list[int]:
        """The chunk ids of the files in `listed` (a JSON array of paths): a search's filters."""
        return [r[0] for r in self.conn.execute(f"SELECT id FROM chunks WHERE path IN {JSON_LIST}", (listed,))]

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
        rows = self.conn.execute(f"{CHUNK_VECTORS} WHERE c.id IN ({marks})", (*key, *ids))
        return {int(i): np.frombuffer(b, dtype=np.float32) for i, b in rows}


def _integers(joined: str | None) -> np.ndarray:
    """The integers of a `group_concat` (comma-separated; None for no row), parsed in C: np.array over the
    split string cost 0.8 us a number (41 ms for 50,000 chunk ids), this 0.05 us."""
    return np.fromstring(joined, dtype=np.int64, sep=",") if joined else np.empty(0, dtype=np.int64)


def _varints(blob: bytes) -> np.ndarray:
    """SQLite's varints packed one after another (FTS5's docsize sizes, its averages record), decoded together: big
    endian groups of 7 bits, the high bit set on every byte but a number's last (values below 2^56)."""
    data = np.frombuffer(blob, dtype=np.uint8)
    ends = np.flatnonzero(data < 0x80)
    starts = np.concatenate(([0], ends[:-1] + 1)).astype(np.int64)
    values = np.zeros(len(ends), dtype=np.int64)
    width = ends - starts + 1
    for k in range(int(width.max(initial=0))):
        live = width > k
        values[live] = (values[live] << 7) | (data[starts[live] + k] & 0x7F)
    return values
