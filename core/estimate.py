"""What a run will embed and cost, before it spends anything: `memsift index --dry-run`, and the plan that
opens every run's report and Prefect artifact.

The files are read and chunked exactly as the indexer will (core.sync_plan.read_batch, the same batches), the
chunk hashes looked up in the index and the shared cache (core.shared_cache, without marking them used), and
what is left is packed into requests the way the provider will pack them (a hosted provider's
`document_request_tokens`; the local model counts one request per step of `embedding.batchMaxInputs`). Tokens
are counted as the rate limiter counts them (UTF-8 bytes / 4).

Seconds come from the provider's configured limits (`requestsPerMinute`, `tokensPerMinute`) and from the
embedder's measured speed, stored in the shared cache by every run that embedded enough to say (and, for the
local model on a dry run with no measurement yet, by embedding a small sample now); the slower of the two
wins. Cost is tokens times `embedding.pricePerMillionTokens`, null when no price is configured.

A held rebuild's estimate keeps each memory file's chunks in this process (`_chunks`), by size and mtime: a rebuild
held for `--force` is estimated again at every sync, and a server's watcher then reads only the notes changed
since (3.6 s of CPU per 30 s of appends on 551 notes before, 1.4-1.8 s now, the same figures).
"""

from __future__ import annotations

import threading
import time
from dataclasses import asdict, dataclass
from typing import Any

from .chunking import Chunk
from .config_types import Config
from .embedders import Embedder
from .identity import cache_key
from .shared_cache import SharedCache
from .sources import FileEntry
from .store import Store
from .sync_plan import RACY_SECONDS, SyncPlan, SyncReport, batches, read_batch
from .sync_vectors import VECTORS_PENDING, embed_step, request_token_counts
from .words import counted

#: The local model's speed is measured on this many chunks of the plan when no run has measured it yet (one
#: step of the default batchMaxInputs), after WARM_UP_INPUTS untimed: the first calls of a fresh process are
#: slower (measured: 48 chunks after a 1-chunk warm-up overestimated a 300-chunk run by 24-41%).
SAMPLE_INPUTS = 96
WARM_UP_INPUTS = 16
#: Text the memo of chunked files (`_chunks`) holds at most; past it, it starts again empty.
MEMO_CHARS = 32 * 1024 * 1024

#: (workspace, chunking, path) -> (size, mtime_ns, chunks) of the memory files a held rebuild's estimate chunked, in
#: this process. While a rebuild waits for `--force`, every sync re-estimates it (the held record's figures,
#: which `status` and every search's `degraded` give): reading and chunking each note again cost 0.12-0.15 s of
#: CPU a sync on 551 notes, 3.6 s per 30 s of appends on `memsift serve` (1.4-1.8 s with it).
_memo: dict[tuple[str, int, int, str], tuple[int, int, list[Chunk]]] = {}
_memo_chars = 0
_memo_lock = threading.Lock()


@dataclass
class Estimate:
    provider: str  # the embedder's ("none": keyword only)
    rebuild: bool  # the run rebuilds the index (new, forced, or its identity changed)
    filesToRead: int  # new or modified by size and time: read, hashed and chunked
    filesToEmbed: int  # of those, files with at least one chunk to embed
    chunks: int | None  # chunks of the files read (each distinct text once); None: a keyword-only run's plan
    chunksToEmbed: int
    cacheHits: int  # chunks whose vector the index or the shared cache already holds
    estimatedTokens: int
    estimatedRequests: int
    estimatedSeconds: float | None  # None: no limit configured and no measured speed yet
    estimatedCost: float | None  # None: embedding.pricePerMillionTokens is not set
    secondsFrom: str | None  # "limits", "measured", "limits+measured"
    #: The identity changed but the rebuild waits for `--force` (sync.autoRebuild): why. The figures are then
    #: those of `memsift index --force`; a plain sync embeds nothing.
    rebuildHeld: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def estimate(
    store: Store,
    config: Config,
    embedder: Embedder | None,
    plan: SyncPlan,
    cache: SharedCache | None,
    *,
    calibrate: bool = False,
    remember: bool = False,
) -> Estimate:
    """The figures of the run `plan` describes; `calibrate` lets a dry run time the local model on a sample.
    A keyword-only run's own plan reads no file: it has nothing to embed or pay, and reading every file twice
    cost a third of a keyword-only first index of 100,000 notes (a dry run still counts the chunks). The text
    a failed sync left without a vector is counted too: the run embeds it as well (core.sync_vectors
    `complete_vectors`). With `remember` (a held rebuild's estimate, made again at every sync), the chunks of
    the files read stay in this process for the next one (`_chunks`)."""
    counted = embedder is not None or calibrate
    seen: set[str] = set()
    files_to_embed = chunks = hits = 0
    # The requests the run would make, counted step by step (`embed_documents` calls) as the batches are read:
    # the texts are not kept, but for the first SAMPLE_INPUTS (a dry run times the local model on them). A plan
    # kept every text to embed until its end, the whole workspace's text at once in a first index.
    requests = tokens = chars = to_embed = 0
    sample: list[str] = []

    def count(part: list[str]) -> None:
        nonlocal requests, tokens, chars, to_embed
        sizes = request_token_counts(embedder, part)
        requests, tokens = requests + len(sizes), tokens + sum(sizes)
        chars, to_embed = chars + sum(map(len, part)), to_embed + len(part)
        sample.extend(part[: SAMPLE_INPUTS - len(sample)])

    step = embed_step(config, embedder) if embedder is not None else 1
    for batch in batches(plan.to_check) if counted else ():
        texts: dict[str, str] = {}
        owners: dict[str, int] = {}
        for n, file_chunks in enumerate(_chunks(config, batch, plan, remember)):
            for c in file_chunks:
                if c.hash not in seen and c.hash not in texts:
                    texts[c.hash] = c.text
                    owners[c.hash] = n
        seen.update(texts)
        chunks += len(texts)
        if embedder is None:
            continue
        key = cache_key(embedder)
        known = set(store.cache_get(key, texts))  # a rebuild hands them to the shared cache first
        if cache is not None:
            known |= cache.known(key, [h for h in texts if h not in known])
        hits += len(known)
        todo = [h for h in texts if h not in known]
        files_to_embed += len({owners[h] for h in todo})
        for i in range(0, len(todo), step):
            count([texts[h] for h in todo[i : i + step]])
    if embedder is not None and not plan.rebuild and store.get_meta(VECTORS_PENDING):
        key = cache_key(embedder)
        waiting = {h: t for h, t in store.chunks_without_cached_vectors(key).items() if h not in seen}
        known = cache.known(key, list(waiting)) if cache is not None else set()
        hits += len(known)
        pending = [t for h, t in waiting.items() if h not in known]
        for i in range(0, len(pending), step):
            count(pending[i : i + step])
    seconds, basis = _seconds(config, embedder, cache, requests, tokens, chars, sample if calibrate else [])
    price = config.embedding.pricePerMillionTokens
    return Estimate(
        provider=embedder.provider if embedder else "none",
        rebuild=plan.rebuild,
        filesToRead=len(plan.to_check),
        filesToEmbed=files_to_embed,
        chunks=chunks if counted else None,
        chunksToEmbed=to_embed,
        cacheHits=hits,
        estimatedTokens=tokens,
        estimatedRequests=requests,
        estimatedSeconds=None if seconds is None else round(seconds, 1),
        estimatedCost=None if price is None or embedder is None else round(tokens / 1e6 * price, 6),
        secondsFrom=basis,
    )


def _chunks(config: Config, batch: list[FileEntry], plan: SyncPlan, remember: bool) -> list[list[Chunk]]:
    """The chunks of each file of `batch` the run would index (read_batch's), in order. Remembering, a
    rebuild's plan (all of them: read_batch compares no digest; any other plan holds one batch of text at a
    time, as a dry run of a first index must) takes a memory file's from the memo while its size and mtime are
    those it was chunked at, and only a file settled before the scan (`RACY_SECONDS`: a second write in the
    same timestamp tick keeps both) goes into it: a held rebuild's estimate reads the files changed since."""
    if not (remember and plan.rebuild):
        return [chunks for _, _, chunks in read_batch(config, batch, plan, SyncReport())[0]]
    global _memo_chars
    key = (str(config.workspace), config.chunking.tokens, config.chunking.overlap)
    found: dict[str, list[Chunk]] = {}
    with _memo_lock:
        for entry in batch:
            held = _memo.get((*key, entry.path)) if entry.source == "memory" else None
            if held is not None and held[:2] == (entry.size, entry.mtime_ns):
                found[entry.path] = held[2]
    missed = [entry for entry in batch if entry.path not in found]
    read = read_batch(config, missed, plan, SyncReport())[0] if missed else []
    settled = plan.scanned_at - RACY_SECONDS
    with _memo_lock:
        for entry, _, chunks in read:
            found[entry.path] = chunks
            if entry.source == "memory" and chunks and entry.mtime_ns / 1e9 < settled:
                if _memo_chars > MEMO_CHARS:
                    _memo.clear()
                    _memo_chars = 0
                _memo[(*key, entry.path)] = (entry.size, entry.mtime_ns, chunks)
                _memo_chars += sum(len(c.text) for c in chunks)
    return [found[entry.path] for entry in batch if entry.path in found]


def _seconds(
    config: Config,
    embedder: Embedder | None,
    cache: SharedCache | None,
    requests: int,
    tokens: int,
    chars: int,
    sample: list[str],
) -> tuple[float | None, str | None]:
    if embedder is None or requests == 0:
        return 0.0, None
    e = config.embedding
    by_limits = None
    if e.requestsPerMinute or e.tokensPerMinute:
        by_limits = max(
            requests / e.requestsPerMinute * 60 if e.requestsPerMinute else 0.0,
            tokens / e.tokensPerMinute * 60 if e.tokensPerMinute else 0.0,
        )
    measured = cache.throughput(cache_key(embedder)) if cache is not None else None
    if measured is None and sample and embedder.provider == "local" and cache is not None:
        measured = _measure(embedder, cache, sample[:SAMPLE_INPUTS])
    by_speed = chars * measured["seconds"] / measured["chars"] if measured and measured["chars"] else None
    found = {name: s for name, s in (("limits", by_limits), ("measured", by_speed)) if s is not None}
    if not found:
        return None, None
    return max(found.values()), "+".join(found)


def _measure(embedder: Embedder, cache: SharedCache, sample: list[str]) -> dict[str, float]:
    """Time the local model on a sample of the texts to embed (after an untimed warm-up call) and store the
    speed for the next estimates. The vectors are not kept: a dry run embeds nothing."""
    embedder.embed_documents(sample[-WARM_UP_INPUTS:])
    started = time.perf_counter()
    embedder.embed_documents(sample)
    seconds = time.perf_counter() - started
    chars = sum(map(len, sample))
    cache.record_throughput(cache_key(embedder), len(sample), chars, 1, seconds)
    return {"inputs": len(sample), "chars": chars, "requests": 1, "seconds": seconds}


def summary(plan: dict[str, Any]) -> str:
    """An estimate (`Estimate.to_dict()`) in one line: chunks, tokens, requests, time and cost; what is unknown
    says how to know it. The CLI and the flow's log open a run's report with it."""
    seconds = plan["estimatedSeconds"]
    return ", ".join(
        [
            f"{counted(plan['chunksToEmbed'], 'chunk')} to embed ({plan['cacheHits']} cached)",
            f"~{counted(plan['estimatedTokens'], 'token')} in {counted(plan['estimatedRequests'], 'request')}",
            f"~{seconds:g} s" if seconds is not None else "time unknown (no rate limit set, speed not measured yet)",
            _cost(plan),
        ]
    )


def _cost(plan: dict[str, Any]) -> str:
    cost = plan["estimatedCost"]
    if cost is not None:
        return f"~{cost:.4f} in the price's currency" if cost >= 0.0001 else "under 0.0001 in the price's currency"
    if plan["provider"] in ("local", "none"):
        return "no cost (local)" if plan["provider"] == "local" else "no cost (no embedder)"
    if not plan["chunksToEmbed"]:  # a run the caches serve whole costs nothing, whatever the price
        return "no cost (nothing to embed)"
    return "cost unknown (set embedding.pricePerMillionTokens)"
