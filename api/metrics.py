"""Prometheus metrics of the API process.

Requests per route (count and latency) come from Litestar's Prometheus middleware, labelled by the route
template so `/v1/index/{runId}` is one series; it records into prometheus_client's process-wide registry,
which also holds the process collectors (RSS, CPU, open files). What is memsift's own lives in a registry per
app: the time core spends in a search and in each of its stages (`core.timings`), per agent the searches
answered with no hit (and why) and the score of the first hit of the others (retrieval quality drifting),
and per agent the index
size, chunk count and age of the last sync, read when scraped.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path

from litestar.plugins.prometheus import PrometheusConfig
from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from core import MemoryIndex, SearchResponse, StoreError

# Searches take milliseconds; the defaults of prometheus_client start at 5 ms.
SEARCH_BUCKETS = (0.002, 0.005, 0.01, 0.02, 0.035, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1.0, 2.5, 10.0)
# A stage can take a fraction of a millisecond.
STAGE_BUCKETS = (0.0002, 0.0005, 0.001, 0.002, *SEARCH_BUCKETS[1:])
# Scores live in [0, 1]; 0.35 is the default floor.
SCORE_BUCKETS = (0.1, 0.2, 0.3, 0.35, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)

Lease = Callable[[str], AbstractContextManager[MemoryIndex]]


#: Set in the scope of a HEAD request the app answers as a GET (api.app._App), for the `method` label.
HEAD_AS_GET = "memsift.head_as_get"


def request_metrics() -> PrometheusConfig:
    """The request middleware's settings: `memsift_requests_total`, `memsift_request_duration_seconds`.

    `method` is the method the client sent. The app answers a HEAD as a GET without the body, but counted as a
    GET, a load balancer's HEAD probe of /readyz every few seconds swelled the GET series (and their latencies,
    which include a body) with traffic no client sent; a HEAD 503 is a failing probe to alert on, not to hide."""
    return PrometheusConfig(
        app_name="memsift",
        prefix="memsift",
        group_path=True,
        exclude_unhandled_paths=True,
        buckets=SEARCH_BUCKETS,
        labels={"method": lambda request: "HEAD" if request.scope.get(HEAD_AS_GET) else request.method},
    )


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.search_seconds = Histogram(
            "memsift_search_seconds",
            "Time core spent in one search (tookMs), by agent and the mode that ran",
            ["agent", "mode"],
            buckets=SEARCH_BUCKETS,
            registry=self.registry,
        )
        self.stage_seconds = Histogram(
            "memsift_search_stage_seconds",
            "Time one search spent in each stage (core.timings.STAGES: embed, keyword, vector, fusion, rerank, "
            "shaping); a stage a search skipped is not observed",
            ["stage"],
            buckets=STAGE_BUCKETS,
            registry=self.registry,
        )
        # Retrieval drifting shows here before anyone complains: more empty answers, lower top scores.
        self.search_empty = Counter(
            "memsift_search_empty",
            "Searches answered with no hit, by agent and why: no_match (no candidate at all) or below_floor "
            "(candidates found, none passed the score floor)",
            ["agent", "reason"],
            registry=self.registry,
        )
        # A reranker with a wrong key or a provider down degrades every answer and fails nothing: count it.
        self.search_degraded = Counter(
            "memsift_search_degraded",
            "Searches answered degraded, by agent and what degraded (`degraded` says why): vector (keyword results "
            "only), vectors_pending (chunks without a vector yet), rerank (the reranker failed: fused order), "
            "first_index (the agent's first index still running), unsynced (changed notes not indexed yet)",
            ["agent", "part"],
            registry=self.registry,
        )
        self.top_score = Histogram(
            "memsift_search_top_score",
            "Score of the first hit of each search that returned one, by agent",
            ["agent"],
            buckets=SCORE_BUCKETS,
            registry=self.registry,
        )

    def track_indexes(self, agents: Callable[[], list[str]], lease: Lease) -> None:
        """`agents` is asked at every scrape: a configuration reload may add or remove agents."""
        self.registry.register(IndexCollector(agents, lease))

    def observe_search(self, agent: str, response: SearchResponse) -> None:
        self.search_seconds.labels(agent, response.mode).observe(response.tookMs / 1000)
        for stage, ms in (response.timings or {}).items():
            if ms:
                self.stage_seconds.labels(stage).observe(ms / 1000)
        for part in response.degradedBy:
            self.search_degraded.labels(agent, part).inc()
        if response.results:
            self.top_score.labels(agent).observe(response.results[0].score)
        else:
            self.search_empty.labels(agent, response.empty or "no_match").inc()

    def exposition(self) -> bytes:
        """Prometheus text: the process-wide registry (requests, process), then this app's."""
        return generate_latest(REGISTRY) + generate_latest(self.registry)


class IndexCollector(Collector):
    """Per agent, at scrape time: bytes on disk (database and WAL), chunks, seconds since the last sync
    (the last two only while the index opens)."""

    def __init__(self, agents: Callable[[], list[str]], lease: Lease) -> None:
        self.agents = agents
        self.lease = lease

    def collect(self) -> Iterator[GaugeMetricFamily]:
        size = GaugeMetricFamily("memsift_index_size_bytes", "Index file and its WAL, bytes", labels=["agent"])
        chunks = GaugeMetricFamily("memsift_index_chunks", "Chunks in the index", labels=["agent"])
        age = GaugeMetricFamily(
            "memsift_index_last_sync_age_seconds",
            "Seconds since the last sync (absent: never synced)",
            labels=["agent"],
        )
        for agent in self.agents():
            with self.lease(agent) as index:
                size.add_metric([agent], _bytes_on_disk(index.config.db_path))
                try:
                    count = sum(index.store.stats()["chunks"].values())
                    last = index.store.get_meta("last_sync")
                except StoreError:  # /readyz says why; the scrape goes on
                    continue
            chunks.add_metric([agent], count)
            if last:
                age.add_metric([agent], max(0.0, time.time() - float(last)))
        yield from (size, chunks, age)


def _bytes_on_disk(db: Path) -> int:
    total = 0
    for path in (db, Path(f"{db}-wal")):
        try:
            total += os.stat(path).st_size
        except FileNotFoundError:
            pass
    return total
