"""Client-side rate limit for hosted embedding providers (`embedding.requestsPerMinute`, `tokensPerMinute`).

Providers meter us per minute and answer 429 when we go over; waiting here before each HTTP request is
cheaper than a refused request and a retry. One limiter is shared by all request threads of a provider.

Each limit is a token bucket holding one second's worth (so a burst is at most a second of quota) and
refilled continuously. Requests reserve their share in arrival order under a lock and then sleep outside
it, so threads are served first come, first served and a large request is not starved by small ones.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class _Bucket:
    """One limit: `rate` units a second, `capacity` units at most. The level may go below zero: that is
    time already promised to earlier requests, paid back by the refill before anyone else goes."""

    def __init__(self, per_minute: float, now: float) -> None:
        self.rate = per_minute / 60.0
        self.per_minute = per_minute
        self.capacity = max(1.0, self.rate)
        self.level = self.capacity
        self.last = now

    def _need_and_cap(self, units: float) -> tuple[float, float]:
        # A request bigger than the usual capacity may fill the bucket up to its size; one bigger than a
        # minute's worth waits for a minute's worth and goes, leaving the rest as debt.
        need = min(units, self.per_minute)
        return need, max(self.capacity, need)

    def ready_at(self, units: float, now: float) -> float:
        """The earliest time at which `units` may go, given the reservations made so far."""
        need, cap = self._need_and_cap(units)
        base = max(now, self.last)
        level = min(cap, self.level + self.rate * (base - self.last))
        return base if level >= need else base + (need - level) / self.rate

    def take(self, units: float, at: float) -> None:
        """Reserve `units` at time `at` (never earlier than a previous reservation)."""
        _, cap = self._need_and_cap(units)
        self.level = min(cap, self.level + self.rate * (at - self.last)) - units
        self.last = at


class PastDeadline(Exception):
    """A request the limits would hold past its caller's deadline (a search waiting on its query's embedding):
    nothing was reserved for it, and `wait` says how long it would have waited."""

    def __init__(self, wait: float) -> None:
        super().__init__(f"the rate limit would hold the request {wait:.1f} s")
        self.wait = wait


class RateLimiter:
    """Holds requests to `requests_per_minute` and their tokens to `tokens_per_minute` (None: no limit)."""

    def __init__(
        self,
        requests_per_minute: float | None,
        tokens_per_minute: float | None,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        # clock and sleep are replaceable so tests can check minute-long waits without waiting a minute.
        self._clock, self._sleep = clock, sleep
        self._lock = threading.Lock()
        now = clock()
        self._requests = _Bucket(requests_per_minute, now) if requests_per_minute else None
        self._tokens = _Bucket(tokens_per_minute, now) if tokens_per_minute else None

    def acquire(self, tokens: int, deadline: float | None = None) -> float:
        """Block until one request of `tokens` tokens may go under both limits; return the seconds waited.
        With a `deadline` (on the limiter's clock) that the request could not go by: PastDeadline at once, and
        no share taken (a search answers from keywords rather than queue behind a sync's requests)."""
        start = self._clock()
        if self._requests is None and self._tokens is None:
            return 0.0
        with self._lock:
            now = self._clock()
            go = now
            if self._requests is not None:
                go = max(go, self._requests.ready_at(1, now))
            if self._tokens is not None:
                go = max(go, self._tokens.ready_at(tokens, now))
            if deadline is not None and go > deadline:
                raise PastDeadline(go - now)
            if self._requests is not None:
                self._requests.take(1, go)
            if self._tokens is not None:
                self._tokens.take(tokens, go)
        if go <= now:
            return 0.0
        # Sleep may return a little early on some platforms; loop on the monotonic clock until it is time.
        while (remaining := go - self._clock()) > 0:
            self._sleep(remaining)
        return self._clock() - start


def request_tokens(texts: list[str]) -> int:
    """A request's tokens as the limiter (and the dry run, core.estimate) counts them: UTF-8 bytes / 4. There
    is no tokenizer for hosted models here; English text averages about four bytes a token."""
    return max(1, sum(len(t.encode("utf-8")) for t in texts) // 4)
