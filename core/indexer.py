"""The incremental sync: scan, diff, chunk, embed what the cache lacks, write, delete what vanished.

`sync` is the one orchestration. Each stage goes through `stage(name, fn)`, which by default just returns
`fn`; the Prefect flow passes a function that wraps stages in tasks, so the flow and a plain call run the
same code. Every file is written in the same transaction as its chunks, so a crash leaves each file either
fully old or fully new. A changed index identity is not handled here but by `core.rebuild`, which runs this
sync into a fresh file and swaps it in.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from .binding import check_workspace, record_workspace
from .config import Config
from .embedders import Embedder, EmbeddingError
from .progress import Progress, ProgressTracker
from .query import FTS_TEXT_VERSION
from .rerankers.local import token_capture
from .sources import FileEntry, active, read_memory_file
from .sources.memory import nothing_found
from .store import SCHEMA_VERSION, Store

if TYPE_CHECKING:
    from .rerankers.maxsim import MaxSimReranker

BATCH_FILES = 64
BATCH_BYTES = 512 * 1024
VECTORS_PENDING = "vectors_pending"  # meta key: JSON {reason, at} while some chunks wait for their vectors

Stage = Callable[[str, Callable[..., Any]], Callable[..., Any]]


@dataclass
class SyncReport:
    filesScanned: int = 0
    added: int = 0
    changed: int = 0
    removed: int = 0
    unchanged: int = 0
    skipped: int = 0  # not readable as text (binary, too large): recorded without chunks
    chunksWritten: int = 0
    chunksEmbedded: int = 0
    cacheHits: int = 0
    embeddingCalls: int = 0
    inputChars: int = 0  # characters sent to the embedder
    cacheCopied: int = 0  # a rebuild: cache entries carried over from the live index
    cachePruned: int = 0  # a rebuild: cache entries dropped by cache.maxEntries
    rebuilt: bool = False
    fallback: str | None = None  # why this sync ran on embedding.fallback instead of the configured provider
    vectorsPending: bool = False  # the embedder failed: some text is indexed for keyword search only
    seconds: float = 0.0
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class SyncPlan:
    identity: dict[str, Any]
    rebuild: bool
    to_check: list[FileEntry]  # stat changed or new: read, hash, and index if the content changed
    removed: list[str]
    known: dict[str, tuple[int, int, str]]


def cache_key(embedder: Embedder) -> tuple[str, str, str]:
    return (embedder.provider, embedder.model, embedder.fingerprint)


def index_identity(config: Config, embedder: Embedder | None) -> dict[str, Any]:
    """Everything that, when changed, makes the stored chunks or vectors wrong."""
    return {
        "schema": SCHEMA_VERSION,
        "provider": embedder.provider if embedder else "none",
        "model": embedder.model if embedder else None,
        "fingerprint": embedder.fingerprint if embedder else None,
        "dims": embedder.dims if embedder else None,
        "chunking": {"tokens": config.chunking.tokens, "overlap": config.chunking.overlap},
        "sources": list(config.sources),
        "extraPaths": list(config.extra_paths),
        "tokenizer": config.store.fts_tokenize,
        "ftsText": FTS_TEXT_VERSION,
        # Turning MaxSim token capture on or off rebuilds once: chunks indexed before would lack token bits.
        "tokens": capture.fingerprint if (capture := token_capture(config, embedder)) else None,
    }


def plan_sync(
    store: Store, config: Config, embedder: Embedder | None, report: SyncReport, force: bool = False
) -> SyncPlan:
    identity = index_identity(config, embedder)
    rebuild = force or store.identity() != identity
    known = {} if rebuild else store.file_rows()
    sources = active(config)
    files: list[FileEntry] = []
    for source in sources.values():
        found, warnings = source.discover()
        files.extend(found)
        report.warnings.extend(warnings)
    if not files:
        report.warnings.append(nothing_found(config.workspace))
    report.filesScanned = len(files)
    to_check = []
    for entry in files:
        old = known.get(entry.path)
        if old is not None and old[0] == entry.size and old[1] == entry.mtime_ns:
            report.unchanged += 1
        elif old is not None and not sources[entry.source].due(entry, old[0]):
            report.unchanged += 1  # e.g. a transcript that grew by less than a delta: read it later
        else:
            to_check.append(entry)
    seen = {f.path for f in files}
    removed = [p for p in known if p not in seen]
    return SyncPlan(identity, rebuild, to_check, removed, known)


def batches(entries: list[FileEntry]) -> list[list[FileEntry]]:
    """Coarse units of work: up to BATCH_FILES files or BATCH_BYTES of text each."""
    out: list[list[FileEntry]] = []
    current: list[FileEntry] = []
    size = 0
    for entry in entries:
        if current and (len(current) >= BATCH_FILES or size + entry.size > BATCH_BYTES):
            out.append(current)
            current, size = [], 0
        current.append(entry)
        size += entry.size
    if current:
        out.append(current)
    return out


def count_to_embed(store: Store, config: Config, embedder: Embedder | None, plan: SyncPlan) -> int:
    """How many chunks this sync will embed: those of the new or changed files that the cache lacks. Reads
    and chunks those files once more than the sync itself does, so it runs only when someone shows progress
    (bench/progress_count.py: 0.035 s against the 194 s first sync of 128 locomo-dev notes)."""
    if embedder is None or not plan.to_check:
        return 0
    sources = active(config)
    hashes: set[str] = set()
    for entry in plan.to_check:
        source = sources[entry.source]
        try:
            raw, text, _ = read_memory_file(source.path(entry.path))
        except OSError:
            continue
        old = plan.known.get(entry.path)
        if text is None or (old is not None and old[2] == hashlib.sha256(raw).hexdigest()):
            continue
        hashes.update(c.hash for c in source.chunk(entry.path, text, []))
    return len(hashes - store.cache_known(cache_key(embedder), hashes))


def index_batch(
    store: Store,
    config: Config,
    embedder: Embedder | None,
    batch: list[FileEntry],
    plan: SyncPlan,
    report: SyncReport,
    progress: ProgressTracker | None = None,
) -> None:
    """Read, hash and chunk a batch of files, embed the chunks the cache lacks, write them in one go."""
    sources = active(config)
    files: list[tuple[FileEntry, str, list]] = []
    touched: list[FileEntry] = []
    for entry in batch:
        source = sources[entry.source]
        try:
            raw, text, problem = read_memory_file(source.path(entry.path))
        except OSError as exc:
            report.warnings.append(f"skipped {entry.path}: {exc.strerror or exc}")
            continue
        digest = hashlib.sha256(raw).hexdigest()
        old = plan.known.get(entry.path)
        if old is not None and old[2] == digest:
            touched.append(entry)
            report.unchanged += 1
            continue
        if text is None:
            # Recorded with no chunks: old chunks go, and the next sync skips it by stat until it changes.
            report.warnings.append(f"skipped {entry.path}: {problem}")
            report.skipped += 1
            files.append((entry, digest, []))
            continue
        if problem:
            report.warnings.append(f"{entry.path}: {problem}")
        chunks = source.chunk(entry.path, text, report.warnings)
        files.append((entry, digest, chunks))
        if old is None:
            report.added += 1
        else:
            report.changed += 1

    vectors: dict[str, np.ndarray] = {}
    fresh: dict[str, np.ndarray] = {}
    tokens: dict[str, bytes] = {}
    capture = token_capture(config, embedder)
    pending: str | None = None
    if embedder is not None:
        texts = {c.hash: c.text for _, _, chunks in files for c in chunks}
        vectors = store.cache_get(cache_key(embedder), texts)
        report.cacheHits += len(vectors)
        try:
            todo = {h: t for h, t in texts.items() if h not in vectors}
            embed_missing(embedder, config, todo, fresh, report, capture, tokens, progress)
        except EmbeddingError as exc:
            if plan.rebuild or config.embedding.fallback != "none":
                raise  # a rebuild is thrown away whole; MemoryIndex hands the index to the fallback
            pending = _keyword_only(report, exc)
        vectors.update(fresh)
        if capture is not None:  # cached vectors from before capture was on: their token bits cost a pass
            lacking = [h for h in vectors if h not in tokens]
            lacking = sorted(set(lacking) - store.tokens_known(capture.fingerprint, lacking))
            step = config.embedding.batchMaxInputs
            for i in range(0, len(lacking), step):
                part = lacking[i : i + step]
                tokens.update(zip(part, capture.document_tokens([texts[h] for h in part])[1]))

    with store.transaction():
        if fresh:
            store.cache_put(cache_key(embedder), fresh)
        if tokens and capture is not None:
            store.tokens_put(capture.fingerprint, tokens)
        if pending:
            store.set_meta(VECTORS_PENDING, pending)
        for entry in touched:
            store.touch_file(entry.path, entry.size, entry.mtime_ns)
        for entry, digest, chunks in files:
            rows = [(c.start_line, c.end_line, c.text, c.hash) for c in chunks]
            vecs = None
            if embedder is not None and chunks and all(c.hash in vectors for c in chunks):
                vecs = np.stack([vectors[c.hash] for c in chunks])
            store.replace_file(entry.path, entry.source, entry.size, entry.mtime_ns, digest, rows, vecs)
            report.chunksWritten += len(chunks)
    if progress is not None:
        progress.written(len(batch))


def embed_missing(
    embedder: Embedder,
    config: Config,
    texts: dict[str, str],
    into: dict[str, np.ndarray],
    report: SyncReport,
    capture: MaxSimReranker | None = None,
    tokens: dict[str, bytes] | None = None,
    progress: ProgressTracker | None = None,
) -> None:
    """Embed `texts` (hash -> text) in requests of batchMaxInputs, adding each answer to `into` as it comes,
    so what was embedded before a failure is kept (and cached). With `capture`, the same pass of the local
    model also yields each chunk's MaxSim token bits, added to `tokens`. `progress` hears of each request."""
    missing = list(texts)
    step = config.embedding.batchMaxInputs
    for i in range(0, len(missing), step):
        part = missing[i : i + step]
        calls = embedder.calls
        inputs = [texts[h] for h in part]
        report.inputChars += sum(map(len, inputs))
        if capture is not None and tokens is not None:
            embedded, bits = capture.document_tokens(inputs)
            tokens.update(zip(part, bits))
        else:
            embedded = embedder.embed_documents(inputs)
        report.embeddingCalls += embedder.calls - calls
        into.update(zip(part, embedded))
        report.chunksEmbedded += len(part)
        if progress is not None:
            progress.embedded(len(part))


def _keyword_only(report: SyncReport, error: EmbeddingError) -> str:
    """The embedder failed an incremental sync with no fallback configured: the text is indexed anyway
    (keyword search finds it at once), its vectors are left pending for the next sync; the record's JSON."""
    record = {"reason": f"{type(error).__name__}: {error}", "at": time.time()}
    if not report.vectorsPending:
        report.warnings.append(
            f"embedding failed ({record['reason']}): new text is indexed for keyword search only; "
            "the next sync embeds it"
        )
    report.vectorsPending = True
    return json.dumps(record)


def complete_vectors(store: Store, config: Config, embedder: Embedder, report: SyncReport) -> None:
    """Embed the chunks a sync left without vectors while the embedder was down, and refill the vector table."""
    key = cache_key(embedder)
    fresh: dict[str, np.ndarray] = {}
    try:
        embed_missing(embedder, config, store.chunks_without_cached_vectors(key), fresh, report)
    except EmbeddingError as exc:
        pending = _keyword_only(report, exc)
    else:
        pending = None
    with store.transaction():
        store.cache_put(key, fresh)
        store.set_meta(VECTORS_PENDING, pending or "")
    store.rebuild_vec(key, embedder.dims)


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
) -> SyncReport:
    """Bring the index up to date with the workspace; `force` rebuilds everything (the cache still serves)."""
    started = time.perf_counter()
    check_workspace(store, config)  # never delete the rows of another workspace's files
    report = SyncReport()
    plan = stage("scan-and-diff", plan_sync)(store, config, embedder, report, force)
    report.rebuilt = plan.rebuild
    pending_before = embedder is not None and bool(store.get_meta(VECTORS_PENDING))
    if plan.rebuild:  # a fresh file from core.rebuild (or a test): start from empty tables
        store.reset(plan.identity, config.store.fts_tokenize)
    tracker = None
    if progress is not None:
        chunks = stage("count-chunks", count_to_embed)(store, config, embedder, plan) if plan.to_check else 0
        tracker = ProgressTracker(progress, len(plan.to_check), chunks)
    for batch in batches(plan.to_check):
        stage("index-batch", index_batch)(store, config, embedder, batch, plan, report, tracker)
    if plan.removed:
        stage("remove-vanished", remove_files)(store, plan.removed, report)
    if pending_before and not report.vectorsPending:  # the embedder answered this sync: catch up
        stage("complete-vectors", complete_vectors)(store, config, embedder, report)
    if embedder is not None and store.vec_needs_refill():
        store.rebuild_vec(cache_key(embedder), embedder.dims)
    with store.transaction():
        store.set_meta("last_sync", str(time.time()))
        record_workspace(store, config)
    if tracker is not None:
        tracker.emit()
    report.seconds = round(time.perf_counter() - started, 3)
    return report
