"""The keyword leg of large indexes (core/keyword_cache.py): the same ids, order and scores as FTS5's bm25 over the
OR of the query's phrases, under every tokenizer, with filters, and never stale after a sync or a rebuild."""

from __future__ import annotations

import hashlib
import math
import random
import threading
from collections import defaultdict

import numpy as np
import pytest

from core import MemoryIndex
from core.keyword_cache import KEYWORD_CACHES, KeywordCaches, lucene_idf_ratio
from core.query import fts_phrases
from core.store import Store

TOKENIZERS = {
    "porter": "porter unicode61 remove_diacritics 2",
    "plain": "unicode61 remove_diacritics 2",
    "trigram": "trigram",
}
WORDS = (
    "deploy deployed deploying running runs ran proxy certificate morning standup tea dentist friday "
    "café cafe naïve resume résumé alpha beta gamma budget berlin ramen allergic elena marco"
).split()
SPECIAL = [
    "The deploy failed with ERR_SSL_PROTOCOL after PR #17 merged; err ssl protocol again",
    'alpha AND beta OR gamma NOT delta; NEAR(foo bar) prefix* ^caret "quoted words" col:on',
    "日本語のメモ 東京で会議 한국어 메모 café naïve résumé",
    "running runs ran the runner 2026 12 17 v1.2.3",
    "the a is of and to it",  # stop words only
]
QUERIES = [
    "deploy",
    "running",
    "runs ran",
    "what is it",  # stop words only: they are all there is
    "the",
    "ERR_SSL_PROTOCOL",
    "err ssl protocol",
    "PR #17",
    "17",
    "2026 12",
    "v1.2.3",
    "alpha AND beta",
    "NEAR(foo bar)",
    "prefix*",
    '"quoted words"',
    "col:on ^caret",
    "東京",
    "会議 メモ",
    "한국어",
    "cafe",
    "café naïve",
    "resume",
    "Elena allergic ramen Berlin budget",
    "morning tea before the standup with Marco",
    "zzzz nothing matches this",
]


def _fill(store: Store, chunks: int, seed: int = 7) -> None:
    """`chunks` one-chunk files of words drawn with repeats (so many rows tie), and the special texts."""
    rng = random.Random(seed)
    texts = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 12))) for _ in range(chunks)]
    texts[:: max(1, chunks // len(SPECIAL))][: len(SPECIAL)] = SPECIAL
    for i, text in enumerate(texts[:chunks] + SPECIAL):
        rows = [(1, 1, text, hashlib.sha256(text.encode()).hexdigest())]
        store.replace_file(f"memory/{i:04d}.md", "memory", len(text), 0, str(i), rows, None)


@pytest.fixture(scope="module", params=sorted(TOKENIZERS))
def store(request, tmp_path_factory):
    """A real index file of 600 chunks under each tokenizer (with and without the porter stemmer)."""
    tokenize = TOKENIZERS[request.param]
    s = Store(tmp_path_factory.mktemp("kw") / "kw.sqlite", use_vec=False)
    s.reset({"tokenizer": tokenize}, tokenize)
    with s.transaction():
        _fill(s, 600)
    yield s
    s.close()


@pytest.fixture
def large(monkeypatch: pytest.MonkeyPatch) -> None:
    """Treat every index as large, so the cached phrases answer (thousands of real chunks would be slow)."""
    monkeypatch.setattr("core.store_search.CACHE_MIN_CHUNKS", 1)


def _ids(store: Store) -> np.ndarray:
    return np.array([r[0] for r in store.conn.execute("SELECT id FROM chunks ORDER BY id")], dtype=np.int64)


def _same(cached: list[tuple[int, float]], fts: list[tuple[int, float]]) -> None:
    """The same ids in the same order with the same scores: bit for bit, since each row's terms are added in
    the order fts5Bm25Function adds them (a tolerance would hide a change of that order)."""
    assert [c for c, _ in cached] == [c for c, _ in fts]
    assert [s for _, s in cached] == [s for _, s in fts]


@pytest.mark.parametrize("limit", [1, 7, 40, 5000])
def test_cached_phrases_rank_as_fts5_bm25(store: Store, large, limit: int) -> None:
    matched = 0
    for query in QUERIES:
        phrases = fts_phrases(query)
        fts = store.fts_search(" OR ".join(phrases), limit)
        for _ in range(2):  # the first search fills the phrases, the second reads them
            _same(store.keyword_search(phrases, limit), fts)
        matched += bool(fts)
    assert matched >= len(QUERIES) - 3  # the queries do reach the rows (a few match nothing under trigram)


@pytest.mark.parametrize("tokenizer", sorted(TOKENIZERS))
def test_one_token_phrases_are_scored_without_bm25_and_as_fts5_scores_them(tmp_path, large, tokenizer: str) -> None:
    """A phrase FTS5 makes one token of is scored from its occurrences and the rows' lengths, not by `bm25()`
    (whose lookup of each row's length cost 4 us a row: 200 ms for a word in 50,000 rows): the same ids, order and
    scores bit for bit, over rows deleted (FTS5's tombstones), rows of 0, 1-byte, 2-byte and 3-byte lengths, and a
    file rewritten; phrases of several tokens and prefixes still ask `bm25()`."""
    tokenize = TOKENIZERS[tokenizer]
    with Store(tmp_path / "kw.sqlite", use_vec=False) as store:
        store.reset({"tokenizer": tokenize}, tokenize)
        with store.transaction():
            _fill(store, 300)
            rng = random.Random(3)
            for i, words in enumerate([0, 200, 20_000]):  # no token at all, then 2- and 3-byte varint lengths
                text = " ".join(rng.choice(WORDS) for _ in range(words)) or "-- ... --"
                rows = [(1, 1, text, hashlib.sha256(text.encode()).hexdigest())]
                store.replace_file(f"memory/long{i}.md", "memory", len(text), 0, "x", rows, None)
        with store.transaction():
            for i in range(0, 300, 7):
                store.remove_file(f"memory/{i:04d}.md")
            text = "deploy deploy deploy tea"
            store.replace_file("memory/0001.md", "memory", 1, 0, "y", [(1, 1, text, "h")], None)
        statements: list[str] = []
        store.conn.exec_trace = lambda _cursor, sql, _bindings: statements.append(sql) or True
        by_bm25 = 0
        for query in QUERIES:
            phrases = fts_phrases(query)
            statements.clear()
            found = store.keyword_search(phrases, 5000)
            asked = [s for s in statements if "bm25(" in s]
            by_bm25 += len(asked)
            if tokenizer != "trigram" and query.replace(" ", "").isalpha() and query.isascii():
                assert asked == [], query  # words: one token each (trigram makes several of most)
            store.conn.exec_trace = None
            _same(found, store.fts_search(" OR ".join(phrases), 5000))
            store.conn.exec_trace = lambda _cursor, sql, _bindings: statements.append(sql) or True
        store.conn.exec_trace = None
        cached = KEYWORD_CACHES._indexes[str(store.path)]
        assert cached.lengths is not None and cached.lengths.max() > 16_384 and cached.lengths.min() == 0
        assert by_bm25 > 0  # several-token phrases (and trigram's) are FTS5's still


def test_phrase_counts_are_fts5_counts_cached_or_not(store: Store, large) -> None:
    """Calibration's document frequencies: from the phrases a keyword search cached (no FTS5 query), and from
    FTS5 for the others and for a cache of another state of the index, always FTS5's count."""

    def fts_count(phrase: str) -> int:
        return store.conn.execute("SELECT count(*) FROM chunks_fts WHERE chunks_fts MATCH ?", (phrase,)).fetchone()[0]

    tag = (store._inode, store.get_meta("vectors_version"))
    for query in QUERIES:
        phrases = fts_phrases(query)
        expected = [fts_count(p) for p in phrases]
        assert store.phrase_counts(phrases) == expected
        store.keyword_search(phrases, 10)
        assert KEYWORD_CACHES.counts(str(store.path), tag, phrases) == expected  # read from the cached rows
        assert store.phrase_counts(phrases) == expected
    assert KEYWORD_CACHES.counts(str(store.path), (*tag, "stale"), ['"deploy"']) == [None]
    assert sum(fts_count(p) for q in QUERIES for p in fts_phrases(q)) > 100  # the phrases do match rows


def test_a_filtered_search_still_gets_limit_candidates(store: Store, large) -> None:
    phrases = fts_phrases("deploy running tea")
    paths = [f"memory/{i:04d}.md" for i in range(0, 600, 3)]
    fts = store.fts_search(" OR ".join(phrases), 20, paths)
    cached = store.keyword_search(phrases, 20, paths)
    _same(cached, fts)
    rows = store.chunks_by_ids(c for c, _ in cached)
    assert len(cached) == 20 and all(rows[c].path in paths for c, _ in cached)


def test_lucene_idf_replaces_fts5s_floored_and_positive_idf() -> None:
    """FTS5's idf is floored at 1e-6 from n = N/2 on; Lucene's log(1 + (N - n + 0.5) / (n + 0.5)) never is."""
    assert lucene_idf_ratio(2, 1) == math.log(2) / 1e-6  # a first workspace: N = 2, FTS5's idf log(1) = 0
    assert lucene_idf_ratio(100, 10) == math.log1p(90.5 / 10.5) / math.log(90.5 / 10.5)
    idf = [lucene_idf_ratio(100, n) * max(math.log((100.5 - n) / (n + 0.5)), 1e-6) for n in range(1, 101)]
    assert all(a > b > 0 for a, b in zip(idf, idf[1:]))  # a commoner phrase never weighs more, whatever n


@pytest.mark.parametrize("filtered", [False, True])
def test_keyword_only_scores_are_fts5s_terms_with_lucene_idf(store: Store, filtered: bool) -> None:
    """`positive_idf` at any index size (600 chunks: under the cache's threshold): each phrase's FTS5 term in a
    row times Lucene's idf over FTS5's, added in query order; the order is theirs, ties by ascending id."""
    rows = store.conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
    paths = [f"memory/{i:04d}.md" for i in range(0, 600, 3)] if filtered else None
    allowed = None if paths is None else {c for c, p in store.conn.execute("SELECT id, path FROM chunks") if p in paths}
    for query in QUERIES:
        phrases = fts_phrases(query)
        expected: dict[int, float] = defaultdict(float)
        for phrase in phrases:
            sql = "SELECT rowid, bm25(chunks_fts) FROM chunks_fts WHERE chunks_fts MATCH ?"
            found = store.conn.execute(sql, (phrase,)).fetchall()
            for rowid, bm25 in found:
                expected[rowid] += bm25 * lucene_idf_ratio(rows, len(found))
        ranked = sorted((s, c) for c, s in expected.items() if allowed is None or c in allowed)[:30]
        assert store.keyword_search(phrases, 30, paths, positive_idf=True) == [(c, s) for s, c in ranked], query


def test_small_indexes_are_answered_by_fts5(store: Store) -> None:
    caches = KeywordCaches()
    tag = ("small", 1)
    ids = lambda: _ids(store)  # noqa: E731
    asked: list[str] = []

    def phrase_scores(phrase: str) -> list[tuple[int, float]]:
        asked.append(phrase)
        return []

    assert caches.search("x", tag, ids, ['"deploy"'], phrase_scores, 10, min_chunks=10_000) is None
    assert asked == [] and caches.nbytes == 0


def test_memory_stays_within_its_bound_and_answers_stay_exact(store: Store) -> None:
    caches = KeywordCaches(max_bytes=4_000)  # a few hundred rows of phrases
    ids = lambda: _ids(store)  # noqa: E731

    def phrase_scores(phrase: str) -> list[tuple[int, float]]:
        return store.conn.execute(
            "SELECT rowid, bm25(chunks_fts) FROM chunks_fts WHERE chunks_fts MATCH ?", (phrase,)
        ).fetchall()

    held = []
    for query in QUERIES * 2:
        phrases = fts_phrases(query)
        found = caches.search(str(store.path), (1,), ids, phrases, phrase_scores, 15, min_chunks=1)
        assert found is not None
        _same(found, store.fts_search(" OR ".join(phrases), 15))
        held.append(caches.nbytes)
    assert 0 < max(held) <= 4_000  # phrases were cached, and evicted to fit (a phrase too large is never held)


NOTES = {
    "MEMORY.md": "# Facts\n\nDana drinks green tea every morning before the standup.\n",
    "memory/2026-01-05.md": "# Monday\n\nThe deploy failed with ERR_SSL_PROTOCOL because the proxy stripped SNI.\n",
    "memory/2026-01-06.md": "# Tuesday\n\nBooked the dentist for Friday; the car needs new tyres.\n",
}


def _keyword(index: MemoryIndex, query: str) -> list[tuple[int, float]]:
    phrases = fts_phrases(query)
    cached = index.store.keyword_search(phrases, 10)
    _same(cached, index.store.fts_search(" OR ".join(phrases), 10))
    return cached


def test_a_sync_and_a_rebuild_are_seen_by_the_next_search(workspace, make_config, large) -> None:
    ws = workspace(NOTES)
    config = make_config(ws, **{"embedding.provider": "none"})
    with MemoryIndex(config) as index:
        index.sync()
        assert len(_keyword(index, "tea deploy violin")) == 2
        assert str(config.db_path) in KEYWORD_CACHES._indexes
        (ws / "memory" / "2026-01-07.md").write_text("# Wednesday\n\nViolin lesson moved; tea after it.\n")
        index.sync()  # a file added
        found = _keyword(index, "tea deploy violin")
        assert len(found) == 3 and index.store.chunks_by_ids([found[0][0]])[found[0][0]].path == "memory/2026-01-07.md"
        (ws / "MEMORY.md").write_text("# Facts\n\nDana drinks coffee now.\n")
        index.sync()  # a file changed
        assert len(_keyword(index, "tea deploy violin")) == 2 and len(_keyword(index, "coffee")) == 1
        (ws / "memory" / "2026-01-05.md").unlink()
        index.sync()  # a file removed
        assert len(_keyword(index, "tea deploy violin")) == 1 and _keyword(index, "proxy") == []
        (ws / "memory" / "2026-01-05.md").write_text("# Monday\n\nThe proxy again.\n")
        index.sync(force=True)  # a rebuilt file is swapped in: another inode
        assert len(_keyword(index, "proxy dentist")) == 2
        response = index.search("proxy", mode="keyword")
        assert [r.path for r in response.results] == ["memory/2026-01-05.md"]


def test_stores_of_one_file_share_one_cache(store: Store, large) -> None:
    phrases = fts_phrases("deploy tea")
    store.keyword_search(phrases, 5)
    cached = KEYWORD_CACHES._indexes[str(store.path)]
    filled = [cached.phrases[p] for p in phrases]
    with Store(store.path, use_vec=False, readonly=True) as other:
        _same(other.keyword_search(phrases, 5), store.fts_search(" OR ".join(phrases), 5))
    assert KEYWORD_CACHES._indexes[str(store.path)] is cached  # not reloaded, and no phrase filled again
    assert all(cached.phrases[p] is f for p, f in zip(phrases, filled))


# Concurrency: the lock guards the cache's dictionaries, never the SQL behind them. Each test holds one thread
# inside its phrase's read (an Event it waits on) and shows another thread getting through meanwhile.
WAIT = 30  # seconds a thread waits for the other before the test fails (a guard against hanging, not a timing)


def _ids_of(n: int):
    return lambda: np.arange(1, n + 1, dtype=np.int64)


def _run(target, *args) -> tuple[threading.Thread, list]:
    """`target(*args)` in a thread; its result or exception lands in the returned list."""
    out: list = []

    def body() -> None:
        try:
            out.append(target(*args))
        except BaseException as exc:  # noqa: BLE001  (reported to the test, which asserts on it)
            out.append(exc)

    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    return thread, out


def test_a_cached_phrase_is_answered_while_another_phrase_is_read() -> None:
    caches = KeywordCaches()
    inside, release = threading.Event(), threading.Event()

    def slow(phrase: str) -> list[tuple[int, float]]:
        if phrase == '"new"':
            inside.set()
            assert release.wait(WAIT)
        return [(3, -1.5), (5, -0.5)]

    search = lambda phrase: caches.search("x", 1, _ids_of(10), [phrase], slow, 5, min_chunks=1)  # noqa: E731
    assert search('"known"') == [(3, -1.5), (5, -0.5)]  # cached before the slow read starts
    reading, first = _run(search, '"new"')
    assert inside.wait(WAIT)
    other, second = _run(search, '"known"')
    other.join(WAIT)
    done_while_reading = not other.is_alive() and reading.is_alive()
    release.set()
    reading.join(WAIT)
    assert done_while_reading  # the old lock held it until the slow read ended
    assert second == [[(3, -1.5), (5, -0.5)]] and first == [[(3, -1.5), (5, -0.5)]]


def test_two_new_phrases_are_read_at_the_same_time() -> None:
    caches = KeywordCaches()
    both = threading.Barrier(2, timeout=WAIT)  # passed only when both threads are inside their reads at once

    def meet(phrase: str) -> list[tuple[int, float]]:
        both.wait()
        return [(int(phrase.strip('"')), -1.0)]

    search = lambda phrase: caches.search("x", 1, _ids_of(10), [phrase], meet, 5, min_chunks=1)  # noqa: E731
    runs = [_run(search, f'"{n}"') for n in (2, 7)]
    for thread, _ in runs:
        thread.join(WAIT)
    assert [out for _, out in runs] == [[[(2, -1.0)]], [[(7, -1.0)]]]
    assert set(caches._indexes["x"].phrases) == {'"2"', '"7"'} and not caches._indexes["x"].filling


def test_a_phrase_being_read_is_awaited_not_read_again() -> None:
    caches = KeywordCaches()
    inside, release = threading.Event(), threading.Event()
    reads: list[str] = []

    def slow(phrase: str) -> list[tuple[int, float]]:
        reads.append(phrase)
        inside.set()
        assert release.wait(WAIT)
        return [(4, -2.0)]

    search = lambda: caches.search("x", 1, _ids_of(10), ['"p"'], slow, 5, min_chunks=1)  # noqa: E731
    first, out1 = _run(search)
    assert inside.wait(WAIT)
    second, out2 = _run(search)  # finds the read in progress, or (if it finished first) its cached result
    release.set()
    first.join(WAIT)
    second.join(WAIT)
    assert out1 == out2 == [[(4, -2.0)]] and reads == ['"p"']


def test_a_failed_read_fails_its_search_only() -> None:
    caches = KeywordCaches()
    inside, release = threading.Event(), threading.Event()
    calls: list[int] = []

    def flaky(phrase: str) -> list[tuple[int, float]]:
        calls.append(1)
        if len(calls) == 1:
            inside.set()
            assert release.wait(WAIT)
            raise RuntimeError("connection closed")
        return [(6, -1.0)]

    search = lambda: caches.search("x", 1, _ids_of(10), ['"p"'], flaky, 5, min_chunks=1)  # noqa: E731
    failing, out1 = _run(search)
    assert inside.wait(WAIT)
    other, out2 = _run(search)  # awaits the failing read, then reads the phrase itself
    release.set()
    failing.join(WAIT)
    other.join(WAIT)
    assert isinstance(out1[0], RuntimeError) and out2 == [[(6, -1.0)]] and len(calls) == 2
    assert list(caches._indexes["x"].phrases) == ['"p"'] and not caches._indexes["x"].filling


def test_the_chunk_ids_are_read_outside_the_lock() -> None:
    caches = KeywordCaches()
    inside, release = threading.Event(), threading.Event()

    def slow_ids() -> np.ndarray:
        inside.set()
        assert release.wait(WAIT)
        return np.arange(1, 11, dtype=np.int64)

    def scores(phrase: str) -> list[tuple[int, float]]:
        return [(1, -1.0)]

    caches.search("a", 1, _ids_of(10), ['"p"'], scores, 5, min_chunks=1)
    loading, _ = _run(caches.search, "b", 1, slow_ids, ['"p"'], scores, 5, None, 1)  # another index's first use
    assert inside.wait(WAIT)
    other, out = _run(caches.search, "a", 1, _ids_of(10), ['"p"'], scores, 5, None, 1)
    other.join(WAIT)
    done_while_loading = not other.is_alive() and loading.is_alive()
    release.set()
    loading.join(WAIT)
    assert done_while_loading and out == [[(1, -1.0)]]
