"""The client-side rate limiter: real threads on the real clock for the rate, a fake clock for minute-long waits."""

from __future__ import annotations

import threading
import time

import pytest

from core.limiter import PastDeadline, RateLimiter


def run_threads(limiter: RateLimiter, tokens: int, threads: int, seconds: float) -> tuple[float, list[float]]:
    """`threads` threads acquiring in a loop for `seconds`; returns the start and the times of acquisitions
    that completed inside the window."""
    start = time.monotonic()
    end = start + seconds
    times: list[float] = []
    lock = threading.Lock()

    def worker() -> None:
        while True:
            limiter.acquire(tokens)
            now = time.monotonic()
            if now > end:
                return
            with lock:
                times.append(now)

    workers = [threading.Thread(target=worker) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=seconds + 30)
    assert not any(w.is_alive() for w in workers)
    return start, times


def test_requests_per_minute_holds_the_rate_within_ten_percent_across_threads():
    limiter = RateLimiter(600, None)  # 10 requests a second, after a burst of one second's worth
    _, times = run_threads(limiter, tokens=1, threads=8, seconds=5)
    rate = (len(times) - 10) / 5  # the steady rate, without the burst the full bucket lets through at once
    assert abs(rate - 10) / 10 <= 0.10, rate


def test_tokens_per_minute_limits_by_tokens():
    limiter = RateLimiter(None, 6000)  # 100 tokens a second, a burst of at most 100
    start, times = run_threads(limiter, tokens=25, threads=3, seconds=4)
    # The token-bucket guarantee in every prefix of the window: capacity + rate * elapsed.
    for n, t in enumerate(sorted(times), start=1):
        assert n * 25 <= 100 + 100 * (t - start) + 1e-6
    assert len(times) * 25 >= 0.9 * 100 * 4


def test_no_limit_means_no_wait():
    started = time.monotonic()
    assert RateLimiter(None, None).acquire(10**9) == 0.0
    only_requests = RateLimiter(600, None)
    assert [only_requests.acquire(10**9) for _ in range(5)] == [0.0] * 5  # within the burst, tokens unlimited
    assert time.monotonic() - started < 1


def test_acquire_never_returns_early_and_reports_its_wait():
    before = time.monotonic()
    limiter = RateLimiter(600, None)  # full bucket of 10, then one every 0.1 s
    for k in range(25):
        called = time.monotonic()
        waited = limiter.acquire(1)
        now = time.monotonic()
        assert now >= before + max(0, k - 9) / 10
        assert 0 <= waited <= now - called
    assert waited > 0


class FakeClock:
    """Time that passes only when the limiter sleeps."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def test_a_request_bigger_than_a_second_is_not_starved(clock):
    limiter = RateLimiter(None, 600, clock=clock, sleep=clock.sleep)  # 10 tokens a second, a burst of 10
    assert limiter.acquire(300) == pytest.approx(29.0)  # the bucket grows to 300 for it: 29 s from 10
    assert limiter.acquire(10) == pytest.approx(1.0)


def test_a_request_bigger_than_a_minute_waits_for_a_full_minute_then_goes(clock):
    limiter = RateLimiter(None, 600, clock=clock, sleep=clock.sleep)
    assert limiter.acquire(1200) == pytest.approx(59.0)  # a minute's worth (600) from 10
    # The 600 tokens beyond the minute are a debt: the next request waits for it to be repaid first.
    assert limiter.acquire(10) == pytest.approx(61.0)


def test_both_limits_apply_together(clock):
    limiter = RateLimiter(60, 6000, clock=clock, sleep=clock.sleep)  # 1 request/s; 100 tokens/s
    assert limiter.acquire(100) == 0.0
    assert limiter.acquire(1) == pytest.approx(1.0)  # the request bucket is the tighter one
    assert limiter.acquire(300) == pytest.approx(2.01)  # now the token bucket: (300 - 99) / 100 s


def test_a_request_that_could_not_go_by_its_deadline_is_refused_at_once_and_takes_no_share(clock):
    limiter = RateLimiter(2, None, clock=clock, sleep=clock.sleep)  # one request, then one every 30 s
    assert limiter.acquire(1) == 0.0
    with pytest.raises(PastDeadline) as refused:
        limiter.acquire(1, deadline=clock.now + 10)  # a search's query: 10 s at most
    assert refused.value.wait == pytest.approx(30.0) and clock.slept == []
    assert limiter.acquire(1, deadline=clock.now + 30) == pytest.approx(30.0)  # the refused one took nothing
