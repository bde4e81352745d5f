"""Progress of a sync as a person reads it: chunks embedded of chunks to embed, the rate, the time left.

Embedding is what a long sync spends its time on, so progress counts chunks (those the embedding cache
lacks), not files. The sync emits a `ProgressEvent` after every embedding request and every batch written;
whoever shows progress consumes the events: the CLI's terminal bar (api/progress.py) and the Prefect flow's
progress artifact (flows/sync.py). Core knows neither. `ProgressEvent` is a plain dataclass: add a field
with a default to carry more (e.g. what the embedding has cost so far) and both consumers keep working.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass


@dataclass(frozen=True)
class ProgressEvent:
    chunksDone: int  # chunks embedded so far in this sync
    chunksTotal: int  # chunks this sync embeds: those of new or changed files that the cache lacks
    filesDone: int  # files read and written so far (of those new or changed)
    filesTotal: int
    seconds: float  # since the sync started indexing
    #: What the embedding has cost so far, counted as the rate limiter and the dry run count (UTF-8 bytes / 4):
    #: tokens sent to a hosted provider (0 for the local model, which costs nothing), and their price when
    #: `embedding.pricePerMillionTokens` is set (else None).
    tokensSent: int = 0
    spent: float | None = None
    #: A request waiting to be retried, and why (`openai HTTP 429: retry 1 of 3 in 2.0 s (Retry-After)`), until
    #: the next answer: a provider's Retry-After or backoff held the bar still with nothing said.
    waiting: str | None = None

    @property
    def rate(self) -> float | None:
        """Chunks embedded per second so far; None before the first one."""
        return self.chunksDone / self.seconds if self.chunksDone and self.seconds > 0 else None

    @property
    def eta(self) -> float | None:
        """Seconds until every chunk is embedded, at the rate so far; None while the rate is unknown."""
        rate = self.rate
        return max(self.chunksTotal - self.chunksDone, 0) / rate if rate else None

    @property
    def fraction(self) -> float:
        """Done, from 0 to 1: by chunks when there is anything to embed, else by files."""
        if self.chunksTotal:
            return min(self.chunksDone / self.chunksTotal, 1.0)
        return min(self.filesDone / self.filesTotal, 1.0) if self.filesTotal else 1.0

    def describe(self) -> str:
        """`120/480 chunks embedded, 35.2 chunks/s, ETA 10 s` (files when nothing is to be embedded)."""
        if not self.chunksTotal:
            return f"{self.filesDone}/{self.filesTotal} files"
        parts = [f"{self.chunksDone}/{self.chunksTotal} chunks embedded"]
        if self.rate is not None:
            parts.append(f"{self.rate:.1f} chunks/s")
        if self.eta is not None and self.chunksDone < self.chunksTotal:
            parts.append(f"ETA {_duration(self.eta)}")
        if self.tokensSent:
            cost = f" (${self.spent:.4f})" if self.spent is not None else ""
            parts.append(f"~{self.tokensSent:,} tokens sent{cost}")
        if self.waiting:
            parts.append(f"waiting: {self.waiting}")
        return ", ".join(parts)


Progress = Callable[[ProgressEvent], None]

#: Who hears that a hosted request waits before its retry (core.json_endpoint says it, in the request's thread):
#: the progress of the sync that sent it, set for its embedding calls by `retry_waits_to`.
RETRY_WAITS: ContextVar[Callable[[str], None] | None] = ContextVar("memsift_retry_waits", default=None)


@contextmanager
def retry_waits_to(tracker: ProgressTracker | None) -> Iterator[None]:
    """Within the block, a request's wait before a retry is shown by `tracker` (none: nobody hears it)."""
    token = RETRY_WAITS.set(tracker.waiting if tracker is not None else None)
    try:
        yield
    finally:
        RETRY_WAITS.reset(token)


class ProgressTracker:
    """Counts a sync's work and emits an event to `sink` at each step."""

    def __init__(
        self,
        sink: Progress,
        files: int,
        chunks: int,
        clock: Callable[[], float] = time.monotonic,
        price: float | None = None,
    ) -> None:
        """`price` per million tokens: with it, each event says what the tokens sent so far cost."""
        self._sink = sink
        self._price = price
        self.tokens_sent = 0
        self._clock = clock
        self._started = clock()
        self.files_total = files
        self.chunks_total = chunks
        self.files_done = 0
        self.chunks_done = 0
        self._waiting: str | None = None
        self.emit()

    def embedded(self, chunks: int, tokens: int = 0) -> None:
        """`chunks` more embedded by a request that sent `tokens` to a paid provider (0: nothing paid)."""
        self.chunks_done += chunks
        self.tokens_sent += tokens
        self._waiting = None
        self.emit()

    def waiting(self, why: str) -> None:
        """A request waits before its retry (`why`: the status, the seconds, Retry-After or backoff)."""
        self._waiting = why
        self.emit()

    def written(self, files: int) -> None:
        self.files_done += files
        self.emit()

    def emit(self) -> None:
        self._sink(
            ProgressEvent(
                chunksDone=self.chunks_done,
                chunksTotal=max(self.chunks_total, self.chunks_done),  # a file edited since it was counted
                filesDone=self.files_done,
                filesTotal=self.files_total,
                seconds=self._clock() - self._started,
                tokensSent=self.tokens_sent,
                spent=None if self._price is None else round(self.tokens_sent / 1e6 * self._price, 6),
                waiting=self._waiting,
            )
        )


def _duration(seconds: float) -> str:
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"
