#!/usr/bin/env python
"""Whether two checkouts of memsift rank alike, run by hand: every question of query files, hit by hit.

A speed change must not move a ranking. For each checkout in `--code` (folders holding `core/`), a child
process with that folder first on PYTHONPATH runs every question of each `--queries` file the way `memsift eval`
does (one index per workspace, `core.evaluate.query_index`; the default configuration, top `--k`) and writes
each question's hits (path, lines, score) to a JSON file; then they are compared question by question: the same
hits in the same order with scores within `--tol`. The children share one MEMSIFT_HOME, so the second finds the
indexes the first built (when the code builds the same index; otherwise it builds its own under another name).

    .venv/bin/python bench/same_rankings.py --code /tmp/main-export,. \\
        --queries ../shared/bench/locomo-dev/queries.jsonl,../shared/bench/cosqa-dev/queries_ident.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def dump(queries_files: list[str], k: int, out: Path) -> None:
    """Hits of every question of every file, with the checkout on PYTHONPATH (the child's side)."""
    import core
    from core import load_config
    from core.evaluate import load_queries, query_index

    config = load_config()
    found: dict[str, list[list[Any]]] = {}
    started = time.process_time()
    for name in queries_files:
        base = Path(name).resolve().parent
        indexes: dict[Path, Any] = {}
        try:
            for n, q in enumerate(load_queries(name)):
                index = query_index(indexes, config, base, q)
                response = index.search(q["query"], max_results=k, min_score=0.0)
                found[f"{name}#{n}"] = [[h.path, h.startLine, h.endLine, h.score] for h in response.results]
        finally:
            for index in indexes.values():
                index.close()
    out.write_text(
        json.dumps({"core": core.__file__, "cpu_s": time.process_time() - started, "hits": found}), encoding="utf-8"
    )


def same(a: list[list[Any]], b: list[list[Any]], tol: float) -> bool:
    return len(a) == len(b) and all(x[:3] == y[:3] and abs(x[3] - y[3]) <= tol for x, y in zip(a, b))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--code", required=True, help="two checkouts, comma-separated (e.g. /tmp/main-export,.)")
    p.add_argument("--queries", required=True, help="query files (JSON Lines), comma-separated")
    p.add_argument("--k", type=int, default=10)
    p.add_argument("--tol", type=float, default=1e-6, help="largest score difference counted as the same")
    p.add_argument("--home", type=Path, help="MEMSIFT_HOME shared by both (default: a new temporary folder)")
    p.add_argument("--dump", type=Path, help=argparse.SUPPRESS)  # the child's side: write the hits there
    args = p.parse_args(argv)
    files = [str(Path(f).resolve()) for f in args.queries.split(",")]
    if args.dump:
        dump(files, args.k, args.dump)
        return 0
    codes = [Path(c).resolve() for c in args.code.split(",")]
    home = args.home or Path(tempfile.mkdtemp(prefix="memsift-rankings-"))
    runs = []
    for n, code in enumerate(codes):
        out = home / f"hits-{n}.json"
        env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSIFT_")}  # the defaults are compared
        env |= {"MEMSIFT_HOME": str(home), "PYTHONPATH": str(code)}
        cmd = [sys.executable, __file__, "--code", args.code, "--queries", ",".join(files)]
        subprocess.run([*cmd, "--k", str(args.k), "--dump", str(out)], env=env, cwd=code, check=True)
        runs.append(json.loads(out.read_text(encoding="utf-8")))
        print(f"{code}: core from {runs[-1]['core']}, {runs[-1]['cpu_s']:.1f} s of CPU", file=sys.stderr)
    a, b = (r["hits"] for r in runs[:2])
    worst = max((abs(x[3] - y[3]) for q in a for x, y in zip(a[q], b.get(q, []))), default=0.0)
    for name in files:
        keys = [q for q in a if q.startswith(f"{name}#")]
        equal = sum(same(a[q], b.get(q, []), args.tol) for q in keys)
        differ = [q.rsplit("#", 1)[1] for q in keys if not same(a[q], b.get(q, []), args.tol)]
        print(f"{name}: {equal}/{len(keys)} identical" + (f"; differ: {', '.join(differ[:20])}" if differ else ""))
    print(f"largest score difference between hits at the same rank: {worst:.3g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
