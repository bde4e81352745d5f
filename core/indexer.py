"""The incremental sync: scan, diff, chunk, embed what the cache lacks, write, delete what vanished.

`sync` is the one orchestration. Each stage goes through `stage(name, fn)`, which by default just returns
`fn`; the Prefect flow passes a function that wraps stages in tasks, so the flow and a plain call run the
same code. Every file is written in the same transaction as its chunks, so a crash leaves each file either
fully old or fully new. A changed index identity is not handled here but by `core.rebuild`, which runs this
sync into a fresh file and swaps it in; an agent's first index runs it in the live file, whose committed
batches searches can already answer from (`UNFINISHED` marks it until the end). Its parts: `core.sync_plan`
(the scan, the diff and the files read), `core.sync_vectors` (what the embedder is sent, failed and refused)
and `core.identity` (what makes an index's chunks or vectors wrong).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from contextlib import nullcontext
from typing import Any

import numpy as np

from .binding import check_workspace, record_workspace
from .config_types import Config
from .embedders import Embedder, EmbeddingError
from .errors import ProviderDown
from .identity import cache_key
from .progress import Progress, ProgressTracker
from .rerankers.local import token_capture
from .shared_cache import SharedCache
from .sources import FileEntry
from .store import Store
from .sync_plan import SKIPPED, SyncPlan, SyncReport, batches, plan_sync, read_batch
from .sync_vectors import VECTORS_PENDING, complete_vectors, embed_missing, keep, keyword_only, record_refused

#: A run that embedded fewer inputs says little about the embedder's speed (model load, one request's latency).
MEASURED_MIN_INPUTS = 32
SHARED_CACHE = "shared_cache"  # meta key: "1" once the index's vectors are in the shared cache
#: meta key: JSON {reason, at, plan, summary} while a rebuild the identity calls for waits for `--force`
REBUILD_HELD = "rebuild_held"
#: meta key: JSON {files, at} from the start of an index built from scratch (a first index, in the live file, batch
#: by batch) until its last step, so searches and `status` can tell a partial index from a finished one
UNFINISHED = "unfinished"

Stage = Callable[[str, Callable[..., Any]], Callable[..., Any]]
#: core.estimate.estimate, handed in by the caller (it builds on this module): the plan that opens a report
Estimator = Callable[..., Any]


def index_batch(
    store: Store,
    config: Config,
    embedder: Embedder | None,
    batch: list[FileEntry],
    plan: SyncPlan,
    report: SyncReport,
    cache: SharedCache | None = None,
    progress: ProgressTracker | None = None,
) -> None:
    """Read, hash and chunk a batch of files, embed the chunks the caches lack, write them in one go."""
    files, touched = read_batch(config, batch, plan, report)
    vectors: dict[str, np.ndarray] = {}
    fresh: dict[str, np.ndarray] = {}
    tokens: dict[str, bytes] = {}
    capture = token_capture(config, embedder)
    pending: str | None = None
    rejected: dict[str, str] = {}
    if embedder is not None:
        texts = {c.hash: c.text for _, _, chunks in files for c in chunks}
        vectors = store.cache_get(cache_key(embedder), texts)
        if cache is not None:  # the index lacks them: another agent's, or a killed run's, vectors
            fresh.update(cache.get(cache_key(embedder), [h for h in texts if h not in vectors]))
        report.cacheHits += len(vectors) + len(fresh)
        todo = {h: t for h, t in texts.items() if h not in vectors and h not in fresh}
        try:
            if not report.vectorsPending:  # after a failure the run asks no more: each request would wait out
                # its retries (or timeouts) again; the next sync embeds what is left
                embed_missing(embedder, config, todo, fresh, report, capture, tokens, cache, rejected, progress)
        except EmbeddingError as exc:
            if plan.forced or config.embedding.fallback != "none":
                raise  # a rebuild's file is thrown away (what it embedded is in the shared cache)
            if plan.rebuild and not isinstance(exc, ProviderDown):
                raise  # a first index the provider refuses (a key, a model to fix): not an index of no vector
            pending = keyword_only(report, exc)
        vectors.update(fresh)
        _warn_rejected(files, rejected, report)
        if capture is not None:  # cached vectors from before capture was on: their token bits cost a pass
            lacking = [h for h in vectors if h not in tokens]
            lacking = sorted(set(lacking) - store.tokens_known(capture.fingerprint, lacking))
            if cache is not None:
                tokens.update(cache.tokens_get(capture.fingerprint, lacking))
                lacking = [h for h in lacking if h not in tokens]
            step = config.embedding.batchMaxInputs
            for i in range(0, len(lacking), step):
                part = lacking[i : i + step]
                bits = dict(zip(part, capture.document_tokens([texts[h] for h in part])[1]))
                tokens.update(bits)
                if cache is not None:
                    keep(report, cache.tokens_put, capture.fingerprint, bits)

    with store.transaction():
        if fresh:  # the index keeps its own copy of every vector its chunks use
            store.cache_put(cache_key(embedder), fresh)
        if tokens and capture is not None:
            store.tokens_put(capture.fingerprint, tokens)
        if pending:
            store.set_meta(VECTORS_PENDING, pending)
        record_refused(store, set(rejected), fresh)
        if files or touched:  # which of the files now hold no text, for the next syncs to say (core.sync_plan)
            store.set_meta(SKIPPED, json.dumps(plan.skipped))
        for entry in touched:
            store.touch_file(entry.path, entry.size, entry.mtime_ns, plan.scanned_at)
        for entry, digest, chunks in files:
            rows = [(c.start_line, c.end_line, c.text, c.hash) for c in chunks]
            vecs = None
            if embedder is not None and chunks and all(c.hash in vectors or c.hash in rejected for c in chunks):
                vecs = [vectors.get(c.hash) for c in chunks]  # None: refused by the provider, keyword-only
            store.replace_file(
                entry.path, entry.source, entry.size, entry.mtime_ns, digest, rows, vecs, plan.scanned_at
            )
            report.chunksWritten += len(chunks)
    if progress is not None:
        progress.written(len(batch))


def _warn_rejected(files: list[tuple[FileEntry, str, list]], rejected: dict[str, str], report: SyncReport) -> None:
    """One warning per chunk the provider refused, naming its file and lines: keyword search still finds it."""
    for entry, _, chunks in files:
        for c in chunks:
            if c.hash in rejected:
                report.chunksRejected += 1
                report.warnings.append(
                    f"skipped embedding {entry.path}:{c.start_line}-{c.end_line} (keyword search only): "
                    f"{rejected[c.hash]}"
                )


def remove_files(store: Store, paths: list[str], report: SyncReport) -> None:
    with store.transaction():
        for path in paths:
            store.remove_file(path)
    report.removed += len(paths)


def plain_stage(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """The default `stage` hook: each stage runs as a plain call (the Prefect flow passes its own)."""
    return fn


def sync(
    store: Store,
    config: Config,
    embedder: Embedder | None,
    *,
    force: bool = False,
    progress: Progress | None = None,
    stage: Stage = plain_stage,
    estimator: Estimator | None = None,
) -> SyncReport:
    """Bring the index up to date with the workspace; `force` rebuilds everything (the caches still serve).
    With `estimator` (core.estimate.estimate; MemoryIndex passes it), the run's plan opens its report."""
    started = time.perf_counter()
    check_workspace(store, config)  # never delete the rows of another workspace's files
    report = SyncReport()
    plan = stage("scan-and-diff", plan_sync)(store, config, embedder, report, force, True)  # True: recheck
    report.rebuilt = plan.rebuild
    pending_before = embedder is not None and bool(store.get_meta(VECTORS_PENDING))
    if plan.rebuild:  # a first index, or a fresh file from core.rebuild: start from empty tables
        with store.transaction():  # one commit: no reader sees the identity without the mark
            store.reset(plan.identity, config.store.fts_tokenize)
            store.set_meta(UNFINISHED, json.dumps({"files": len(plan.to_check), "at": time.time()}))
    elif store.identity() != plan.identity:  # a provisional identity, its provider answering: it is completed
        with store.transaction():
            store.set_identity(plan.identity)
    with SharedCache.open(config.home) if embedder is not None else nullcontext() as cache:
        if estimator is not None:  # a task only when there is something to read: a no-op sync stays cheap
            estimating = stage("estimate", estimator) if plan.to_check else estimator
            report.plan = estimating(store, config, embedder, plan, cache).to_dict()
        tracker = None
        if progress is not None:  # the plan counted the chunks the caches lack; without one, files tell
            to_embed = (report.plan or {}).get("chunksToEmbed", 0)
            price = config.embedding.pricePerMillionTokens
            tracker = ProgressTracker(progress, len(plan.to_check), to_embed, price=price)
        for batch in batches(plan.to_check):
            stage("index-batch", index_batch)(store, config, embedder, batch, plan, report, cache, tracker)
        if plan.removed:
            stage("remove-vanished", remove_files)(store, plan.removed, report)
        if pending_before and not report.vectorsPending:  # the embedder answered this sync: catch up
            stage("complete-vectors", complete_vectors)(store, config, embedder, report, cache)
        if cache is not None and report.chunksEmbedded >= MEASURED_MIN_INPUTS:
            r = report
            measured = (r.chunksEmbedded, r.inputChars, r.embeddingRequests, r.embedSeconds)
            keep(r, cache.record_throughput, cache_key(embedder), *measured)
    if report.changed or report.removed or report.skipped:  # their old text's vectors are in no chunk now
        store.prune_caches()
    if embedder is not None and embedder.dims and store.vec_needs_refill():
        store.rebuild_vec(cache_key(embedder), embedder.dims)
    with store.transaction():
        store.set_meta("last_sync", str(time.time()))
        store.set_meta(SHARED_CACHE, "1")  # every vector this run wrote went to the shared cache too
        store.set_meta(REBUILD_HELD, "")  # the index matches the configuration: no rebuild is waiting
        store.set_meta(UNFINISHED, "")
        record_workspace(store, config)
    if tracker is not None:
        tracker.emit()
    report.seconds = round(time.perf_counter() - started, 3)
    return report
