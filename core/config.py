"""Configuration: TOML file, then `MEMSIFT_<SECTION>_<KEY>` environment overrides, then validation.

Every key is declared once in `_SCHEMA` with its default and its parser (core/config_values.py), so an unknown
key or a bad value is an error that names the key before any work starts (SPEC section 2).
"""

from __future__ import annotations

import hashlib
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .config_values import (
    Parser,
    Text,
    boolean,
    boolean_or_auto,
    choice,
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


def _sources(key: str, v: Any) -> tuple[str, ...]:
    sources = text_list(key, v)
    for name in sources:
        if name not in SOURCES:
            raise ConfigError(f"{key}: {name!r} is not one of {', '.join(SOURCES)}")
    if "memory" not in sources:
        raise ConfigError(f'{key}: must include "memory" (the Markdown memory is always indexed)')
    return tuple(dict.fromkeys(sources))


# dotted key -> (default, parser). Defaults match SPEC section 2 unless docs/ says why not
# (docs/configuration.md lists every key; tests/test_docs.py checks it).
_SCHEMA: dict[str, tuple[Any, Parser]] = {
    "workspace": (None, optional(text)),
    "extraPaths": ((), text_list),
    "exclude": (DEFAULT_EXCLUDE, text_list),
    "embedding.provider": ("auto", choice(*PROVIDERS)),
    "embedding.model": (None, optional(text)),
    "embedding.baseUrl": (None, optional(text)),
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
    "embedding.timeoutSeconds": (None, optional(number(float, 0.001))),
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
    "search.candidateMultiplier": (4, number(int, 1, 50)),
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
    "rerank.baseUrl": (None, optional(text)),
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
    "rerank.timeoutSeconds": (10.0, number(float, 0.001)),
    "rerank.retries": (1, number(int, 0, 20)),
    "sync.watch": (True, boolean),
    "sync.watchDebounceMs": (1500, number(int, 0, 3_600_000)),
    "sync.intervalMinutes": (0, number(float, 0)),
    "sync.lockTimeoutSeconds": (10.0, number(float, 0)),
    "sync.taskRunner": ("inline", choice("inline", "thread", "dask")),
    "sync.daskAddress": (None, optional(text)),
    # When a changed index identity (model, chunking...) rebuilds without `--force`: "local" only when the
    # embedder costs nothing (the local model, or none), "always", or "never" (SPEC section 1).
    "sync.autoRebuild": ("local", choice("local", "always", "never")),
    "cache.maxEntries": (None, optional(number(int, 1))),
    "api.host": ("127.0.0.1", text),
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
        top-k is monotonic: the first j hits of maxResults k are those of maxResults j."""
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
    timeoutSeconds: float = 10.0
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


def default(key: str) -> Any:
    """A configuration key's default, for help texts that must not drift from the schema."""
    return _SCHEMA[key][0]


def db_path(home: Path, agent: str, workspace: Path) -> Path:
    """`<home>/memory/<agent>.<folder name>-<hash>.sqlite`: one index per agent and workspace (SPEC section 1).
    The folder's name keeps the file recognisable; a hash of its resolved path keeps two folders of the same
    name apart. Agent ids hold no '.', so the name reads back unambiguously."""
    digest = hashlib.sha256(str(workspace).encode("utf-8", "surrogateescape")).hexdigest()[:12]
    name = "".join(c if c.isascii() and (c.isalnum() or c in "-_") else "_" for c in workspace.name)[:40]
    return home / "memory" / f"{agent}.{name or 'root'}-{digest}.sqlite"


def legacy_db_path(home: Path, agent: str) -> Path:
    """Where indexes were before they were bound to their workspace (core.binding adopts them)."""
    return home / "memory" / f"{agent}.sqlite"


def memsift_home(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    return Path(env.get("MEMSIFT_HOME") or Path.home() / ".memsift").expanduser()


def home_problem(home: Path) -> str | None:
    """Why `home` cannot hold memsift's files, found without creating anything (a command refused for a bad
    configuration leaves no trace); else the first write there failed as "NotADirectoryError: [Errno 20]..."."""
    if home.exists():
        return None if home.is_dir() else "is a file, not a folder"
    ancestor = next(p for p in home.parents if p.exists())
    return None if ancestor.is_dir() else f"cannot be created: {ancestor} is a file"


def _flatten(table: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in table.items():
        dotted = f"{prefix}{key}"
        # embedding.headers is a table-valued key; agents.<id>.workspace is dynamic.
        if isinstance(value, dict) and dotted not in _SCHEMA:
            flat.update(_flatten(value, dotted + "."))
        else:
            flat[dotted] = value
    return flat


def _env_key(name: str) -> str:
    return name.replace("_", "").replace(".", "").lower()


_ENV_KEYS = {_env_key(k): k for k in _SCHEMA}
_SECTIONS = {k.split(".")[0].lower() for k in _SCHEMA if "." in k}
_NOT_CONFIG_ENV = {"MEMSIFT_HOME", "MEMSIFT_CONFIG", "MEMSIFT_RERANK_API_KEY"}  # the last: a secret, not a key


def _env_overrides(env: Mapping[str, str]) -> dict[str, tuple[str, str]]:
    """`MEMSIFT_SEARCH_MAX_RESULTS` or `MEMSIFT_SEARCH_MAXRESULTS` -> `search.maxResults`: (value, variable),
    the variable kept so that a bad value's error names what the user actually set. A variable set to the empty
    string is unset, as an empty MEMSIFT_CONFIG, MEMSIFT_HOME or OPENAI_API_KEY is (`MEMSIFT_API_KEY=${KEY:-}`
    in a compose file dropped the file's `api.key`: a server without a key)."""
    found: dict[str, tuple[str, str]] = {}
    for name, value in env.items():
        if not name.startswith("MEMSIFT_") or name in _NOT_CONFIG_ENV or value == "":
            continue
        rest = name[len("MEMSIFT_") :]
        key = _ENV_KEYS.get(_env_key(rest))
        if key is not None:
            _found(found, key, value, name)
        elif rest.lower().startswith("agents_"):  # agents.<id>.workspace, as MEMSIFT_AGENTS_<ID>_WORKSPACE
            agent = re.fullmatch(r"agents_(\w+)_workspace", rest, re.IGNORECASE)
            if agent is None or agent_id_problem(agent[1]):
                raise ConfigError(f"{name}: no such configuration key (MEMSIFT_AGENTS_<ID>_WORKSPACE)")
            _found(found, f"agents.{agent[1].lower()}.workspace", value, name)
        elif rest.split("_")[0].lower() in _SECTIONS:
            raise ConfigError(f"{name}: no such configuration key")
    return found


def _found(found: dict[str, tuple[str, str]], key: str, value: str, name: str) -> None:
    """One key's value from the environment. Two spellings of it (`MEMSIFT_SEARCH_MAXRESULTS` and
    `MEMSIFT_SEARCH_MAX_RESULTS`) that disagree are an error: the environment's order picked one in silence."""
    if key in found and found[key][0] != value:
        first, second = sorted((found[key][1], name))
        raise ConfigError(f"{first} and {second} set {key} to different values; keep one")
    found[key] = (value, name)


def _not_a_file(path: Path) -> str:
    """Why a configuration path is not read. A pipe (`--config <(...)`) or a device (/dev/null) exists but is
    refused: the file is read again later (an index run's flow, a server's reload), and a pipe is empty then."""
    if path.is_dir():
        return "is a folder, not a TOML file"
    return "is not a regular file (a pipe or a device); give a TOML file" if path.exists() else "does not exist"


def find_config_file(explicit: str | Path | None, workspace: Path, env: Mapping[str, str]) -> Path | None:
    for name, given in (("--config", explicit), ("MEMSIFT_CONFIG", env.get("MEMSIFT_CONFIG"))):
        if given:
            path = Path(given).expanduser()
            if not path.is_file():
                raise ConfigError(f"{name}: {path} {_not_a_file(path)}")
            return path
    candidate = workspace / "memsift.toml"
    return candidate if candidate.is_file() else None


def load_config(
    config_path: str | Path | None = None,
    *,
    workspace: str | Path | None = None,
    agent: str = "main",
    overrides: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
) -> Config:
    """Read and validate the configuration for one agent.

    `workspace` (the `--workspace` flag) wins over the file's `workspace` key, which wins over the current
    folder. `overrides` are dotted keys set by code (tests, the eval command) after everything else.
    """
    env = os.environ if env is None else env
    # The folder whose memsift.toml is read: MEMSIFT_WORKSPACE's as --workspace's (it read the current folder's,
    # so `MEMSIFT_WORKSPACE=~/agent memsift index` from elsewhere dropped the workspace's extraPaths).
    given = workspace or env.get("MEMSIFT_WORKSPACE")
    start = Path(given).expanduser() if given else Path.cwd()
    source = find_config_file(config_path, start, env)
    raw: dict[str, Any] = {}
    if source is not None:
        try:
            raw = _flatten(tomllib.loads(source.read_text(encoding="utf-8-sig")))  # -sig: drops a BOM
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{source}: not valid TOML: {exc}") from None
        except UnicodeDecodeError:
            raise ConfigError(f"{source}: not valid UTF-8 (TOML files are UTF-8)") from None
        except OSError as exc:
            raise ConfigError(f"{source}: cannot be read: {exc.strerror or exc}") from None
    from_env = _env_overrides(env)
    # An agent the file names is overridden whatever the case of its id (MEMSIFT_AGENTS_WORK_WORKSPACE, [agents.Work]).
    spelled = {key.lower(): key for key in raw if key.startswith("agents.")}
    from_env = {spelled.get(key.lower(), key): given for key, given in from_env.items()}
    raw.update({key: Text(value) for key, (value, _) in from_env.items()})
    raw.update({key: Text(v) if isinstance(v, str) else v for key, v in (overrides or {}).items()})
    # A value from the environment is validated under its variable's name: "MEMSIFT_SEARCH_MAXRESULTS
    # (search.maxResults): expected an integer, got 'abc'".
    labels = {key: f"{name} ({key})" for key, (_, name) in from_env.items() if key not in (overrides or {})}

    agents: dict[str, Path] = {}
    values: dict[str, Any] = {k: default for k, (default, _) in _SCHEMA.items()}
    for key, value in raw.items():
        if key.startswith("agents."):
            parts = key.split(".")
            if len(parts) != 3 or parts[2] != "workspace" or not parts[1]:
                raise ConfigError(f"{key}: no such configuration key (agents.<id>.workspace)")
            if why := agent_id_problem(parts[1]):  # else only `serve` refused it, blaming an `--agent` never given
                raise ConfigError(f"{key}: {why}")
            if not text(key, value).strip():  # it named the config file's folder
                raise ConfigError(f"{key}: must not be blank")
            agents[parts[1]] = _resolve(None if key in labels else source, value)
            continue
        if key not in _SCHEMA:
            raise ConfigError(f"{key}: {_not_a_key(key)}")
        parsed = _SCHEMA[key][1](labels.get(key, key), value)
        values[key] = str(parsed) if isinstance(parsed, Text) else parsed  # plain str on: msgspec encodes no subclass

    top_source = None if "workspace" in labels else source  # MEMSIFT_WORKSPACE: relative to the current folder
    # `[agents.main] workspace = ...` names the main agent's folder, as the `workspace` key does (it was ignored).
    if "main" in agents and values["workspace"]:
        top = _resolve(top_source, values["workspace"])
        if top.resolve() != agents["main"].resolve():
            raise ConfigError(f"agents.main.workspace: {agents['main']} differs from workspace: {top}; set one")
    if why := agent_id_problem(agent):
        raise ConfigError(f"--agent: {why}")
    named_by = "workspace"  # the setting an error names: the key (or variable) that chose the folder
    if workspace:
        ws = Path(workspace).expanduser()
    elif agent != "main":
        if agent not in agents:
            raise ConfigError(f"--agent: unknown agent {agent!r} (configure agents.{agent}.workspace)")
        ws, named_by = agents[agent], labels.get(f"agents.{agent}.workspace", f"agents.{agent}.workspace")
    elif values["workspace"]:
        ws, named_by = _resolve(top_source, values["workspace"]), labels.get("workspace", "workspace")
    elif "main" in agents:
        ws, named_by = agents["main"], "agents.main.workspace"
    else:
        ws = Path.cwd()
    ws = ws.resolve()
    if not ws.is_dir():
        raise ConfigError(f"{named_by}: {ws} is not a folder")

    if values["chunking.overlap"] >= values["chunking.tokens"]:
        raise ConfigError("chunking.overlap: must be smaller than chunking.tokens")
    fusion = values["search.fusion"]
    vw, tw = FUSIONS[fusion].weights
    vw = values["search.vectorWeight"] if values["search.vectorWeight"] is not None else vw
    tw = values["search.textWeight"] if values["search.textWeight"] is not None else tw

    def section(name: str) -> dict[str, Any]:
        return {k.split(".", 1)[1]: v for k, v in values.items() if k.startswith(name + ".")}

    return Config(
        workspace=ws,
        agent=agent,
        home=memsift_home(env),
        extra_paths=values["extraPaths"],
        exclude=values["exclude"],
        embedding=EmbeddingConfig(**section("embedding")),
        chunking=ChunkingConfig(values["chunking.tokens"], values["chunking.overlap"]),
        search=SearchConfig(
            maxResults=values["search.maxResults"],
            minScore=values["search.minScore"],
            calibrate=values["search.calibrate"],
            mode=values["search.mode"],
            fusion=fusion,
            vectorWeight=vw,
            textWeight=tw,
            rrfK=values["search.rrfK"],
            candidatePool=values["search.candidatePool"],
            candidateMultiplier=values["search.candidateMultiplier"],
            decayEnabled=values["search.temporalDecay.enabled"],
            halfLifeDays=values["search.temporalDecay.halfLifeDays"],
            mmrEnabled=values["search.mmr.enabled"],
            mmrLambda=values["search.mmr.lambda"],
            snippetChars=values["search.snippetChars"],
            citations=values["search.citations"] == "on",
        ),
        store=StoreConfig(values["store.fts.tokenizer"], values["store.fts.stemmer"]),
        rerank=RerankConfig(**section("rerank")),
        sync=SyncConfig(**section("sync")),
        cache=CacheConfig(**section("cache")),
        api=ApiConfig(**section("api")),
        agents=agents,
        source=source,
        sources=values["sources"],
        sessions=_sessions(values, ws, agent, env) if "sessions" in values["sources"] else None,
    )


def _not_a_key(key: str) -> str:
    """Why `key` is refused: a table given a plain value (`temporalDecay = 5`) is told so, naming its keys."""
    inner = [k[len(key) + 1 :] for k in _SCHEMA if k.startswith(key + ".")]
    if key == "agents":  # its keys are the agents' ids: none is in _SCHEMA
        return "expected a table of agents, [agents.<id>] with workspace = ..."
    if not inner:
        return "no such configuration key"
    return f"expected a table of {', '.join(inner[:4])}{', ...' if len(inner) > 4 else ''}"


def _sessions(values: dict[str, Any], ws: Path, agent: str, env: Mapping[str, str]) -> SessionsConfig:
    """A relative `sessions.dir` is relative to the workspace."""
    folder = Path(values["sessions.dir"]).expanduser() if values["sessions.dir"] else None
    if folder is None:
        folder = memsift_home(env) / "sessions" / agent
    elif not folder.is_absolute():
        folder = ws / folder
    return SessionsConfig(folder, values["sessions.deltaBytes"], values["sessions.deltaMessages"])


def _resolve(source: Path | None, value: str) -> Path:
    """A folder the file names is relative to the file; one an environment variable names (source None), as
    a shell user means it, to the current folder."""
    path = Path(value).expanduser()
    if not path.is_absolute() and source is not None:
        path = source.parent / path
    return path


def agent_id_problem(agent: str) -> str | None:
    """Why `agent` can never name an agent (`" "`, `"a b"`, 65 characters), or None when it can: one rule for
    the configuration's `agents.<id>`, `--agent` and the `agent` of a REST request."""
    if agent and len(agent) <= 64 and all(c.isalnum() or c in "-_" for c in agent) and agent.isascii():
        return None
    return f"{agent!r} is not a valid agent id (letters, digits, '-', '_'; at most 64)"
