"""A rebuild's embedding fanned out on a Prefect task runner: threads in the flow's process, or a Dask cluster.

`sync.taskRunner = "inline"` (the default) embeds batch after batch inside the indexer, as a plain sync does.
With `"thread"` or `"dask"` the rebuild flow first reads and chunks every file, looks the texts up in the live
index and the shared cache (core.shared_cache), submits what is missing in batches of
`embedding.batchMaxInputs` as `embed-batch` tasks to a `ThreadPoolTaskRunner` or a `DaskTaskRunner` (a
`LocalCluster` of one single-threaded process per core, or the scheduler at `sync.daskAddress`). The indexer
then runs unchanged with a `PrecomputedEmbedder` that answers from those vectors, so the index, its cache
and the sync report are the same as inline.

Dask workers get the configuration, not the embedder (an ONNX session does not pickle): each worker process
builds its embedder once and keeps it. Every worker must have memsift installed; with the local model they
need no network. The vectors of one rebuild are held in memory until it ends (1.5 kB per chunk at 384 dims).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.task_runners import TaskRunner, ThreadPoolTaskRunner

from core.config_types import Config, SyncConfig
from core.embedders import Embedder, EmbedderWrapper
from core.identity import cache_key
from core.shared_cache import SharedCache
from core.sources import active, read_memory_file
from core.store import Store
from flows.ratelimit import limited_embedder

_worker_embedders: dict[str, Embedder | None] = {}  # read by worker_embedder only


def task_runner(sync: SyncConfig) -> TaskRunner | None:
    """The runner `sync.taskRunner` names; None for inline."""
    if sync.taskRunner == "thread":
        return ThreadPoolTaskRunner(max_workers=os.cpu_count() or 1)
    if sync.taskRunner == "dask":
        from prefect_dask import DaskTaskRunner

        if sync.daskAddress:
            return DaskTaskRunner(address=sync.daskAddress)
        # Processes, one thread each: the model's own thread pool is per process, and the GIL is not shared.
        cluster = {"n_workers": os.cpu_count() or 1, "threads_per_worker": 1, "dashboard_address": ":0"}
        return DaskTaskRunner(cluster_kwargs=cluster)
    return None


def worker_embedder(config: Config) -> Embedder:
    """The embedder of this process (a Dask worker's, or the flow's with threads), built once per setting."""
    key = repr(config.embedding)
    if key not in _worker_embedders:
        _worker_embedders[key] = limited_embedder(config)
    embedder = _worker_embedders[key]
    assert embedder is not None  # fan_out is only called with an embedder
    return embedder


@task(name="embed-batch", cache_policy=NO_CACHE, persist_result=False)
def embed_batch(config: Config, texts: list[str]) -> np.ndarray:
    """One batch of document vectors, computed wherever the runner put this task. Dask pickles this function
    by value: it must name only importable things (the cache of embedders lives behind worker_embedder)."""
    return worker_embedder(config).embed_documents(texts)


class PrecomputedEmbedder(EmbedderWrapper):
    """The rebuild's embedder, answering document requests from vectors computed beforehand; a text it was not
    given (a file written since the fan-out) goes to the wrapped embedder. Each request counts as a call, as
    it would inline, so the sync report reads the same."""

    def __init__(self, inner: Embedder, vectors: dict[str, np.ndarray]) -> None:
        super().__init__(inner)
        self.vectors = vectors
        self.served = 0

    @property
    def calls(self) -> int:
        return self.inner.calls + self.served

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        if all(t in self.vectors for t in texts):
            self.served += 1
            return np.stack([self.vectors[t] for t in texts])
        return self.inner.embed_documents(texts)


def texts_to_embed(config: Config, embedder: Embedder) -> dict[str, str]:
    """The chunk texts (by hash) of every active source that the live index and the shared cache lack, read
    and chunked by their source as the indexer does (unreadable files and warnings are left to the indexer,
    which reports them)."""
    texts: dict[str, str] = {}
    for source in active(config).values():
        for entry in source.discover()[0]:
            try:
                _, text, _ = read_memory_file(source.path(entry.path))
            except OSError:
                continue
            for chunk in source.chunk(entry.path, text or "", []):
                texts[chunk.hash] = chunk.text
    cached: dict[str, Any] = {}
    if config.db_path.exists():
        live = Store(config.db_path, use_vec=False, readonly=True)
        try:
            cached = live.cache_get(cache_key(embedder), texts)
        finally:
            live.close()
    with SharedCache.open(config.home) as cache:
        cached.update(cache.get(cache_key(embedder), [h for h in texts if h not in cached]))
    return {h: text for h, text in texts.items() if h not in cached}


def fan_out(config: Config, embedder: Embedder, runner: TaskRunner) -> PrecomputedEmbedder:
    """Embed what the rebuild will need on `runner`; call inside a flow run."""
    missing = texts_to_embed(config, embedder)
    hashes = list(missing)
    step = config.embedding.batchMaxInputs
    batches = [hashes[i : i + step] for i in range(0, len(hashes), step)]
    vectors: dict[str, np.ndarray] = {}
    done: dict[str, np.ndarray] = {}
    with runner:
        futures = [
            runner.submit(embed_batch, {"config": config, "texts": [missing[h] for h in batch]}) for batch in batches
        ]
        try:
            for batch, future in zip(batches, futures):
                got = dict(zip(batch, future.result()))
                done.update(got)
                vectors.update((missing[h], v) for h, v in got.items())
        except BaseException:
            # The indexer writes the vectors to the shared cache as it takes them; a fan-out that fails
            # before that keeps what its batches returned for the next run.
            with SharedCache.open(config.home) as cache:
                cache.put(cache_key(embedder), done)
            raise
    return PrecomputedEmbedder(embedder, vectors)
