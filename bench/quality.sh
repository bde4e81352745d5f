#!/usr/bin/env bash
# The retrieval-quality table of docs/search-and-ranking.md "Retrieval quality": every searcher on ../shared/bench/locomo-dev,
# k = 10, no floor. Indexes go to $MEMSIFT_HOME (default /tmp/memsift-quality); the first run builds them.
set -euo pipefail
cd "$(dirname "$0")/.."
export MEMSIFT_HOME=${MEMSIFT_HOME:-/tmp/memsift-quality}
Q=../shared/bench/locomo-dev/queries.jsonl
run() { echo "== $*"; .venv/bin/memsift eval "$Q" "$@"; echo; }
run --mode keyword --no-rerank
run --mode vector --no-rerank
run --fusion rrf --no-rerank
run --fusion weighted --no-rerank
run --no-rerank
run --set rerank.method=blend         # minmax fusion + MaxSim rerank, blend weight 0.4 (the default before the learned ranker)
run --set rerank.method=blend --set rerank.weight=1.0      # MaxSim replacing the fused order
run --set rerank.method=blend --set rerank.candidates=10
run                                   # the default: the learned ranker (in-sample on locomo-dev)
