"""Scoring steps (core/ranking.py) on hand-computed cases, and decay and MMR through a real search."""

from __future__ import annotations

import os
import time
from datetime import date

import pytest

from core.ranking import (
    Candidate,
    bm25_score,
    decay_factor,
    fuse_minmax,
    fuse_rrf,
    fuse_weighted,
    is_evergreen,
    merge_legs,
    mmr_order,
    note_date,
    passes_floor,
)


def three() -> list[Candidate]:
    # 1: both legs; 2: vector only; 3: keyword only. bm25 holds r = -bm25(): r 1 -> text 0.5, r 9 -> text 0.9.
    return [Candidate(1, bm25=1.0, vector=0.8), Candidate(2, vector=0.6), Candidate(3, bm25=9.0)]


def scores(cands: list[Candidate]) -> dict[int, float]:
    return {c.id: c.score for c in cands}


def test_bm25_score_is_r_over_one_plus_r():
    assert bm25_score(-3.0) == pytest.approx(0.75)
    assert bm25_score(-1.0) == pytest.approx(0.5)
    assert bm25_score(-0.25) == pytest.approx(0.2)
    assert bm25_score(0.0) == 0.0
    assert bm25_score(2.0) == 0.0  # never negative


def test_merge_legs_one_candidate_per_chunk_with_text_score_from_bm25():
    cands = {c.id: c for c in merge_legs([(1, -1.0), (3, -9.0)], [(1, 0.8), (2, 0.6)])}
    assert (cands[1].text, cands[1].vector) == (pytest.approx(0.5), 0.8)
    assert (cands[2].text, cands[2].vector) == (None, 0.6)
    assert (cands[3].text, cands[3].vector) == (pytest.approx(0.9), None)


def test_fuse_weighted():
    cands = three()
    fuse_weighted(cands, vector_weight=0.7, text_weight=0.3)
    assert scores(cands) == pytest.approx({1: 0.7 * 0.8 + 0.3 * 0.5, 2: 0.42, 3: 0.27})


def test_fuse_minmax():
    cands = three()
    fuse_minmax(cands, vector_weight=0.3, text_weight=0.7)
    # bm25: 1 -> 0, 9 -> 1; vector: 0.8 -> 1, 0.6 -> 0
    assert scores(cands) == pytest.approx({1: 0.3, 2: 0.0, 3: 0.7})


def test_fuse_minmax_single_value_leg_normalises_to_one():
    cands = [Candidate(1, bm25=0.2, vector=0.4), Candidate(2, vector=0.9)]
    fuse_minmax(cands, vector_weight=0.3, text_weight=0.7)
    # text has one value -> 1; vector 0.4 -> 0, 0.9 -> 1
    assert scores(cands) == pytest.approx({1: 0.7, 2: 0.3})


def test_fuse_rrf():
    cands = three()
    fuse_rrf(cands, k=60)
    # text ranks: 3 first, 1 second; vector ranks: 1 first, 2 second; divided by the best possible 2/61
    assert scores(cands) == pytest.approx({1: 123 / 124, 2: 61 / 124, 3: 0.5})


def test_fuse_rrf_weighted_legs():
    cands = three()
    fuse_rrf(cands, k=10, vector_weight=3.0, text_weight=1.0)
    top = 4 / 11
    assert scores(cands) == pytest.approx({1: (1 / 12 + 3 / 11) / top, 2: (3 / 12) / top, 3: (1 / 11) / top})


def test_floor_keeps_keyword_hits_and_needs_cosine_for_vector_only():
    assert passes_floor(Candidate(1, bm25=0.01, score=0.01), 0.35)
    assert passes_floor(Candidate(1, bm25=0.01, vector=0.0), 0.35)
    assert passes_floor(Candidate(1, vector=0.35, score=0.1), 0.35)
    assert not passes_floor(Candidate(1, vector=0.349, score=0.9), 0.35)
    assert not passes_floor(Candidate(1), 0.35)


def test_note_date_from_daily_note_names():
    assert note_date("memory/2026-05-14.md") == date(2026, 5, 14)
    assert note_date("memory/work/2026-05-14-standup.md") == date(2026, 5, 14)
    assert note_date("memory/2026-02-30.md") is None  # not a date
    assert note_date("notes/2026-05-14.md") is None  # not under memory/
    assert note_date("memory/people.md") is None
    assert note_date("MEMORY.md") is None


def test_evergreen_files():
    for path in ("MEMORY.md", "memory.md", "memory/people.md", "memory/2026-02-30.md"):
        assert is_evergreen(path), path
    for path in ("memory/2026-05-14.md", "notes/todo.md"):
        assert not is_evergreen(path), path


def test_decay_factor_half_life():
    assert decay_factor(0, 30) == 1.0
    assert decay_factor(30, 30) == pytest.approx(0.5)
    assert decay_factor(90, 30) == pytest.approx(0.125)
    assert decay_factor(7, 7) == pytest.approx(0.5)
    assert decay_factor(-5, 30) == 1.0  # a date in the future does not boost


def test_mmr_pushes_a_near_duplicate_below_a_diverse_hit():
    texts = {
        1: "deploy failed ssl certificate expired load balancer",
        2: "deploy failed ssl certificate expired load balancer again",
        3: "dana prefers oat milk in her coffee",
        4: "lunch order tacos",
    }
    cands = [Candidate(1, score=1.0), Candidate(2, score=0.9), Candidate(3, score=0.6), Candidate(4, score=0.2)]
    assert [c.id for c in mmr_order(cands, texts, lam=1.0, limit=4)] == [1, 2, 3, 4]
    # relevance 1, 0.875, 0.5, 0; Jaccard(2, 1) = 7/8: after 1, hit 2 is worth 0 and hit 3 is worth 0.25
    assert [c.id for c in mmr_order(cands, texts, lam=0.5, limit=2)] == [1, 3]


# -- through a real search --------------------------------------------------------------------------

NOTE = "The staging cluster reads from the blue database replica.\n"


def test_temporal_decay_end_to_end(workspace, make_config, open_index):
    ws = workspace(
        {
            "MEMORY.md": NOTE,
            "memory/people.md": NOTE,
            "memory/2026-11-28.md": NOTE,
            "memory/2024-01-15.md": NOTE,
            "notes/undated.md": NOTE,
        }
    )
    now = time.mktime(date(2026, 11, 29).timetuple()) + 12 * 3600  # noon local time on 11-29
    os.utime(ws / "notes/undated.md", (now - 60 * 86400, now - 60 * 86400))
    overrides = {
        "extraPaths": ["notes"],
        "search.temporalDecay.enabled": True,
        "search.temporalDecay.halfLifeDays": 30,
        "rerank.enabled": False,  # the arithmetic of decay alone; reranking would blend the scores
        "search.calibrate": False,  # and calibration would replace them
    }
    index = open_index(make_config(ws, **overrides))
    index.sync()
    response = index.search("staging cluster blue database replica", now=now, explain=True)
    got = {h.path: h for h in response.results}
    assert len(got) == 5
    # Identical notes: every leg scores them alike, min-max fusion gives 1.0 before decay.
    assert got["MEMORY.md"].score == pytest.approx(1.0)
    assert got["memory/people.md"].score == pytest.approx(1.0)
    assert "decay" not in got["MEMORY.md"].scores and "decay" not in got["memory/people.md"].scores
    # Ages in whole days, today's date minus the note's: 11-28 is 1 day old all through 11-29.
    assert got["memory/2026-11-28.md"].score == pytest.approx(0.5 ** (1 / 30), abs=1e-6)
    assert got["notes/undated.md"].score == pytest.approx(0.25, abs=1e-6)  # by mtime: 60 days
    old_age = (date(2026, 11, 29) - date(2024, 1, 15)).days
    assert got["memory/2024-01-15.md"].score == pytest.approx(0.5 ** (old_age / 30), abs=1e-6)
    # The same request an hour later, and a second later, scores alike to the last digit (ages in seconds
    # from now drifted in the sixth decimal between identical requests).
    for later in (1, 3600):
        again = index.search("staging cluster blue database replica", now=now + later, explain=True)
        assert [(h.path, h.score, h.scores) for h in again.results] == [
            (h.path, h.score, h.scores) for h in response.results
        ]
    order = [h.path for h in response.results]
    assert order.index("memory/2026-11-28.md") < order.index("notes/undated.md") < order.index("memory/2024-01-15.md")
    assert order[-1] == "memory/2024-01-15.md"  # decayed, yet kept: it is keyword-backed


def test_decay_disabled_leaves_scores_alone(workspace, make_config, open_index):
    ws = workspace({"memory/2026-11-28.md": NOTE, "memory/2020-01-01.md": NOTE})
    # fused scores (not reranked, not calibrated): the two notes tie
    index = open_index(make_config(ws, **{"rerank.enabled": False, "search.calibrate": False}))
    response = index.search("staging cluster blue database replica", explain=True)
    assert [h.score for h in response.results] == pytest.approx([1.0, 1.0])
    assert all("decay" not in h.scores for h in response.results)


def test_mmr_end_to_end_reorders_near_duplicates(workspace, make_config, open_index):
    ws = workspace(
        {
            "memory/a.md": "Deploy failed: the SSL certificate on the load balancer expired.\n",
            "memory/b.md": "Deploy failed: the SSL certificate on the load balancer expired again.\n",
            "memory/c.md": "Deploy checklist: renew the SSL certificate a week before it expires.\n",
            "memory/d.md": "Lunch order for the deploy team: tacos.\n",
        }
    )
    query = "deploy failed ssl certificate expired"
    fused = {"rerank.enabled": False}  # MMR over the fused scores, which rank the near-duplicates together
    plain = open_index(make_config(ws, **fused)).search(query, min_score=0)
    assert [h.path for h in plain.results] == ["memory/a.md", "memory/b.md", "memory/c.md", "memory/d.md"]
    diverse = open_index(make_config(ws, **fused, **{"search.mmr.enabled": True, "search.mmr.lambda": 0.5})).search(
        query, min_score=0
    )
    assert [h.path for h in diverse.results] == ["memory/a.md", "memory/c.md", "memory/b.md", "memory/d.md"]


def test_mmr_with_lambda_one_keeps_score_order_for_negative_scores():
    # Weighted fusion of negative cosines gives negative scores; dividing by the top score once flipped them.
    cands = [Candidate(1, score=-0.05), Candidate(2, score=-0.2)]
    assert [c.id for c in mmr_order(cands, {1: "alpha beta", 2: "gamma delta"}, lam=1.0, limit=2)] == [1, 2]
