"""`memsift eval`: the metrics on a hand-scored case, the table, and two configs compared."""

from __future__ import annotations

import json
import math
import re
import unicodedata
from pathlib import Path

import pytest
from sample import NOTES

from api.cli import main
from core.evaluate import METRICS, score_query
from core.search_response import Hit


def _hit(path: str, start: int, end: int) -> Hit:
    return Hit(path=path, startLine=start, endLine=end, score=1.0, snippet="", source="memory", citation=None)


def test_metrics_on_a_hand_scored_ranking():
    relevant = [{"path": "a.md", "line": 3}, {"path": "b.md", "line": 7}]
    hits = [_hit("c.md", 1, 9), _hit("a.md", 1, 5), _hit("a.md", 2, 4), _hit("b.md", 6, 8)]
    got = score_query(hits, relevant, 10)
    ideal = 1 + 1 / 1.5849625007211562  # two relevant lines: ranks 1 and 2
    assert got["R@5"] == got["R@10"] == 1.0
    assert got["MRR@10"] == 0.5
    # Rank 3 covers a line rank 2 already covered: no gain. Gains at ranks 2 and 4.
    assert got["nDCG@10"] == pytest.approx((1 / 1.5849625007211562 + 1 / 2.321928094887362) / ideal)


def test_each_metric_is_named_by_the_rank_it_was_cut_at():
    """`eval --k 3` printed three-hit figures under R@5, R@10, MRR@10 and nDCG@10, and `--k 20` an nDCG of
    twenty hits under nDCG@10: a reader compared them with real @10 figures."""
    relevant = [{"path": "a.md", "line": 3}, {"path": "b.md", "line": 7}]
    hits = [_hit("c.md", 1, 9), _hit("a.md", 1, 5), *(_hit("c.md", i, i) for i in range(10, 20)), _hit("b.md", 7, 7)]
    assert score_query(hits, relevant, 3) == {"R@3": 0.5, "MRR@3": 0.5, "nDCG@3": pytest.approx(0.6309 / 1.6309, 1e-4)}
    twenty = score_query(hits, relevant, 20)  # the default four, at their own cut, then k's own
    assert list(twenty) == ["R@5", "R@10", "R@20", "MRR@10", "MRR@20", "nDCG@10", "nDCG@20"]
    assert (twenty["R@5"], twenty["R@10"], twenty["R@20"], twenty["MRR@10"]) == (0.5, 0.5, 1.0, 0.5)
    ideal = 1 + 1 / math.log2(3)
    assert twenty["nDCG@10"] == pytest.approx(1 / math.log2(3) / ideal)
    assert twenty["nDCG@20"] == pytest.approx((1 / math.log2(3) + 1 / math.log2(14)) / ideal)
    assert list(score_query(hits, relevant, 10)) == list(METRICS) == ["R@5", "R@10", "MRR@10", "nDCG@10"]


def test_a_relevant_path_as_a_shell_completes_it_is_the_same_file():
    """`./memory/a.md` (tab completion, as `get` and pathPrefix take it) covered nothing: every metric 0."""
    hits = [_hit("memory/a.md", 1, 5)]
    assert score_query(hits, [{"path": "./memory/a.md", "line": 3}], 10) == score_query(
        hits, [{"path": "memory/a.md", "line": 3}], 10
    )
    assert score_query(hits, [{"path": "./memory/a.md", "line": 3}], 10)["R@10"] == 1.0


@pytest.mark.parametrize(("on_disk", "in_file"), [("NFC", "NFD"), ("NFD", "NFC")])
def test_a_relevant_path_in_either_unicode_form_names_the_same_note(capsys, tmp_path, workspace, on_disk, in_file):
    """A query file saved on macOS spells `café` decomposed (NFD), a Linux folder keeps the name as written
    (NFC, mostly): the hit and the relevant path never matched, R@10 0 for a note found first."""
    name = "memory/café.md"
    ws = workspace({unicodedata.normalize(on_disk, name): "# Café\n\nThe espresso machine is descaled on Mondays.\n"})
    row = {
        "query": "espresso machine descaled",
        "relevant": [{"path": unicodedata.normalize(in_file, name), "line": 3}],
    }
    queries = tmp_path / "q.jsonl"
    queries.write_text(json.dumps(row, ensure_ascii=False) + "\n", encoding="utf-8")
    assert main(["--workspace", str(ws), "eval", str(queries), "--json", "--no-rerank"]) == 0
    assert json.loads(capsys.readouterr().out)["overall"] == {m: 1.0 for m in METRICS} | {"n": 1}


@pytest.fixture
def queries(workspace, tmp_path: Path) -> Path:
    ws = workspace(NOTES)
    rows = [
        {
            "query": "flat white",
            "workspace": str(ws),
            "category": "single",
            "relevant": [{"path": "MEMORY.md", "line": 2}],
        },
        {
            "query": "ERR_SSL_PROTOCOL_ERROR",
            "workspace": str(ws),
            "category": "single",
            "relevant": [{"path": "memory/2026-05-14.md", "line": 11}],
        },
    ]
    path = tmp_path / "q.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_eval_compares_two_configs(capsys, queries: Path):
    code = main(["eval", str(queries), "--no-rerank", "--compare", "search.fusion=rrf"])
    out = capsys.readouterr().out
    assert code == 0
    assert "A: mode hybrid, fusion minmax, rerank off" in out and "B: mode hybrid, fusion rrf, rerank off" in out
    diff = out.split("B - A (points)")[1].splitlines()
    assert any(re.fullmatch(r"overall\s+2(\s+[+-]\d+\.\d){4}", line) for line in diff)


def test_a_bad_compare_value_is_refused_before_any_work(capsys, queries: Path, memsift_home: Path):
    """B's configuration was read after A had run every query (its indexes built, minutes on a large file),
    so `--compare search.mode=fuzzy` failed only then: SPEC section 2, a bad value stops before any work."""
    assert main(["eval", str(queries), "--compare", "search.mode=fuzzy"]) == 1
    assert "search.mode: 'fuzzy' is not one of" in capsys.readouterr().err
    assert not list(memsift_home.glob("memory/*.sqlite"))


def test_eval_json_and_a_bad_setting(capsys, queries: Path):
    assert main(["eval", str(queries), "--json", "--set", "rerank.method=blend", "--set", "rerank.weight=1.0"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["queries"] == 2 and doc["overall"]["R@10"] == 1.0
    assert doc["rerank"].startswith("auto: local/maxsim (weight 1.0)")
    with pytest.raises(SystemExit):
        main(["eval", str(queries), "--set", "no-equals-sign"])
    assert main(["eval", str(queries), "--set", "rerank.weight=7"]) != 0


def test_eval_k_names_the_columns_of_the_table_and_the_json(capsys, queries: Path):
    assert main(["eval", str(queries), "--json", "--no-rerank", "--k", "3"]) == 0
    assert list(json.loads(capsys.readouterr().out)["overall"]) == ["R@3", "MRR@3", "nDCG@3", "n"]
    assert main(["eval", str(queries), "--no-rerank", "--k", "3", "--compare", "search.fusion=rrf"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"category\s+n\s+R@3\s+MRR@3\s+nDCG@3\n", out) and "@10" not in out, out


def test_a_query_without_a_relevant_line_is_left_out_and_counted(capsys, queries: Path):
    """An off-topic question (no relevant line) was scored 0 on every metric: R@10 1.0 read 0.667."""
    rows = [json.loads(line) for line in queries.read_text().splitlines()]
    rows.append({"query": "what is the capital of Peru", "workspace": rows[0]["workspace"], "relevant": []})
    queries.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["eval", str(queries), "--json", "--no-rerank"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["queries"], doc["unscored"], doc["overall"]["R@10"]) == (2, 1, 1.0)
    assert list(doc["categories"]) == ["single"]
    assert main(["eval", str(queries), "--no-rerank"]) == 0
    assert "2 queries (1 more without a relevant line, not scored)" in capsys.readouterr().out


def test_a_relevant_path_the_index_does_not_hold_is_named_on_stderr(capsys, queries: Path):
    """A typo in a relevant path (`MEMORY.mdx`, a note renamed since the file was written) scored 0 on every
    metric, in silence, read as a search that missed."""
    rows = [json.loads(line) for line in queries.read_text().splitlines()]
    rows[0]["qid"] = "tea"
    rows[0]["relevant"] = [{"path": "MEMORY.mdx", "line": 2}]
    queries.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["eval", str(queries), "--json", "--no-rerank"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["overall"]["R@10"] == 0.5
    ws = Path(rows[0]["workspace"]).resolve()
    assert captured.err == (
        f"warning: {queries}: relevant path 'MEMORY.mdx' (query tea) is no file the index of {ws} holds: "
        "no hit can cover it\n"
    )


def test_a_relevant_line_past_the_end_of_its_file_is_named_on_stderr(capsys, queries: Path):
    """A line number past the end of its note (from an older version of it, a typo) scored 0 on every metric,
    in silence, as a bad path did; it is named with the last line the index holds of that file."""
    rows = [json.loads(line) for line in queries.read_text().splitlines()]
    rows[0]["qid"] = "tea"
    last = len((Path(rows[0]["workspace"]) / "MEMORY.md").read_text().splitlines())
    rows[0]["relevant"] = [{"path": "./MEMORY.md", "line": 99}, {"path": "MEMORY.md", "line": last}]
    queries.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["eval", str(queries), "--json", "--no-rerank"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["overall"]["R@10"] == 0.75  # tea's last line found, its line 99 never
    ws = Path(rows[0]["workspace"]).resolve()
    assert captured.err == (
        f"warning: {queries}: relevant line 99 of './MEMORY.md' (query tea) is past the last line the index of "
        f"{ws} holds of it ({last}): no hit can cover it\n"
    )


def test_eval_rows_name_each_category_and_the_uncategorised(capsys, queries: Path):
    """A query without a category was counted in a row named "all", read as every query; category 0 too."""
    rows = [json.loads(line) for line in queries.read_text().splitlines()]
    rows[0]["category"] = 0
    del rows[1]["category"]
    queries.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["eval", str(queries), "--json", "--no-rerank"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert {name: row["n"] for name, row in doc["categories"].items()} == {"0": 1, "(none)": 1}


def test_a_query_file_saved_with_a_byte_order_mark_is_read(capsys, queries: Path):
    """A JSON Lines file from a Windows tool starts with a BOM: its first line was "not JSON (Unexpected UTF-8
    BOM)"; the configuration file is read past one too."""
    queries.write_bytes(b"\xef\xbb\xbf" + queries.read_bytes())
    assert main(["eval", str(queries), "--json", "--no-rerank"]) == 0
    assert json.loads(capsys.readouterr().out)["queries"] == 2


_Q = '{"qid": "%s", "query": "tea", "relevant": [{"path": "MEMORY.md", "line": 1}]}\n'


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (None, "no such query file"),
        ("", "no queries"),
        ("\n\n", "no queries"),
        ("not json\n", "q.jsonl:1"),
        ("[1, 2]\n", "q.jsonl:1"),
        ('{"query": "tea", "relevant": [{"path": "MEMORY.md"}]}\n', "q.jsonl:1"),
        ('{"query": "tea", "relevant": [], "workspace": "nowhere"}\n', "nowhere"),
        ('{"query": "tea", "relevant": []}\n', "no query has a relevant line"),
        ('{"query": "tea", "relevant": [{"path": "MEMORY.md", "line": 0}]}\n', "q.jsonl:1"),
        ('{"query": "tea", "relevant": [{"path": "MEMORY.md", "line": true}]}\n', "q.jsonl:1"),
        # a blank query: "query: must not be blank", naming no file, after every search above it
        ('{"query": "tea", "relevant": []}\n{"query": " ", "relevant": []}\n', "q.jsonl:2: query: must not be blank"),
        ('{"query": "\\u200b", "relevant": []}\n', "q.jsonl:1: query: must not be blank"),
        # half a UTF-16 pair, valid JSON to Python: the search degraded to keywords in silence
        ('{"query": "tea \\ud800", "relevant": []}\n', "q.jsonl:1: query: holds a lone surrogate"),
        ('{"query": "tea", "relevant": [{"path": "/ws/MEMORY.md", "line": 1}]}\n', "q.jsonl:1: a 'relevant' path"),
        # a copied line: scored twice and weighed double, in silence
        (_Q % "a" + _Q % "b" + _Q % "a", "q.jsonl:3: duplicate qid 'a' (first on line 1)"),
        (_Q % "a" + '{"qid": [1], "query": "tea", "relevant": []}\n', "q.jsonl:2: 'qid' is a string"),
        # was "workspace 3 (<folder>/3) is not a folder", and a blank one passed as the query file's folder
        ('{"query": "tea", "relevant": [], "workspace": 3}\n', "q.jsonl:1: 'workspace' is a folder relative to"),
        ('{"query": "tea", "relevant": [], "workspace": " "}\n', "q.jsonl:1: 'workspace' is a folder relative to"),
    ],
)
def test_eval_refuses_a_bad_query_file_in_one_line(capsys, tmp_path: Path, content: str | None, needle: str):
    """A missing or empty file, a line that is not a query object, a relevant entry without its line, a
    workspace that is not there: each a one-line error naming the file (it was a KeyError, an AttributeError,
    or, for a mistyped workspace, metrics of 0 over nothing), a relevant line no hit can cover (0, `true`: it
    was scored 0 on every metric), a file whose queries have no relevant line at all."""
    path = tmp_path / "q.jsonl"
    if content is not None:
        path.write_text(content)
    assert main(["eval", str(path)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    err = captured.err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("memsift: error: ") and needle in err, err
    assert "q.jsonl" in err and "Error:" not in err, err


@pytest.mark.parametrize(("make", "needle"), [("folder", "a folder, not a query file"), ("latin1", "not UTF-8")])
def test_eval_names_a_query_file_it_cannot_read(capsys, tmp_path: Path, make: str, needle: str):
    """A folder was "no such query file", and a file in Latin-1 "UnicodeDecodeError: 'utf-8' codec ..."."""
    path = tmp_path / "q.jsonl"
    if make == "folder":
        path.mkdir()
    else:
        path.write_bytes('{"query": "caf\u00e9", "relevant": []}\n'.encode("latin-1"))
    assert main(["eval", str(path)]) == 1
    err = capsys.readouterr().err.strip()
    assert err == f"memsift: error: {path}: {needle}" or err.startswith(f"memsift: error: {path}: {needle} "), err


def test_a_query_workspace_is_indexed_with_its_own_extra_paths(capsys, tmp_path: Path, workspace):
    """`memsift eval` run from a workspace whose memsift.toml adds notes kept elsewhere, on a query file whose
    queries name another workspace: that workspace's own extraPaths were left out (its answer unfound,
    R@10 0), and the command's were indexed into it (another workspace's notes among the hits)."""
    from core import load_config
    from core.evaluate import query_index

    outside = workspace({"boat.md": "# Elsewhere\n\nThe rowing club keeps the kayak at the quarry lake.\n"}, "outside")
    home = workspace({"MEMORY.md": "# Memory\n- Home notes.\n", "memsift.toml": f'extraPaths = ["{outside}"]\n'})
    asked = workspace(
        {
            "MEMORY.md": "# Memory\n- The team mascot is a capybara.\n",
            "docs/boat.md": "# Boat\n\nThe sailing boat is moored at pier 14 in Cascais marina.\n",
            "memsift.toml": 'extraPaths = ["docs"]\n',
        },
        "asked",
    )
    row = {"query": "Cascais marina pier", "workspace": "asked", "relevant": [{"path": "docs/boat.md", "line": 3}]}
    queries = tmp_path / "q.jsonl"
    queries.write_text(json.dumps(row) + "\n")
    assert main(["--workspace", str(home), "eval", str(queries), "--json", "--no-rerank"]) == 0
    assert json.loads(capsys.readouterr().out)["overall"]["R@10"] == 1.0
    indexes: dict = {}
    try:
        index = query_index(indexes, load_config(workspace=home), tmp_path, row)
        hits = index.search("rowing club kayak quarry", mode="keyword", min_score=0).results
        assert [h.path for h in hits] == [], [h.path for h in hits]
        assert asked == index.config.workspace
    finally:
        for each in indexes.values():
            each.close()


def test_a_bad_key_in_a_query_workspace_config_names_that_file(capsys, tmp_path: Path, workspace):
    """A query's workspace whose memsift.toml had a typo failed with "bogus: no such configuration key",
    which reads as the command's own configuration, valid and elsewhere."""
    asked = workspace({"MEMORY.md": "- The mascot is a capybara.\n", "memsift.toml": "bogus = 1\n"}, "asked")
    queries = tmp_path / "q.jsonl"
    row = {"query": "mascot", "workspace": "asked", "relevant": [{"path": "MEMORY.md", "line": 1}]}
    queries.write_text(json.dumps(row) + "\n")
    assert main(["--workspace", str(workspace({"MEMORY.md": "- home\n"})), "eval", str(queries)]) == 1
    err = capsys.readouterr().err.strip()
    assert err == f"memsift: error: {asked / 'memsift.toml'}: bogus: no such configuration key", err


@pytest.mark.parametrize(
    ("flag", "value"), [("--k", "0"), ("--k", "101"), ("--min-score", "2"), ("--min-score", "-1"), ("--limit", "0")]
)
def test_an_eval_option_out_of_range_is_a_usage_error_naming_it(capsys, queries: Path, flag: str, value: str):
    """`--k 0` was exit 1 with "maxResults: 0 is out of range" (a key the user never typed), `--limit 0` "no
    query has a relevant line to score"; search's own `--max-results 0` is exit 2 naming its flag."""
    with pytest.raises(SystemExit) as exit_:
        main(["eval", str(queries), flag, value])
    assert exit_.value.code == 2
    assert f"argument {flag}: " in capsys.readouterr().err


def test_the_table_of_one_query_says_1_query(capsys, queries: Path):
    """It said `1 queries`: counts in messages take the noun's number (core.words.counted)."""
    assert main(["eval", str(queries), "--no-rerank", "--limit", "1"]) == 0
    out = capsys.readouterr().out
    assert ", 1 query\n" in out and "1 queries" not in out, out
