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
from core.rerankers.maxsim import MaxSimReranker, pack, unpack
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


def test_pack_round_trip_keeps_signs():
    states = np.random.default_rng(7).normal(size=(5, 384)).astype(np.float32)
    signs = unpack(pack(states), 384)
    assert signs.shape == (5, 384)
    assert np.array_equal(np.sign(signs), np.sign(states))
    assert np.allclose(np.linalg.norm(signs, axis=1), 1.0)


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
