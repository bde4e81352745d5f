"""What a loaded configuration is: one frozen dataclass per section and `Config`, the agent's whole of it.

Apart from the loader (core/config.py) so that the many modules that only read a configuration import its
shape without the TOML file, the environment's rules or the key table.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .config_home import db_path


@dataclass(frozen=True)
class EmbeddingConfig:
    provider: str
    model: str | None
    baseUrl: str | None
    headers: dict[str, str] = field(repr=False)  # may carry API keys: never printed
    dimensions: int | None
    queryPrefix: str | None
    documentPrefix: str | None
    fallback: str
    batchMaxBytes: int
    batchMaxInputs: int
    concurrency: int | None
    requestsPerMinute: float | None
    tokensPerMinute: float | None
    timeoutSeconds: float | None
    retries: int
    localGraph: str
    pricePerMillionTokens: float | None = None
    apiKey: str | None = field(default=None, repr=False)  # a secret: never printed


@dataclass(frozen=True)
class ChunkingConfig:
    tokens: int
    overlap: int


@dataclass(frozen=True)
class SearchConfig:
    maxResults: int
    minScore: float
    calibrate: bool
    mode: str
    fusion: str
    vectorWeight: float
    textWeight: float
    rrfK: int
    candidatePool: int
    candidateMultiplier: int

    @property
    def fetch(self) -> int:
        """Candidates each leg fetches: SPEC's `maxResults x candidateMultiplier` on the *configured* maxResults
        (never a request's), at least `candidatePool`, at most 200. A request's maxResults does not move it, so
        top-k is monotonic: the first j hits of maxResults k are those of maxResults j. A keyword- or vector-only
        search fetches more when a request asks for more (`core.search`: its order does not depend on the pool)."""
        return min(200, max(self.candidatePool, self.maxResults * self.candidateMultiplier))

    decayEnabled: bool
    halfLifeDays: float
    mmrEnabled: bool
    mmrLambda: float
    snippetChars: int
    citations: bool


@dataclass(frozen=True)
class StoreConfig:
    tokenizer: str
    stemmer: str

    @property
    def fts_tokenize(self) -> str:
        """The FTS5 `tokenize=` argument."""
        base = "trigram" if self.tokenizer == "trigram" else "unicode61 remove_diacritics 2"
        return f"porter {base}" if self.stemmer == "porter" and self.tokenizer != "trigram" else base


@dataclass(frozen=True)
class RerankConfig:
    enabled: bool | str
    provider: str
    model: str | None
    baseUrl: str | None
    candidates: int
    weight: float
    dialect: str = "cohere"
    headers: dict[str, str] = field(default_factory=dict, repr=False)  # may hold keys
    method: str = "learned"
    rankerModel: str | None = None
    timeoutSeconds: float = 3.0  # a search's whole rerank (config_schema.py holds the default users see)
    retries: int = 1


@dataclass(frozen=True)
class SyncConfig:
    watch: bool
    watchDebounceMs: int
    intervalMinutes: float
    lockTimeoutSeconds: float
    taskRunner: str = "inline"  # where a rebuild's embedding batches run: in the flow, on threads, on Dask
    daskAddress: str | None = None  # a Dask scheduler (tcp://host:8786); None: a LocalCluster per rebuild
    autoRebuild: str = "local"  # a changed identity rebuilds on its own: "local" (free embedders), always, never


@dataclass(frozen=True)
class CacheConfig:
    maxEntries: int | None
    maxMiB: int = 512  # the shared cache's bound in MiB (0: none); entries in use are never dropped


@dataclass(frozen=True)
class SessionsConfig:
    dir: Path  # JSONL transcripts; default <home>/sessions/<agent>
    deltaBytes: int  # re-index a transcript once it grew by this many bytes...
    deltaMessages: int  # ...or by this many lines


@dataclass(frozen=True)
class ApiConfig:
    host: str
    port: int
    key: str | None = field(default=None, repr=False)  # a secret: never printed
    workers: int = 0


@dataclass(frozen=True)
class Config:
    workspace: Path
    agent: str
    home: Path
    extra_paths: tuple[str, ...]
    exclude: tuple[str, ...]
    embedding: EmbeddingConfig
    chunking: ChunkingConfig
    search: SearchConfig
    store: StoreConfig
    rerank: RerankConfig
    sync: SyncConfig
    cache: CacheConfig
    api: ApiConfig
    agents: dict[str, Path] = field(default_factory=dict)
    source: Path | None = None
    sources: tuple[str, ...] = ("memory",)
    sessions: SessionsConfig | None = None  # set when `sources` holds "sessions"

    @property
    def db_path(self) -> Path:
        return db_path(self.home, self.agent, self.workspace)
