"""The incremental sync: scan, diff, chunk, embed what the cache lacks, write, delete what vanished.

`sync` is the one orchestration. Each stage goes through `stage(name, fn)`, which by default just returns
`fn`; the Prefect flow passes a function that wraps stages in tasks, so the flow and a plain call run the
same code. Every file is written in the same transaction as its chunks, so a crash leaves each file either
fully old or fully new. A changed index identity is not handled here but by `core.rebuild`, which runs this
sync into a fresh file and swaps it in; an agent's first index runs it in the live file, whose committed
batches searches can already answer from (`UNFINISHED` marks it until the end).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Collection
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import apsw
import numpy as np

from .binding import check_workspace, record_workspace
from .config import Config
from .embedders import Embedder, EmbeddingError, InputsRejected, answered_before
from .errors import ProviderDown
from .limiter import request_tokens
from .progress import Progress, ProgressTracker
from .query import FTS_TEXT_VERSION
from .rerankers.local import token_capture
from .shared_cache import SharedCache
from .sources import FileEntry, active, read_memory_file
from .sources.memory import nothing_found
from .store import Store
from .store_schema import SCHEMA_VERSION

if TYPE_CHECKING:
    from .rerankers.maxsim import MaxSimReranker

BATCH_FILES = 64
BATCH_BYTES = 512 * 1024
#: A run that embedded fewer inputs says little about the embedder's speed (model load, one request's latency).
MEASURED_MIN_INPUTS = 32
VECTORS_PENDING = "vectors_pending"  # meta key: JSON {reason, at} while some chunks wait for their vectors
#: meta key: JSON list of the hashes of chunks the provider refused on their own (HTTP 400 naming the input): they
#: have no vector as the pending ones have none, but no sync gives them one, so they are counted apart
VECTORS_REFUSED = "vectors_refused"
SHARED_CACHE = "shared_cache"  # meta key: "1" once the index's vectors are in the shared cache
#: meta key: JSON {reason, at, plan, summary} while a rebuild the identity calls for waits for `--force`
REBUILD_HELD = "rebuild_held"
#: meta key: JSON {files, at} from the start of an index built from scratch (a first index, in the live file, batch
#: by batch) until its last step, so searches and `status` can tell a partial index from a finished one
UNFINISHED = "unfinished"

Stage = Callable[[str, Callable[..., Any]], Callable[..., Any]]
#: core.estimate.estimate, handed in by the caller (it builds on this module): the plan that opens a report
Estimator = Callable[..., Any]


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
    chunksRejected: int = 0  # refused by the provider even split (too long, invalid): indexed keyword-only
    cacheHits: int = 0  # chunks whose vector the index or the shared cache already had
    embeddingCalls: int = 0
    inputChars: int = 0  # characters sent to the embedder
    embedSeconds: float = 0.0  # time spent waiting for the embedder (its measured throughput)
    cachePruned: int = 0  # shared cache entries dropped by cache.maxEntries after this run
    rebuilt: bool = False
    fallback: str | None = None  # why this sync ran on embedding.fallback instead of the configured provider
    vectorsPending: bool = False  # the embedder failed: some text is indexed for keyword search only
    plan: dict[str, Any] | None = None  # what the run was about to embed and spend (core.estimate.Estimate)
    rebuildHeld: str | None = None  # the identity changed, a rebuild would cost money: why it waits for --force
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
    forced: bool = False  # a forced run (core.rebuild's are): it needs every vector, the embedder failing stops it


def unwrapped(embedder: Embedder) -> Embedder:
    """The embedder behind rate-limit, fan-out and timing wrappers (core.embedders.EmbedderWrapper)."""
    while hasattr(embedder, "inner"):
        embedder = embedder.inner
    return embedder


def embed_step(config: Config, embedder: Embedder) -> int:
    """Inputs per `embed_documents` call: batchMaxInputs times the provider's `concurrency`, so a call's
    requests keep every connection busy (calls go one after another, each written to the shared cache as it
    returns: a kill loses at most one step)."""
    return config.embedding.batchMaxInputs * getattr(unwrapped(embedder), "concurrency", 1)


def cache_key(embedder: Embedder) -> tuple[str, str, str]:
    return (embedder.provider, embedder.model, embedder.fingerprint)


def identity_key(identity: dict[str, Any] | None) -> tuple[str | None, str | None, str | None]:
    """The cache key of the vectors an index of this identity holds (`cache_key` of the embedder it was built
    with; the fingerprint is None under a provisional identity, and no vector has that key)."""
    identity = identity or {}
    return identity.get("provider"), identity.get("model"), identity.get("fingerprint")


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


def provisional(identity: dict[str, Any]) -> bool:
    """An identity recorded by a first index whose hosted provider never answered (core.embedders
    `provisional_stand_in`): its dims and fingerprint are not known yet, and no chunk has a vector."""
    return identity.get("provider") not in (None, "none") and identity.get("fingerprint", "") is None


def identity_matches(stored: dict[str, Any] | None, new: dict[str, Any]) -> bool:
    """Whether an index of identity `stored` answers for `new` without a rebuild: the same identity, or a
    provisional one that `new` completes (the same provider and model, answering now: its chunks stay, the
    sync embeds them)."""
    if stored is not None and provisional(stored):
        stored = {**stored, "dims": new.get("dims"), "fingerprint": new.get("fingerprint")}
    return stored == new


def identity_changes(old: dict[str, Any], new: dict[str, Any]) -> str:
    """The index identity's keys that differ, for a message: `chunking, extraPaths`."""
    return ", ".join(k for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k))


def plan_sync(
    store: Store, config: Config, embedder: Embedder | None, report: SyncReport, force: bool = False
) -> SyncPlan:
    identity = index_identity(config, embedder)
    rebuild = force or not identity_matches(store.identity(), identity)
    known = {} if rebuild else store.file_rows()
    sources = active(config)
    files: list[FileEntry] = []
    unlisted: list[str] = []
    for source in sources.values():
        found, warnings, unlistable = source.discover()
        files.extend(found)
        report.warnings.extend(warnings)
        unlisted.extend(unlistable)
    if not files and not unlisted:  # a folder that could not be listed says so itself
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
    # A file under a folder that could not be listed is not known to be gone: its rows stay as they are.
    removed = [p for p in known if p not in seen and not any(not u or p.startswith(f"{u}/") for u in unlisted)]
    return SyncPlan(identity, rebuild, to_check, removed, known, force)


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


def read_batch(
    config: Config, batch: list[FileEntry], plan: SyncPlan, report: SyncReport
) -> tuple[list[tuple[FileEntry, str, list]], list[FileEntry]]:
    """Read, hash and chunk a batch of files: (files to write with their digest and chunks, files whose
    content is unchanged and only need their stat updated)."""
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
    return files, touched


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
            pending = _keyword_only(report, exc)
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
                    _keep(report, cache.tokens_put, capture.fingerprint, bits)

    with store.transaction():
        if fresh:  # the index keeps its own copy of every vector its chunks use
            store.cache_put(cache_key(embedder), fresh)
        if tokens and capture is not None:
            store.tokens_put(capture.fingerprint, tokens)
        if pending:
            store.set_meta(VECTORS_PENDING, pending)
        record_refused(store, set(rejected), fresh)
        for entry in touched:
            store.touch_file(entry.path, entry.size, entry.mtime_ns)
        for entry, digest, chunks in files:
            rows = [(c.start_line, c.end_line, c.text, c.hash) for c in chunks]
            vecs = None
            if embedder is not None and chunks and all(c.hash in vectors or c.hash in rejected for c in chunks):
                vecs = [vectors.get(c.hash) for c in chunks]  # None: refused by the provider, keyword-only
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
    cache: SharedCache | None = None,
    rejected: dict[str, str] | None = None,
    progress: ProgressTracker | None = None,
) -> None:
    """Embed `texts` (hash -> text) in steps of `embed_step`, adding each answer to `into` and to the
    shared `cache` as it comes, so what was embedded before a failure, a kill or Ctrl-C is never paid for
    again. With `capture`, the same pass of the local model also yields each chunk's MaxSim token bits.
    Inputs the provider refuses on their own go to `rejected` (hash -> reason) and get no vector; without
    `rejected` they stop the run. `progress` hears of each request."""
    missing = list(texts)
    step = embed_step(config, embedder)
    key = cache_key(embedder)
    for i in range(0, len(missing), step):
        part = missing[i : i + step]
        calls = embedder.calls
        inputs = [texts[h] for h in part]
        started = time.perf_counter()
        bits: dict[str, bytes] = {}
        failure: BaseException | None = None
        if capture is not None and tokens is not None:
            embedded, blobs = capture.document_tokens(inputs)
            bits = dict(zip(part, blobs))
            tokens.update(bits)
        else:
            try:
                embedded = embedder.embed_documents(inputs)
            except InputsRejected as exc:  # the others' vectors are good: skip those, keep the rest
                if rejected is None:
                    raise
                embedded = exc.vectors
                refused = {part[i]: reason for i, reason in exc.rejected.items()}
                rejected.update(refused)
                part = [h for h in part if h not in refused]
                embedded = embedded[[i for i in range(len(inputs)) if i not in exc.rejected]]
            except BaseException as exc:  # it stops the run, once what its requests got back is kept
                failure, answered = exc, answered_before(exc)
                part, embedded = [part[i] for i in answered], list(answered.values())
        report.embedSeconds += time.perf_counter() - started
        report.inputChars += sum(map(len, inputs))
        report.embeddingCalls += embedder.calls - calls
        got = dict(zip(part, embedded))
        into.update(got)
        report.chunksEmbedded += len(part)
        if cache is not None:
            _keep(report, cache.put, key, got)
            if bits and capture is not None:
                _keep(report, cache.tokens_put, capture.fingerprint, bits)
        if failure is not None:
            raise failure
        if progress is not None:  # the local model costs nothing; a hosted provider is paid by the token
            paid = 0 if embedder.provider == "local" else sum(request_token_counts(embedder, inputs))
            progress.embedded(len(part), paid)


def request_token_counts(embedder: Embedder, texts: list[str]) -> list[int]:
    """Tokens per request of one `embed_documents(texts)`, as the rate limiter counts them: as a hosted
    provider packs the texts into requests, else one call (the dry run and the progress's spend use it)."""
    plan = getattr(unwrapped(embedder), "document_request_tokens", None)
    return plan(texts) if plan is not None else [request_tokens(texts)]


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


def _keep(report: SyncReport, write: Callable[..., object], *args: Any) -> None:
    """A write to the shared cache that waited out its busy timeout costs a re-embed later, not this run."""
    try:
        write(*args)
    except apsw.Error as exc:
        warning = f"the shared embedding cache could not be written ({type(exc).__name__}); this run goes on"
        if warning not in report.warnings:
            report.warnings.append(warning)


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


def complete_vectors(
    store: Store, config: Config, embedder: Embedder, report: SyncReport, cache: SharedCache | None = None
) -> None:
    """Embed the chunks a sync left without vectors while the embedder was down, and refill the vector table.
    Those include any the provider refused on their own before (they have no vector either): refused again,
    they stay keyword-only and do not keep the others waiting."""
    key = cache_key(embedder)
    lacking = store.chunks_without_cached_vectors(key)
    found = cache.get(key, lacking) if cache is not None else {}
    fresh: dict[str, np.ndarray] = dict(found)
    todo = {h: t for h, t in lacking.items() if h not in found}
    rejected: dict[str, str] = {}
    try:
        embed_missing(embedder, config, todo, fresh, report, cache=cache, rejected=rejected)
    except EmbeddingError as exc:
        pending = _keyword_only(report, exc)
    else:
        pending = None
    report.chunksRejected += len(rejected)
    with store.transaction():
        store.cache_put(key, fresh)
        store.set_meta(VECTORS_PENDING, pending or "")
        record_refused(store, set(rejected), fresh)
    if fresh:
        store.rebuild_vec(key, embedder.dims)


def record_refused(store: Store, refused: set[str], embedded: Collection[str]) -> None:
    """Add the chunks the provider refused to VECTORS_REFUSED, and drop those that now have a vector."""
    known = set(json.loads(store.get_meta(VECTORS_REFUSED) or "[]"))
    now = (known | refused) - set(embedded)
    if now != known:
        store.set_meta(VECTORS_REFUSED, json.dumps(sorted(now)) if now else "")


def vectorless(
    store: Store, key: tuple[str | None, str | None, str | None], *, waiting: bool = True
) -> tuple[int, int]:
    """(chunks waiting for a vector, chunks the provider refused) under `key`: what `status` and a search say.
    Only the first kind does the next sync embed; without `waiting` (no vector is pending) it is not counted,
    which would cost a pass over every chunk."""
    refused = json.loads(store.get_meta(VECTORS_REFUSED) or "[]")
    never = store.count_without_vectors(key, among=refused) if refused else 0
    return (store.count_without_vectors(key) - never if waiting else 0), never


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
    plan = stage("scan-and-diff", plan_sync)(store, config, embedder, report, force)
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
            measured = (r.chunksEmbedded, r.inputChars, r.embeddingCalls, r.embedSeconds)
            _keep(r, cache.record_throughput, cache_key(embedder), *measured)
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
