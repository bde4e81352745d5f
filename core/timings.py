"""Where a search's time goes: milliseconds per stage, so a slow search can be read rather than guessed.

`search` times each stage with a `StageClock`; the response carries the figures (`timings` in `--explain`
output and in the REST answer when `explain` is set) and the API puts them in a histogram per stage. What is
not in any stage (checking the request, reading the index's identity) is the rest of `tookMs`.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

#: embed: the query embedding; keyword: the FTS5 leg; vector: the KNN leg; fusion: merging the legs, the
#: keyword hits' cosines, fusion, reading the candidates' rows, decay and the floor; rerank: the reranker and
#: the blend; shaping: MMR, snippets and citations.
STAGES = ("embed", "keyword", "vector", "fusion", "rerank", "shaping")


class StageClock:
    def __init__(self) -> None:
        self.seconds = dict.fromkeys(STAGES, 0.0)

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] += time.perf_counter() - started

    def ms(self) -> dict[str, float]:
        return {name: round(s * 1000, 3) for name, s in self.seconds.items()}
