"""The labelled mixed-script set (bench/cjk): a floor on the keyword leg's Recall@5 under both tokenizers.

The keyword leg is deterministic, so a floor is a fair test; the hybrid figures need the model and are
reported by `bench/cjk.py`. Before CJK runs were queried as bigrams, the phrase categories scored 0.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from core import load_config
from core.evaluate import evaluate

SET = Path(__file__).resolve().parent.parent / "bench" / "cjk"


@pytest.mark.parametrize("tokenizer", ["unicode61", "trigram"])
def test_keyword_recall_at_5_on_the_cjk_set(tokenizer):
    overrides = {"store.fts.tokenizer": tokenizer, "embedding.provider": "none"}
    config = load_config(workspace=SET / "workspace", overrides=overrides)
    result = evaluate(config, SET / "queries.jsonl", mode="keyword", min_score=config.search.minScore)
    assert result["queries"] == 33
    assert result["overall"]["R@5"] >= 0.95
    for name, row in result["categories"].items():  # words and non-verbatim phrases, in each script
        assert row["R@5"] >= 0.8, name
