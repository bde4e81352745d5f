"""The abstention check (issue 18), two held-out sets at the default floor (`search.minScore`):
- queries.jsonl, questions about things absent from a workspace: the share that abstained (no hit);
- answerable.jsonl, paraphrase questions over tiny workspaces that hold the answer: the share answered with
  the right note among the hits (a floor that abstains on those fails the agent that asks);
- short.jsonl, bare keywords over the same tiny workspaces and examples/workspace ("zebra", "Who is Alice?",
  "database"): the share that abstained where absent, and answered with the right note where the notes hold
  the answer (written after the keywords of bench/calibration were trained on, with other words);
and a dev set, not held out (its figures chose the MaxSim features): offtopic_small.jsonl, 15 off-topic
questions in plain words asked of each of the five tiny workspaces above: the share that abstained; and a
second dev set, inference_absent.jsonl, 20 off-topic questions asking for an inference ("Which Python version
could the build server be using?") over the locomo-dev conversations and examples/workspace, written after
the inference features to watch what they risk (core/calibration.py `INFERENCE`): the share that abstained.
Prints each per category, and the top scores.

    MEMSIFT_HOME=/tmp/memsift-quality .venv/bin/python bench/abstention.py [--shared ../shared/bench] [--floor X]
        [--learned] [--model CALIBRATION.json]

The companion figure, locomo-dev recall at the default floor against no floor, is two `memsift eval` runs:
`memsift eval ../shared/bench/locomo-dev/queries.jsonl --min-score X` with X the default, and with 0.
Both sets are held out: bench/train_calibration.py never reads them, though their figures guided the choice
of features (figures: bench/README.md, "Issue 18").
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from core import calibration_model  # noqa: E402
from core.config import load_config  # noqa: E402
from core.memory import MemoryIndex  # noqa: E402

HERE = Path(__file__).resolve().parent / "abstention"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shared", type=Path, default=Path("../shared/bench"))
    ap.add_argument("--floor", type=float, help="a floor other than the configured default")
    ap.add_argument("--learned", action="store_true", help="order by the learned ranker (rerank.method)")
    ap.add_argument(
        "--model",
        type=Path,
        help="a calibration other than the shipped one (train_calibration.py --out FILE), to measure before shipping",
    )
    args = ap.parse_args()
    if args.model is not None:
        # the search reads calibration_model.default_model(), which loads DEFAULT_MODEL once
        calibration_model.DEFAULT_MODEL = args.model
        calibration_model.default_model.cache_clear()
    config = load_config(None, overrides={"rerank.method": "learned"} if args.learned else {})
    floor = config.search.minScore if args.floor is None else args.floor

    def load(name: str) -> list[dict]:
        return [json.loads(line) for line in (HERE / name).read_text().splitlines() if line.strip()]

    passed: dict[str, list[bool]] = defaultdict(list)  # absent: abstained; answerable: the right note in the hits
    tops: dict[str, list[float]] = defaultdict(list)
    indexes: dict[Path, MemoryIndex] = {}
    try:
        sets = (
            ("absent", "queries.jsonl"),
            ("answerable", "answerable.jsonl"),
            ("short", "short.jsonl"),
            ("dev", "offtopic_small.jsonl"),
            ("inference", "inference_absent.jsonl"),
        )
        for kind, name in sets:
            queries = load(name)
            for q in queries:
                ws = (args.shared / q["sharedWorkspace"] if "sharedWorkspace" in q else HERE / q["workspace"]).resolve()
                if ws not in indexes:
                    agent = "eval-" + hashlib.sha256(str(ws).encode()).hexdigest()[:12]  # as `memsift eval` names it
                    indexes[ws] = MemoryIndex(replace(config, workspace=ws, agent=agent))
                    indexes[ws].sync()
                answer = indexes[ws].search(q["query"], max_results=10, min_score=floor)
                top = answer.results
                tops[kind].append(top[0].score if top else 0.0)
                if not top and not answer.abstained:  # no candidate at all is no abstention: say so
                    print(f"  nothing found ({answer.empty}): {q['query']}")
                wanted = {r["path"] for r in q["relevant"]}
                ok = any(h.path in wanted for h in top) if wanted else not top
                passed[q["category"]].append(ok)
                if not ok:
                    said = f"{top[0].score:.3f} [{top[0].path}]" if top else answer.abstained
                    print(f"  {kind} failed: {q['query']}  ({said})")
    finally:
        for index in indexes.values():
            index.close()
    for kind, verb in (
        ("absent", "abstained"),
        ("answerable", "answered"),
        ("short", "passed"),
        ("dev", "abstained"),
        ("inference", "abstained"),
    ):
        every = [a for name, rows in passed.items() if name.startswith(kind) for a in rows]
        for name, rows in sorted(passed.items()):
            if name.startswith(kind):
                print(f"{name:<20}{len(rows):>4} questions, {verb} {sum(rows) / len(rows):.3f}")
        share = sum(every) / len(every)
        print(f"{kind + ' overall':<20}{len(every):>4} questions, {verb} {share:.3f} at floor {floor}")
        print(f"  top score (0: none): median {statistics.median(tops[kind]):.3f}, max {max(tops[kind]):.3f}")


if __name__ == "__main__":
    main()
