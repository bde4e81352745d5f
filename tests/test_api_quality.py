"""A real `memsift serve` process over HTTP: the time filters of `POST /v1/search` and the quality telemetry of
`/metrics` (searches answered with no hit and why, the top score of the others), per agent."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator

import httpx
import pytest
from conftest import stop_process
from prometheus_client.parser import text_string_to_metric_families
from test_api_server import MEMSIFT, free_port, wait_for

NOTES = {
    "MEMORY.md": "# Memory\n- Dana Whitfield starts every morning with a flat white, no sugar.\n",
    "memory/2026-05-14.md": "# 2026-05-14\n- The deploy failed with ERR_SSL_PROTOCOL_ERROR.\n",
    "memory/2026-05-15.md": "# 2026-05-15\n- Priya wants offline mode for the mobile app; the deploy waits.\n",
}
RESEARCH = {"MEMORY.md": "# Research\n- The spectrometer calibration drifts above 30 degrees.\n"}


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One server for the module (the model loads once): agents `main` and `research`."""
    root = tmp_path_factory.mktemp("quality")
    for name, files in (("main-ws", NOTES), ("research-ws", RESEARCH)):
        for rel, text in files.items():
            (root / name / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / name / rel).write_text(text, encoding="utf-8")
    config = root / "memsift.toml"
    config.write_text(f'workspace = "{root / "main-ws"}"\n\n[agents.research]\nworkspace = "{root / "research-ws"}"\n')
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMSIFT_", "PREFECT_API_URL"))}
    env["MEMSIFT_HOME"] = str(root / "home")
    proc = subprocess.Popen(
        [MEMSIFT, "--config", config, "serve", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(proc, f"{url}/readyz")
        yield url
    finally:
        stop_process(proc)


def search(base: str, **body) -> httpx.Response:
    return httpx.post(f"{base}/v1/search", json=body, timeout=120)


def paths(response: httpx.Response) -> set[str]:
    assert response.status_code == 200, response.text
    return {h["path"] for h in response.json()["results"]}


def samples(base: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of /metrics by (name, sorted labels)."""
    text = httpx.get(f"{base}/metrics", timeout=30).text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_time_filters_over_http(base: str) -> None:
    q = {"query": "deploy Priya flat white", "minScore": 0}
    assert paths(search(base, **q, after="2026-05-15")) == {"MEMORY.md", "memory/2026-05-15.md"}
    assert paths(search(base, **q, before="2026-05-14", evergreen=False)) == {"memory/2026-05-14.md"}
    # A daily note spans its whole day: noon of the 14th is inside the note of the 14th.
    window = {"before": "2026-05-15T08:00", "evergreen": False}
    assert paths(search(base, **q, after="2026-05-14T12:00", **window)) == {
        "memory/2026-05-14.md",
        "memory/2026-05-15.md",
    }
    assert paths(search(base, **q, after="2026-05-15T00:00", **window)) == {"memory/2026-05-15.md"}
    for body, field, needle in [
        ({"after": "soon"}, "after", "after: 'soon' is not a date (YYYY-MM-DD)"),
        ({"after": "2026-05-15", "before": "2026-05-14"}, "after", "later than before: '2026-05-14'"),
        ({"before": 20260514}, "before", "before"),
        ({"evergreen": "no"}, "evergreen", "evergreen"),
    ]:
        r = search(base, query="deploy", **body)
        assert r.status_code == 400 and r.headers["content-type"].startswith("application/problem+json"), r.text
        doc = r.json()
        assert doc["status"] == 400 and field in doc["detail"] and needle in doc["detail"], doc


def test_metrics_count_empty_answers_and_the_top_scores_per_agent(base: str) -> None:
    def empty(agent: str, reason: str) -> float:
        return before.get(("memsift_search_empty_total", (("agent", agent), ("reason", reason))), 0.0)

    def top(agent: str, what: str) -> float:
        return before.get((f"memsift_search_top_score_{what}", (("agent", agent),)), 0.0)

    before = samples(base)
    counts = {
        "no_match": empty("main", "no_match"),
        "below_floor": empty("main", "below_floor"),
        "count": top("main", "count"),
        "sum": top("main", "sum"),
        "research": top("research", "count"),
    }
    scores = []
    for body in ({"query": "flat white"}, {"query": "ERR_SSL_PROTOCOL_ERROR", "mode": "keyword"}):
        r = search(base, **body)
        assert r.status_code == 200 and r.json()["results"]
        scores.append(r.json()["results"][0]["score"])
    r = search(base, query="spectrometer", agent="research")
    assert r.json()["results"]
    # No candidate at all: a word no note holds, and a window no note is in.
    assert search(base, query="zeppelin", mode="keyword").json()["results"] == []
    assert search(base, query="deploy", after="2030-01-01", evergreen=False).json()["results"] == []
    # Candidates, none above the floor: the vector leg always finds neighbours, none at cosine 1.
    assert search(base, query="a recipe for lemon cake", mode="vector", minScore=1.0).json()["results"] == []
    assert search(base, query="deploy", after="soon").status_code == 400  # a refused request is not a search

    before = samples(base)
    assert empty("main", "no_match") - counts["no_match"] == 2
    assert empty("main", "below_floor") - counts["below_floor"] == 1
    assert top("main", "count") - counts["count"] == 2
    assert top("main", "sum") - counts["sum"] == pytest.approx(sum(scores), abs=1e-5)
    assert top("research", "count") - counts["research"] == 1
    assert empty("research", "no_match") == 0
    bucket = ("memsift_search_top_score_bucket", (("agent", "main"), ("le", "1.0")))
    assert before[bucket] == top("main", "count")  # every score is at most 1
