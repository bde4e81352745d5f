"""The routes of SPEC section 4: `/v1` (search, get, status, index runs) and the open health routes.

Handlers that touch an index or the model are synchronous and run in the server's worker threads
(`sync_to_thread=True`): apsw and onnxruntime release the GIL, so searches run side by side and only the
model call itself is shared. Errors are raised as exceptions and turned into problem details by `api.app`.
"""

from __future__ import annotations

from dataclasses import dataclass
from http import HTTPStatus
from typing import Annotated, Any

import msgspec
from litestar import Controller, Request, Response, get, post
from litestar.di import NamedDependency
from litestar.exceptions import HTTPException, NotFoundException, ValidationException
from litestar.openapi.datastructures import ResponseSpec
from litestar.openapi.spec import Operation
from litestar.params import FromPath, FromQuery, Parameter
from msgspec import UNSET
from prometheus_client import CONTENT_TYPE_LATEST

from api.agents import Agents
from api.local_only import REFUSALS
from api.metrics import Metrics
from api.runs import MAX_KEPT, IndexRuns, Run
from api.schemas import (
    MAX_AGENT_ID,
    MAX_LINES,
    AgentId,
    ConfigState,
    GetAnswer,
    GetRequest,
    Health,
    IndexRequest,
    IndexRun,
    Problem,
    Readiness,
    SearchAnswer,
    SearchRequest,
    Status,
    query_too_large,
)
from api.strict import StrictJSONBody, only_query_parameters
from core.config_home import AGENT_ID_PATTERN

PROBLEM_MEDIA_TYPE = "application/problem+json"

# Litestar adds `; charset=utf-8` to a text/ media type itself: prometheus_client's already has one, and a
# duplicate parameter makes the header invalid (Prometheus 3 refuses the scrape).
METRICS_MEDIA_TYPE = "; ".join(p for p in CONTENT_TYPE_LATEST.split("; ") if not p.startswith("charset="))


def problems(*statuses: int) -> dict[int, ResponseSpec]:
    """OpenAPI entries for the error answers a route can give, with the 421 and 403 of a server on loopback
    without a key (api.local_only guards every route; a client generated from the schema met them unlisted)."""
    return {
        status: ResponseSpec(
            data_container=Problem,
            description=HTTPStatus(status).phrase,
            media_type=PROBLEM_MEDIA_TYPE,
            generate_examples=False,
        )
        for status in sorted({*statuses, *REFUSALS})
    }


class QueryTooLarge(HTTPException):
    status_code = 413


@dataclass
class OptionalBody(Operation):
    """An operation whose body may be left out: Litestar marks every request body required in the OpenAPI
    document, even one with a default (`POST /v1/index` with no body is `{}`)."""

    def __post_init__(self) -> None:
        if self.request_body is not None:
            self.request_body.required = False


class MemoryController(Controller):
    """Search, get, status and index runs of one agent's memory."""

    path = "/v1"
    tags = ["memory"]

    @post(
        "/search",
        status_code=200,
        sync_to_thread=True,
        summary="Hybrid search",
        responses=problems(400, 401, 404, 413, 415, 503),
    )
    def search(
        self, data: StrictJSONBody[SearchRequest], agents: NamedDependency[Agents], metrics: NamedDependency[Metrics]
    ) -> SearchAnswer:
        if why := query_too_large(data.query):
            raise QueryTooLarge(why)
        options = {
            "max_results": data.max_results,
            "min_score": data.min_score,
            "mode": data.mode,
            "path_prefix": data.path_prefix,
            "after": data.after,
            "before": data.before,
            "evergreen": data.evergreen is not False,
            "explain": data.explain is True,
            "rerank": data.rerank,
        }
        agent, response = agents.search(data.agent, data.query, options)
        metrics.observe_search(agent, response)
        return msgspec.convert(response.to_dict(), SearchAnswer)

    @post(
        "/get",
        status_code=200,
        sync_to_thread=True,
        summary="A line range of one memory file",
        description=f"Reads only memory files. Without `lines`, the rest of the file up to {MAX_LINES} lines.",
        responses=problems(400, 401, 403, 404, 413, 415, 422, 503),
    )
    def get_lines(self, data: StrictJSONBody[GetRequest], agents: NamedDependency[Agents]) -> GetAnswer:
        with agents.lease(data.agent) as index:
            doc = index.get(data.path, data.start or 1, MAX_LINES if data.lines is None else data.lines)
        return msgspec.convert(doc, GetAnswer)

    @get("/status", sync_to_thread=True, summary="Index and embedder state", responses=problems(400, 401, 404, 503))
    def status(
        self,
        request: Request[Any, Any, Any],
        agents: NamedDependency[Agents],
        # Litestar checks a query parameter's bounds given here, not AgentId's own: `?agent=` was the default agent
        agent: Annotated[
            AgentId | None,
            Parameter(min_length=1, max_length=MAX_AGENT_ID, schema_extra={"pattern": AGENT_ID_PATTERN}),
        ] = None,
        deep: FromQuery[bool] = False,
    ) -> Status:
        from flows.ratelimit import rate_limit_status

        only_query_parameters(request, "agent", "deep")
        # `?agent=main&agent=work` answered for the last one, in silence: which one was meant is not known.
        if twice := sorted(k for k in set(request.query_params) if len(request.query_params.getall(k)) > 1):
            raise ValidationException(extra=[{"key": twice[0], "message": "given more than once; give it once"}])

        with agents.lease(agent) as index:
            doc = index.status(deep=deep)
        doc["rateLimit"] = rate_limit_status(index.config)  # as `memsift status --json` adds it
        return msgspec.convert(doc, Status)  # SPEC: the document of `memsift status --json`, no more

    @post(
        "/index",
        status_code=202,
        sync_to_thread=True,
        summary="Start a sync (a Prefect flow run)",
        responses=problems(400, 401, 404, 413, 415, 503),
        operation_class=OptionalBody,
    )
    def start_index(
        self,
        agents: NamedDependency[Agents],
        runs: NamedDependency[IndexRuns],
        data: StrictJSONBody[IndexRequest] = IndexRequest(),  # noqa: B008  (no body, as `curl -X POST` sends: `{}`)
    ) -> IndexRun:
        return _answer(runs.start(agents.config(data.agent), data.force is True))

    @get(
        "/index/{runId:str}",
        sync_to_thread=True,
        summary="The state of an index run",
        responses=problems(400, 401, 404, 503),
    )
    def index_run(
        self,
        request: Request[Any, Any, Any],
        runId: FromPath[str],  # noqa: N803
        runs: NamedDependency[IndexRuns],
    ) -> IndexRun:
        only_query_parameters(request)
        run = runs.get(runId)
        if run is None:
            raise NotFoundException(f"no index run {runId!r} (runs are kept in memory, the newest {MAX_KEPT})")
        return _answer(run)


def _readiness(agents: Agents) -> Readiness:
    """Ready once the model has loaded, every agent's index opens, every search worker has started and the
    default agent's first index is complete (a server starts it at start-up, api.first_index): before, a
    server of an agent never indexed said ready at once, and its first search then took minutes, or answered
    from part of the notes. The other agents' first indexes are listed without holding it."""
    indexes = agents.check()
    ready = agents.ready.is_set() and all(state == "ok" for state in indexes.values())
    config = UNSET if agents.config_state is None else msgspec.convert(agents.config_state, ConfigState)
    workers = UNSET if agents.pool is None else agents.pool.state
    ready = ready and (agents.pool is None or agents.pool.started)
    first = agents.first_index_states()
    ready = ready and agents.default not in first
    return Readiness(
        ready=ready,
        embedder=agents.embedder_state,
        agents=indexes,
        config=config,
        workers=workers,
        firstIndex=first or UNSET,
    )


def _answer(run: Run) -> IndexRun:
    return IndexRun(
        runId=run.id,
        state=run.state,
        agent=run.agent,
        summary=UNSET if run.summary is None else run.summary,
        error=UNSET if run.error is None else run.error,
    )


class HealthController(Controller):
    """Liveness, readiness and metrics: open even when an API key is set."""

    tags = ["health"]

    @get("/healthz", sync_to_thread=False, summary="Liveness", responses=problems())
    def healthz(self) -> Health:
        return Health()

    @get(
        "/readyz",
        sync_to_thread=True,
        summary="Readiness",
        responses={
            **problems(),
            503: ResponseSpec(
                Readiness,
                description="Not ready: the model is loading, an index cannot be opened or the default agent's "
                "first index is not complete",
            ),
        },
    )
    def readyz(self, agents: NamedDependency[Agents]) -> Response[Readiness]:
        answer = _readiness(agents)
        return Response(answer, status_code=200 if answer.ready else 503)

    @get(
        "/metrics",
        sync_to_thread=True,
        summary="Prometheus metrics",
        media_type=METRICS_MEDIA_TYPE,
        responses=problems(),
    )
    def metrics(self, metrics: NamedDependency[Metrics]) -> bytes:
        return metrics.exposition()
