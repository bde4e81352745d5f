"""The vectors of a sync: what the embedder is sent and in what steps, what it failed or refused, and the
catch-up that embeds the chunks an earlier sync left without a vector.

Apart from the sync's orchestration because the dry run's estimate counts requests the same way, and
`status` and a search count the chunks still waiting for their vector.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any

import apsw
import numpy as np

from .config_types import Config
from .embedders import Embedder, EmbeddingError, InputsRejected, answered_before
from .identity import cache_key
from .limiter import request_tokens
from .progress import ProgressTracker, retry_waits_to
from .shared_cache import SharedCache
from .store import Store
from .sync_plan import SyncReport

if TYPE_CHECKING:
    from .rerankers.maxsim import MaxSimReranker

VECTORS_PENDING = "vectors_pending"  # meta key: JSON {reason, at} while some chunks wait for their vectors
#: meta key: JSON list of the hashes of chunks the provider refused on their own (HTTP 400 naming the input): they
#: have no vector as the pending ones have none, but no sync gives them one, so they are counted apart
VECTORS_REFUSED = "vectors_refused"


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
            if (before := getattr(embedder, "before_request", None)) is not None:  # the request embed_documents
                before()  # would make, paced alike: a shared rate limit counted none of the local model's
            embedded, blobs = capture.document_tokens(inputs)
            bits = dict(zip(part, blobs))
            tokens.update(bits)
        else:
            try:
                with retry_waits_to(progress):
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
        report.embeddingRequests += embedder.calls - calls if _packs_requests(embedder) else 1
        got = dict(zip(part, embedded))
        into.update(got)
        report.chunksEmbedded += len(part)
        if cache is not None:
            keep(report, cache.put, key, got)
            if bits and capture is not None:
                keep(report, cache.tokens_put, capture.fingerprint, bits)
        if failure is not None:
            raise failure
        if progress is not None:  # the local model costs nothing; a hosted provider is paid by the token
            paid = 0 if embedder.provider == "local" else sum(request_token_counts(embedder, inputs))
            progress.embedded(len(part), paid)


def _packs_requests(embedder: Embedder) -> bool:
    """A hosted provider, which packs a step's texts into HTTP requests (each one of its `calls`); the local
    model makes one of its calls per token window, and a step is one request as the plan counts them: its
    report said "300 chunks embedded in 320 requests" under a plan of "~... in 4 requests"."""
    return getattr(unwrapped(embedder), "document_request_tokens", None) is not None


def request_token_counts(embedder: Embedder, texts: list[str]) -> list[int]:
    """Tokens per request of one `embed_documents(texts)`, as the rate limiter counts them: as a hosted
    provider packs the texts into requests, else one call (the dry run and the progress's spend use it)."""
    plan = getattr(unwrapped(embedder), "document_request_tokens", None)
    return plan(texts) if plan is not None else [request_tokens(texts)]


def keep(report: SyncReport, write: Callable[..., object], *args: Any) -> None:
    """A write to the shared cache that waited out its busy timeout costs a re-embed later, not this run."""
    try:
        write(*args)
    except apsw.Error as exc:
        warning = f"the shared embedding cache could not be written ({type(exc).__name__}); this run goes on"
        if warning not in report.warnings:
            report.warnings.append(warning)


def keyword_only(report: SyncReport, error: EmbeddingError) -> str:
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
        pending = keyword_only(report, exc)
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
