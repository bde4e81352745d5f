"""`MemoryIndex`: one agent's configuration, index file and embedder, behind the operations users call.

The CLI and the API are thin layers over this class; the Prefect flows drive `core.indexer.sync` with it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from functools import partial
from typing import Any

from . import learned, rerankers
from .binding import check_workspace
from .config import Config, EmbeddingConfig
from .embedders import (
    DownEmbedder,
    Embedder,
    EmbedderUnavailable,
    EmbeddingError,
    create_embedder,
    provisional_stand_in,
)
from .errors import LockTimeout, ProviderDown
from .estimate import Estimate, estimate, summary
from .get import get_lines
from .indexer import (
    REBUILD_HELD,
    SHARED_CACHE,
    UNFINISHED,
    Progress,
    Stage,
    SyncReport,
    identity_changes,
    identity_matches,
    index_identity,
    plain_stage,
    plan_sync,
    provisional,
    sync,
)
from .legacy import adopt_legacy
from .locking import POLL_SECONDS, writer_lock, writer_pid
from .rebuild import rebuild, remove_orphans
from .search import SearchResponse, check_request, search
from .shared_cache import SharedCache
from .sources.memory import workspace_gone
from .status import iso, status_document
from .store import Store, StoreError
from .store_recovery import UnreadableIndex, set_aside

_CONFIGURED: Any = object()
#: A configured embedder that failed to start is tried again by the first use this long after: a long-lived
#: process (`memsift serve`'s pooled indexes, `memsift mcp`) searches and syncs with the provider once it is back
#: instead of keyword-only until a restart, and a provider still down costs one probe a minute, not one a search.
START_RETRY_SECONDS = 60.0


class MemoryIndex:
    """One agent's index. `embedder` replaces the configured one (a shared instance, or None for keyword
    only); `use_vec=False` runs the vector leg on the numpy scan, as when sqlite-vec cannot load.

    `embedding.fallback`: when the provider fails a sync (EmbeddingError, or EmbedderUnavailable at start),
    the sync rebuilds once under the fallback provider and records the switch in the index's meta (`fallback`:
    from, to, reason, at). While the record is there, syncs and searches use the fallback, so the index keeps
    one identity; `sync(force=True)` tries the provider again, and its rebuild swaps in a file without the record.
    """

    def __init__(self, config: Config, *, use_vec: bool = True, embedder: Embedder | None = _CONFIGURED) -> None:
        self.config = config
        self._use_vec = use_vec
        self._store: Store | None = None
        self._embedder: Embedder | None = None if embedder is _CONFIGURED else embedder
        self._embedder_error: str | None = None
        self._embedder_loaded = embedder is not _CONFIGURED
        self._retry_at = 0.0  # when `_primary` tries again an embedder that failed to start
        self._provider_down = False  # it failed to start because it is down (ProviderDown), not refusing
        self._fallback: Embedder | None = None
        self._fallback_error: str | None = None
        self._fallback_loaded = False
        self._reranker: rerankers.Reranker | None = None
        self._legacy_checked = False
        #: Called when a search is about to index the agent first (minutes for thousands of notes), with the files
        #: an interrupted first index already holds (0 for none): the CLI says so.
        self.before_first_index: Callable[[int], None] | None = None

    @property
    def store(self) -> Store:
        """The open index; reopened when a rebuild has swapped a new file in (one stat per access)."""
        if self._store is not None and not self._store.is_current():
            self.close()
        if self._store is None:
            self._adopt_legacy()
            store = Store(self.config.db_path, use_vec=self._use_vec)
            try:
                check_workspace(store, self.config)
            except StoreError:
                store.close()
                raise
            self._store = store
        return self._store

    def _indexed(self) -> bool:
        """Whether the agent has an index file (a legacy one adopted first). What only reads the index (status,
        the fallback record) asks this first: opening `store` would create the file."""
        self._adopt_legacy()
        return self._store is not None or self.config.db_path.exists()

    def _adopt_legacy(self) -> None:
        """Once per instance, before the agent's writer lock is taken: adoption takes it itself."""
        if not self._legacy_checked:
            self._legacy_checked = True
            adopt_legacy(self.config)

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None

    def __enter__(self) -> MemoryIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def embedder(self) -> Embedder | None:
        """The embedder the index is built with: the fallback while a switch is recorded, else the configured
        one. Loaded once (one that failed: again after START_RETRY_SECONDS); None when `none` or when it
        failed (see `embedder_error`)."""
        if self.fallback_record() is not None:
            return self._fallback_embedder()
        return self._primary()

    def _primary(self) -> Embedder | None:
        if not self._embedder_loaded or (self._embedder_error and time.monotonic() >= self._retry_at):
            self._embedder_loaded, self._embedder_error = True, None
            try:
                self._embedder = create_embedder(self.config.embedding)
            except (EmbedderUnavailable, EmbeddingError) as exc:  # a provider's start-up probe may fail either way
                self._embedder_error = str(exc)
                self._retry_at = time.monotonic() + START_RETRY_SECONDS
                self._provider_down = isinstance(exc.__cause__ or exc, ProviderDown)
        return self._embedder

    @property
    def embedder_error(self) -> str | None:
        """Why `embedder()` is None when something was configured; while switched, why we left the provider."""
        record = self.fallback_record()
        if record is None:
            self._primary()
            return self._embedder_error
        if self._fallback_embedder() is None:
            return (
                self._fallback_error or f"{record['from']} failed ({record['reason']}); on the fallback {record['to']}"
            )
        return None

    def require_embedder(self) -> Embedder | None:
        """For indexing: a configured provider that cannot start is an error, not a silent keyword index,
        unless a fallback is configured (the sync switches to it) or the index was built by it (`_stand_in`)."""
        if self.fallback_record() is not None:
            return self._require_fallback()
        embedder = self._primary()
        if self._embedder_error and self.config.embedding.fallback == "none":
            stand_in = self._stand_in()  # the index this provider built can still take text, keyword-only
            if stand_in is None:
                raise EmbedderUnavailable(self._embedder_error)
            return stand_in
        return embedder

    def _stand_in(self, *, refused: bool = False) -> Embedder | None:
        """While the configured provider cannot start, the index it built can still take new text for keyword
        search (its vectors wait for the next sync): a DownEmbedder with the index's identity, or None when
        the index was not built by this provider. An index not built yet is built keyword-only under the
        provider's provisional identity (`provisional_stand_in`), its vectors pending as well, when the
        provider is down; one that refused (a key, a model to fix) stands in only when `refused` allows it
        (a search must answer; `memsift index` fails with the reason)."""
        if not self._embedder_error:
            return None
        identity = self.store.identity()
        if identity is None:
            if not (self._provider_down or refused):
                return None
            return provisional_stand_in(self.config.embedding, self._embedder_error)
        if identity.get("provider") != self.config.embedding.provider:
            return None
        return DownEmbedder(identity, self._embedder_error)

    def fallback_record(self) -> dict[str, Any] | None:
        """The recorded switch to `embedding.fallback` ({from, to, reason, at}), or None."""
        if not self._indexed():
            return None
        try:
            raw = self.store.get_meta("fallback")
        except UnreadableIndex:  # none readable: a forced sync sets the file aside, any other use reports it
            return None
        return json.loads(raw) if raw else None

    def _fallback_config(self) -> EmbeddingConfig:
        """The embedding settings with the fallback as provider; model and endpoint belong to the primary
        unless the fallback is the same provider."""
        embedding = self.config.embedding
        if embedding.fallback == embedding.provider:
            return embedding
        return replace(embedding, provider=embedding.fallback, model=None, baseUrl=None, apiKey=None)

    def _fallback_embedder(self) -> Embedder | None:
        if not self._fallback_loaded:
            self._fallback_loaded = True
            try:
                self._fallback = create_embedder(self._fallback_config())
            except (EmbedderUnavailable, EmbeddingError) as exc:
                self._fallback_error = str(exc)
        return self._fallback

    def _require_fallback(self) -> Embedder | None:
        embedder = self._fallback_embedder()
        if self._fallback_error:
            raise EmbedderUnavailable(self._fallback_error)
        return embedder

    def needs_rebuild(self) -> bool:
        """True when a sync would rebuild: the index is new, or its identity (model, chunking, tokenizer...)
        no longer matches and `sync.autoRebuild` lets the rebuild run without `--force`."""
        embedder = self.embedder()
        identity = self.store.identity()
        if identity is None or identity_matches(identity, index_identity(self.config, embedder)):
            return False  # a first index is a sync into the live file (its batches answer searches at once)
        return self._rebuild_held(embedder) is None

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

    def catch_up(self) -> str | None:
        """The incremental sync a search (`memsift search`, `POST /v1/search`, an MCP call) runs first when memory
        files changed since the last sync, so no hit points at lines a note no longer holds (a note edited, emptied
        or deleted since `memsift index`); a server's watcher also does it a debounce later. With the provider
        down, the new text is indexed for keyword search, its vectors pending, as by a sync. None when the index
        now answers for the files as they are (or was never built: the search's first sync builds it); else
        why it may not, for a note: the configuration or model changed (a rebuild is `memsift index`'s to run,
        not a search's: it may take minutes) or another process is syncing this agent right now (rather than
        wait for it: that sync catches the changes up); or the warnings of the sync it ran, as `memsift index`
        prints them."""
        try:  # as a sync: with the provider down, its index still takes the new text through a stand-in
            embedder = self.require_embedder()
        except EmbedderUnavailable:
            embedder = None  # the identities differ below, and the note says so
        store = self.store  # after the calls above: each may reopen a file a rebuild swapped in, closing this one
        identity = store.identity()
        if identity is None or store.get_meta(UNFINISHED):
            return None  # the search completes the first index, or says another process is running it
        new = index_identity(self.config, embedder)
        if not identity_matches(identity, new):
            if store.get_meta(REBUILD_HELD):
                return None  # the search's `degraded` says why, and what the rebuild would cost
            changed = identity_changes(identity, new)
            return (
                f"the configuration or model changed since the last sync ({changed}): the answers come from the "
                "index as it was; `memsift index` rebuilds it"
            )
        if not self.config.workspace.is_dir():  # the scan keeps its files; the answer says why it may be stale
            return workspace_gone(self.config.workspace)
        plan = plan_sync(store, self.config, embedder, SyncReport())
        if not plan.to_check and not plan.removed:
            return None
        try:
            with self._writing(lock_timeout=0) as notes:
                report = self._sync_locked(False, None, plain_stage)
                self._tend_cache(report)
        except LockTimeout:
            return "another sync of this agent is running: the answers come from the index as it is"
        return "; ".join([*notes, *report.warnings]) or None  # what a sync says (a note indexed with U+FFFD)

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
        embedder = self.embedder() or (self._stand_in() if self.fallback_record() is None else None)
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
        return sync(self.store, self.config, embedder, force=force, progress=progress, stage=stage, estimator=estimate)

    def _rebuild_held(self, embedder: Embedder | None) -> dict[str, Any] | None:
        """The record of why the rebuild a changed identity calls for waits for `--force`, or None when it
        may run now: a first index (asked for), `sync.autoRebuild` allowing it, or a rebuild the caches serve
        whole (it costs nothing), or one of an index whose provider never answered (it holds no vector to keep).
        The record carries what the forced rebuild would embed and cost."""
        identity = self.store.identity()
        policy = self.config.sync.autoRebuild
        if identity is None or policy == "always":
            return None
        if policy == "local" and (embedder is None or embedder.provider == "local" or provisional(identity)):
            return None
        new = index_identity(self.config, embedder)
        changed = identity_changes(identity, new)
        plan = self._estimate(embedder, force=True)
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
        with store.transaction():
            store.set_meta(REBUILD_HELD, json.dumps(held))
        report = SyncReport(plan=held["plan"], rebuildHeld=held["reason"])
        report.warnings.append(f"{held['reason']}; it would embed: {held['summary']}")
        return report

    def _estimate(self, embedder: Embedder | None, *, force: bool, calibrate: bool = False) -> Estimate:
        plan = plan_sync(self.store, self.config, embedder, SyncReport(), force)
        with SharedCache.open(self.config.home) as cache:
            return estimate(self.store, self.config, embedder, plan, cache, calibrate=calibrate)

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
        """After a run: the shared cache learns this index uses it, and `cache.maxEntries` prunes it."""
        with SharedCache.open(self.config.home) as cache:
            cache.register(self.config.db_path)
            if self.config.cache.maxEntries is not None:
                report.cachePruned = cache.prune(self.config.cache.maxEntries)

    def _rebuild(self, embedder: Embedder | None, progress: Progress | None, stage: Stage) -> SyncReport:
        self.close()  # our connection would hold the old file; the next access opens the new one
        return rebuild(self.config, embedder, progress=progress, stage=stage, use_vec=self._use_vec, estimator=estimate)

    def search(self, query: str, **options: Any) -> SearchResponse:
        """Hybrid search; an agent that was never indexed is synced first (SPEC section 5), with whatever
        embedder works: a provider that cannot start gives a keyword index and a degraded answer."""
        check_request(query, *(options.get(k) for k in ("max_results", "min_score", "after", "before", "path_prefix")))
        if self.config.rerank.method == "learned":  # an unreadable model: one error before any indexing
            learned.model_for(self.config.rerank.rankerModel)
        partial, said = self._first_index()
        embedder, error = self.embedder(), self.embedder_error
        store = self.store
        with store.snapshot():  # one state of the index for every leg, even while a sync commits batches
            response = search(
                store,
                self.config,
                embedder,
                query,
                embedder_error=error,
                make_reranker=lambda: self.reranker(embedder),  # not self.embedder(): it may reopen `store`
                **options,
            )
            held = self._held_rebuild(store, embedder, response.degraded or "")
        if held:
            response.degraded = f"{response.degraded}; {held}" if response.degraded else held
        if partial:
            response.degraded = f"{partial}; {response.degraded}" if response.degraded else partial
            response.partial = True
        response.warn(said)
        return response

    def _held_rebuild(self, store: Store, embedder: Embedder | None, said: str) -> str | None:
        """Why the answer comes from an index the configuration no longer describes (SPEC section 1: on a hosted
        provider the rebuild waits for a forced run, "search degrades meanwhile and says so"). A new model's
        search is keyword-only and `said` names the rebuild already; a new chunking or extraPaths keeps the
        old vectors usable, so the search ran as before and said nothing. `store` is the search's snapshot:
        `self.store` would reopen a file a rebuild swapped in, closing the connection the snapshot holds."""
        held = store.get_meta(REBUILD_HELD)
        if not held or identity_matches(store.identity(), index_identity(self.config, embedder)):
            return None  # none recorded, or the configuration went back to the index's
        record = json.loads(held)
        if record["reason"] in said:
            return None
        return f"{record['reason']}, which would embed: {record['summary']}; the answers come from the index as it was"

    def _first_index(self) -> tuple[str | None, str | None]:
        """SPEC section 5: a search of an agent never indexed syncs it first, and so does one whose first index
        was interrupted (its committed batches stay: the sync adds the rest). While another process or thread
        runs that first index (minutes for thousands of notes), the search does not wait for it: it answers
        from the batches committed so far, and this returns why the answer may miss files. Only until that run
        has committed its start (it scans the workspace first) is it waited for, `sync.lockTimeoutSeconds` at
        most. (why the answer may miss files, the warnings of the sync run here, as `memsift index` prints
        them); (None, None) when the index is complete."""
        deadline = time.monotonic() + self.config.sync.lockTimeoutSeconds
        while True:
            if not self._unfinished():
                return None, None
            try:
                with self._writing(lock_timeout=0) as notes:
                    if not self._unfinished():  # somebody finished it meanwhile
                        return None, None
                    if self.before_first_index is not None:
                        self.before_first_index(sum(self.store.stats()["files"].values()))
                    embedder = self.embedder() or self._stand_in(refused=True)  # keyword-only, vectors pending
                    report = sync(self.store, self.config, embedder, estimator=estimate)
                    self._tend_cache(report)
                    return None, "; ".join([*notes, *report.warnings]) or None
            except LockTimeout:
                store = self.store
                if store.identity() is not None or time.monotonic() >= deadline:
                    return self._partial(store), None
            time.sleep(POLL_SECONDS)  # the running first index commits its start within moments

    def _unfinished(self) -> bool:
        store = self.store
        return store.identity() is None or bool(store.get_meta(UNFINISHED))

    def _partial(self, store: Store) -> str | None:
        """Why a search answers from part of the memory: the first index running elsewhere, and how far it is;
        None when that index finished since the caller looked (the answer then covers everything)."""
        unfinished = json.loads(store.get_meta(UNFINISHED) or "null")
        if unfinished is None and store.identity() is not None:
            return None
        running = f"the first index of this agent is running (pid {writer_pid(self.config.db_path)})"
        done = sum(store.stats()["files"].values())
        if not done:
            of = f" of its {unfinished['files']} files" if unfinished else ""
            return f"{running} and has indexed none{of} yet: no answer before its first batch is in; try again shortly"
        return f"{running}: {done} of {unfinished['files']} files indexed so far, the answers come from those"

    def reranker(self, embedder: Embedder | None = _CONFIGURED) -> rerankers.Reranker:
        """The configured reranker, built on first use and kept: a hosted one holds an HTTP client (one per
        search would be a TLS handshake per query), a cross-encoder a model. A failure to build it is not
        kept: search degrades and the next search tries again. `embedder`: the one a search already holds."""
        if self._reranker is None:
            self._reranker = rerankers.create_reranker(
                self.config.rerank, self.embedder() if embedder is _CONFIGURED else embedder
            )
        return self._reranker

    def get(self, path: str, start: int = 1, count: int | None = None) -> dict[str, Any]:
        # Asked only for a file outside the workspace: a get of a workspace file never opens the index.
        return get_lines(self.config, path, start, count, indexed=lambda rel: self.store.has_file(rel))

    def status(self, *, deep: bool = False) -> dict[str, Any]:
        # Everything that reads `self.store` first: a rebuild's swap makes the next `self.store` close the
        # connection held below, so once it is taken only `store` is read (one state of the index).
        fallback = self.fallback_record()
        embedder = self.embedder() or (self._stand_in() if fallback is None else None)
        embedder_error = self.embedder_error

        def document(store: Store) -> dict[str, Any]:
            held = partial(self._rebuild_held, embedder)  # asked only when the identity changed
            return status_document(self.config, store, fallback, embedder, embedder_error, deep=deep, rebuild_held=held)

        if not self._indexed():  # never indexed: read an empty index in memory, as asking must write nothing
            with Store.empty(use_vec=self._use_vec) as empty:
                return document(empty)
        return document(self.store)


def _on_fallback(report: SyncReport, record: dict[str, Any]) -> SyncReport:
    """Say in the report (and its warnings, which the CLI and the flow show) that the fallback did the work."""
    report.fallback = record["reason"]
    report.warnings.append(
        f"embedding: using the fallback {record['to']!r} since {record['at']} because {record['from']!r} failed "
        f"({record['reason']}); `memsift index --force` tries {record['from']!r} again"
    )
    return report
