"""The configuration's key table: every key once, with its default and its parser (core/config_values.py).

Its own module so that what a key accepts is read in one place: the loader (core/config.py), the environment's
spellings (core/config_env.py), help texts (`default`) and docs/configuration.md's check all read this table.
"""

from __future__ import annotations

from typing import Any

from .config_values import (
    Parser,
    boolean,
    boolean_or_auto,
    choice,
    host,
    http_url,
    number,
    on_off,
    optional,
    secret,
    text,
    text_list,
    text_map,
)
from .embedders import PROVIDERS
from .errors import ConfigError
from .ranking import FUSIONS
from .rerankers import RERANKERS
from .sources import SOURCES

DEFAULT_EXCLUDE = (".git", "node_modules", ".venv", "venv", "__pycache__", ".tox")
MODES = ("hybrid", "keyword", "vector")
LOCAL_GRAPHS = ("optimized", "shipped")
DIALECTS = ("cohere", "jina", "voyage", "tei")  # the hosted reranker's request shapes (core/rerankers/cohere.py)
# The longest waits: 1e20 passed as a timeout and failed the first request ("timestamp out of range for platform
# time_t", a socket's), and as an interval failed `memsift up` once its Prefect server ran (the schedule's).
DAY_SECONDS = 86_400
YEAR_MINUTES = 525_600


def _sources(key: str, v: Any) -> tuple[str, ...]:
    sources = text_list(key, v)
    for name in sources:
        if name not in SOURCES:
            raise ConfigError(f"{key}: {name!r} is not one of {', '.join(SOURCES)}")
    if "memory" not in sources:
        raise ConfigError(f'{key}: must include "memory" (the Markdown memory is always indexed)')
    return tuple(dict.fromkeys(sources))


def _folder_names(key: str, v: Any) -> tuple[str, ...]:
    """`exclude` is matched against each folder's own name as the walk meets it (core/sources/memory.py): a path
    (`memory/private`) or a glob pattern (`drafts/**`, `*.tmp.md`) matches no name, so the notes it was meant to
    keep out were indexed and served in silence. Refused here, with the name that would do it when there is one."""
    names = text_list(key, v)
    for name in names:
        if "/" in name or "\\" in name or any(c in name for c in "*?"):
            parts = [p for p in name.replace("\\", "/").split("/") if p and not any(c in p for c in "*?")]
            hint = f"; write {parts[-1]!r} to leave out every folder of that name" if parts else ""
            raise ConfigError(
                f"{key}: {name!r} is not a folder name: exclude holds names of folders never walked, wherever they "
                f"are, not paths or glob patterns{hint}"
            )
    return names


# dotted key -> (default, parser). Defaults match SPEC section 2 unless docs/ says why not
# (docs/configuration.md lists every key; tests/test_docs.py checks it).
SCHEMA: dict[str, tuple[Any, Parser]] = {
    "workspace": (None, optional(text)),
    "extraPaths": ((), text_list),
    "exclude": (DEFAULT_EXCLUDE, _folder_names),
    "embedding.provider": ("auto", choice(*PROVIDERS)),
    "embedding.model": (None, optional(text)),
    "embedding.baseUrl": (None, optional(http_url)),
    "embedding.headers": ({}, text_map),
    "embedding.apiKey": (None, optional(secret)),  # a secret: else the provider's variable (OPENAI_API_KEY...)
    "embedding.dimensions": (None, optional(number(int, 1, 65536))),
    "embedding.queryPrefix": (None, optional(text)),
    "embedding.documentPrefix": (None, optional(text)),
    "embedding.fallback": ("none", choice(*PROVIDERS)),
    "embedding.batchMaxBytes": (8000, number(int, 1)),
    "embedding.batchMaxInputs": (96, number(int, 1, 4096)),
    "embedding.concurrency": (None, optional(number(int, 1, 64))),
    "embedding.requestsPerMinute": (None, optional(number(float, 0.001))),
    "embedding.tokensPerMinute": (None, optional(number(float, 1))),
    "embedding.timeoutSeconds": (None, optional(number(float, 0.001, DAY_SECONDS))),
    "embedding.retries": (3, number(int, 0, 20)),
    "embedding.localGraph": ("optimized", choice(*LOCAL_GRAPHS)),
    # What the hosted provider charges, for the cost `memsift index --dry-run` and every run's plan show.
    "embedding.pricePerMillionTokens": (None, optional(number(float, 0.0))),
    "chunking.tokens": (400, number(int, 16, 8192)),
    "chunking.overlap": (80, number(int, 0, 4096)),
    "search.maxResults": (6, number(int, 1, 100)),
    "search.minScore": (0.35, number(float, 0.0, 1.0)),
    "search.calibrate": (True, boolean),
    "search.mode": ("hybrid", choice(*MODES)),
    "search.fusion": ("minmax", choice(*FUSIONS)),
    "search.vectorWeight": (None, optional(number(float, 0.0, 1.0))),
    "search.textWeight": (None, optional(number(float, 0.0, 1.0))),
    "search.rrfK": (60, number(int, 1, 10000)),
    "search.candidatePool": (40, number(int, 1, 200)),
    # No upper bound: SPEC caps the product (maxResults x this) at 200 candidates, not the multiplier, so
    # `candidateMultiplier = 100` is the cap, as SPEC reads (`Search.fetch`), rather than an error.
    "search.candidateMultiplier": (4, number(int, 1)),
    "search.temporalDecay.enabled": (False, boolean),
    "search.temporalDecay.halfLifeDays": (30.0, number(float, 0.001)),
    "search.mmr.enabled": (False, boolean),
    "search.mmr.lambda": (0.7, number(float, 0.0, 1.0)),
    "search.snippetChars": (700, number(int, 20, 100000)),
    "search.citations": ("on", on_off),
    "store.fts.tokenizer": ("unicode61", choice("unicode61", "trigram")),
    "store.fts.stemmer": ("porter", choice("porter", "none")),
    # Read by the parts that use them (the REST API, the watcher and scheduler, the reranker); validated here
    # so that a file setting them is checked before any work.
    # auto: rerank when it is cheap, i.e. local MaxSim over an index the local model built
    # (docs/search-and-ranking.md, "Rerankers").
    "rerank.enabled": ("auto", boolean_or_auto),
    "rerank.provider": ("local", choice(*RERANKERS)),
    "rerank.model": (None, optional(text)),
    "rerank.baseUrl": (None, optional(http_url)),
    "rerank.candidates": (30, number(int, 1, 200)),
    # The reranker's share of the blend; 1.0 replaces the retrieval order (measured: docs/search-and-ranking.md).
    "rerank.weight": (0.4, number(float, 0.0, 1.0)),
    # How a MaxSim rerank orders hits: the learned ranker over all candidates (default), whose score is a
    # probability (docs/search-and-ranking.md "Learned ranker (default)"), or the blend above.
    "rerank.method": ("learned", choice("learned", "blend")),
    # The learned ranker's model file (`memsift train-ranker --out`); unset: the one shipped in the package.
    "rerank.rankerModel": (None, optional(text)),
    # The hosted reranker (docs/search-and-ranking.md): a search waits for it, so a shorter timeout than embeddings'.
    "rerank.dialect": ("cohere", choice(*DIALECTS)),
    "rerank.headers": ({}, text_map),
    "rerank.timeoutSeconds": (3.0, number(float, 0.001, DAY_SECONDS)),
    "rerank.retries": (1, number(int, 0, 20)),
    "sync.watch": (True, boolean),
    "sync.watchDebounceMs": (1500, number(int, 0, 3_600_000)),
    "sync.intervalMinutes": (0, number(float, 0, YEAR_MINUTES)),
    "sync.lockTimeoutSeconds": (10.0, number(float, 0)),
    "sync.taskRunner": ("inline", choice("inline", "thread", "dask")),
    "sync.daskAddress": (None, optional(text)),
    # When a changed index identity (model, chunking...) rebuilds without `--force`: "local" only when the
    # embedder costs nothing (the local model, or none), "always", or "never" (SPEC section 1).
    "sync.autoRebuild": ("local", choice("local", "always", "never")),
    "cache.maxEntries": (None, optional(number(int, 1))),
    # The shared embedding cache's size after every run, in MiB of pages in use; 0: no bound (core.shared_cache).
    "cache.maxMiB": (512, number(int, 0, 1_048_576)),
    "api.host": ("127.0.0.1", host),
    "api.port": (8000, number(int, 1, 65535)),
    "api.key": (None, optional(secret)),
    # Processes that run searches (api/search_pool.py); 0: in the server's threads, one core's worth of Python.
    "api.workers": (0, number(int, 0, 64)),
    # Session transcripts (docs/indexing-and-prefect.md); OpenClaw's delta defaults.
    "sources": (("memory",), _sources),
    "sessions.dir": (None, optional(text)),
    "sessions.deltaBytes": (100_000, number(int, 0)),
    "sessions.deltaMessages": (50, number(int, 0)),
}


def default(key: str) -> Any:
    """A configuration key's default, for help texts that must not drift from the schema."""
    return SCHEMA[key][0]
