#!/usr/bin/env python
"""The vector leg at 1,000 / 10,000 / 100,000 chunks, run by hand: which nearest-neighbour method, per size.

Methods, each against the exact answer of a float32 numpy scan (the physical reference: every dot product):

  vec0        sqlite-vec KNN on a `vec0(float[384] distance_metric=cosine)` table, the store's own query
              (`embedding MATCH ? AND k = ?`), in a SQLite file
  numpy-f32   the float32 matrix held in memory, `matrix @ q` + argpartition (exact by construction)
  int8+rescore  per-row int8 codes in memory, a shortlist of `--shortlist` by int8 dot product, then float
              re-scoring of the shortlist with vectors read from SQLite (the embedding cache's role)
  binary+rescore  sign bits (48 bytes a row), a Hamming shortlist, then the same float re-scoring

Vectors come from a cheap deterministic embedder (hashed bag of words through a fixed random projection,
`--seed`) over blocks of bench/corpus.py's seeded daily notes, so similar texts get similar vectors as with a
real model, and the size test needs no hours of model time. Queries: bench/corpus.py's query generator through
the same embedder. Reports recall@k against exact, p50/p95 ms per method and size, and memory per method.

    .venv/bin/python bench/vector_leg.py                          # 1k, 10k, 100k; 200 queries (~3 min)
    .venv/bin/python bench/vector_leg.py --sizes 1000,10000 --queries 100
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent))

import corpus  # noqa: E402  (the seeded notes and queries)
import harness  # noqa: E402  (timing, the model, the query index, results)

DIMS = 384
BUCKETS = 1 << 14
_WORD = re.compile(r"[a-z0-9]+")


class HashEmbedder:
    """Deterministic and cheap: each word (and word pair) hashes to a fixed random direction; a text is the
    normalised sum. Texts sharing words get close vectors, like a real model's on these notes."""

    provider, model, dims = "bench-hash", "hash-bow", DIMS

    def __init__(self, seed: int) -> None:
        self.fingerprint = f"seed{seed}"
        self.calls = 0
        self.table = np.random.default_rng(seed).standard_normal((BUCKETS, DIMS)).astype(np.float32)

    def _one(self, text: str) -> np.ndarray:
        words = _WORD.findall(text.lower())
        keys = [hash_key(w) for w in words] + [hash_key(a + " " + b) for a, b in zip(words, words[1:])]
        v = self.table[np.asarray(keys or [0]) % BUCKETS].sum(axis=0)
        return (v / max(float(np.linalg.norm(v)), 1e-12)).astype(np.float32)

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        self.calls += 1
        return np.stack([self._one(t) for t in texts]) if texts else np.zeros((0, DIMS), np.float32)

    def embed_query(self, text: str) -> np.ndarray:
        return self._one(text)


def hash_key(word: str) -> int:
    """A stable hash (Python's `hash` of a str changes per process)."""
    h = 2166136261
    for b in word.encode():
        h = ((h ^ b) * 16777619) & 0xFFFFFFFF
    return h


def chunk_texts(seed: int, n: int) -> list[str]:
    """`n` blocks of 8 lines of the seeded daily notes (a chunk-sized piece of text each)."""
    out: list[str] = []
    i = 0
    while len(out) < n:
        lines = corpus.daily_note(seed, i).splitlines()
        out += ["\n".join(lines[k : k + 8]) for k in range(0, len(lines), 8)]
        i += 1
    return out[:n]


def top_k(scores: np.ndarray, k: int) -> np.ndarray:
    part = np.argpartition(-scores, min(k, len(scores) - 1))[:k]
    return part[np.argsort(-scores[part], kind="stable")]


def timed(fn, queries: np.ndarray) -> tuple[list[np.ndarray], list[float]]:
    answers, seconds = [], []
    for q in queries:
        t = time.perf_counter()
        answers.append(np.asarray(fn(q)))
        seconds.append(time.perf_counter() - t)
    return answers, seconds


def measure(size: int, vectors: np.ndarray, queries: np.ndarray, args: argparse.Namespace, tmp: Path) -> dict:
    import apsw
    import sqlite_vec

    matrix = vectors[:size]
    k = args.k
    exact, exact_s = timed(lambda q: top_k(matrix @ q, k), queries)

    db = apsw.Connection(str(tmp / f"vec-{size}.sqlite"))
    db.enable_load_extension(True)
    db.load_extension(sqlite_vec.loadable_path())
    db.execute(f"CREATE VIRTUAL TABLE v USING vec0(embedding float[{DIMS}] distance_metric=cosine)")
    db.execute("CREATE TABLE cache(id INTEGER PRIMARY KEY, vector BLOB)")  # the embedding cache's role
    with db:
        rows = [(i + 1, matrix[i].tobytes()) for i in range(size)]
        db.executemany("INSERT INTO v(rowid, embedding) VALUES (?, ?)", rows)
        db.executemany("INSERT INTO cache(id, vector) VALUES (?, ?)", rows)

    def vec0(q: np.ndarray) -> list[int]:
        sql = "SELECT rowid FROM v WHERE embedding MATCH ? AND k = ?"
        return [r - 1 for (r,) in db.execute(sql, (q.tobytes(), k))]

    def rescore(q: np.ndarray, shortlist: np.ndarray) -> np.ndarray:
        ids = [int(i) + 1 for i in shortlist]
        marks = ",".join("?" * len(ids))
        got = db.execute(f"SELECT id, vector FROM cache WHERE id IN ({marks})", ids).fetchall()
        idx = np.fromiter((r[0] - 1 for r in got), dtype=np.int64, count=len(got))
        floats = np.frombuffer(b"".join(r[1] for r in got), dtype=np.float32).reshape(len(got), DIMS)
        return idx[top_k(floats @ q, k)]

    scale = np.abs(matrix).max(axis=1, keepdims=True) / 127.0
    codes = np.round(matrix / scale).astype(np.int8)
    bits = np.packbits(matrix > 0, axis=1)

    def int8(q: np.ndarray) -> np.ndarray:
        qc = np.round(q / (np.abs(q).max() / 127.0)).astype(np.int8)
        approx = (codes.astype(np.int32) @ qc.astype(np.int32)).astype(np.float32) * scale[:, 0]
        return rescore(q, top_k(approx, args.shortlist))

    def binary(q: np.ndarray) -> np.ndarray:
        distance = np.bitwise_count(np.bitwise_xor(bits, np.packbits(q > 0))).sum(axis=1, dtype=np.int32)
        return rescore(q, top_k(-distance.astype(np.float32), args.binary_shortlist))

    methods = {
        "vec0": vec0,
        "numpy-f32": lambda q: top_k(matrix @ q, k),
        "int8+rescore": int8,
        "binary+rescore": binary,
    }
    memory = {
        "vec0": 0,
        "numpy-f32": matrix.nbytes,
        "int8+rescore": codes.nbytes + scale.nbytes,
        "binary+rescore": bits.nbytes,
    }
    out: dict[str, Any] = {"exact_p50_ms": round(harness.pct(exact_s, 50) * 1000, 2)}
    for name, fn in methods.items():
        fn(queries[0])  # warm caches
        answers, seconds = timed(fn, queries)
        recall = np.mean([len(set(a.tolist()) & set(e.tolist())) / k for a, e in zip(answers, exact)])
        out[name] = {
            "recall": round(float(recall), 4),
            "p50_ms": round(harness.pct(seconds, 50) * 1000, 2),
            "p95_ms": round(harness.pct(seconds, 95) * 1000, 2),
            "memory_mib": round(memory[name] / 2**20, 1),
        }
        harness.log(f"{size}: {name} {out[name]}")
    db.close()
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", default="1000,10000,100000")
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--k", type=int, default=10)
    p.add_argument("--shortlist", type=int, default=100, help="candidates re-scored in float (int8, binary)")
    p.add_argument("--binary-shortlist", type=int, default=1000, help="candidates re-scored in float (binary)")
    p.add_argument("--seed", type=int, default=11)
    args = p.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    emb = HashEmbedder(args.seed)
    t = time.perf_counter()
    vectors = emb.embed_documents(chunk_texts(args.seed, max(sizes)))
    harness.log(f"{len(vectors)} vectors in {time.perf_counter() - t:.1f} s")
    queries = np.stack([emb.embed_query(q) for q in corpus.make_queries(args.seed + 1, args.queries)])
    busy = harness.cpu_busy()
    with tempfile.TemporaryDirectory(prefix="memsift-bench-vec-") as tmp:
        results = {size: measure(size, vectors, queries, args, Path(tmp)) for size in sizes}
    methods = ("vec0", "numpy-f32", "int8+rescore", "binary+rescore")
    print(f"| chunks | exact p50 ms | {' | '.join(f'{m} recall@{args.k} / p50 ms' for m in methods)} |")
    print("|---" * (2 + len(methods)) + "|")
    for size, r in results.items():
        cells = " | ".join(f"{r[m]['recall']:.3f} / {r[m]['p50_ms']}" for m in methods)
        print(f"| {size:,} | {r['exact_p50_ms']} | {cells} |")
    print(f"\nCPUs busy before: {busy:.0%}; load average {os.getloadavg()[0]:.1f}")
    doc = {"environment": harness.environment(), "busy_before": busy, "args": vars(args), "results": results}
    harness.save_result("vector-leg", doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
