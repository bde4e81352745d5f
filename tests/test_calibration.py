"""Calibrated scores and abstention (issue 18, core/calibration.py): over a real index built by the real
indexer, a hit's score is an estimate in [0, 1] that never increases down the order, calibration never
reorders, and with `search.calibrate` a question about something absent gets no hit at the floor, with the
reason, through the library, the CLI, REST and MCP."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from litestar.testing import TestClient

from api.app import create_app
from api.cli import main
from api.mcp import MemoryTools
from core import calibration, load_config
from core.memory import MemoryIndex
from tests.sample import NOTES

ABSENT = "Which Kubernetes version runs in the production cluster?"
PRESENT = "Why did the deploy fail with ERR_SSL_PROTOCOL_ERROR?"


# Calibration is opt-in (docs/search-and-ranking.md, "Calibrated scores and abstention"), with the floor
# measured for it.
CALIBRATED = "[search]\ncalibrate = true\nminScore = 0.03\n"


@pytest.fixture
def ws(workspace) -> Path:
    root = workspace(NOTES | {"memsift.toml": CALIBRATED})
    with MemoryIndex(load_config(workspace=root)) as index:
        index.sync()
    return root


@pytest.fixture
def index(ws: Path):
    with MemoryIndex(load_config(workspace=ws)) as idx:
        yield idx


@pytest.mark.parametrize("query", [PRESENT, "what does Dana drink in the morning", ABSENT, "Marco on-call"])
def test_scores_are_probabilities_that_never_increase(index, query: str) -> None:
    hits = index.search(query, max_results=10, min_score=0).results
    assert hits
    scores = [h.score for h in hits]
    assert all(0.0 <= s <= 1.0 for s in scores)
    assert scores == sorted(scores, reverse=True)


def test_calibration_keeps_the_rankers_order(index) -> None:
    """The order is the ranker's (its scores, shown under explain as `ranker`, are sorted), and the order at
    no floor equals the order the ranker made before calibration (seen by the collector)."""
    seen: list = []
    response = index.search(
        PRESENT,
        max_results=10,
        min_score=0,
        explain=True,
        collect_calibration=lambda inputs, ordered, rows: seen.append([(rows[c.id].path, c.ranker) for c in ordered]),
    )
    ranker = [h.scores["ranker"] for h in response.results]
    assert ranker == sorted(ranker, reverse=True)
    assert [h.path for h in response.results] == [path for path, _ in seen[0]][: len(response.results)]


def test_an_absent_question_abstains_at_the_default_floor(index) -> None:
    response = index.search(ABSENT)
    assert response.results == []
    assert response.empty == "below_floor"
    assert "under the floor minScore" in response.abstained
    assert response.to_dict()["abstained"] == response.abstained
    # the candidates were there: with no floor the same question has hits, all scored low
    assert all(h.score < index.config.search.minScore for h in index.search(ABSENT, min_score=0).results)


def test_a_present_question_keeps_its_hit(index) -> None:
    response = index.search(PRESENT)
    assert response.results and response.results[0].path == "memory/2026-05-14.md"
    assert response.abstained is None and "abstained" not in response.to_dict()


def test_the_first_hit_does_not_depend_on_max_results(index) -> None:
    top = index.search(PRESENT, max_results=10, min_score=0).results
    one = index.search(PRESENT, max_results=1, min_score=0).results
    assert [(h.path, h.score) for h in one] == [(h.path, h.score) for h in top[:1]]


def test_keyword_mode_is_not_calibrated(index) -> None:
    """Without vectors the model has no basis: keyword answers keep the leg's score and the old floor rule
    (a hit that matched a query word is kept)."""
    response = index.search("ERR_SSL_PROTOCOL_ERROR", mode="keyword", explain=True)
    assert response.results and "ranker" not in response.results[0].scores


def test_cli_says_it_found_nothing_relevant(capsys, ws: Path) -> None:
    capsys.readouterr()
    assert main(["--workspace", str(ws), "search", ABSENT]) == 0
    out = capsys.readouterr().out
    assert out.startswith("No relevant hits: the best hit scored ") and "under the floor minScore" in out
    assert main(["--workspace", str(ws), "search", ABSENT, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["results"] == [] and "under the floor" in doc["abstained"]


def test_rest_answers_abstained(ws: Path) -> None:
    with TestClient(create_app(load_config(workspace=ws))) as client:
        doc = client.post("/v1/search", json={"query": ABSENT}).json()
        assert doc["results"] == [] and "under the floor minScore" in doc["abstained"]
        present = client.post("/v1/search", json={"query": PRESENT}).json()
        assert present["results"] and "abstained" not in present
        metrics = client.get("/metrics").text
    assert 'memsift_search_empty_total{agent="main",reason="below_floor"} 1.0' in metrics


def test_mcp_answers_abstained(ws: Path) -> None:
    tools = MemoryTools(load_config(workspace=ws))
    try:
        answer, failed = tools.call("memory_search", {"query": ABSENT})
    finally:
        tools.close()
    assert not failed and answer["results"] == [] and "under the floor minScore" in answer["abstained"]


def test_the_shipped_model_loads_and_a_foreign_one_is_refused(tmp_path: Path) -> None:
    model = calibration.default_model()
    assert model.question.features == calibration.QUESTION_FEATURES
    assert model.hit.weights.shape == (len(calibration.FEATURES),)
    doc = json.loads(model.to_json())
    doc["question"]["features"] = ["q_cover"]
    wrong = tmp_path / "old.json"
    wrong.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="retrain it"):
        calibration.load_model(wrong)
    wrong.write_text("{")
    with pytest.raises(ValueError, match="cannot be read"):
        calibration.load_model(wrong)


def test_fit_learns_a_separable_signal() -> None:
    rng = np.random.default_rng(18)
    x = rng.normal(size=(400, len(calibration.FEATURES)))
    y = (x[:, 4] > 0).astype(float)  # q_top_vector decides
    model = calibration.fit(x, y, calibration.FEATURES, l2=1.0)
    p = model.predict(x)
    assert ((p > 0.5) == (y == 1)).mean() > 0.97
    assert np.argmax(np.abs(model.weights)) == 4
