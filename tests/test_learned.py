"""The learned ranker's features on hand-built chunks, and its numpy logistic regression."""

import dataclasses
import os
import random
import string
import subprocess
import sys
from datetime import date

import numpy as np
import pytest

from core import learned, ranker_features
from core.ranking import Candidate
from core.store_search import ChunkRow

COL = {name: i for i, name in enumerate(ranker_features.FEATURES)}
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
    x = ranker_features.features("What puppy did Caroline adopt on 4 August, 2023?", cands, rows, TODAY)
    assert x.shape == (4, len(ranker_features.FEATURES))
    assert list(x[:, COL["has_text"]]) == [1, 1, 0, 1]
    assert list(x[:, COL["bm25_norm"]]) == pytest.approx([1.0, 1 / 3, 0.0, 0.0])
    assert list(x[:, COL["rr_fused"]]) == pytest.approx([1.0, 0.5, 0.25, 1 / 3])
    assert list(x[:, COL["rr_text"]]) == pytest.approx([1.0, 0.5, 0.0, 1 / 3])
    assert list(x[:, COL["maxsim_gap"]]) == pytest.approx([-0.1, 0.0, -0.4, -0.3])


def test_date_affinity_follows_the_question_period() -> None:
    cands, rows = _pool()
    x = ranker_features.features("What puppy did Caroline adopt on 4 August, 2023?", cands, rows, TODAY)
    assert list(x[:, COL["has_period"]]) == [1, 1, 1, 1]
    assert x[0, COL["date_affinity"]] == 1.0 and x[1, COL["date_affinity"]] == 1.0
    assert 0 < x[2, COL["date_affinity"]] < 1e-3  # five months earlier
    assert x[3, COL["date_affinity"]] == 0.0  # MEMORY.md is not dated
    undated = ranker_features.features("What puppy did Caroline adopt?", cands, rows, TODAY)
    assert not undated[:, COL["has_period"]].any() and not undated[:, COL["date_affinity"]].any()


def test_line_evidence_and_attribution() -> None:
    cands, rows = _pool()
    x = ranker_features.features("What puppy did Caroline adopt?", cands, rows, TODAY)
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
    mine = ranker_features.features("What is my puppy called?", cands, rows, TODAY)
    assert mine[3, COL["attr_any"]] == 1 and mine[3, COL["attr_best"]] > 0
    assert mine[0, COL["attr_any"]] == 0  # nobody in chunk 1 is named by that question


def test_file_context_comes_from_the_other_chunks_of_the_note() -> None:
    cands, rows = _pool()
    x = ranker_features.features("puppy", cands, rows, TODAY)
    assert x[0, COL["file_best_fused"]] == pytest.approx(0.6) and x[1, COL["file_best_fused"]] == pytest.approx(0.9)
    assert x[0, COL["file_best_maxsim"]] == pytest.approx(0.6)
    assert list(x[:, COL["file_rr"]]) == [1.0, 0.5, 1.0, 1.0]
    assert list(x[:, COL["file_count"]]) == pytest.approx([0.2, 0.2, 0.1, 0.1])


def test_fit_learns_a_separable_signal_and_round_trips(tmp_path) -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(400, len(ranker_features.FEATURES)))
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
    with pytest.raises(learned.RankerModelError, match="m.json: not a model") as caught:
        learned.Model.load(path)
    # a model of another version's signals: it said what, not what to do
    assert str(caught.value).endswith("fit it again with `memsift train-ranker QUERIES.jsonl --out PATH`")
    with pytest.raises(learned.RankerModelError, match="missing.json"):
        learned.Model.load(tmp_path / "missing.json")


def test_status_names_the_learned_ranker_it_scores_with(workspace, make_config, open_index) -> None:
    index = open_index(make_config(workspace({"MEMORY.md": "- a note\n"}), **{"rerank.method": "learned"}))
    index.sync()
    rerank = index.status()["rerank"]
    assert rerank["method"] == "learned" and rerank["ranker"] == learned.model_for(None).fingerprint


def test_line_maxsim_and_query_shape_are_features() -> None:
    cands, rows = _pool()
    lines = np.array([[0.7, 0.5, 0.8], [0.6, 0.1, 0.6], [0.2, 0.0, 0.2], [0.3, 0.3, 0.4]])
    x = ranker_features.features("puppy", cands, rows, TODAY, lines)
    assert list(x[:, COL["maxsim_line_best"]]) == [0.7, 0.6, 0.2, 0.3]
    assert list(x[:, COL["maxsim_window_best"]]) == [0.8, 0.6, 0.2, 0.4]
    assert list(x[:, COL["pool_maxsim_line_best"]]) == [0.7] * 4
    assert not ranker_features.features("puppy", cands, rows, TODAY)[:, COL["maxsim_line_best"]].any()  # none given
    # The shape of the query: a bare identifier, code words inside a sentence, or plain words.
    assert x[0, COL["query_ident"]] == 0 and x[0, COL["query_code_share"]] == 0
    for ident in ("parse_args", "os.path.join", "getUserName", "run()"):
        assert ranker_features.is_identifier(ident), ident
    assert not ranker_features.is_identifier("puppy") and not ranker_features.is_identifier("parse the args")
    mixed = ranker_features.features("how does parse_args read sys.argv here", cands, rows, TODAY)
    assert mixed[0, COL["query_ident"]] == 0 and mixed[0, COL["query_code_share"]] == pytest.approx(2 / 6)
    assert mixed[0, COL["query_words"]] == pytest.approx(6 / 20)


#: A hand-written ensemble of two trees over features 0 and 1: the first splits twice, the second never.
NESTED = [
    {
        "split_feature": 0,
        "threshold": 0.5,
        "decision_type": "<=",
        "left_child": {"leaf_value": -1.0},
        "right_child": {
            "split_feature": 1,
            "threshold": 2.0,
            "decision_type": "<=",
            "left_child": {"leaf_value": 0.25},
            "right_child": {"leaf_value": 3.0},
        },
    },
    {"leaf_value": 0.5},
]


def test_trees_evaluate_a_hand_written_ensemble_in_numpy() -> None:
    trees = learned.Trees.from_nested(NESTED)
    x = np.zeros((4, len(ranker_features.FEATURES)))
    x[:, 0] = [0.5, 0.6, 0.6, -3.0]
    x[:, 1] = [9.0, 2.0, 2.1, 9.0]
    # Row 0 sits on the split point: `<=` goes left, as LightGBM does.
    assert list(trees.predict(x)) == [-0.5, 0.75, 3.5, -0.5]
    again = learned.Trees.from_dict(trees.to_dict())
    assert list(again.predict(x)) == [-0.5, 0.75, 3.5, -0.5]
    with pytest.raises(ValueError, match="only numerical"):
        learned.Trees.from_nested([{**NESTED[0], "decision_type": "=="}])


def test_a_model_with_trees_adds_them_to_the_logit_and_round_trips(tmp_path) -> None:
    rng = np.random.default_rng(1)
    x = rng.normal(size=(200, len(ranker_features.FEATURES)))
    y = (x[:, 0] > 0).astype(float)
    plain = learned.fit(x, y, l2=1.0)
    model = plain.with_trees(learned.Trees.from_nested(NESTED), {"trees": 2})
    z = np.log(model.predict(x) / (1 - model.predict(x)))
    assert np.allclose(z - plain.linear(x), model.trees.predict(x), atol=1e-6)
    path = tmp_path / "m.json"
    path.write_text(model.to_json())
    again = learned.Model.load(path)
    assert again.trees is not None and np.allclose(again.predict(x), model.predict(x))
    assert again.fingerprint == model.fingerprint != plain.fingerprint and again.meta["trees"] == 2


def test_numpy_trees_equal_lightgbm_on_a_fitted_model() -> None:
    lightgbm = pytest.importorskip("lightgbm")  # the training extra; search never needs it
    from core.ranker_training import fit_trees

    rng = np.random.default_rng(2)
    x = rng.normal(size=(2000, len(ranker_features.FEATURES)))
    x[:, 5] = rng.integers(0, 3, size=2000)  # a few discrete values: splits fall between them
    y = ((x[:, 0] * x[:, 5] + np.sin(x[:, 1]) + 0.3 * rng.normal(size=2000)) > 0.2).astype(float)
    base = 0.1 * x[:, 2]
    trees = fit_trees(x, y, base, 30)
    booster = lightgbm.train(
        __import__("core.ranker_training", fromlist=["TREE_PARAMS"]).TREE_PARAMS,
        lightgbm.Dataset(x, y, init_score=base, params={"verbose": -1}),
        num_boost_round=30,
    )
    test = rng.normal(size=(500, len(ranker_features.FEATURES)))
    test[:, 5] = rng.integers(0, 3, size=500)
    assert np.allclose(trees.predict(test), booster.predict(test, raw_score=True), atol=1e-9)
    assert len(trees.feature) == 30


def test_a_search_feeds_each_candidate_its_own_line_maxsim(workspace, make_config, open_index) -> None:
    """The features a search hands the model, row by row, are those of the candidate in that row (the blend
    reorders the pool between computing MaxSim per line and the features)."""
    from sample import NOTES

    index = open_index(make_config(workspace(NOTES)))
    index.sync()
    found = []
    index.search("why did the deploy fail", min_score=0.0, collect=lambda *args: found.append(args))
    (cands, rows, x), reranker = found[0], index.reranker()
    assert len(cands) > 2 and x[:, COL["maxsim_line_best"]].any()
    stored = index.store.tokens_for([c.id for c in cands], reranker.fingerprint)
    alone = reranker.line_scores(
        "why did the deploy fail", [stored[c.id] for c in cands], [rows[c.id].text for c in cands]
    )
    assert np.allclose(x[:, COL["maxsim"]], alone[:, 0], atol=1e-6)
    names = ["maxsim_line_best", "maxsim_line_second", "maxsim_window_best"]
    assert np.allclose(x[:, [COL[n] for n in names]], alone[:, 1:], atol=1e-6)


def test_words_of_ascii_lines_are_the_regex_words():
    """The C path for ASCII text (`_line_words`) finds exactly the words `\\w+` finds, line by line."""
    rng = random.Random(11)
    alphabet = string.printable + "_" * 5  # letters, digits, punctuation, tabs, \r, \v, \f and line breaks
    texts = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 300))) for _ in range(300)]
    texts += ["caroline: hi_there 2023-05-08\n\n- **user**: x.y(z) a\tb\r\nend", "", "\n", "café naïve\nplain"]
    for text in texts:
        low = text.lower()
        assert ranker_features._line_words(low) == [ranker_features._WORD.findall(line) for line in low.split("\n")]


_FEATURES_OF_A_WIDE_POOL = """
import hashlib, sys
from datetime import date
from core import ranker_features
from core.ranking import Candidate
from core.store_search import ChunkRow
words = "heron quorum relay pump bay sunrise puppy oscar beach proposal friday staging proxy".split()
rows, cands = {}, []
for i in range(1, 14):  # each word in a different number of chunks: every idf differs
    text = " ".join(w for k, w in enumerate(words) if i % (k + 2) == 0) + f" line{i}\\nmore {words[i % 13]}"
    rows[i] = ChunkRow(i, f"memory/2023-08-{i:02d}.md", "memory", 1, 2, text, f"h{i}")
    cands.append(Candidate(i, bm25=float(i), vector=0.5, score=1 / i, rerank=0.3, fused=1 / i))
x = ranker_features.features(" ".join(words), cands, rows, date(2026, 12, 1))
print(hashlib.sha256(x.tobytes()).hexdigest())
"""


def test_feature_rows_are_the_same_in_every_process() -> None:
    """The idf sums used to follow a set's order, which Python's hash seed changes from process to process: a
    CLI search and a server's could differ in a score's last decimal."""
    digests = {
        subprocess.run(
            [sys.executable, "-c", _FEATURES_OF_A_WIDE_POOL],
            env=os.environ | {"PYTHONHASHSEED": str(seed)},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in range(8)
    }
    assert len(digests) == 1, digests


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("[]", "not a model (a JSON object with kind and features)"),  # was "AttributeError: 'list' object ..."
        ('{"kind": "logistic"}', "not a model, no 'features' field"),  # was a bare "'features'"
        (None, "No such file or directory"),  # was "[Errno 2] No such file or directory: '<the path again>'"
    ],
)
def test_a_bad_model_file_names_the_key_and_says_what_is_wrong(tmp_path, text: str | None, why: str) -> None:
    path = tmp_path / "m.json"
    if text is not None:
        path.write_text(text)
    with pytest.raises(learned.RankerModelError) as err:
        learned.Model.load(str(path))
    assert str(err.value) == f"rerank.rankerModel: ranker model {path}: {why}"


def test_a_model_retrained_in_place_is_what_the_next_search_uses(workspace, make_config, open_index, tmp_path) -> None:
    """The owner's loop with a server running: `train-ranker --out` the file `rerank.rankerModel` names. The
    process cached the model by path, so status and searches kept the old one until a restart (SIGHUP and a
    touched config said "unchanged"). The file is replaced by a rename: a search never reads half of it."""
    models = tmp_path / "models"
    models.mkdir()
    path = models / "ranker.json"
    shipped = learned.Model.load()
    shipped.save(path)
    config = make_config(
        workspace({"MEMORY.md": "- Dana drinks a flat white\n- the ledger uses PostgreSQL 15\n"}),
        **{"rerank.method": "learned", "rerank.rankerModel": str(path)},
    )
    index = open_index(config)
    index.sync()

    def ranker_score() -> float:
        hits = index.search("flat white", min_score=0.0, explain=True).results
        return hits[0].scores["ranker"]

    before = ranker_score()
    assert index.status()["rerank"]["ranker"] == shipped.fingerprint
    inode = path.stat().st_ino
    retrained = dataclasses.replace(shipped, bias=shipped.bias - 4.0)
    retrained.save(path)
    assert path.stat().st_ino != inode and [p.name for p in models.iterdir()] == ["ranker.json"]
    assert index.status()["rerank"]["ranker"] == retrained.fingerprint
    assert ranker_score() < before
    # A version that cannot be read (a `cp` caught halfway, here half the file) leaves the model read before
    # in use, as a reload keeps the settings in force: it answered every search 500; status says why.
    path.write_text(shipped.to_json()[:100])
    assert ranker_score() < before
    ranker = index.status()["rerank"]["ranker"]
    assert ranker.startswith(f"{retrained.fingerprint} (the file now unreadable: rerank.rankerModel: ranker model")
    shipped.save(path)  # whole again
    assert index.status()["rerank"]["ranker"] == shipped.fingerprint and ranker_score() == pytest.approx(before)
