"""What every hosted embedder shares: the rate limiter, concurrency, batching, splitting, checks of the answers.

A provider subclass only says how its wire format looks (`_request`, `_vectors`) and what it knows about its
models; everything that decides whether an index stays consistent (order, counts, dimensions, which inputs
were rejected) lives here once. The HTTP client, which faults are retried and what an error message may contain
are `JsonEndpoint`'s (core/json_endpoint.py), shared with the hosted reranker.
"""

from __future__ import annotations

import contextvars
import json
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import urlsplit

import numpy as np

from ..config_types import EmbeddingConfig
from ..errors import EmbedderUnavailable, EmbeddingError, ProviderDown
from ..json_endpoint import JsonEndpoint, public_headers, public_url
from ..limiter import RateLimiter, request_tokens
from ..words import counted
from .base import InputsRejected, keep_answered

REMOTE_TIMEOUT = 120.0
DEFAULT_CONCURRENCY = 4
#: Token limits are converted to bytes pessimistically (CJK text can be one token per 2-3 bytes).
BYTES_PER_TOKEN = 2
UNKNOWN_MODEL_TOKENS = 512
PROBE_TEXT = "memsift probe"
#: The server refuses the inputs (too long, invalid): halves of the request are tried, a lone input is split.
_REJECTED_STATUS = {400, 413, 422}
#: A lone rejected input is split in two at most this many times (up to 4 pieces) before it is skipped.
SPLIT_DEPTH = 2


def split_utf8(text: str, max_bytes: int) -> list[str]:
    """`text` in pieces of at most `max_bytes` UTF-8 bytes, never cut inside a character."""
    raw = text.encode("utf-8")
    pieces: list[str] = []
    start = 0
    while start < len(raw):
        end = min(start + max_bytes, len(raw))
        while end < len(raw) and end > start and raw[end] & 0xC0 == 0x80:  # a continuation byte: step back
            end -= 1
        if end == start:  # max_bytes smaller than one character: take the whole character
            end = start + 1
            while end < len(raw) and raw[end] & 0xC0 == 0x80:
                end += 1
        pieces.append(raw[start:end].decode("utf-8"))
        start = end
    return pieces or [""]


class HostedEmbedder(JsonEndpoint):
    """An Embedder over HTTP. Subclasses set the class attributes and implement `_request` and `_vectors`."""

    failure = EmbeddingError
    outage = ProviderDown
    quota_advice = (
        "Lower embedding.requestsPerMinute / tokensPerMinute or embedding.concurrency, "
        "or check the plan and quota of the API key."
    )
    default_base_url: str
    default_model: str
    key_env: str | None = None
    #: Max input tokens per model; an unknown model gets UNKNOWN_MODEL_TOKENS.
    model_tokens: dict[str, int] = {}
    #: Native dimension per model, so the probe is only a health check for known models.
    model_dims: dict[str, int] = {}
    #: Default (query, document) prefixes per model, for models trained with them and APIs without input types.
    model_prefixes: dict[str, tuple[str, str]] = {}
    #: How queries and documents are told apart on the wire, for the fingerprint ("prefix" or an input type).
    input_scheme = "prefix"
    #: Inputs the API takes in one request (None: no documented limit); `batchMaxInputs` is cut to it, since a
    #: request over it is refused (400) and costs a halving into two more requests every time.
    max_inputs: int | None = None
    #: The API's version path (`/v1`), tried when a base URL naming only a server answers 404 (`_probe`).
    api_version: str | None = None

    def __init__(self, config: EmbeddingConfig, *, probe: bool = True, stored: dict[str, Any] | None = None) -> None:
        """`probe=False` skips the start-up probe, a paid request (`memsift status` without --deep makes none);
        what only the probe tells (the dimension of a model not in `model_dims`, the API's version path) is then
        taken from `stored`, the identity of the index this provider and model built, when there is one."""
        self.model = config.model or self.default_model
        known = self.catalogue_name(self.model)
        self.base_url = (config.baseUrl or self.default_base_url).rstrip("/")
        self._key = config.apiKey or (os.environ.get(self.key_env) if self.key_env else None)
        self.key_origin = "embedding.apiKey" if config.apiKey else self.key_env
        self.key_settings = f"{self.key_env} or embedding.apiKey" if self.key_env else "embedding.apiKey"
        if self.key_env and not self._key and not config.baseUrl:
            raise EmbedderUnavailable(f"{self.provider}: set {self.key_env} in the environment (or embedding.apiKey)")
        query_prefix, document_prefix = self.model_prefixes.get(known, ("", ""))
        self.query_prefix = query_prefix if config.queryPrefix is None else config.queryPrefix
        self.document_prefix = document_prefix if config.documentPrefix is None else config.documentPrefix
        self.max_bytes = min(self.model_tokens.get(known, UNKNOWN_MODEL_TOKENS) * BYTES_PER_TOKEN, config.batchMaxBytes)
        self.batch_max_bytes = config.batchMaxBytes
        self.batch_max_inputs = min(config.batchMaxInputs, self.max_inputs or config.batchMaxInputs)
        self._requested_dims = config.dimensions
        self._connect(
            config.headers,
            config.retries,
            config.timeoutSeconds or REMOTE_TIMEOUT,
            RateLimiter(config.requestsPerMinute, config.tokensPerMinute),
        )
        self.concurrency = config.concurrency or DEFAULT_CONCURRENCY
        self._pool = ThreadPoolExecutor(self.concurrency, thread_name_prefix=self.provider)
        self.dims = config.dimensions or self.model_dims.get(known, 0)
        #: The start-up probe's outcome ({ok, dims, ms} and `at`, `time.monotonic()` when it ended): what
        #: `status --deep` reports when it made this embedder, rather than paying for a second request.
        self.probed: dict[str, Any] | None = None
        if probe:
            started = time.perf_counter()
            try:
                answer = self._probe()
            except EmbeddingError as exc:
                self.close()
                raise EmbedderUnavailable(str(exc)) from exc
            self.dims = self.dims or answer.shape[1]
            ms = round((time.perf_counter() - started) * 1000, 1)
            self.probed = {"ok": True, "dims": int(answer.shape[1]), "ms": ms, "at": time.monotonic()}
        else:
            self._assume(stored)
        self.fingerprint = json.dumps(
            {
                "baseUrl": public_url(self.base_url),
                "dims": self.dims,
                "inputs": self.input_scheme,
                "queryPrefix": self.query_prefix,
                "documentPrefix": self.document_prefix,
                "headers": public_headers(config.headers),
            },
            sort_keys=True,
            ensure_ascii=False,
        )

    def _assume(self, stored: dict[str, Any] | None) -> None:
        """In place of the probe: the dimension and the base URL the probe found when it built the index of
        identity `stored` (same provider and model), so that an unchanged configuration is not called dirty."""
        if not stored or (stored.get("provider"), stored.get("model")) != (self.provider, self.model):
            return
        try:
            found = json.loads(stored.get("fingerprint") or "null") or {}
        except ValueError:
            return
        self.dims = self.dims or stored.get("dims") or 0
        bare = urlsplit(self.base_url).path in ("", "/")
        if bare and self.api_version and found.get("baseUrl") == public_url(self.base_url + self.api_version):
            self.base_url += self.api_version

    def _probe(self) -> np.ndarray:
        """Embed PROBE_TEXT; a start waits on it (a server's readiness, `status --deep`, a CLI search), so it is
        bounded as a query is. A base URL naming only a server (`http://gpu:8000`) that answers 404 is tried
        once more under the API's version (`api_version`, `/v1`), where OpenAI, vLLM and most servers copying
        an API serve it: the URL that answered is the one used, and fingerprinted, from then on. When both say
        404, the error gives both answers (one may be "no such route", the other "no such model")."""
        try:
            return self._embed_batch([PROBE_TEXT], query=False, waited_on=True)
        except EmbeddingError as exc:
            bare = urlsplit(self.base_url).path in ("", "/")
            if getattr(exc, "status", None) != 404 or not bare or not self.api_version:
                raise
            first = exc
        self.base_url += self.api_version
        self._client.base_url = self.base_url
        try:
            return self._embed_batch([PROBE_TEXT], query=False, waited_on=True)
        except EmbeddingError as exc:
            if getattr(exc, "status", None) != 404:
                raise
            raise EmbeddingError(f"{first}; then {str(exc).removeprefix(self.provider + ': ')}") from None

    # -- the wire format, per provider -----------------------------------------------------------------

    @staticmethod
    def catalogue_name(model: str) -> str:
        """The model's name in `model_tokens`, `model_dims` and `model_prefixes`, where the API has more than
        one name for it (Ollama's `nomic-embed-text:latest`, Gemini's `models/gemini-embedding-001`)."""
        return model

    def _request(self, texts: list[str], query: bool) -> tuple[str, dict[str, Any]]:
        """(path relative to the base URL, JSON body) for one batch."""
        raise NotImplementedError

    def _vectors(self, payload: Any) -> list[list[float]]:
        """The vectors of an answer, in input order; KeyError/TypeError/ValueError on a wrong shape."""
        raise NotImplementedError

    # -- the Embedder interface ------------------------------------------------------------------------

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        return self._embed([self.document_prefix + t for t in texts], query=False)

    def embed_query(self, text: str) -> np.ndarray:
        return self._embed([self.query_prefix + text], query=True)[0]

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._client.close()

    # -- batching and splitting ------------------------------------------------------------------------

    def _requests(self, texts: list[str]) -> tuple[list[list[str]], list[int]]:
        """Oversized texts split, the pieces packed into requests: (requests, the text each piece belongs to)."""
        pieces: list[str] = []
        owners: list[int] = []
        for i, text in enumerate(texts):
            for piece in split_utf8(text, self.max_bytes):
                pieces.append(piece)
                owners.append(i)
        groups: list[list[str]] = []
        size = 0
        for piece in pieces:
            n = len(piece.encode("utf-8"))
            if not groups or len(groups[-1]) >= self.batch_max_inputs or size + n > self.batch_max_bytes:
                groups.append([])
                size = 0
            groups[-1].append(piece)
            size += n
        return groups, owners

    def document_request_tokens(self, texts: list[str]) -> list[int]:
        """The tokens (as the rate limiter counts them) of each request `embed_documents(texts)` would send:
        what `memsift index --dry-run` counts, without sending anything."""
        groups, _ = self._requests([self.document_prefix + t for t in texts])
        return [request_tokens(g) for g in groups]

    def _embed(self, texts: list[str], query: bool) -> np.ndarray:
        """Split oversized texts, pack pieces into requests, run `concurrency` at a time, average the pieces
        of each text back into one unit vector, in input order. When a request fails for good (or on Ctrl-C),
        the requests not started are not sent and the error carries the answers already received
        (`answered_before`): a step of embedding is many requests, each paid for."""
        groups, owners = self._requests(texts)
        check = _RequestCheck(self, query)
        # Each request in the caller's context: who hears of its retries (core.progress.RETRY_WAITS) is the caller's.
        futures = [
            self._pool.submit(contextvars.copy_context().run, self._embed_group, g, query, check) for g in groups
        ]
        try:
            results = [f.result() for f in futures]
        except BaseException as exc:  # a request failed for good, or Ctrl-C: keep what came back, send no more
            for future in futures:
                future.cancel()
            answered = [f.result() if f.done() and not f.cancelled() and not f.exception() else None for f in futures]
            vectors, rejected, complete = _assemble(len(texts), self.dims, groups, owners, answered)
            keep_answered(exc, {i: vectors[i] for i in complete if i not in rejected})
            raise
        vectors, rejected, _ = _assemble(len(texts), self.dims, groups, owners, results)
        if rejected and len(rejected) == len(texts) > 1:
            # Every input refused on its own: the request is wrong (a parameter, the model), not the inputs.
            raise EmbeddingError(next(iter(rejected.values())))
        if rejected:
            vectors[list(rejected)] = 0.0
            raise InputsRejected(
                f"{self.provider}: {len(rejected)} of {counted(len(texts), 'input')} rejected: "
                f"{next(iter(rejected.values()))}",
                vectors,
                rejected,
            )
        return vectors

    def _embed_group(self, texts: list[str], query: bool, check: _RequestCheck) -> tuple[np.ndarray, dict[int, str]]:
        """One request's group of a call, not sent once another of the call failed for good: a pool thread took
        the next group before the caller could cancel it, so a provider down cost every thread one more
        group's retries (23 requests and 21 s where 17 and 8 s told the same)."""
        if check.failed:
            raise EmbeddingError(f"{self.provider}: not sent: another request of this step failed")
        try:
            return self._embed_or_split(texts, query, check)
        except BaseException:
            check.failed = True
            raise

    def _embed_or_split(
        self, texts: list[str], query: bool, check: _RequestCheck, depth: int = 0
    ) -> tuple[np.ndarray, dict[int, str]]:
        """One request's rows, and the inputs the server rejected (index -> reason). When it refuses the
        request's inputs (HTTP 400/413/422), its halves are tried apart, so one bad input costs a few requests
        and not the batch; a lone input is split in two (up to SPLIT_DEPTH times: "too long" by the server's
        count, not ours) and averaged, and one refused even so is left out, its row zeros. Before the first
        split, `check` makes sure the server refuses these inputs and not every request."""
        try:
            return self._embed_batch(texts, query), {}
        except EmbeddingError as exc:
            if getattr(exc, "status", None) not in _REJECTED_STATUS or not self.dims:
                raise  # not the inputs' fault, or the start-up probe: the run stops with the reason
            reason = str(exc)
        check.inputs_at_fault(reason)
        if len(texts) > 1:
            mid = len(texts) // 2
            head, bad_head = self._embed_or_split(texts[:mid], query, check, depth)
            tail, bad_tail = self._embed_or_split(texts[mid:], query, check, depth)
            return np.concatenate([head, tail]), {**bad_head, **{mid + i: r for i, r in bad_tail.items()}}
        size = len(texts[0].encode("utf-8"))
        if depth < SPLIT_DEPTH and size > 1:
            rows, bad = self._embed_or_split(split_utf8(texts[0], (size + 1) // 2), query, check, depth + 1)
            if not bad:
                return _normalise(rows.sum(axis=0, keepdims=True)), {}
        return np.zeros((1, self.dims), dtype=np.float32), {0: reason}

    def _embed_batch(self, texts: list[str], query: bool, waited_on: bool | None = None) -> np.ndarray:
        """One request, retried on transient faults; checked and normalised rows. A query's, or any other
        someone is `waited_on` for, gets `waiting_deadline` for all its attempts."""
        path, body = self._request(texts, query)
        deadline = self.waiting_deadline() if (query if waited_on is None else waited_on) else None
        payload = self._post_retrying(path, body, tokens=request_tokens(texts), deadline=deadline)
        try:
            rows = self._vectors(payload)
            vectors = np.asarray(rows, dtype=np.float32)
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise EmbeddingError(
                f"{self.provider}: unexpected answer shape from {public_url(self.base_url)} ({exc!r})"
            ) from None
        if vectors.ndim != 2 or len(vectors) != len(texts):
            raise EmbeddingError(
                f"{self.provider}: asked for {counted(len(texts), 'vector')}, got {len(rows)} "
                f"from {public_url(self.base_url)}"
            )
        if self.dims and vectors.shape[1] != self.dims:
            raise EmbeddingError(
                f"{self.provider}: vectors of dimension {vectors.shape[1]}, expected {self.dims} "
                f"(model {self.model}; check embedding.dimensions)"
            )
        if not np.isfinite(vectors).all():
            # Stored, a NaN row made every later vector search of the index fail (sqlite-vec gives it no
            # distance): a broken answer is refused as a wrong count or dimension is.
            raise EmbeddingError(
                f"{self.provider}: vectors holding NaN or infinity from {public_url(self.base_url)} "
                f"(model {self.model})"
            )
        return _normalise(vectors)


class _RequestCheck:
    """Whether a refusal (HTTP 400/413/422) is the inputs' fault, asked once per `_embed` call at its first
    refusal: the server is sent PROBE_TEXT, which it took at start. Where it refuses that too (a proxy or a
    plan refusing every request with a 400), halving and splitting every request cost 666 requests for 41
    chunks before the run stopped with the same error; now it stops at once with the reason."""

    def __init__(self, embedder: HostedEmbedder, query: bool) -> None:
        self._embedder, self._query = embedder, query
        #: a request of the call failed for good: the groups not started yet are not sent (`_embed_group`)
        self.failed = False
        self._lock = threading.Lock()
        self._refused: str | None = None
        self._asked = False

    def inputs_at_fault(self, reason: str) -> None:
        """Return when the server takes a known-good input; raise EmbeddingError when it refuses that too."""
        with self._lock:
            if not self._asked:
                self._asked = True
                try:
                    self._embedder._embed_batch([PROBE_TEXT], self._query)
                except EmbeddingError as exc:
                    if getattr(exc, "status", None) not in _REJECTED_STATUS:
                        raise
                    self._refused = f"{reason} (every request is refused, even one of {PROBE_TEXT!r})"
            if self._refused:
                raise EmbeddingError(self._refused)


def _assemble(
    n: int,
    dims: int,
    groups: list[list[str]],
    owners: list[int],
    results: list[tuple[np.ndarray, dict[int, str]] | None],
) -> tuple[np.ndarray, dict[int, str], set[int]]:
    """The texts' vectors from their requests' answers (None: a request not answered): each text's pieces
    averaged into one unit vector; the texts the server rejected (index -> reason); and the texts all of whose
    pieces were answered."""
    sums = np.zeros((n, dims), dtype=np.float32)
    rejected: dict[int, str] = {}
    unanswered: set[int] = set()
    offset = 0
    for group, result in zip(groups, results):
        mine = owners[offset : offset + len(group)]
        offset += len(group)
        if result is None:
            unanswered.update(mine)
            continue
        rows, refused = result
        np.add.at(sums, mine, rows)
        rejected.update((mine[i], reason) for i, reason in refused.items())
    return _normalise(sums), rejected, set(range(n)) - unanswered


def _normalise(rows: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    return (rows / np.maximum(norms, 1e-12)).astype(np.float32)
