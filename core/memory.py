"""`MemoryIndex`: one agent's configuration, index file and embedder, behind the operations users call.

The CLI and the API are thin layers over this class; the Prefect flows drive `core.indexer.sync` with it.

Here: the open index, and the facade's reads (search, with the first index it may run; get; status). Which
embedder it uses is core.memory_embedder's `EmbedderChoice`, the runs that write it core.memory_sync's
`SyncRuns`; `MemoryIndex` is the one class they make up.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from . import learned, rerankers
from .binding import check_workspace
from .config_types import Config
from .embedders import Embedder
from .errors import LockTimeout
from .estimate import estimate
from .get import get_lines
from .identity import identity_matches, index_identity
from .indexer import REBUILD_HELD, UNFINISHED, sync
from .legacy import adopt_legacy
from .locking import POLL_SECONDS, writer_lock, writer_pid
from .memory_sync import SyncRuns
from .progress import Progress
from .search import search
from .search_request import check_request
from .search_response import SearchResponse
from .status import status_document
from .store import Store, StoreError
from .store_recovery import UnreadableIndex, unreadable_as_such
from .sync_plan import SyncReport
from .words import counted

_CONFIGURED: Any = object()


class MemoryIndex(SyncRuns):
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
        #: A server's too (api.progress.FirstIndexLines: it has no terminal, and a client waiting minutes for a
        #: search cannot tell that work from a hang): the first index's progress events, then its report, or the
        #: error that stopped it.
        self.first_index_progress: Progress | None = None
        self.after_first_index: Callable[[SyncReport | BaseException], None] | None = None

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

    @unreadable_as_such
    def search(self, query: str, *, index_first: bool = True, **options: Any) -> SearchResponse:
        """Hybrid search; an agent that was never indexed is synced first (SPEC section 5), with whatever
        embedder works: a provider that cannot start gives a keyword index and a degraded answer. With
        `index_first=False` (a server whose own start-up index of the agent is running or queued, and which
        waited for it as long as a search waits), an unfinished first index is not run here: the answer comes
        from the batches committed so far and `degraded` says so."""
        check_request(query, *(options.get(k) for k in ("max_results", "min_score", "after", "before", "path_prefix")))
        if self.config.rerank.method == "learned":  # an unreadable model: one error before any indexing
            learned.model_for(self.config.rerank.rankerModel)
        partial, said = self._first_index() if index_first else (self._unstarted(), None)
        # A keyword search, or one of an index of no file, embeds nothing: the provider described from the
        # configuration and the index, as for `status`, and no start-up probe (each paid one request).
        keyword = (options.get("mode") or self.config.search.mode) == "keyword"
        described = self.unprobed() if keyword or not self.store.file_count() else None
        embedder, error = (described, None) if described is not None else (self.embedder(), self.embedder_error)
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
            response.degrade(partial, "first_index")
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
                    report = self._index_first()
                    return None, "; ".join([*notes, *report.warnings]) or None
            except LockTimeout:
                store = self.store
                if store.identity() is not None or time.monotonic() >= deadline:
                    return self._partial(store), None
            except UnreadableIndex:
                raise
            except StoreError as exc:  # the index cannot be written (a full disk, a read-only file)
                if (stopped := self._stopped(exc)) is None:
                    raise
                return stopped, None
            time.sleep(POLL_SECONDS)  # the running first index commits its start within moments

    def _index_first(self) -> SyncReport:
        """The first index (or the rest of an interrupted one), under the writer lock, told to the hooks."""
        if self.before_first_index is not None:
            self.before_first_index(sum(self.store.stats()["files"].values()))
        embedder = self.embedder() or self._stand_in(refused=True)  # keyword-only, vectors pending
        try:
            report = sync(self.store, self.config, embedder, estimator=estimate, progress=self.first_index_progress)
        except BaseException as exc:
            if self.after_first_index is not None:
                self.after_first_index(exc)
            raise
        if self.after_first_index is not None:
            self.after_first_index(report)
        self._tend_cache(report)
        return report

    def complete_first_index(self) -> SyncReport | None:
        """Run the agent's first index now, or the rest of an interrupted one, as its first search would: a
        server starts it at start-up (api.first_index), so that the first search finds the memory indexed, or
        being indexed, rather than start minutes of work itself. None when it is not due, or another process or
        thread holds the agent's writer lock (that run completes it)."""
        if not self.first_index_due():
            return None
        try:
            with self._writing(lock_timeout=0):
                return self._index_first() if self._unfinished() else None
        except LockTimeout:
            return None

    def first_index_due(self) -> bool:
        """Whether the agent has no index or an unfinished first index, asked without creating the index file
        (readiness, and a server's start-up, ask this of agents nobody indexed yet)."""
        return not self._indexed() or self._unfinished()

    def first_index_state(self) -> str | None:
        """How far an unfinished first index is, for readiness (`not indexed yet`, `12 of 70 files indexed`);
        None when the index is complete. Reads only: never creates the index file."""
        if not self._indexed():
            return "not indexed yet"
        store = self.store
        unfinished = json.loads(store.get_meta(UNFINISHED) or "null")
        if unfinished is None and store.identity() is not None:
            return None
        done = sum(store.stats()["files"].values())
        return f"{done} of {counted(unfinished['files'], 'file')} indexed" if unfinished else "not indexed yet"

    def _unstarted(self) -> str | None:
        """`_first_index` for a search that must not run it (`index_first=False`): why the answer may miss
        files, from the batches committed so far; the run may not have started yet (a server indexes its
        agents one at a time). None when the index is complete."""
        if not self._unfinished():
            return None
        try:
            with writer_lock(self.config.db_path, 0):
                pass  # free: nobody runs it yet
        except LockTimeout:
            return self._partial(self.store)
        return "the first index of this agent has not started yet: no answer before its first batch is in"

    def needs_first_index(self) -> bool:
        """Whether a search would index the agent first (never indexed, or its first index interrupted): a server
        with search workers runs that search in its own process, where its lines (api.progress) are said."""
        return self._unfinished()

    def _unfinished(self) -> bool:
        store = self.store
        return store.identity() is None or bool(store.get_meta(UNFINISHED))

    def _stopped(self, error: StoreError) -> str | None:
        """Why a search answers from part of the memory when completing the first index failed to write: the
        batches committed before still answer (a search failed on a full disk, where one of a finished index only
        notes that the changed files were not synced); None when none was committed (nothing to answer from)."""
        store = self.store
        done = sum(store.stats()["files"].values())
        if not done:
            return None
        unfinished = json.loads(store.get_meta(UNFINISHED) or "null")
        indexed = f"{done} of {counted(unfinished['files'], 'file')}" if unfinished else counted(done, "file")
        why = f"the first index of this agent is not finished ({error})"
        return f"{why}: {indexed} indexed, the answers come from those"

    def _partial(self, store: Store) -> str | None:
        """Why a search answers from part of the memory: the first index running elsewhere, and how far it is;
        None when that index finished since the caller looked (the answer then covers everything)."""
        unfinished = json.loads(store.get_meta(UNFINISHED) or "null")
        if unfinished is None and store.identity() is not None:
            return None
        running = f"the first index of this agent is running (pid {writer_pid(self.config.db_path)})"
        done = sum(store.stats()["files"].values())
        if not done:
            of = f" of its {counted(unfinished['files'], 'file')}" if unfinished else ""
            return f"{running} and has indexed none{of} yet: no answer before its first batch is in; try again shortly"
        of = counted(unfinished["files"], "file")
        return f"{running}: {done} of {of} indexed so far, the answers come from those"

    def reranker(self, embedder: Embedder | None = _CONFIGURED) -> rerankers.Reranker:
        """The configured reranker, built on first use and kept: a hosted one holds an HTTP client (one per
        search would be a TLS handshake per query), a cross-encoder a model. A failure to build it is not
        kept: search degrades and the next search tries again. `embedder`: the one a search already holds."""
        if self._reranker is None:
            self._reranker = rerankers.create_reranker(
                self.config.rerank, self.embedder() if embedder is _CONFIGURED else embedder
            )
        return self._reranker

    @unreadable_as_such
    def get(self, path: str, start: int = 1, count: int | None = None) -> dict[str, Any]:
        # Asked only for a file outside the workspace: a get of a workspace file never opens the index.
        return get_lines(self.config, path, start, count, indexed=lambda rel: self.store.has_file(rel))

    @unreadable_as_such
    def status(self, *, deep: bool = False) -> dict[str, Any]:
        # Everything that reads `self.store` first: a rebuild's swap makes the next `self.store` close the
        # connection held below, so once it is taken only `store` is read (one state of the index).
        asked = time.monotonic()  # an embedder made from here on probed its provider for this status
        fallback = self.fallback_record()
        if not deep and (described := self.unprobed()) is not None:  # the probe is --deep's, and a paid request
            embedder, embedder_error = described, None
        else:
            embedder = self.embedder() or (self._stand_in() if fallback is None else None)
            embedder_error = self.embedder_error

        def document(store: Store) -> dict[str, Any]:
            held = partial(self._rebuild_held, embedder)  # asked only when the identity changed
            return status_document(
                self.config, store, fallback, embedder, embedder_error, deep=deep, rebuild_held=held, asked=asked
            )

        if not self._indexed():  # never indexed: read an empty index in memory, as asking must write nothing
            with Store.empty(use_vec=self._use_vec) as empty:
                return document(empty)
        return document(self.store)
