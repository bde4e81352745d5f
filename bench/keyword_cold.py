#!/usr/bin/env python
"""The keyword leg when its phrase cache is empty, run by hand: what a fresh `memsift search` process, or the first
searches after a sync, pay at 50,000-100,000 chunks.

On an existing index (`--db`, any memsift index file; e.g. one bench/keyword_leg.py `--keep` left, or the 50,000
tiny notes of bench/pathological.py `deep`), for each query of `--queries` generated ones (or `--query` given):

  fresh   the cache emptied, then `Store.keyword_search`: the chunk ids (and FTS5's row lengths) read, and every
          phrase of the query read from FTS5
  cold    the ids already read, the query's phrases not: each phrase read from FTS5
  warm    every phrase cached
  same    the leg's answer against FTS5's own `ORDER BY bm25() LIMIT` over the OR of the phrases: ids, order and
          scores compared bit for bit (hybrid's FTS5 idf; keyword-only's Lucene idf has no FTS5 reference)

thread CPU and wall time of each, in ms, p50 / p95 / max. Run it with each checkout first on PYTHONPATH to compare
code (bench/README.md "Keyword leg at 50,000-100,000 chunks: the cold phrase").

    PYTHONPATH=. .venv/bin/python bench/keyword_cold.py --db /tmp/kw/100000/s3-home/memory/main.*.sqlite
    PYTHONPATH=. .venv/bin/python bench/keyword_cold.py --db INDEX --query "tiny note 49999" --lucene
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import corpus  # noqa: E402  (the seeded queries)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--db", required=True, help="an index file")
    p.add_argument("--queries", type=int, default=60, help="generated queries (bench/corpus.py)")
    p.add_argument("--query", action="append", help="a query of your own (repeatable; replaces the generated)")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--limit", type=int, default=60, help="candidates the leg fetches (the default search: 60)")
    p.add_argument("--lucene", action="store_true", help="keyword-only scoring (Lucene idf), as `--mode keyword`")
    p.add_argument("--out", help="write the figures as JSON here")
    args = p.parse_args()

    from core.keyword_cache import KEYWORD_CACHES
    from core.query import fts_phrases
    from core.store import Store

    queries = args.query or list(dict.fromkeys(corpus.make_queries(args.seed + 1, 20 * args.queries)))[: args.queries]
    phrases = [ph for ph in (fts_phrases(q) for q in queries) if ph]
    clocks: dict[str, list[float]] = {f"{phase}_{c}": [] for phase in ("fresh", "cold", "warm") for c in "wc"}
    same = 0
    with Store(args.db, use_vec=False, readonly=True) as store:
        chunks = store.conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
        store.fts_search(" OR ".join(phrases[0]), args.limit)  # FTS5's pages in the page cache

        def leg(ph: list[str]) -> list[tuple[int, float]]:
            return store.keyword_search(ph, args.limit, positive_idf=args.lucene)

        for ph in phrases:
            KEYWORD_CACHES.clear()
            for phase in ("fresh", "cold", "warm"):
                if phase == "cold":  # the ids stay read; the phrases go
                    for index in KEYWORD_CACHES._indexes.values():
                        index.phrases.clear()
                wall, cpu = time.perf_counter(), time.thread_time()
                got = leg(ph)
                clocks[f"{phase}_c"].append(time.thread_time() - cpu)
                clocks[f"{phase}_w"].append(time.perf_counter() - wall)
            if not args.lucene:
                same += got == store.fts_search(" OR ".join(ph), args.limit)
    stats = {
        name: {
            q: round(float(np.percentile(np.asarray(v) * 1000, pct)), 2)
            for q, pct in (("p50", 50), ("p95", 95), ("max", 100))
        }
        for name, v in clocks.items()
    }
    doc: dict[str, Any] = {
        "db": args.db,
        "chunks": chunks,
        "queries": len(phrases),
        "lucene": args.lucene,
        "same_as_fts5": None if args.lucene else f"{same}/{len(phrases)}",
        "ms": stats,
        "loadavg": os.getloadavg(),
        "code": str(Path(sys.modules["core"].__file__).parent),
    }
    print(json.dumps(doc, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
