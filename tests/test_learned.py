"""The learned ranker's features on hand-built chunks, and its numpy logistic regression."""

from datetime import date

import numpy as np
import pytest

from core import learned
from core.ranking import Candidate
from core.store import ChunkRow

COL = {name: i for i, name in enumerate(learned.FEATURES)}
TODAY = date(2026, 12, 1)


def _row(cid: int, path: str, text: str) -> ChunkRow:
    return ChunkRow(cid, path, "memory", 1, text.count("\n") + 1, text, f"h{cid}")


def _pool() -> tuple[list[Candidate], dict[int, ChunkRow]]:
    rows = {
        1: _row(1, "memory/2023-08-04.md", "# 2023-08-04\n\nCaroline: I adopted a puppy named Oscar.\nMelanie: Nice!"),
        2: _row(2, "memory/2023-08-04.md", "Melanie: Oscar the puppy loves the beach.\nCaroline: so cute"),
        3: _row(3, "memory/2023-03-01.md", "# 2023-03-01\n\nMelanie: I painted a sunrise.\nDana: lovely"),
        4: _row(4, "MEMORY.md", "user: my puppy is called Oscar\nassistant: noted"),
    }
    cands = [
        Candidate(1, bm25=4.0, vector=0.6, score=0.9, rerank=0.5, fused=0.9),
        Candidate(2, bm25=2.0, vector=0.5, score=0.7, rerank=0.6, fused=0.6),
        Candidate(3, bm25=None, vector=0.3, score=0.2, rerank=0.2, fused=0.2),
        Candidate(4, bm25=1.0, vector=0.4, score=0.4, rerank=0.3, fused=0.4),
    ]
    return cands, rows


def test_signals_of_the_pipeline_are_carried_over() -> None:
    cands, rows = _pool()
    x = learned.features("What puppy did Caroline adopt on 4 August, 2023?", cands, rows, TODAY)
    assert x.shape == (4, len(learned.FEATURES))
    assert list(x[:, COL["has_text"]]) == [1, 1, 0, 1]
    assert list(x[:, COL["bm25_norm"]]) == pytest.approx([1.0, 1 / 3, 0.0, 0.0])
    assert list(x[:, COL["rr_fused"]]) == pytest.approx([1.0, 0.5, 0.25, 1 / 3])
    assert list(x[:, COL["rr_text"]]) == pytest.approx([1.0, 0.5, 0.0, 1 / 3])
    assert list(x[:, COL["maxsim_gap"]]) == pytest.approx([-0.1, 0.0, -0.4, -0.3])


def test_date_affinity_follows_the_question_period() -> None:
    cands, rows = _pool()
    x = learned.features("What puppy did Caroline adopt on 4 August, 2023?", cands, rows, TODAY)
    assert list(x[:, COL["has_period"]]) == [1, 1, 1, 1]
    assert x[0, COL["date_affinity"]] == 1.0 and x[1, COL["date_affinity"]] == 1.0
    assert 0 < x[2, COL["date_affinity"]] < 1e-3  # five months earlier
    assert x[3, COL["date_affinity"]] == 0.0  # MEMORY.md is not dated
    undated = learned.features("What puppy did Caroline adopt?", cands, rows, TODAY)
    assert not undated[:, COL["has_period"]].any() and not undated[:, COL["date_affinity"]].any()


def test_line_evidence_and_attribution() -> None:
    cands, rows = _pool()
    x = learned.features("What puppy did Caroline adopt?", cands, rows, TODAY)
    # Terms: puppy, carol(ine), adopt. Chunk 1 holds all three on one line, said by Caroline herself.
    assert x[0, COL["line_best"]] == pytest.approx(1.0)
    assert x[0, COL["coverage_plain"]] == pytest.approx(1.0)
    assert x[0, COL["attr_best"]] == pytest.approx(x[0, COL["line_best"]]) and x[0, COL["attr_any"]] == 1
    # Chunk 2: "puppy" on Melanie's line, "Caroline" only as a speaker on another: two lines, each partial.
    assert 0 < x[1, COL["line_best"]] < x[1, COL["window_best"]] <= x[1, COL["coverage"]] + 1e-9
    # Caroline's own line there holds only her name: less than chunk 1's line, where she says it all.
    assert 0 < x[1, COL["attr_best"]] < x[0, COL["attr_best"]] and x[1, COL["attr_any"]] == 1
    # Chunk 3: no query term at all; attribution to someone the question does not name counts nothing.
    assert x[2, COL["line_best"]] == 0.0 and x[2, COL["coverage"]] == 0.0
    # Transcripts: `user:` lines count as the person asking in the first person.
    mine = learned.features("What is my puppy called?", cands, rows, TODAY)
    assert mine[3, COL["attr_any"]] == 1 and mine[3, COL["attr_best"]] > 0
    assert mine[0, COL["attr_any"]] == 0  # nobody in chunk 1 is named by that question


def test_file_context_comes_from_the_other_chunks_of_the_note() -> None:
    cands, rows = _pool()
    x = learned.features("puppy", cands, rows, TODAY)
    assert x[0, COL["file_best_fused"]] == pytest.approx(0.6) and x[1, COL["file_best_fused"]] == pytest.approx(0.9)
    assert x[0, COL["file_best_maxsim"]] == pytest.approx(0.6)
    assert list(x[:, COL["file_rr"]]) == [1.0, 0.5, 1.0, 1.0]
    assert list(x[:, COL["file_count"]]) == pytest.approx([0.2, 0.2, 0.1, 0.1])


def test_fit_learns_a_separable_signal_and_round_trips(tmp_path) -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(400, len(learned.FEATURES)))
    y = (x[:, COL["maxsim"]] + 0.3 * rng.normal(size=400) > 0).astype(float)
    model = learned.fit(x, y, l2=1.0)
    p = model.predict(x)
    assert ((p > 0.5) == (y == 1)).mean() > 0.9
    assert int(np.argmax(np.abs(model.weights))) == COL["maxsim"]
    path = tmp_path / "m.json"
    path.write_text(model.to_json())
    again = learned.Model.load(path)
    assert np.allclose(again.predict(x), p, atol=1e-6) and again.fingerprint == model.fingerprint


def test_a_bad_model_file_is_a_clear_error(tmp_path) -> None:
    path = tmp_path / "m.json"
    path.write_text('{"kind": "logistic", "features": ["vector"]}')
    with pytest.raises(learned.RankerModelError, match="m.json: not a logistic model"):
        learned.Model.load(path)
    with pytest.raises(learned.RankerModelError, match="missing.json"):
        learned.Model.load(tmp_path / "missing.json")


def test_status_names_the_learned_ranker_it_scores_with(workspace, make_config, open_index) -> None:
    index = open_index(make_config(workspace({"MEMORY.md": "- a note\n"}), **{"rerank.method": "learned"}))
    index.sync()
    rerank = index.status()["rerank"]
    assert rerank["method"] == "learned" and rerank["ranker"] == learned.model_for(None).fingerprint
