"""`memsift train-ranker` end to end as a real process, and the default floor on a real small workspace."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from core import MemoryIndex, load_config
from core.learned import Model
from tests.sample import NOTES
from tests.test_cli import _on_a_terminal

MEMSIFT = Path(sys.executable).parent / "memsift"
QUESTIONS = [
    ("what does Dana drink in the morning", "MEMORY.md", 2),
    ("which database does the ledger service use", "MEMORY.md", 3),
    ("why did the deploy fail", "memory/2026-05-14.md", 11),
    ("who is on call this quarter", "memory/2026-05-15.md", 3),
    ("what does Priya want for the mobile app", "memory/2026-05-15.md", 2),
]


@pytest.fixture
def ws(workspace) -> Path:
    return workspace(NOTES)


def _env(memsift_home: Path, **extra: str) -> dict[str, str]:
    keep = ("MEMSIFT_MODEL_CACHE",)  # the session's optimised graph: not built again per process
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMSIFT_", "PREFECT_API_URL")) or k in keep}
    return env | {"MEMSIFT_HOME": str(memsift_home), **extra}


def test_train_ranker_writes_a_model_that_search_then_uses(ws: Path, memsift_home: Path, tmp_path: Path) -> None:
    queries = tmp_path / "q.jsonl"
    queries.write_text(
        "".join(json.dumps({"query": q, "relevant": [{"path": p, "line": n}]}) + "\n" for q, p, n in QUESTIONS)
    )
    out = tmp_path / "ranker.json"
    proc = subprocess.run(
        [MEMSIFT, "--workspace", ws, "train-ranker", queries, "--out", out, "--json"],
        capture_output=True, text=True, env=_env(memsift_home), timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["questions"] == len(QUESTIONS) and doc["candidates"] >= len(QUESTIONS)
    model = Model.load(out)
    assert doc["fingerprint"] == model.fingerprint and model.meta["trainedOn"] == ["q.jsonl"]

    proc = subprocess.run(
        [MEMSIFT, "--workspace", ws, "search", "flat white", "--json", "--min-score", "0"],
        capture_output=True, text=True, timeout=120,
        env=_env(memsift_home, MEMSIFT_RERANK_RANKERMODEL=str(out), MEMSIFT_RERANK_METHOD="learned"),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    hits = json.loads(proc.stdout)["results"]
    assert hits[0]["path"] == "MEMORY.md" and 0 < hits[0]["score"] < 1


def test_train_ranker_bad_input_is_one_line(ws: Path, memsift_home: Path, tmp_path: Path) -> None:
    proc = subprocess.run(
        [MEMSIFT, "--workspace", ws, "train-ranker", tmp_path / "nope.jsonl", "--out", tmp_path / "m.json"],
        capture_output=True, text=True, env=_env(memsift_home), timeout=120,
    )  # fmt: skip
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.strip().count("\n") == 0 and "nope.jsonl: no such query file" in proc.stderr
    bad = tmp_path / "m.json"
    bad.write_text("{}")
    proc = subprocess.run(
        [MEMSIFT, "--workspace", ws, "search", "flat white"],
        capture_output=True, text=True, timeout=120,
        env=_env(memsift_home, MEMSIFT_RERANK_RANKERMODEL=str(bad), MEMSIFT_RERANK_METHOD="learned"),
    )  # fmt: skip
    assert proc.returncode == 1 and proc.stderr.strip().count("\n") == 0 and "ranker model" in proc.stderr


def test_train_ranker_refuses_an_out_folder_that_is_not_there_before_any_work(
    capsys, ws: Path, memsift_home: Path, tmp_path: Path
) -> None:
    """It indexed, searched every question and fitted the model, then failed writing it: "FileNotFoundError:
    [Errno 2] No such file or directory", the work lost."""
    from api.cli import main

    queries = tmp_path / "q.jsonl"
    queries.write_text(json.dumps({"query": "flat white", "relevant": [{"path": "MEMORY.md", "line": 2}]}) + "\n")
    out = tmp_path / "no-such-folder" / "m.json"
    assert main(["--workspace", str(ws), "train-ranker", str(queries), "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert err == f"memsift: error: --out: {out.parent} is not a folder\n", err
    assert not memsift_home.exists()


def test_train_ranker_fits_trees_that_search_evaluates_without_lightgbm(
    ws: Path, memsift_home: Path, tmp_path: Path
) -> None:
    pytest.importorskip("lightgbm")  # the training extra (memsift[train]); searching needs only numpy
    queries = tmp_path / "q.jsonl"
    queries.write_text(
        "".join(json.dumps({"query": q, "relevant": [{"path": p, "line": n}]}) + "\n" for q, p, n in QUESTIONS)
    )
    out = tmp_path / "trees.json"
    proc = subprocess.run(
        [MEMSIFT, "--workspace", ws, "train-ranker", queries, "--out", out, "--trees", "3", "--json"],
        capture_output=True, text=True, env=_env(memsift_home), timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    model = Model.load(out)
    # Five questions are too few for LightGBM to split on (min_data_in_leaf): it may stop before 3 rounds.
    assert model.trees is not None and 1 <= len(model.trees.feature) <= 3 and model.meta["trees"] == 3
    assert json.loads(out.read_text())["kind"] == "logistic+trees"


def test_the_default_orders_by_the_learned_ranker_and_floors_calibrated_scores(ws: Path) -> None:
    """The learned ranker is the default second stage and orders the hits (its output shows as `ranker`);
    `minScore` acts on the calibrated scores made after it. With `search.calibrate = false` it acts on
    retrieval (a keyword hit, or a cosine at or above it), as it did under the blend."""
    index = MemoryIndex(load_config(workspace=ws))
    try:
        assert index.config.rerank.method == "learned"
        index.sync()
        hits = index.search("what does Dana drink in the morning", explain=True).results
        assert hits and hits[0].path == "MEMORY.md"
        assert all(index.config.search.minScore <= h.score < 1 for h in hits)
        ranker = [h.scores["ranker"] for h in hits]
        assert ranker == sorted(ranker, reverse=True)
        with MemoryIndex(load_config(workspace=ws, overrides={"search.calibrate": False})) as plain:
            raw = plain.search("what does Dana drink in the morning", explain=True).results
        assert raw and all(0 < h.score < 1 for h in raw) and "ranker" not in raw[0].scores
        assert all("text" in h.scores or h.scores["vector"] >= index.config.search.minScore for h in raw)
        everything = index.search("what does Dana drink in the morning", min_score=0.0).results
        assert len(everything) >= len(hits) and everything[0].path == hits[0].path
    finally:
        index.close()


def test_train_ranker_refuses_an_out_that_is_a_folder_before_any_work(
    capsys, ws: Path, memsift_home: Path, tmp_path: Path
) -> None:
    """`--out models` (a folder) fitted the model, then failed: "IsADirectoryError: [Errno 21] Is a directory"."""
    from api.cli import main

    queries = tmp_path / "q.jsonl"
    queries.write_text(json.dumps({"query": "flat white", "relevant": [{"path": "MEMORY.md", "line": 2}]}) + "\n")
    out = tmp_path / "models"
    out.mkdir()
    assert main(["--workspace", str(ws), "train-ranker", str(queries), "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert err == f"memsift: error: --out: {out} is a folder; give the model file's name ({out / 'ranker.json'})\n"
    assert not memsift_home.exists()


def test_train_ranker_without_lightgbm_says_so_before_any_work(
    capsys, monkeypatch, ws: Path, memsift_home: Path, tmp_path: Path
) -> None:
    """`--trees` without the `train` extra indexed the workspace and searched every question before saying that
    fitting trees needs LightGBM: minutes on a real query file, lost."""
    from api.cli import main

    monkeypatch.setitem(sys.modules, "lightgbm", None)  # as where `memsift[train]` is not installed
    queries = tmp_path / "q.jsonl"
    queries.write_text(json.dumps({"query": "flat white", "relevant": [{"path": "MEMORY.md", "line": 2}]}) + "\n")
    argv = ["--workspace", str(ws), "train-ranker", str(queries), "--out", str(tmp_path / "m.json"), "--trees", "3"]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err == "memsift: error: fitting trees needs LightGBM, a training-only extra: pip install 'memsift[train]'\n"
    assert not memsift_home.exists() and not (tmp_path / "m.json").exists()


def _lines(questions: list[tuple[str, str, int]]) -> str:
    return "".join(
        json.dumps({"qid": f"q{i}", "query": q, "relevant": [{"path": p, "line": n}] if p else []}) + "\n"
        for i, (q, p, n) in enumerate(questions)
    )


def test_train_ranker_names_a_relevant_path_the_index_does_not_hold_and_leaves_its_question_out(
    capsys, ws: Path, memsift_home: Path, tmp_path: Path
) -> None:
    """A mistyped path trained the model with that question's answer as a wrong one, in silence ("wrote ...: 6
    questions"); `memsift eval` named such a path. A file of such questions only, or of questions without a
    relevant line, failed with "training needs candidates of both kinds", which named neither."""
    from api.cli import main

    queries, out = tmp_path / "q.jsonl", tmp_path / "m.json"
    queries.write_text(_lines([*QUESTIONS, ("who is on call this quarter", "notes/2026-05-15.md", 3)]))
    assert main(["--workspace", str(ws), "--json", "train-ranker", str(queries), "--out", str(out)]) == 0
    captured = capsys.readouterr()
    assert captured.err == (
        f"warning: {queries}: relevant path 'notes/2026-05-15.md' (query q5) is no file the index of {ws} holds: "
        "no hit can cover it\n"
        f"warning: 5 questions for 43 signals: a model fitted on so few is likely to order other questions worse "
        f"than the shipped one; compare them first: memsift eval QUERIES.jsonl --compare rerank.rankerModel={out}\n"
    )  # the second: it wrote a model from 5 questions as from 760, in silence
    doc = json.loads(captured.out)
    assert doc["questions"] == len(QUESTIONS) and doc["leftOut"] == 1

    queries.write_text(_lines([("who is on call this quarter", "notes/2026-05-15.md", 3)]))
    assert main(["--workspace", str(ws), "train-ranker", str(queries), "--out", str(out)]) == 1
    assert capsys.readouterr().err.endswith(
        "memsift: error: every question was left out: none of their relevant lines is one a hit can cover (the "
        "warnings above); a relevant path is relative to the question's workspace, as a hit names it\n"
    )
    # A line past the end of its note (numbered from an older version of it) is as uncoverable as a bad path.
    queries.write_text(_lines([*QUESTIONS, ("who is on call this quarter", "memory/2026-05-15.md", 300)]))
    assert main(["--workspace", str(ws), "--json", "train-ranker", str(queries), "--out", str(out)]) == 0
    captured = capsys.readouterr()
    assert "relevant line 300 of 'memory/2026-05-15.md' (query q5) is past the last line" in captured.err
    assert json.loads(captured.out)["leftOut"] == 1
    queries.write_text(_lines([(q, "", 0) for q, _, _ in QUESTIONS]))
    assert main(["--workspace", str(ws), "train-ranker", str(queries), "--out", str(out)]) == 1
    assert capsys.readouterr().err == "memsift: error: no question has a relevant line to learn from\n"


def test_train_ranker_labels_a_relevant_path_as_eval_reads_it(ws: Path, tmp_path: Path) -> None:
    """`./MEMORY.md` (as a shell completes it) and a name in the other Unicode normal form are the note for
    `memsift eval`; training compared them as written, so their answer was learnt as a wrong one."""
    from core.ranker_training import collect

    (ws / "memory" / "café.md").write_text("# Café\n- The espresso machine descales on Fridays.\n")
    queries = tmp_path / "q.jsonl"
    queries.write_text(
        _lines([("what does Dana drink in the morning", "./MEMORY.md", 2)])
        + json.dumps(
            {
                "query": "when does the espresso machine descale",
                "relevant": [{"path": "memory/cafe\u0301.md", "line": 2}],
            }
        )
        + "\n"
    )
    data = collect(load_config(workspace=ws), [queries])
    assert [y.max() for y in data.y] == [1.0, 1.0]


def test_train_ranker_shows_progress_on_a_terminal_and_reads_every_file_first(
    ws: Path, memsift_home: Path, tmp_path: Path
) -> None:
    """On locomo-dev's 760 questions it searched for minutes with nothing on the terminal; it now shows the
    questions done of all its files' questions. A bad line in the second file stopped it only after every
    search of the first: every file is now read before any work (no index is built)."""
    queries = tmp_path / "q.jsonl"
    queries.write_text(
        "".join(json.dumps({"query": q, "relevant": [{"path": p, "line": n}]}) + "\n" for q, p, n in QUESTIONS)
    )
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"query": "x", "relevant": []}\n[1, 2]\n')
    proc = subprocess.run(
        [MEMSIFT, "--workspace", ws, "train-ranker", queries, bad, "--out", tmp_path / "m.json"],
        capture_output=True, text=True, env=_env(memsift_home), timeout=120,
    )  # fmt: skip
    assert proc.returncode == 1 and "bad.jsonl:2: needs an object" in proc.stderr, proc.stderr
    assert not (memsift_home / "memory").exists() and not (tmp_path / "m.json").exists()

    argv = [MEMSIFT, "--workspace", ws, "train-ranker", queries, "--out", tmp_path / "m.json"]
    proc, shown = _on_a_terminal(argv, _env(memsift_home), stream="stderr")
    assert proc.returncode == 0 and proc.stdout.decode().startswith("wrote "), proc.stdout
    assert b"questions" in shown and f"{len(QUESTIONS)}/{len(QUESTIONS)}".encode() in shown, shown


def test_eval_shows_progress_on_a_terminal_for_each_config(ws: Path, memsift_home: Path, tmp_path: Path) -> None:
    """`memsift eval` of locomo-dev's 760 questions searched (and indexed) for minutes with nothing on the
    terminal; it shows the questions searched, once per configuration with `--compare`, and stdout keeps the
    tables alone."""
    queries = tmp_path / "q.jsonl"
    queries.write_text(_lines(QUESTIONS))
    argv = [MEMSIFT, "--workspace", ws, "eval", queries, "--compare", "rerank.method=blend"]
    proc, shown = _on_a_terminal(argv, _env(memsift_home), stream="stderr")
    assert proc.returncode == 0 and proc.stdout.decode().startswith("A: mode hybrid"), proc.stdout
    assert b"\x1b" not in proc.stdout
    done = f"{len(QUESTIONS)}/{len(QUESTIONS)}".encode()
    assert b"A: questions" in shown and b"B: questions" in shown and done in shown, shown


def test_train_ranker_replaces_the_model_the_configuration_names_even_when_unreadable(
    capsys, ws: Path, tmp_path: Path
) -> None:
    """The configuration pointed at the model first (not written yet), or at one of another memsift version
    whose error says "fit it again with `memsift train-ranker`": train-ranker itself refused, reading the very
    file it was asked to write."""
    from api.cli import main

    config, out = tmp_path / "memsift.toml", tmp_path / "ranker.json"
    config.write_text(f'workspace = "{ws}"\n[rerank]\nrankerModel = "ranker.json"\n')
    queries = tmp_path / "q.jsonl"
    queries.write_text(_lines(QUESTIONS))
    train = ["--config", str(config), "--json", "train-ranker", str(queries), "--out", str(out)]
    assert main(train) == 0, capsys.readouterr().err
    first = json.loads(capsys.readouterr().out)["fingerprint"]
    stale = json.loads(out.read_text())
    stale["features"], stale["mean"] = stale["features"][:-1], stale["mean"][:-1]  # one signal fewer
    out.write_text(json.dumps(stale))
    assert main(["--config", str(config), "search", "flat white"]) == 1
    assert "fit it again with `memsift train-ranker" in capsys.readouterr().err
    assert main([*train, "--l2", "3"]) == 0, capsys.readouterr().err
    second = json.loads(capsys.readouterr().out)["fingerprint"]
    assert second != first
    assert main(["--config", str(config), "--json", "status"]) == 0
    assert json.loads(capsys.readouterr().out)["rerank"]["ranker"] == second
