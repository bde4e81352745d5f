"""Reranking: the blend, the score cache, the degraded path, and MaxSim over the real local model."""

from __future__ import annotations

import numpy as np
import pytest
from sample import NOTES

from core import ranking
from core.embedders import EmbedderWrapper
from core.embedders.local import LocalEmbedder
from core.rerankers import RerankError
from core.rerankers.local import token_capture
from core.rerankers.maxsim import (
    BLOCK_ROWS,
    MaxSimReranker,
    line_maxsim,
    line_maxsim_many,
    pack,
    packed_many,
    products,
    unpack,
    unpack_lines,
)
from core.rerankers.shortlist import ScoreCache, rerank_shortlist, wanted


class OverlapReranker:
    """A real (if simple) reranker: the share of query words in the document; counts what it scores."""

    provider, model, fingerprint = "test", "overlap", "overlap-v1"

    def __init__(self) -> None:
        self.scored: list[str] = []

    def score(self, query: str, documents: list[str]) -> list[float]:
        self.scored.extend(documents)
        words = set(query.lower().split())
        return [len(words & set(d.lower().split())) / len(words) for d in documents]


class BrokenReranker(OverlapReranker):
    fingerprint = "broken"

    def score(self, query: str, documents: list[str]) -> list[float]:
        raise RerankError("service answered 503")


def _cands(*pairs: tuple[int, float, float]) -> list[ranking.Candidate]:
    return [ranking.Candidate(id=i, score=s, rerank=r) for i, s, r in pairs]


def test_blend_keeps_a_strong_exact_match_that_replacement_throws_away():
    # Retrieval is sure of 1 (an exact identifier); the reranker prefers 2 and 3 a little and ranks 1 last.
    shortlist = [(1, 1.0, 0.20), (2, 0.2, 0.30), (3, 0.1, 0.29), (4, 0.0, 0.28)]
    blended = [c.id for c in ranking.blend(_cands(*shortlist), 0.5)]
    replaced = [c.id for c in ranking.blend(_cands(*shortlist), 1.0)]
    assert replaced == [2, 3, 4, 1]
    assert blended == [2, 1, 3, 4]
    # ...and the reranker still reorders what retrieval could not tell apart.
    assert ranking.blend(_cands((1, 0.5, 0.1), (2, 0.5, 0.9)), 0.5)[0].id == 2


def test_blend_scores_are_hand_computed():
    out = ranking.blend(_cands((1, 2.0, 0.0), (2, 1.0, 4.0), (3, 0.5, 2.0)), 0.25)
    # Blend: 1 -> 0.75 * 1 = 0.75; 2 -> 0.75 * 1/3 + 0.25 = 0.5; 3 -> 0 + 0.25 * 0.5 = 0.125; shown on the
    # fused range [0.5, 2.0].
    assert [c.id for c in out] == [1, 2, 3]
    shown = {1: 0.5 + 1.5 * 0.75, 2: 0.5 + 1.5 * 0.5, 3: 0.5 + 1.5 * 0.125}
    assert {c.id: c.score for c in out} == pytest.approx(shown)
    assert {c.id: c.fused for c in out} == {1: 2.0, 2: 1.0, 3: 0.5}


def test_score_cache_is_lru_and_keyed_by_fingerprint_and_query():
    cache = ScoreCache(capacity=2)
    cache.put("fp", "q", {"h1": 1.0, "h2": 2.0})
    assert cache.get("fp", "q", ["h1"]) == {"h1": 1.0}  # h1 now most recent
    cache.put("fp", "q", {"h3": 3.0})  # evicts h2
    assert cache.get("fp", "q", ["h1", "h2", "h3"]) == {"h1": 1.0, "h3": 3.0}
    assert cache.get("other", "q", ["h1"]) == {} and cache.get("fp", "q2", ["h1"]) == {}


@pytest.fixture
def sample_index(workspace, make_config, open_index, counting_embedder):
    index = open_index(make_config(workspace(NOTES)), embedder=counting_embedder)
    index.sync()
    return index


def _shortlist(index, query: str):
    store = index.store
    ids = [cid for cid, _ in store.fts_search('"deploy" OR "certificate" OR "morning"', 10)]
    cands = [ranking.Candidate(id=cid, score=1.0 - n / 10) for n, cid in enumerate(ids)]
    return store, cands, store.chunks_by_ids(ids)


def test_rerank_shortlist_scores_each_chunk_once_per_query(sample_index):
    store, cands, rows = _shortlist(sample_index, "q")
    reranker, cache = OverlapReranker(), ScoreCache()
    query = "why did the certificate expire"
    first, problem = rerank_shortlist(store, sample_index.config, None, query, cands, rows, cache, lambda: reranker)
    assert problem is None and len(reranker.scored) == len(cands)
    assert all(c.rerank is not None for c in first)
    again = [ranking.Candidate(id=c.id, score=1.0 - n / 10) for n, c in enumerate(cands)]
    second, _ = rerank_shortlist(store, sample_index.config, None, query, again, rows, cache, lambda: reranker)
    assert len(reranker.scored) == len(cands)  # all from the cache
    assert [c.id for c in second] == [c.id for c in first]
    rerank_shortlist(store, sample_index.config, None, "another question", again, rows, cache, lambda: reranker)
    assert len(reranker.scored) == 2 * len(cands)


def test_a_failing_reranker_leaves_the_fused_order_and_says_why(sample_index):
    store, cands, rows = _shortlist(sample_index, "q")
    before = [c.id for c in cands]
    out, problem = rerank_shortlist(store, sample_index.config, None, "q", cands, rows, ScoreCache(), BrokenReranker)
    assert [c.id for c in out] == before
    assert "reranking failed" in problem and "503" in problem


def test_an_unavailable_reranker_degrades_search_not_fails(workspace, make_config, open_index, tmp_path):
    config = make_config(workspace(NOTES), **{"rerank.enabled": True, "rerank.model": str(tmp_path / "no-such-model")})
    index = open_index(config)
    plain = index.search("certificate expired", rerank=False)
    response = index.search("certificate expired")
    assert response.results and [h.path for h in response.results] == [h.path for h in plain.results]
    assert "reranker unavailable" in response.degraded


def test_pack_round_trip_keeps_signs_and_lines():
    states = np.random.default_rng(7).normal(size=(5, 384)).astype(np.float32)
    signs, lines = unpack_lines(pack(states, np.array([0, 0, 2, 7, 300])), 384)
    assert signs.shape == (5, 384) and list(lines) == [0, 0, 2, 7, 300]
    assert np.array_equal(np.sign(signs), np.sign(states)) and np.array_equal(unpack(pack(states, lines), 384), signs)
    assert np.allclose(np.linalg.norm(signs, axis=1), 1.0)


def test_line_maxsim_is_maxsim_over_one_line_and_over_three():
    rng = np.random.default_rng(3)
    query, signs = rng.normal(size=(4, 16)), rng.normal(size=(12, 16))
    lines = np.array([5, 0, 0, 1, 3, 3, 3, 5, 6, 6, 9, 1])  # out of order, as windows arrive

    def maxsim(mask: np.ndarray) -> float:
        return float((query @ signs[mask].T).max(axis=1).mean())

    per_line = sorted((maxsim(lines == ln) for ln in set(lines)), reverse=True)
    window = max(maxsim((lines >= ln) & (lines < ln + 3)) for ln in set(lines))
    assert line_maxsim(query, signs, lines) == pytest.approx((maxsim(lines >= 0), per_line[0], per_line[1], window))
    one = maxsim(np.arange(12) == 0)  # a single token on a single line: no second line
    assert line_maxsim(query, signs[:1], lines[:1]) == pytest.approx((one, one, 0.0, one))
    assert line_maxsim(query, signs[:0], lines[:0]) == (0.0, 0.0, 0.0, 0.0)


def test_many_documents_at_once_score_as_each_alone():
    """One product for the whole pool: no window or best line leaks from one document into the next."""
    rng = np.random.default_rng(5)
    query = rng.normal(size=(5, 16)).astype(np.float32)
    sizes = [12, 1, 0, 30, 7, 3]
    docs = [(rng.normal(size=(n, 16)).astype(np.float32), rng.integers(0, 9, size=n)) for n in sizes]
    docs.append((np.ones((2, 16), np.float32), np.array([4, 5])))  # two lines tie for the best
    together = line_maxsim_many(query, np.concatenate([signs for signs, _ in docs]), [lines for _, lines in docs])
    assert together.shape == (7, 4) and not together[2].any()  # a document without tokens scores nothing
    for row, (signs, lines) in zip(together, docs):
        brute = [
            float((query @ signs[mask].T).max(axis=1).mean()) if mask.any() else 0.0
            for mask in [lines >= 0] + [lines == ln for ln in np.unique(lines)]
        ]
        if len(signs):
            per_line = sorted(brute[1:], reverse=True) + [0.0]
            windows = [(query @ signs[(lines >= ln) & (lines < ln + 3)].T).max(axis=1).mean() for ln in set(lines)]
            assert row == pytest.approx([brute[0], per_line[0], per_line[1], max(windows)], abs=1e-5)


@pytest.mark.parametrize("rows", [0, 1, BLOCK_ROWS - 1, BLOCK_ROWS, BLOCK_ROWS + 1, 3 * BLOCK_ROWS + 17])
def test_packed_bits_multiply_as_their_unpacked_rows(rows):
    """Unpacked block by block, the product is the product with every row unpacked at once (no row skipped or
    repeated at a block's edge), and so are the line signals computed from it."""
    rng = np.random.default_rng(rows)
    states = rng.normal(size=(rows, 384)).astype(np.float32)
    lines = rng.integers(0, 40, size=rows)
    blobs = [pack(states[: rows // 3], lines[: rows // 3]), pack(states[rows // 3 :], lines[rows // 3 :])]
    bits, packed_lines = packed_many(blobs, 384)
    signs = np.concatenate([unpack(b, 384) for b in blobs])
    query = rng.normal(size=(7, 384)).astype(np.float32)
    assert bits.dtype == np.uint8 and bits.shape == (rows, 48)
    assert np.allclose(products(query, bits), query @ signs.T, rtol=1e-6, atol=1e-6)
    assert np.allclose(line_maxsim_many(query, bits, packed_lines), line_maxsim_many(query, signs, packed_lines))


def test_document_tokens_carry_the_line_of_each_token():
    """Over a chunk longer than one model window (its windows reach the sink out of order): each line's
    content tokens, counted alone, are the tokens stored with that line."""
    reranker = MaxSimReranker.shared()
    words = ["puppy", "deploy", "certificate", "Lisbon", "cello", "tomatoes", "ledger", "marathon"]
    text = "\n".join(f"Dana: the {words[i % 8]} note number {i} about {words[(i * 3) % 8]}" for i in range(60))
    _, (blob,) = reranker.document_tokens([text])
    signs, lines = unpack_lines(blob, 384)
    tokenizer = reranker.embedder._tokenizer
    expected = [
        int(reranker._content[tokenizer.encode(line, add_special_tokens=False).ids].sum()) for line in text.split("\n")
    ]
    assert len(tokenizer.encode(text).ids) > 256  # several windows
    assert list(np.bincount(lines, minlength=60)) == expected and len(signs) == sum(expected)
    # The best line for a question about one line's words is found, and beats the second best.
    whole, best, second, window = reranker.line_scores("Lisbon note number 3", [blob], [text])[0]
    assert best > second and window >= best - 1e-6 and whole >= window - 1e-6
    assert whole == pytest.approx(reranker.score("Lisbon note number 3", [text], [blob])[0])
    assert np.allclose(reranker.line_scores("Lisbon note number 3", [None], [text]), [[whole, best, second, window]])


def test_auto_reranks_only_over_the_local_model(make_config, tmp_path, counting_embedder):
    config = make_config(tmp_path)
    local = LocalEmbedder.shared()
    assert config.rerank.enabled == "auto"
    assert wanted(config, None, local) and wanted(config, None, EmbedderWrapper(local))
    assert not wanted(config, None, counting_embedder)  # not the local model: token bits are not stored
    assert not wanted(config, False, local) and wanted(config, True, counting_embedder)
    assert token_capture(make_config(tmp_path, **{"rerank.enabled": False}), local) is None
    assert token_capture(make_config(tmp_path, **{"rerank.provider": "cohere"}), local) is None


def test_sync_stores_token_bits_from_the_same_model_pass(workspace, make_config, open_index):
    config = make_config(workspace(NOTES))
    index = open_index(config)
    local = index.embedder()
    calls = local.calls
    report = index.sync()
    assert local.calls - calls == report.embeddingCalls  # no second pass for the token bits
    maxsim = MaxSimReranker.of(local)
    chunks = index.store.conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
    hashes = [h for (h,) in index.store.conn.execute("SELECT hash FROM chunks")]
    assert len(index.store.tokens_known(maxsim.fingerprint, hashes)) == chunks
    # Stored bits score like bits computed afresh.
    ids = [i for (i,) in index.store.conn.execute("SELECT id FROM chunks")]
    rows = index.store.chunks_by_ids(ids)
    stored = index.store.tokens_for(ids, maxsim.fingerprint)
    texts = [rows[i].text for i in ids]
    fresh = maxsim.score("flat white", texts)
    assert maxsim.score("flat white", texts, [stored[i] for i in ids]) == pytest.approx(fresh)


def test_turning_reranking_on_later_backfills_bits_without_embedding_again(workspace, make_config, open_index):
    ws = workspace(NOTES)
    index = open_index(make_config(ws, **{"rerank.enabled": False}))
    index.sync()
    index.close()
    again = open_index(make_config(ws))
    report = again.sync()
    assert report.rebuilt and report.chunksEmbedded == 0 and report.cacheHits == report.chunksWritten
    maxsim = MaxSimReranker.of(again.embedder())
    hashes = [h for (h,) in again.store.conn.execute("SELECT hash FROM chunks")]
    assert len(again.store.tokens_known(maxsim.fingerprint, hashes)) == len(hashes) > 0


def test_search_reranks_with_maxsim_and_explains_it(workspace, make_config, open_index):
    index = open_index(make_config(workspace(NOTES)))
    response = index.search("which certificate had expired on the load balancer", explain=True)
    assert response.degraded is None
    top = response.results[0]
    assert top.path == "memory/2026-05-14.md"
    assert set(top.scores) >= {"rerank", "fused", "vector", "text"}
    assert all(0.0 <= h.score <= 1.0 for h in response.results)
    off = index.search("which certificate had expired on the load balancer", explain=True, rerank=False)
    assert "rerank" not in off.results[0].scores


def test_search_answers_from_stored_bits_when_the_model_cannot_encode_documents(workspace, make_config, open_index):
    """The search path reads token bits from the index: it encodes only the query."""
    index = open_index(make_config(workspace(NOTES)))
    index.sync()
    maxsim = MaxSimReranker.of(index.embedder())
    seen: list[int] = []
    original = maxsim.document_tokens
    maxsim.document_tokens = lambda texts: (seen.append(len(texts)), original(texts))[1]
    try:
        response = index.search("Dana morning coffee order", rerank=True, min_score=0)
    finally:
        del maxsim.document_tokens
    assert response.results and seen == []


def test_a_reranked_search_runs_the_model_once_for_its_query(workspace, make_config, open_index):
    index = open_index(make_config(workspace(NOTES)))
    index.sync()
    local = index.embedder()
    before = local.calls
    response = index.search("who is on call for the mobile app this quarter", rerank=True, explain=True)
    assert "rerank" in response.results[0].scores
    assert local.calls - before == 1  # the vector leg's pass also gave MaxSim the query's token states
    again = index.search("who is on call for the mobile app this quarter", rerank=True, explain=True)
    assert local.calls - before == 1 and [h.to_dict() for h in again.results] == [h.to_dict() for h in response.results]
