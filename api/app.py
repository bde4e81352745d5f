"""The Litestar app of SPEC section 4: `create_app(config)`.

The factory wires the routes to one agent pool, one index-run registry and one set of metrics, and adds what
every route shares: problem details (RFC 9457) for every error, with a `detail` that names the field or says
what to do; the API key guard on `/v1` (health, metrics and docs stay open); the 64 KiB body limit; the
OpenAPI 3.1 schema at `/schema/openapi.json` and the offline docs page at `/schema`.
"""

from __future__ import annotations

import hmac
import logging
import sys
import threading
from http import HTTPStatus
from importlib.metadata import version
from typing import Any
from urllib.parse import unquote, urlsplit

import msgspec
from litestar import Litestar, Request, Response, Router
from litestar.connection import ASGIConnection
from litestar.datastructures import State
from litestar.di import Provide
from litestar.exceptions import HTTPException, NotAuthorizedException, ValidationException
from litestar.exceptions.http_exceptions import RequestEntityTooLarge
from litestar.handlers import BaseRouteHandler
from litestar.openapi import OpenAPIConfig
from litestar.openapi.spec import Components, SecurityScheme
from litestar.static_files import create_static_files_router
from litestar.types import Guard

from api.agents import DEFAULT_AGENT, Agents
from api.docs import DESCRIPTION, STATIC_DIR, STATIC_PATH, OfflineRedoc, docs_page
from api.local_only import local_only
from api.metrics import HEAD_AS_GET, Metrics, request_metrics
from api.routes import PROBLEM_MEDIA_TYPE, HealthController, MemoryController
from api.runs import IndexRuns
from api.schemas import Problem
from api.strict import strict_body
from core import Config, MemsiftError

MAX_BODY_BYTES = 64 * 1024

log = logging.getLogger("memsift.api")


class _Stderr(logging.StreamHandler):
    """The server's own errors on stderr, whatever the root logger does. A 500 tells the client that the
    server log has the details, but once Prefect is imported (an index run, the watcher's sync) the root
    logger's one handler is Prefect's console handler, at the level the CLI quiets Prefect's chatter to
    (CRITICAL): the traceback went nowhere. `sys.stderr` is looked up at each record, not kept."""

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(logging.Formatter("%(name)s: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr
        super().emit(record)


if not log.handlers:
    log.addHandler(_Stderr())
    log.propagate = False


class _App(Litestar):
    """Litestar, with HEAD answered as GET is, headers (Content-Length included) and no body: `curl -I`, `wget
    --spider` and load balancers' health checks send it, and Litestar answers 405 to a HEAD no handler lists.
    One rule here rather than a HEAD handler beside each GET; a HEAD of a route without GET is still a 405.
    The request metrics count it as the HEAD it is (api.metrics.request_metrics)."""

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await super().__call__(scope, receive, send)
        scope, refusal = origin_form(scope)
        if refusal is not None:
            return await refuse_early(send, *refusal)
        if (why := _bad_port(scope)) is not None:
            return await refuse_early(send, 400, why)
        send = _allowing_head(send)
        if scope["method"] != "HEAD":
            return await super().__call__(scope, receive, send)

        async def headers_only(message: Any) -> None:
            if message["type"] == "http.response.body":
                message = {**message, "body": b""}
            await send(message)

        # A copy: the server keeps its own scope saying HEAD, and so sends no body whatever it is given.
        await super().__call__({**scope, "method": "GET", HEAD_AS_GET: True}, receive, headers_only)


def _allowing_head(send: Any) -> Any:
    """`send`, with HEAD added to an `Allow` header (a 405, an OPTIONS answer) that lists GET: every GET route
    answers HEAD (above), but Litestar's `Allow` said `GET, OPTIONS`, so a client reading it learnt otherwise."""

    async def sending(message: Any) -> None:
        if message["type"] == "http.response.start":
            headers = [
                (name, _with_head(value) if name.lower() == b"allow" else value) for name, value in message["headers"]
            ]
            message = {**message, "headers": headers}
        await send(message)

    return sending


def _with_head(allow: bytes) -> bytes:
    methods = [m.strip() for m in allow.split(b",")]
    return b", ".join(sorted({*methods, b"HEAD"})) if b"GET" in methods else allow


def origin_form(scope: Any) -> tuple[Any, tuple[int, str] | None]:
    """The request of an absolute-form target (`GET http://127.0.0.1:8000/v1/status HTTP/1.1`, as some proxies
    and clients set to use a proxy send it) as its origin-form, `/v1/status` with the authority as its Host: an
    origin server must take that form and use its authority in place of the Host header (RFC 9112 section
    3.2.2). uvicorn passes the whole URL on as the path, which every route answered 404. The authority then
    meets every rule a Host does (the loopback guard's 421 for another name: api.local_only); one naming
    another port, another scheme or a user is no request for this server (421, 400): it is no proxy. Returns
    the scope, and the status and detail of a refusal (for `refuse_early`) or None. Public: any ASGI app this
    package serves under uvicorn (`memsift mcp --http`'s) meets the same targets."""
    raw = scope.get("raw_path") or scope["path"].encode()
    if not raw[:8].lower().startswith((b"http://", b"https://")):
        return scope, None
    target = raw.decode("latin-1")
    try:
        parts = urlsplit(target)
        port = parts.port or {"http": 80, "https": 443}[parts.scheme]
    except ValueError as exc:
        return scope, (400, f"request target {target!r}: {exc}")
    if not parts.hostname or "@" in parts.netloc:  # RFC 9110 section 4.2.4: a user in an http URL is an error
        return scope, (400, f"request target {target!r}: an absolute URL here names a host and no user")
    scheme, server = scope.get("scheme", "http"), scope.get("server")
    if parts.scheme != scheme or (server is not None and port != server[1]):
        here = f"{scheme} on port {server[1]}" if server else scheme
        return scope, (421, f"request target {target!r}: not this server, which answers {here} (it is no proxy)")
    path = parts.path or "/"
    headers = [(name, value) for name, value in scope["headers"] if name != b"host"]
    origin = {**scope, "path": unquote(path), "raw_path": path.encode("latin-1")}
    return origin | {"headers": [(b"host", parts.netloc.encode("latin-1")), *headers]}, None


def _bad_port(scope: Any) -> str | None:
    """Why the `Host` header's port is none (`localhost:abc`, `:99999`), or None. Litestar reads the request's
    URL in its metrics middleware, before any guard, and again in the error handler: such a port raised
    ValueError in both, and the client got a text/plain 500."""
    host = next((value for name, value in scope["headers"] if name == b"host"), None)
    if host is None:
        return None
    text = host.decode("latin-1")
    try:
        parts = urlsplit(f"//{text}")
    except ValueError:  # "[::1": Litestar reads it, and the loopback check answers it (421)
        return None
    try:
        parts.port  # noqa: B018  (the property parses the port, raising ValueError)
    except ValueError as exc:
        return f"Host {text!r}: {exc}"
    return None


async def refuse_early(send: Any, status: int, detail: str) -> None:
    """A problem document sent as ASGI messages, for a request Litestar cannot take in."""
    body = msgspec.json.encode(Problem.of(status, detail))
    headers = [(b"content-type", PROBLEM_MEDIA_TYPE.encode()), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def create_app(config: Config, default_agent: str = DEFAULT_AGENT, *, loopback_only: bool = False) -> Litestar:
    """The API for the main agent of `config` and its `agents.<id>`, answering for `default_agent` when a
    request names none; `api.key` (or MEMSIFT_API_KEY) set makes every `/v1` route require
    `Authorization: Bearer <key>`. `loopback_only` (a server on loopback without a key) refuses requests a web
    page sent (api.local_only)."""
    metrics = Metrics()
    agents = Agents(config, default_agent)
    if config.api.workers:
        from api.search_pool import SearchPool

        agents.pool = SearchPool(config, config.api.workers)
    metrics.track_indexes(lambda: agents.names, agents.lease)
    runs = IndexRuns()
    key = config.api.key

    def start() -> None:
        threading.Thread(target=agents.warm_up, name="memsift-warm-up", daemon=True).start()

    def stop() -> None:
        runs.close()
        agents.close()

    memory = Router(
        path="/",
        route_handlers=[MemoryController],
        guards=[bearer_guard(key)] if key else [],
        before_request=strict_body,
        security=[{"bearer": []}] if key else None,
    )
    return _App(
        route_handlers=[
            memory,
            HealthController,
            docs_page,
            create_static_files_router(path=STATIC_PATH, directories=[STATIC_DIR], include_in_schema=False),
        ],
        dependencies={
            "agents": Provide(lambda: agents, sync_to_thread=False),
            "runs": Provide(lambda: runs, sync_to_thread=False),
            "metrics": Provide(lambda: metrics, sync_to_thread=False),
        },
        state=State({"agents": agents, "runs": runs, "metrics": metrics}),
        exception_handlers={
            HTTPException: _http_problem,
            **{kind: _problem_of for kind in (MemsiftError, Exception)},
        },
        middleware=[request_metrics().middleware],
        guards=[local_only] if loopback_only else None,
        logging_config=None,  # the server's (uvicorn's) logging stays as it is; the app adds no handlers
        request_max_body_size=MAX_BODY_BYTES,
        on_startup=[start],
        on_shutdown=[stop],
        openapi_config=OpenAPIConfig(
            title="memsift",
            version=version("memsift"),
            description=DESCRIPTION,
            path="/schema",
            render_plugins=[OfflineRedoc()],
            components=Components(
                security_schemes={"bearer": SecurityScheme(type="http", scheme="bearer")} if key else None
            ),
        ),
    )


#: Why a request without the key is refused, and the header that says how to authenticate (REST and MCP).
UNAUTHORIZED = "missing or wrong API key: send `Authorization: Bearer <key>` (the server's api.key)"
BEARER_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="memsift"'}


def has_key(authorization: str, key: str) -> bool:
    """Whether an `Authorization` header (as the server decoded it, Latin-1) is `Bearer <key>`, in constant time."""
    expected = key.encode()
    scheme, _, token = authorization.partition(" ")
    # The server decodes the header's bytes as Latin-1. A key with "ü" or "鍵" sent in UTF-8 (curl, httpx)
    # is those bytes as sent; sent in Latin-1 (Python's http.client, requests), it is the decoded text.
    # Both compared, always: a UTF-8 one was re-encoded into other bytes and never matched.
    token = token.strip()
    as_sent = hmac.compare_digest(token.encode("latin-1"), expected)
    as_text = hmac.compare_digest(token.encode(), expected)
    return scheme.lower() == "bearer" and (as_sent or as_text)


def bearer_guard(key: str) -> Guard:
    def guard(connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
        if not has_key(connection.headers.get("authorization", ""), key):
            raise NotAuthorizedException(UNAUTHORIZED, headers=BEARER_CHALLENGE)

    return guard


def problem(status: int, detail: str, headers: dict[str, str] | None = None) -> Response[Problem]:
    return Response(
        Problem.of(status, detail),
        status_code=status,
        media_type=PROBLEM_MEDIA_TYPE,
        headers=headers,
    )


def _http_problem(request: Request[Any, Any, Any], exc: HTTPException) -> Response[Problem]:
    """Litestar's own errors (validation, 401, 404, 405, 413) with a detail a client can act on."""
    if isinstance(exc, ValidationException) and isinstance(exc.extra, list) and exc.extra:
        detail = "; ".join(_field_error(e, request.query_params) for e in exc.extra if isinstance(e, dict))
    elif isinstance(exc, RequestEntityTooLarge):
        detail = f"the request body is over the limit of {MAX_BODY_BYTES} bytes"
    elif exc.detail == HTTPStatus(exc.status_code).phrase:  # Litestar said nothing more than the status
        detail = f"{exc.detail}: {request.method} {request.url.path}"
        if allow := (exc.headers or {}).get("allow"):  # `GET /v1/search` said only that GET was wrong
            methods = sorted(m.strip() for m in _with_head(allow.encode()).decode().split(","))  # in one order
            detail += f"; this route answers {', '.join(methods)}"
    else:
        detail = exc.detail
    return problem(exc.status_code, detail, exc.headers)


def _field_error(error: dict[str, Any], query: Any) -> str:
    """'maxResults: Expected `int` <= 100' (Litestar names the whole body 'data'). Of a query parameter, whose
    value is always text, msgspec's "Expected `bool`, got `str`" says nothing: the words it takes instead."""
    key = error.get("key") or "body"
    message = error.get("message", "invalid")
    if error.get("source") == "query" and message == "Expected `bool`, got `str`":
        message = f"expected true or false, got {query.get(key)!r}"
    return f"{'body' if key == 'data' else key}: {message}"


def _problem_of(request: Request[Any, Any, Any], exc: Exception) -> Response[Problem]:
    if isinstance(exc, MemsiftError) and exc.status is not None:
        return problem(exc.status, str(exc))
    if isinstance(exc, RecursionError):  # msgspec decoding a deeply nested JSON body; Litestar lets it through
        return problem(400, "body: JSON nested too deeply to decode")
    log.exception("%s %s failed", request.method, request.url.path, exc_info=exc)
    return problem(500, f"internal error ({type(exc).__name__}); the server log has the details")
