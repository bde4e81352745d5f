"""What a sync is about to do, read from the workspace: the scan and diff, and the files read batch by batch.

Apart from the sync because the dry run's estimate (core.estimate) and `status` read the workspace exactly as
the sync will, without writing anything. `SyncReport`, which each stage fills in, starts here with the scan.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from .config_types import Config
from .embedders import Embedder
from .identity import identity_matches, index_identity
from .sources import FileEntry, active, read_memory_file
from .sources.memory import nothing_found
from .store import Store

BATCH_FILES = 64
BATCH_BYTES = 512 * 1024
#: meta key: JSON {path: why} of the files recorded without chunks because they cannot be read as text
SKIPPED = "skipped_files"
#: A file whose recorded mtime is this close to (or past) the scan that read it is "racily clean", as git says:
#: a second write of the same size within the file system's timestamp tick (ext4's few milliseconds, FAT's
#: 2 s) leaves size and mtime as recorded, so the stat alone would keep the first version's chunks until the
#: next edit. Such a file is read again (hashed; embedded only if it changed) by the next sync: a watcher's,
#: which the second write's event starts, or the next `memsift index`.
RACY_SECONDS = 2.0


@dataclass
class SyncReport:
    filesScanned: int = 0
    added: int = 0
    changed: int = 0
    removed: int = 0
    unchanged: int = 0
    skipped: int = 0  # not readable as text (binary, too large: recorded without chunks), or not at all (gone, denied)
    chunksWritten: int = 0
    chunksEmbedded: int = 0
    chunksRejected: int = 0  # refused by the provider even split (too long, invalid): indexed keyword-only
    cacheHits: int = 0  # chunks whose vector the index or the shared cache already had
    #: requests made to the embedder, counted as the plan's `estimatedRequests` counts them: a hosted provider's
    #: HTTP requests (retries and the halving of a refused batch included), the local model's `embed_documents`
    #: steps (`batchMaxInputs` times `concurrency` chunks each)
    embeddingRequests: int = 0
    #: model invocations: a hosted provider's HTTP requests again, but the local model's token windows (one per
    #: window of 256 tokens: a chunk of 400 tokens is two), which the plan does not predict
    embeddingCalls: int = 0
    inputChars: int = 0  # characters sent to the embedder
    embedSeconds: float = 0.0  # time spent waiting for the embedder (its measured throughput)
    cachePruned: int = 0  # shared cache entries dropped by cache.maxEntries or cache.maxMiB after this run
    rebuilt: bool = False  # built from empty tables: a first index, or a rebuild (`firstIndex` tells them apart)
    firstIndex: bool = False  # the agent's first index, in the live file: its first run, not a rebuild of one
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
    known: dict[str, tuple[int, int, str, float]]
    forced: bool = False  # a forced run (core.rebuild's are): it needs every vector, the embedder failing stops it
    #: the scanned files the index holds without text, and why; read_batch keeps it current, the sync stores it
    skipped: dict[str, str] = field(default_factory=dict)
    #: when the scan began: each file read is recorded with it (`indexed_at`), for `RACY_SECONDS`
    scanned_at: float = 0.0


def plan_sync(
    store: Store,
    config: Config,
    embedder: Embedder | None,
    report: SyncReport,
    force: bool = False,
    recheck: bool = False,
) -> SyncPlan:
    """The sync's plan. With `recheck` (a sync, and the dry run that predicts it) racily clean files are read
    again; `status` and a search's catch-up, which would run a whole sync for them, judge by stat alone."""
    identity = index_identity(config, embedder)
    rebuild = force or not identity_matches(store.identity(), identity)
    scanned_at = time.time()
    known = {} if rebuild else store.file_rows()
    sources = active(config)
    files, unlisted = _discover(config, report)
    if not files and not unlisted:  # a folder that could not be listed says so itself
        report.warnings.append(nothing_found(config.workspace))
    report.filesScanned = len(files)
    scanned = {entry.path for entry in files}
    recorded = None if rebuild else store.get_meta(SKIPPED)
    skipped = {p: why for p, why in json.loads(recorded or "{}").items() if p in scanned}
    unknown = store.files_without_chunks() if recorded is None and not rebuild else set()  # read once to learn why
    to_check = []
    for entry in files:
        old = known.get(entry.path)
        if old is not None and old[0] == entry.size and old[1] == entry.mtime_ns and entry.path not in unknown:
            if entry.path in skipped:  # not read again, but still in no search: said by every sync
                _skip(report, entry.path, skipped[entry.path])
            elif recheck and entry.mtime_ns / 1e9 >= old[3] - RACY_SECONDS:
                to_check.append(entry)
            else:
                report.unchanged += 1
        elif old is not None and not sources[entry.source].due(entry, old[0]):
            report.unchanged += 1  # e.g. a transcript that grew by less than a delta: read it later
        else:
            to_check.append(entry)
    removed = _gone(known, files, unlisted)
    return SyncPlan(identity, rebuild, to_check, removed, known, force, skipped, scanned_at)


def _skip(report: SyncReport, path: str, why: str) -> None:
    report.warnings.append(f"skipped {path}: {why}")
    report.skipped += 1


def vanished(store: Store, config: Config) -> list[str]:
    """The indexed files that are no longer there: what a sync would remove. A rebuild held for `--force`
    still removes them (it costs nothing), so that a deleted note is not served until the user pays."""
    files, unlisted = _discover(config, SyncReport())
    return _gone(store.file_rows(), files, unlisted)


def _discover(config: Config, report: SyncReport) -> tuple[list[FileEntry], list[str]]:
    """Every source's files, and the folders that exist but could not be listed; the warnings go to `report`."""
    files: list[FileEntry] = []
    unlisted: list[str] = []
    for source in active(config).values():
        found, warnings, unlistable = source.discover()
        files.extend(found)
        report.warnings.extend(warnings)
        unlisted.extend(unlistable)
    return files, unlisted


def _gone(known: Iterable[str], files: list[FileEntry], unlisted: list[str]) -> list[str]:
    seen = {f.path for f in files}
    # A file under a folder that could not be listed is not known to be gone: its rows stay as they are.
    return [p for p in known if p not in seen and not any(not u or p.startswith(f"{u}/") for u in unlisted)]


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
            report.skipped += 1  # the summary's count agrees with its warnings ("0 added", 43 "skipped" lines)
            continue
        digest = hashlib.sha256(raw).hexdigest()
        old = plan.known.get(entry.path)
        if old is not None and old[2] == digest:
            touched.append(entry)
            if text is None:  # the same bytes, still no text: said again (and recorded, for an index from before)
                _skip(report, entry.path, problem or "not text")
                plan.skipped[entry.path] = problem or "not text"
            else:
                report.unchanged += 1
            continue
        if text is None:
            # Recorded with no chunks: old chunks go; the next syncs skip it by stat until it changes, and say so.
            _skip(report, entry.path, problem or "not text")
            plan.skipped[entry.path] = problem or "not text"
            files.append((entry, digest, []))
            continue
        plan.skipped.pop(entry.path, None)
        if problem:
            report.warnings.append(f"{entry.path}: {problem}")
        chunks = source.chunk(entry.path, text, report.warnings)
        files.append((entry, digest, chunks))
        if old is None:
            report.added += 1
        else:
            report.changed += 1
    return files, touched
