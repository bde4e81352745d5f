"""Recall@5 on the labelled mixed-script set (bench/cjk): keyword and hybrid, under both FTS tokenizers.

Run by hand: `.venv/bin/python bench/cjk.py` (about a minute: it loads the local model for the hybrid rows).
Each combination indexes `bench/cjk/workspace` into a temporary MEMSIFT_HOME and runs `core.evaluate` on
`bench/cjk/queries.jsonl` at the default score floor, so the figures are what `memsift search` would find.
The set and what each category tests are described in bench/cjk/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

from core import load_config
from core.evaluate import evaluate

HERE = Path(__file__).resolve().parent / "cjk"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--min-score", type=float, default=0.35, help="score floor (default: search.minScore)")
    parser.add_argument("--json", action="store_true", help="print every figure as JSON")
    args = parser.parse_args()
    rows = {}
    with tempfile.TemporaryDirectory(prefix="memsift-cjk-") as home:
        os.environ["MEMSIFT_HOME"] = home
        for tokenizer in ("unicode61", "trigram"):
            config = load_config(workspace=HERE / "workspace", overrides={"store.fts.tokenizer": tokenizer})
            for mode in ("keyword", "hybrid"):
                rows[f"{tokenizer} {mode}"] = evaluate(
                    config, HERE / "queries.jsonl", mode=mode, min_score=args.min_score
                )
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    categories = sorted(next(iter(rows.values()))["categories"])
    print(f"{'R@5':<18}" + "".join(f"{c:>10}" for c in categories) + f"{'overall':>10}{'MRR@10':>10}")
    for name, result in rows.items():
        cells = "".join(f"{result['categories'][c]['R@5']:>10.3f}" for c in categories)
        print(f"{name:<18}{cells}{result['overall']['R@5']:>10.3f}{result['overall']['MRR@10']:>10.3f}")


if __name__ == "__main__":
    main()
