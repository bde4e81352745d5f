"""What a search answers: its hits and the response around them, as they go on the wire.

Apart from `core.search` because the API, the metrics, `memsift eval` and the public surface read these
documents without running a search.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass
class Hit:
    path: str
    startLine: int
    endLine: int
    score: float
    snippet: str
    source: str
    citation: str | None
    scores: dict[str, float] | None = None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        if d["scores"] is None:
            del d["scores"]
        return d


@dataclass
class SearchResponse:
    results: list[Hit]
    mode: str
    provider: str
    model: str | None
    tookMs: float
    degraded: str | None = None
    #: Milliseconds per stage (`core.timings.STAGES`); always measured, shown with `explain`.
    timings: dict[str, float] | None = None
    explain: bool = False
    # Why `results` is empty, for telemetry (not on the wire): "no_match" (neither leg found a candidate) or
    # "below_floor" (candidates were found, the score floor removed every one).
    empty: str | None = None
    #: Why a calibrated search answered no hit: every candidate's estimate of relevance was under the floor.
    abstained: str | None = None
    #: Not on the wire (`degraded` says why), for telemetry: which parts of the search degraded: "vector" (keyword
    #: results only), "vectors_pending" (chunks without a vector yet), "rerank" (the reranker failed: fused
    #: order), "first_index" (the agent's first index is still running), "unsynced" (changed notes not indexed yet).
    degradedBy: tuple[str, ...] = ()
    #: Not on the wire (`degraded` says it): the agent's first index is still running, or changed notes wait
    #: for a sync: the answer covers part of the memory only, so an empty one does not mean it holds nothing.
    partial: bool = False
    #: What the sync this search ran first said: a first index's or a catch-up's warnings (a note indexed with
    #: U+FFFD in place of invalid UTF-8), or why the answer may not cover the notes as they are now (another
    #: sync running, the configuration changed since the last index).
    warning: str | None = None

    def warn(self, text: str | None) -> None:
        """Add what a sync run before the search said (the caller's catch-up, api.catch_up) to `warning`."""
        if text:
            self.warning = f"{text}; {self.warning}" if self.warning else text

    def degrade(self, why: str, part: str) -> None:
        """Say before the rest of `degraded` that the answer covers part of the memory only, and why (`part`,
        for telemetry: "first_index", "unsynced")."""
        self.degraded = f"{why}; {self.degraded}" if self.degraded else why
        self.partial = True
        self.degradedBy += (part,)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "results": [h.to_dict() for h in self.results],
            "mode": self.mode,
            "provider": self.provider,
            "model": self.model,
            "tookMs": self.tookMs,
        }
        if self.degraded:
            d["degraded"] = self.degraded
        if self.abstained:
            d["abstained"] = self.abstained
        if self.warning:
            d["warning"] = self.warning
        if self.explain and self.timings is not None:
            d["timings"] = self.timings
        return d
