"""The runs that write an agent's index, under its writer lock: a sync, the catch-up a search runs first, a
rebuild (or the record of why it waits for `--force`), the switch to `embedding.fallback` when the provider
fails, and the dry run's plan. Apart from core.memory, whose facade (search, get, status) only reads the
index and calls these."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from .embedders import Embedder, EmbedderUnavailable, EmbeddingError
from .errors import LockTimeout
from .estimate import Estimate, estimate, summary
from .identity import change_cause, identity_changes, identity_matches, index_identity, provisional
from .indexer import REBUILD_HELD, SHARED_CACHE, UNFINISHED, Progress, Stage, plain_stage, sync
from .locking import writer_lock
from .memory_embedder import EmbedderChoice
from .rebuild import rebuild, remove_orphans
from .shared_cache import SharedCache
from .sources import FileEntry
from .sources.memory import workspace_gone
from .status import iso
from .store_recovery import UnreadableIndex, set_aside, unreadable_as_such
from .sync_plan import SyncReport, plan_sync, vanished


class SyncRuns(EmbedderChoice):
    """Part of `MemoryIndex` (core.memory), which gives `_use_vec`, `close` and `_adopt_legacy`."""

    _use_vec: bool

    def needs_rebuild(self) -> bool:
        """True when a sync would rebuild: the index is new, or its identity (model, chunking, tokenizer...)
        no longer matches and `sync.autoRebuild` lets the rebuild run without `--force`. Judged with the
        embedder the sync would use: while the provider is down, the stand-in that keeps the index taking text
        keyword-only (the sync flow asked with none, took the index for another model's, and handed over to a
        rebuild that failed on the provider, where `memsift index --no-prefect` indexed the text)."""
        try:
            embedder = self.require_embedder()
        except EmbedderUnavailable:
            return False  # the sync itself stops with the reason: no rebuild to start in its place
        identity = self.store.identity()
        if identity is None or identity_matches(identity, index_identity(self.config, embedder)):
            return False  # a first index is a sync into the live file (its batches answer searches at once)
        return self._rebuild_held(embedder) is None

    @unreadable_as_such
    def sync(self, *, force: bool = False, progress: Progress | None = None, stage: Stage = plain_stage) -> SyncReport:
        """Incremental sync, or a rebuild with atomic swap when forced or when the identity changed.

        While a fallback switch is recorded the fallback is used and the provider is not tried; `force` tries
        the provider again. A provider that fails switches to `embedding.fallback` (see the class docstring).
        """
        with self._writing(replace_unreadable=force) as notes:
            report = self._sync_locked(force, progress, stage)
            report.warnings[:0] = notes
            self._tend_cache(report)
            return report

    @unreadable_as_such
    def catch_up(self, *, most_bytes: int | None = None) -> tuple[str | None, str | None]:
        """The incremental sync a search (`memsift search`, `POST /v1/search`, an MCP call) runs first when memory
        files changed since the last sync, so no hit points at lines a note no longer holds (a note edited, emptied
        or deleted since `memsift index`); a server's watcher also does it a debounce later. With the provider
        down, the new text is indexed for keyword search, its vectors pending, as by a sync.

        Returns (a note for the answer's `warning`, what the answer does not search yet for its `degraded`), each
        None when there is nothing to say (an index never built: the search's first sync builds it). The note:
        the configuration or model changed (a rebuild is `memsift index`'s to run, not a search's: it may take
        minutes), or the warnings of the sync it ran, as `memsift index` prints them. Not searched yet: the
        changed files, when another sync of the agent is running (rather than wait for it: that sync catches
        them up), or when, with `most_bytes` (a server whose watcher syncs them), more than one changed file
        holds more than that: embedding 100 rewritten notes held a search 9-18 s. Deleted files' rows go then
        all the same (it costs nothing): no hit points at a note that is gone.
        """
        # Whether anything changed needs the provider's identity, not an answer: described as for `status`
        # (no start-up probe: every `memsift search` paid one, even with nothing to sync); the sync below, if
        # there is one, starts the provider.
        embedder = self.unprobed()
        if embedder is None:
            try:  # as a sync: with the provider down, its index still takes the new text through a stand-in
                embedder = self.require_embedder()
            except EmbedderUnavailable:
                embedder = None  # the identities differ below, and the note says so
        store = self.store  # after the calls above: each may reopen a file a rebuild swapped in, closing this one
        identity = store.identity()
        if identity is None or store.get_meta(UNFINISHED):
            return None, None  # the search completes the first index, or says another process is running it
        new = index_identity(self.config, embedder)
        if not identity_matches(identity, new):
            if store.get_meta(REBUILD_HELD):
                self._drop_vanished()  # a deleted note is no hit, even while the rebuild waits for `--force`
                return None, None  # the search's `degraded` says why, and what the rebuild would cost
            changed = identity_changes(identity, new)
            return (
                f"{change_cause(identity, new)} since the last sync ({changed}): the answers come from the "
                "index as it was; `memsift index` rebuilds it"
            ), None
        if not self.config.workspace.is_dir():  # the scan keeps its files; the answer says why it may be stale
            return workspace_gone(self.config.workspace), None
        plan = plan_sync(store, self.config, embedder, SyncReport())
        if not plan.to_check and not plan.removed:
            return None, None
        size = sum(entry.size for entry in plan.to_check)
        if most_bytes is not None and len(plan.to_check) > 1 and size > most_bytes:
            self._drop_vanished()
            return None, _unsearched(plan.to_check, size, "a sync of this agent indexes them meanwhile")
        try:
            with self._writing(lock_timeout=0) as notes:
                report = self._sync_locked(False, None, plain_stage)
                self._tend_cache(report)
        except LockTimeout:
            return None, _unsearched(plan.to_check, size, "another sync of this agent is running and indexes them")
        return "; ".join([*notes, *report.warnings]) or None, None  # what a sync says (a note with U+FFFD)

    def _drop_vanished(self) -> None:
        """The rows of deleted files, under the writer lock if it is free (a sync running removes them itself)."""
        if not vanished(self.store, self.config):
            return
        try:
            with self._writing(lock_timeout=0):
                store = self.store
                gone = vanished(store, self.config)
                with store.transaction():
                    for path in gone:
                        store.remove_file(path)
        except LockTimeout:
            pass

    def _sync_locked(self, force: bool, progress: Progress | None, stage: Stage) -> SyncReport:
        record = self.fallback_record()
        if record is not None and not force:
            report = self._sync_with(self._require_fallback(), False, progress, stage)
            return _on_fallback(report, record)
        try:
            embedder = self._primary()
            if self._embedder_error:
                embedder = self._stand_in()
                if embedder is None or force or self.config.embedding.fallback != "none":
                    raise EmbedderUnavailable(self._embedder_error)
            return self._sync_with(embedder, force, progress, stage)
        except (EmbeddingError, EmbedderUnavailable) as exc:
            if self.config.embedding.fallback == "none":
                raise
            return self._switch_to_fallback(exc, progress, stage)

    def plan(self, *, force: bool = False) -> Estimate:
        """What `sync(force=force)` would read, embed and cost, without embedding anything (a dry run). When
        the identity changed and the rebuild waits for `--force`, the figures are the forced rebuild's and
        `rebuildHeld` says why the plain sync does nothing."""
        # Described from the configuration and the index when that tells its dimension: a dry run sends
        # nothing (it paid the start-up probe); an unknown model's first index still asks the provider.
        described = self.unprobed()
        embedder = (
            described
            if described is not None and described.dims
            else self.embedder() or (self._stand_in() if self.fallback_record() is None else None)
        )
        held = None
        if not force and not identity_matches(self.store.identity(), index_identity(self.config, embedder)):
            held = self._rebuild_held(embedder)
        plan = self._estimate(embedder, force=force, calibrate=True)
        plan.rebuildHeld = held["reason"] if held else None
        return plan

    def rebuild(self, *, progress: Progress | None = None, stage: Stage = plain_stage) -> SyncReport:
        return self.sync(force=True, progress=progress, stage=stage)

    def _sync_with(self, embedder: Embedder | None, force: bool, progress: Progress | None, stage: Stage) -> SyncReport:
        """A rebuild into a temp file when forced or when the identity changed; an index that has none yet
        (a first index) is built in the live file, so that searches answer from its batches as they commit
        instead of waiting minutes for a swap (a crash leaves those batches, and the next sync adds the rest)."""
        identity = self.store.identity()
        if identity is not None and (force or not identity_matches(identity, index_identity(self.config, embedder))):
            if not force and (held := self._rebuild_held(embedder)) is not None:
                return self._hold(held)
            return self._rebuild(embedder, progress, stage)
        report = sync(
            self.store, self.config, embedder, force=force, progress=progress, stage=stage, estimator=estimate
        )
        report.firstIndex = identity is None  # `rebuilt` too (empty tables), which a newcomer's first run read as such
        return report

    def _rebuild_held(self, embedder: Embedder | None) -> dict[str, Any] | None:
        """The record of why the rebuild a changed identity calls for waits for `--force`, or None when it
        may run now: a first index (asked for), `sync.autoRebuild` allowing it, or a rebuild the caches serve
        whole (it costs nothing), or one of an index whose provider never answered (it holds no vector to keep).
        The record carries what the forced rebuild would embed and cost, estimated again at every sync (in a
        long-running server, from the notes changed since: core.estimate `_chunks`)."""
        identity = self.store.identity()
        policy = self.config.sync.autoRebuild
        if identity is None or policy == "always":
            return None
        if policy == "local" and (embedder is None or embedder.provider == "local" or provisional(identity)):
            return None
        new = index_identity(self.config, embedder)
        changed = identity_changes(identity, new)
        plan = self._estimate(embedder, force=True, remember=True)
        if policy == "local" and plan.chunksToEmbed == 0:
            return None
        why = "only the local model rebuilds on its own" if policy == "local" else "nothing rebuilds on its own"
        reason = (
            f"the index identity changed ({changed}): the rebuild with {plan.provider} waits for "
            f"`memsift index --force` (sync.autoRebuild = {policy!r}: {why})"
        )
        plan_doc = plan.to_dict()
        return {"reason": reason, "at": time.time(), "plan": plan_doc, "summary": summary(plan_doc)}

    def _hold(self, held: dict[str, Any]) -> SyncReport:
        """Leave the index as it is (search answers from it, keyword-only where the model changed) and say why
        and what the rebuild would cost, in the report, its warnings, `status` and the searches' `degraded`."""
        store = self.store
        gone = vanished(store, self.config)
        with store.transaction():
            store.set_meta(REBUILD_HELD, json.dumps(held))
            for path in gone:  # a deleted note is not served until the rebuild is paid for (it costs nothing)
                store.remove_file(path)
        report = SyncReport(plan=held["plan"], rebuildHeld=held["reason"], removed=len(gone))
        report.warnings.append(f"{held['reason']}; it would embed: {held['summary']}")
        return report

    def _estimate(
        self, embedder: Embedder | None, *, force: bool, calibrate: bool = False, remember: bool = False
    ) -> Estimate:
        plan = plan_sync(self.store, self.config, embedder, SyncReport(), force, recheck=True)
        with SharedCache.open(self.config.home) as cache:
            return estimate(self.store, self.config, embedder, plan, cache, calibrate=calibrate, remember=remember)

    def _switch_to_fallback(self, error: Exception, progress: Progress | None, stage: Stage) -> SyncReport:
        """Rebuild under the fallback (the old index stays searchable until the swap), then record the switch.
        A fallback that fails too raises the provider's error with the fallback's failure added."""
        to = self.config.embedding.fallback
        try:
            report = self._rebuild(self._require_fallback(), progress, stage)
        except (EmbeddingError, EmbedderUnavailable) as again:
            kind = EmbeddingError if isinstance(error, EmbeddingError) else EmbedderUnavailable
            raise kind(f"{error}; the fallback {to!r} failed too: {again}") from again
        record = {
            "from": self.config.embedding.provider,
            "to": to,
            "reason": f"{type(error).__name__}: {error}",
            "at": iso(time.time()),
        }
        store = self.store
        with store.transaction():
            store.set_meta("fallback", json.dumps(record))
        return _on_fallback(report, record)

    @contextmanager
    def _writing(self, *, replace_unreadable: bool = False, lock_timeout: float | None = None) -> Iterator[list[str]]:
        """The agent's writer lock (waited for `lock_timeout` seconds, default `sync.lockTimeoutSeconds`);
        whoever holds it may delete temp files a crashed rebuild left, and hands the shared cache the vectors of
        an index written before it existed (once). With `replace_unreadable` (a forced run), an index file that
        is no database is set aside and a new one started; it yields the warnings that says so."""
        self._adopt_legacy()
        notes: list[str] = []
        timeout = self.config.sync.lockTimeoutSeconds if lock_timeout is None else lock_timeout
        with writer_lock(self.config.db_path, timeout):
            remove_orphans(self.config.db_path)
            try:
                store = self.store
            except UnreadableIndex as exc:
                if not replace_unreadable:
                    raise
                aside = set_aside(self.config.db_path)
                notes.append(f"{exc.__cause__}: the unreadable index was set aside as {aside}; rebuilt from scratch")
                store = self.store
            if store.identity() is not None and store.get_meta(SHARED_CACHE) != "1":
                with SharedCache.open(self.config.home) as cache:
                    cache.adopt(store)
                with store.transaction():
                    store.set_meta(SHARED_CACHE, "1")
            yield notes

    def _tend_cache(self, report: SyncReport) -> None:
        """After a run: the shared cache learns this index uses it, and `cache.maxEntries` and `cache.maxMiB`
        bound it (before, no bound was set by default: 200 edits of one note left 876 entries for 346 chunks)."""
        bounds = self.config.cache
        with SharedCache.open(self.config.home) as cache:
            cache.register(self.config.db_path)
            if bounds.maxEntries is not None:
                report.cachePruned = cache.prune(bounds.maxEntries)
            if bounds.maxMiB:
                report.cachePruned += cache.bound(bounds.maxMiB * 1024 * 1024)

    def _rebuild(self, embedder: Embedder | None, progress: Progress | None, stage: Stage) -> SyncReport:
        # The vectors of the index it replaces serve the rebuild as the cache's do (estimate counts them), so a
        # cache folder deleted since, or entries pruned, is no cost: a hosted provider's rebuild was held for it.
        with SharedCache.open(self.config.home) as cache:
            cache.adopt(self.store)
        self.close()  # our connection would hold the old file; the next access opens the new one
        return rebuild(self.config, embedder, progress=progress, stage=stage, use_vec=self._use_vec, estimator=estimate)


def _unsearched(files: list[FileEntry], size: int, why: str) -> str | None:
    """What a search answering from the index as it is misses: the changed files (a few named), and why."""
    if not files:
        return None
    named = ", ".join(entry.path for entry in files[:3]) + (f" and {len(files) - 3} more" if len(files) > 3 else "")
    count = f"{len(files)} changed memory file{'s' if len(files) > 1 else ''}"
    return f"{count} ({size / 1024:.0f} KiB) not searched yet ({named}): {why}; the answers come from the index as is"


def _on_fallback(report: SyncReport, record: dict[str, Any]) -> SyncReport:
    """Say in the report (and its warnings, which the CLI and the flow show) that the fallback did the work."""
    report.fallback = record["reason"]
    report.warnings.append(
        f"embedding: using the fallback {record['to']!r} since {record['at']} because {record['from']!r} failed "
        f"({record['reason']}); `memsift index --force` tries {record['from']!r} again"
    )
    return report
