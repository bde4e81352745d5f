"""`tookMs` split by stage: in `--explain` output, the REST answer and nowhere without explain."""

from __future__ import annotations

import json
import re

from sample import NOTES

from api.cli import main
from core.timings import STAGES


def test_an_explained_search_says_where_its_time_went(workspace, make_config, open_index):
    index = open_index(make_config(workspace(NOTES)))
    index.sync()
    response = index.search("which certificate expired on the load balancer", explain=True, rerank=True)
    doc = response.to_dict()
    timings = doc["timings"]
    assert list(timings) == list(STAGES)
    assert all(v > 0 for v in timings.values()), timings  # hybrid + rerank: every stage ran
    assert sum(timings.values()) <= doc["tookMs"] + 0.01  # stages are parts of the whole
    assert "timings" not in index.search("which certificate expired", rerank=True).to_dict()


def test_a_keyword_search_spends_nothing_on_vectors(workspace, make_config, open_index):
    index = open_index(make_config(workspace(NOTES)))
    index.sync()
    timings = index.search("certificate", mode="keyword", explain=True).to_dict()["timings"]
    assert timings["embed"] == timings["vector"] == 0.0 and timings["keyword"] > 0


def test_cli_explain_prints_the_stages(capsys, workspace):
    ws = workspace(NOTES)
    assert main(["--workspace", str(ws), "search", "load balancer certificate", "--explain"]) == 0
    out = capsys.readouterr().out
    line = out.strip().splitlines()[-1]
    assert re.fullmatch(r"took [\d.]+ ms \(" + r", ".join(rf"{s} [\d.]+" for s in STAGES) + r"\)", line), line
    assert main(["--workspace", str(ws), "search", "load balancer certificate", "--explain", "--json"]) == 0
    assert set(json.loads(capsys.readouterr().out)["timings"]) == set(STAGES)
