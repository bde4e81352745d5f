"""The REST API's request and answer shapes (SPEC section 4), as msgspec structs with camelCase names.

Litestar validates request bodies against these (a bad field is a 400 naming it) and draws the OpenAPI
schema from them. Answers are the documents core already builds (`SearchResponse.to_dict`, `status`, `get`)
converted into these structs, so the CLI's `--json` and the REST answer stay one shape: a field core omits
(`degraded`, `scores`, `probe`) is UNSET here and omitted on the wire too.
"""

from __future__ import annotations

from http import HTTPStatus
from typing import Annotated, Any, Literal

import msgspec
from msgspec import UNSET, Meta, UnsetType

from core.config_home import AGENT_ID_PATTERN
from core.errors import ConfigError, EmbedderUnavailable, EmbeddingError, MemsiftError, QueryFileError

MAX_QUERY_BYTES = 4096
MAX_RESULTS = 100
MAX_LINES = 5000
MAX_LINE = 2**53  # the largest integer a float (JSON's number in JavaScript) holds exactly, and msgspec reads as one
MAX_AGENT_ID = 64

WHEN = (
    "a date (YYYY-MM-DD, the whole local day), a date-time (ISO 8601), `today`, `yesterday`, or a duration back "
    "from now (`12h`, `7d`, `2w`, `3m` months, `1y`); daily notes are dated by file name, other files by mtime"
)
# A lower bound of 0 for the OpenAPI document: Litestar copies a `ge` into it only when it is truthy, so `ge=0`
# alone left `minimum` out (the bound still holds: a request under it is a 400). Litestar reads `extra` here.
AT_LEAST_0: dict[str, Any] = {"extra": {"minimum": 0}}

# Every request field carries an example: the docs page builds its sample requests from them, and a
# sample must work as sent (tests/test_rest_words.py sends each one to a server on examples/workspace).
AgentId = Annotated[
    str,
    Meta(
        min_length=1,  # "" is a client's bug, refused, not a request for the default agent
        max_length=MAX_AGENT_ID,
        description="an agent of the configuration (letters, digits, '-', '_'); default `main` (or `memsift --agent "
        "ID serve`'s)",
        examples=["main"],
        # In the document only: the server's 400 names the rule (core.config_home.agent_id_problem), where
        # msgspec checking the pattern would say "Expected `str` matching regex ..."
        extra_json_schema={"extra": {"pattern": AGENT_ID_PATTERN}},
    ),
]


class SearchRequest(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    query: Annotated[
        str,
        Meta(
            description=f"what to look for; not blank, at most {MAX_QUERY_BYTES} bytes of UTF-8",
            examples=["why did the deploy fail"],
        ),
    ]
    agent: AgentId | None = None
    max_results: (
        Annotated[
            int, Meta(ge=1, le=MAX_RESULTS, description="at most this many hits; default 6 (`search.maxResults`)",
                      examples=[5])
        ]
        | None
    ) = None  # fmt: skip
    min_score: (
        Annotated[
            float,
            Meta(
                ge=0.0,
                le=1.0,
                extra_json_schema=AT_LEAST_0,
                description="floor on hybrid scores, which are calibrated estimates that the hit is relevant: hits "
                "under it are dropped (a prefix of the order is kept), and a search whose hits are all under it "
                "abstains (`abstained`); 0 turns it off. In keyword or vector mode (or with `search.calibrate = "
                "false`) a hit found only by meaning needs this cosine, a hit that matched a query word is always "
                "kept; default 0.35 (`search.minScore`)",
                examples=[0.35],
            ),
        ]
        | None
    ) = None
    mode: (
        Annotated[
            Literal["hybrid", "keyword", "vector"],
            Meta(description="words and meaning fused, words only, or meaning only; default hybrid",
                 examples=["hybrid"]),
        ]
        | None
    ) = None  # fmt: skip
    rerank: (
        Annotated[bool, Meta(description="rerank the shortlist; default: on over an index the local model built",
                             examples=[True])]
        | None
    ) = None  # fmt: skip
    path_prefix: (
        Annotated[str, Meta(max_length=1024, description="only files under this path", examples=["memory/"])] | None
    ) = None
    after: (
        Annotated[
            str, Meta(max_length=64, description=f"only notes dated at or after this: {WHEN}", examples=["2026-11-01"])
        ]
        | None
    ) = None
    before: (
        Annotated[
            str, Meta(max_length=64, description=f"only notes dated at or before this: {WHEN}", examples=["2026-12-31"])
        ]
        | None
    ) = None
    # null is absent, for these as for every optional field (a client that sends each field, None included)
    evergreen: (
        Annotated[
            bool,
            Meta(
                description="keep undated files (MEMORY.md, undated memory/ notes) when filtering by date; default "
                "true",
                examples=[True],
            ),
        ]
        | None
    ) = None
    explain: (
        Annotated[bool, Meta(description="add each hit's scores per stage; default false", examples=[False])] | None
    ) = None


class Scores(msgspec.Struct):
    vector: float | UnsetType = UNSET
    text: float | UnsetType = UNSET
    rerank: float | UnsetType = UNSET
    ranker: float | UnsetType = UNSET  # the score the order was made by, before calibration (extends SPEC)
    decay: float | UnsetType = UNSET
    fused: float | UnsetType = UNSET  # the retrieval score a rerank blended with (an extension of SPEC)


class Result(msgspec.Struct):
    """One hit: SPEC section 4's `Result`, the name a client generated from the OpenAPI document reads (it was
    `Hit`, a type the SPEC and the docs never name)."""

    path: str
    startLine: int
    endLine: int
    score: float
    snippet: str
    source: str
    citation: str | None
    scores: Scores | UnsetType = UNSET


class SearchAnswer(msgspec.Struct):
    results: list[Result]
    mode: str
    provider: str
    model: str | None
    tookMs: float
    degraded: (
        Annotated[
            str,
            Meta(
                description="why the answer is less than the configured search: the vector leg did not run or misses "
                "chunks (keyword results), the reranker failed (fused order), the first index is still running"
            ),
        ]
        | UnsetType
    ) = UNSET
    abstained: (
        Annotated[str, Meta(description="no hits because every candidate scored under minScore: nothing relevant")]
        | UnsetType
    ) = UNSET
    warning: (
        Annotated[
            str,
            Meta(description="what the sync this search ran first said (memory files changed since the last sync, "
                 "or an agent never indexed): a note indexed with U+FFFD in place of invalid UTF-8, on which lines; "
                 "or why the answer may not cover the notes as they are now (another sync of the agent running, "
                 "the configuration changed since the last index)"),
        ]
        | UnsetType
    ) = UNSET  # fmt: skip
    timings: (
        Annotated[
            dict[str, float],
            Meta(description="with explain: milliseconds per stage (embed, keyword, vector, fusion, rerank, shaping)"),
        ]
        | UnsetType
    ) = UNSET


class GetRequest(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    path: Annotated[
        str,
        Meta(max_length=4096, description="workspace-relative, with `/`, as search answers it",
             examples=["memory/2026-11-24.md"]),
    ]  # fmt: skip
    agent: AgentId | None = None
    # At most 2**53, in the document as on the server: 1e16 (an integer to JSON Schema) passed a client generated
    # from the document and met "from: Expected `int | null`, got `float`" (Litestar's decoding takes a float
    # for an integer only up to 2**53)
    start: (
        Annotated[int, Meta(ge=1, le=MAX_LINE, description="first line, 1-based; default 1", examples=[1])] | None
    ) = msgspec.field(default=None, name="from")
    lines: (
        Annotated[
            int, Meta(ge=0, le=MAX_LINES, description=f"how many lines; default: the rest, at most {MAX_LINES}",
                      examples=[10], extra_json_schema=AT_LEAST_0)
        ]
        | None
    ) = None  # fmt: skip


class GetAnswer(msgspec.Struct):
    path: str
    start: int = msgspec.field(name="from")
    lines: int
    text: str
    totalLines: int
    warning: (
        Annotated[
            str,
            Meta(description="only when the file is not quite what `text` shows: invalid UTF-8, its bad bytes "
                 "replaced with U+FFFD (as the index holds it), and on which lines"),
        ]
        | UnsetType
    ) = UNSET  # fmt: skip


class VectorState(msgspec.Struct):
    enabled: bool
    backend: str
    error: str | None
    refused: int  # chunks the provider refused on their own: indexed for keyword search only, never embedded


class FtsState(msgspec.Struct):
    enabled: bool
    tokenizer: str


class Probe(msgspec.Struct):
    ok: bool
    error: str | UnsetType = UNSET
    dims: int | UnsetType = UNSET
    ms: float | UnsetType = UNSET


class RateLimit(msgspec.Struct):
    requestsPerMinute: float | None
    active: str
    prefect: dict[str, Any] | None


class Fallback(msgspec.Struct):
    """The recorded switch to `embedding.fallback`: the provider that failed, the fallback, why, when."""

    # "from" is a Python keyword: the attribute is from_, the JSON key "from".
    from_: str = msgspec.field(name="from")
    to: str
    reason: str
    at: str


class VectorsPending(msgspec.Struct):
    """A sync the embedder failed indexed text for keyword search only; the next sync embeds it."""

    reason: str
    at: str
    chunks: int  # chunks waiting for a vector (not those the provider refused: `vector.refused`)


class RerankState(msgspec.Struct):
    """`rerank.*` as searches use it, whether a search reranks by default (`active`), and for MaxSim how many
    chunks have token bits stored."""

    enabled: bool | str
    active: bool
    provider: str
    model: str | None
    endpoint: str | None  # a hosted reranker's URL (a password in it as `<set>`)
    candidates: int
    weight: float
    method: str  # `blend`, or `learned` (the learned ranker, which orders only a MaxSim rerank)
    ranker: str | None  # with `learned`: the model's fingerprint (or why it cannot be read)
    tokenBits: int | None
    calibration: str  # the fingerprint of the score calibration (core/calibration.json)


class SharedCacheState(msgspec.Struct):
    """The home's shared embedding cache (README: "The shared embedding cache")."""

    path: str
    entries: int


class ConfigState(msgspec.Struct):
    """The configuration a long-running server (`serve`, `up`) follows: the file, when its settings were last
    applied and, while the file is invalid, why (naming the key) and since when; the applied settings still
    serve meanwhile."""

    file: str | None
    appliedAt: str
    error: str | None = None
    errorAt: str | None = None


class Status(msgspec.Struct):
    """The document of `memsift status --json`: MemoryIndex.status and the embedding rate limit."""

    agent: str
    workspace: str
    dbPath: str
    provider: str
    model: str | None
    dims: int | None
    files: dict[str, int]
    chunks: dict[str, int]
    dirty: bool
    dirtyReason: str | None
    vector: VectorState
    fts: FtsState
    cacheEntries: int
    lastSync: str | None
    embedderError: str | None
    fallback: Fallback | None
    rateLimit: RateLimit
    probe: Probe | UnsetType = UNSET
    vectorsPending: VectorsPending | None = None
    rerank: RerankState | None = None
    sharedCache: SharedCacheState | None = None


class IndexRequest(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    agent: AgentId | None = None
    force: Annotated[bool, Meta(description="rebuild everything; default false", examples=[False])] | None = None


RunState = Literal[
    "SCHEDULED", "PENDING", "RUNNING", "COMPLETED", "FAILED", "CANCELLING", "CANCELLED", "CRASHED", "PAUSED"
]


class IndexRun(msgspec.Struct):
    runId: str
    state: RunState
    agent: str
    summary: Annotated[dict[str, Any], Meta(description="the sync report, once completed")] | UnsetType = UNSET
    error: str | UnsetType = UNSET


class Problem(msgspec.Struct):
    """RFC 9457 problem details."""

    status: int
    title: str
    detail: str
    type: str = "about:blank"

    @classmethod
    def of(cls, status: int, detail: str) -> Problem:
        """The problem of `status` (its title the status's phrase): REST's error answers, and the document the
        CLI prints under `--json` when a command fails, so that a program reads one shape from either."""
        return cls(status=status, title=HTTPStatus(status).phrase, detail=detail)


def status_of(exc: MemsiftError) -> int:
    """The HTTP status REST answers this error with; for errors REST never meets in a request (the CLI's), the
    one it would: a configuration or query file that is wrong is the request's fault (400), an embedder that
    cannot start is unavailable (503), a provider that failed a bad gateway (502), anything else the server's."""
    if exc.status is not None:
        return exc.status
    if isinstance(exc, ConfigError | QueryFileError):
        return 400
    if isinstance(exc, EmbedderUnavailable):
        return 503
    if isinstance(exc, EmbeddingError):
        return 502
    return 500


class Readiness(msgspec.Struct):
    ready: bool
    embedder: Annotated[str, Meta(description="loading, loaded, none (keyword only) or why it is unavailable")]
    agents: Annotated[dict[str, str], Meta(description="per agent: ok, or why its index cannot be opened")]
    config: Annotated[
        ConfigState | UnsetType,
        Meta(description="an invalid configuration file does not make the server unready: the last valid one serves"),
    ] = UNSET
    workers: Annotated[
        str | UnsetType,
        Meta(description="with api.workers > 0: the search worker processes, 'N of N started' when ready"),
    ] = UNSET
    firstIndex: Annotated[
        dict[str, str] | UnsetType,
        Meta(
            description="per agent whose first index is not complete: how far it is. The server is not ready "
            "until the default agent's is; the others' are listed without holding readiness"
        ),
    ] = UNSET


class Health(msgspec.Struct):
    status: Literal["ok"] = "ok"


def query_too_large(query: str) -> str | None:
    """Why a query is refused for its size (REST's 413, MCP's tool error, the CLI's usage error), or None: one
    bound at every front door."""
    size = len(query.encode(errors="surrogatepass"))
    return f"query: {size} bytes, over the limit of {MAX_QUERY_BYTES}" if size > MAX_QUERY_BYTES else None


def has_lone_surrogate(value: Any) -> bool:
    """Whether a decoded JSON value holds half a UTF-16 pair (`"\\ud800"`): valid JSON syntax to Python's
    parser, no character to msgspec's or the `mcp` package's, which refuse the whole document."""
    if isinstance(value, str):
        return any("\ud800" <= ch <= "\udfff" for ch in value)
    if isinstance(value, list):
        return any(map(has_lone_surrogate, value))
    if isinstance(value, dict):
        return any(has_lone_surrogate(k) or has_lone_surrogate(v) for k, v in value.items())
    return False
