"""One JSON API behind POST requests, as every hosted service memsift calls is: the client, the key, retries on
transient faults (Retry-After first, else backoff with jitter) and errors that never contain a secret.

Its own module because two families share it: the hosted embedders (core/embedders/hosted.py) and the hosted
reranker (core/rerankers/cohere.py), so both behave the same under faults and show a URL or header the same way.
"""

from __future__ import annotations

import email.utils
import re
import threading
import time
from typing import Any

import httpx
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    stop_before_delay,
    wait_exponential_jitter,
)

from .limiter import PastDeadline, RateLimiter
from .progress import RETRY_WAITS

#: Backoff when the server gives no Retry-After: 0.5 s, 1 s, 2 s ... plus up to 0.5 s jitter, at most 30 s.
BACKOFF_INITIAL, BACKOFF_MAX, BACKOFF_JITTER = 0.5, 30.0, 0.5
#: A Retry-After longer than this is cut to it: a sync should fail visibly rather than hang for an hour.
RETRY_AFTER_MAX = 120.0
#: A caller is waiting (a search on its query's embedding or its rerank, a server's start on the provider's
#: probe): all its attempts and waits fit in min(timeout, this), where the retries and timeout sized for
#: indexing (4 x 120 s) held every search, and every start, for 8 minutes on a stalled provider.
QUERY_BUDGET = 10.0
_SECRET_NAME = re.compile(r"auth|key|token|secret|cookie|password|signature", re.IGNORECASE)
_SECRET_VALUE = re.compile(r"^(bearer|basic)\s|^[A-Za-z0-9_\-\.=+/]{20,}$", re.IGNORECASE)
_TRANSIENT_STATUS = {408, 429}
_BACKOFF = wait_exponential_jitter(multiplier=BACKOFF_INITIAL, max=BACKOFF_MAX, jitter=BACKOFF_JITTER)


class Transient(Exception):
    """A fault worth retrying (429, 408, 5xx, timeout, dropped connection, unreadable JSON)."""

    def __init__(self, reason: str, status: int | None = None, retry_after: float | None = None) -> None:
        super().__init__(reason)
        self.reason, self.status, self.retry_after = reason, status, retry_after


def retry_after_seconds(value: str | None, now: float | None = None) -> float | None:
    """Retry-After as seconds to wait: a number of seconds or an HTTP date; None when absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        seconds = when.timestamp() - (time.time() if now is None else now)
    return min(max(seconds, 0.0), RETRY_AFTER_MAX)


def public_headers(headers: dict[str, str]) -> dict[str, str]:
    """The configured headers as they may appear in the fingerprint: secret names dropped, secret-looking
    values replaced by a marker (the header still changes the identity, its value never leaves the process)."""
    return {
        name: ("<set>" if _SECRET_VALUE.search(value) else value)
        for name, value in sorted(headers.items())
        if not _SECRET_NAME.search(name)
    }


def public_url(url: str) -> str:
    """`url` as it may be shown or stored (errors, status, the index fingerprint): a password in it
    (`https://user:pass@host/v1`, a proxy's credentials) becomes `<set>`; it is a secret like a key."""
    scheme, sep, rest = url.partition("://")
    netloc, slash, path = rest.partition("/")
    userinfo, at, host = netloc.rpartition("@")
    if not sep or not at or ":" not in userinfo:
        return url
    return f"{scheme}://{userinfo.split(':', 1)[0]}:<set>@{host}{slash}{path}"


class JsonEndpoint:
    """One JSON API behind POST requests: the client, the key, retries on transient faults (Retry-After first,
    else backoff with jitter), and errors that name the status and the server's reason but never a secret.

    Subclasses set `provider`, `base_url`, `failure` (what a request that failed for good raises) and
    `quota_advice` (what to change after a 429 that outlasted the retries), then call `_connect`.
    """

    provider: str
    base_url: str
    failure: type[Exception] = RuntimeError
    #: What a request whose transient faults outlasted the retries raises (the service is down, not refusing).
    outage: type[Exception] | None = None
    quota_advice = "Check the plan and quota of the API key."
    _key: str | None = None
    #: Where the key sent was read (`OPENAI_API_KEY`, `embedding.apiKey`), and where one may be set when none
    #: was: a 401 or 403 names them, as "invalid API key" alone left the user to guess which setting was read.
    key_origin: str | None = None
    key_settings: str = ""

    def _connect(self, headers: dict[str, str], retries: int, timeout: float, limiter: RateLimiter) -> None:
        """Open the client on `base_url` with the configured `headers` and the key's (`_auth_headers`)."""
        self.retries_allowed = retries
        self.calls = 0
        self.retries = 0
        self._count_lock = threading.Lock()
        secret_headers = [v for k, v in headers.items() if _SECRET_NAME.search(k) or _SECRET_VALUE.search(v)]
        self._secrets = [s for s in (self._key, *secret_headers) if s]
        self.limiter = limiter
        self._timeout = timeout
        self._client = httpx.Client(
            base_url=self.base_url,
            headers={**headers, **self._auth_headers()},
            timeout=httpx.Timeout(timeout, connect=timeout),
        )

    def _auth_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._key}"} if self._key else {}

    def waiting_deadline(self) -> float:
        """When a caller that waits on this endpoint stops waiting: QUERY_BUDGET or one timeout from now."""
        return time.monotonic() + min(self._timeout, QUERY_BUDGET)

    def _post_retrying(self, path: str, body: dict[str, Any], tokens: int, deadline: float | None = None) -> Any:
        """The decoded answer to one request, retried on transient faults; `failure` when they outlast the
        retries or the server refuses (4xx other than 408/429). With a `deadline` (`waiting_deadline`: someone
        is waiting) every attempt and wait fits before it, each attempt's timeout cut to what is left."""
        stop = stop_after_attempt(self.retries_allowed + 1)
        allowed = None if deadline is None else max(deadline - time.monotonic(), 0.0)
        if allowed is not None:
            stop = stop | stop_before_delay(allowed)
        retrying = Retrying(
            stop=stop,
            wait=self._wait,
            retry=retry_if_exception_type(Transient),
            before_sleep=self._count_retry,
            reraise=True,
        )
        try:
            return retrying(self._post, path, body, tokens, deadline)
        except Transient as exc:
            attempts = retrying.statistics.get("attempt_number", 1)
            cut = allowed is not None and attempts <= self.retries_allowed  # the deadline ended them, not retries
            raise (self.outage or self.failure)(
                self._exhausted(exc, attempts, f" in the {round(allowed, 1):g} s allowed" if cut else "")
            ) from None

    # -- one HTTP request ------------------------------------------------------------------------------

    def _post(self, path: str, body: dict[str, Any], tokens: int, deadline: float | None = None) -> Any:
        try:
            self.limiter.acquire(tokens, deadline)
        except PastDeadline as exc:  # the wait is the caller's too: past its deadline the request is not made
            raise self.failure(
                f"{self.provider}: not sent: the client-side rate limit would hold it {exc.wait:.1f} s, longer "
                f"than a waiting caller has left ({max((deadline or 0) - time.monotonic(), 0):.1f} s)"
            ) from None
        with self._count_lock:
            self.calls += 1
        timeout = self._timeout if deadline is None else max(deadline - time.monotonic(), 0.1)
        try:
            response = self._client.post(path, json=body, timeout=httpx.Timeout(timeout, connect=timeout))
        except httpx.TimeoutException as exc:
            raise Transient(f"timed out ({type(exc).__name__})") from None
        except httpx.ConnectError as exc:
            raise Transient(f"cannot connect to {public_url(self.base_url)} ({self._redact(str(exc))})") from None
        except httpx.TransportError as exc:
            raise Transient(f"connection dropped ({type(exc).__name__}: {self._redact(str(exc))})") from None
        status = response.status_code
        if status in _TRANSIENT_STATUS or status >= 500:
            raise Transient(
                self._server_message(response), status, retry_after_seconds(response.headers.get("Retry-After"))
            )
        if status >= 400:
            failure = self.failure(
                f"{self.provider}: HTTP {status} from {public_url(self.base_url)}: {self._server_message(response)}"
                + (f" ({self._key_hint()})" if status in (401, 403) else "")
            )
            failure.status = status  # type: ignore[attr-defined]  # read by HostedEmbedder to split and skip
            raise failure
        try:
            return response.json()
        except ValueError:
            raise Transient("the answer is not valid JSON") from None

    def _key_hint(self) -> str:
        """Which key a 401 or 403 refused, or where to set one when none was sent (names, never the value)."""
        if self._key:
            return f"the key from {self.key_origin} was refused" if self.key_origin else "the key was refused"
        return f"no key was sent: set {self.key_settings}" if self.key_settings else "no key was sent"

    def _wait(self, state: RetryCallState) -> float:
        """Retry-After when the server sent one, else exponential backoff with jitter."""
        exc = state.outcome.exception() if state.outcome else None
        if isinstance(exc, Transient) and exc.retry_after is not None:
            return exc.retry_after  # retry_after_seconds cut it to RETRY_AFTER_MAX
        return _BACKOFF(state)

    def _count_retry(self, state: RetryCallState) -> None:
        with self._count_lock:
            self.retries += 1
        listener = RETRY_WAITS.get()
        exc = state.outcome.exception() if state.outcome else None
        if listener is not None and isinstance(exc, Transient):
            why = f"HTTP {exc.status}" if exc.status else exc.reason
            seconds = state.next_action.sleep if state.next_action else 0.0
            source = "Retry-After" if exc.retry_after is not None else "backoff"
            listener(
                f"{self.provider} {why}: retry {state.attempt_number} of {self.retries_allowed} "
                f"in {seconds:.1f} s ({source})"
            )

    def _exhausted(self, exc: Transient, n: int, waited: str = "") -> str:
        """The reason, after `n` attempts; `waited` says when a caller's deadline, not the retries, ended them."""
        attempts = f"{n} attempt{'s' if n > 1 else ''}{waited}"  # retries = 0: "after 1 attempt"
        if exc.status == 429:
            return (
                f"{self.provider}: HTTP 429 (quota or rate limit) after {attempts}: {exc.reason}. " + self.quota_advice
            )
        status = f"HTTP {exc.status}" if exc.status else "request failed"
        return f"{self.provider}: {status} after {attempts}: {exc.reason}"

    def _server_message(self, response: httpx.Response) -> str:
        """The server's own explanation, redacted: OpenAI's and Gemini's `error.message`, Ollama's and TEI's
        `error`, Cohere's, Mistral's and vLLM's `message`, Voyage's and Jina's `detail`."""
        try:
            payload = response.json()
        except ValueError:
            message = response.text
        else:
            error = payload.get("error") if isinstance(payload, dict) else None
            if isinstance(error, dict):
                message = str(error.get("message") or error)
            elif error:
                message = str(error)
            elif isinstance(payload, dict) and (payload.get("message") or payload.get("detail")):
                message = str(payload.get("message") or payload["detail"])
            else:
                message = str(payload)
        # Redacted before the cut: a key across the 500th character left its first characters in the error.
        return self._redact(message.strip())[:500] or response.reason_phrase

    def _redact(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text
