"""`memsift mcp`: the tools `memory_search` and `memory_get` for an agent, over stdio or streamable HTTP.

Built on the `mcp` package's low-level `Server` rather than its decorator API: `memory_get` takes an argument
named `from` (a Python keyword), and a tool call must never end in a protocol error. Every failure (a bad
argument, an index that cannot be opened, a refused path) comes back as a tool result with `unavailable: true`
and a `reason`, so the agent reads why and carries on. Results have the REST shapes (SPEC section 4): the
search answer `{results, mode, provider, model, tookMs, degraded?, abstained?, warning?}` and the get answer
`{path, from, lines, text, totalLines, warning?}`, as structured content and as JSON text.

The calls run in worker threads on indexes leased from the agents REST serves (api.agents: the embedder loads
once, each thread has its own connection), so a `memory_get` or a second search does not wait for a search's
first index (minutes for thousands of notes): the get reads the file, the search answers from the batches
committed so far and says so in `degraded`. Each tool takes an optional `agent`, as REST's bodies do: the
default is `memsift --agent ID mcp`'s, the others are the configuration's `agents.<id>`. With `sync.watch` on,
memory files the agents write are synced as they change (api.watching), so a note written now is found by the
next search a debounce later.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from http import HTTPStatus
from importlib.metadata import version
from typing import Any, TextIO

import anyio
import anyio.from_thread
import anyio.lowlevel
import mcp_types as types
from anyio.abc import ObjectSendStream
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.server import Server
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.message import SessionMessage
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from api.agents import DEFAULT_AGENT, Agents
from api.catch_up import CatchUps
from api.progress import REQUEST_PROGRESS
from api.schemas import MAX_LINES, has_lone_surrogate, query_too_large
from core import Config, ConfigError, MemsiftError
from core.progress import Progress, ProgressEvent

SERVER_NAME = "memsift"
HTTP_PATH = "/mcp"

SEARCH_DESCRIPTION = (
    "Search the agent's long-term memory (MEMORY.md, memory/*.md notes and, when enabled, past session "
    "transcripts). Call this BEFORE answering anything about prior work, decisions, dates, people, "
    "preferences or to-dos, even when you think you remember. Returns the best matching snippets, each with "
    "path, startLine, endLine, score and a citation; a score estimates (0 to 1) how likely the hit is relevant, "
    "comparably across searches. Read more around a hit with memory_get. For a period, pass "
    "after/before (a date, or a duration back from now such as 7d). An empty list "
    "means nothing relevant is stored. If the result has unavailable=true, memory could not be searched: say "
    "so rather than guessing."
)
GET_DESCRIPTION = (
    "Read exact lines of one memory file (a path returned by memory_search, e.g. memory/2026-05-14.md or "
    "sessions/<id>.jsonl). Use it after memory_search to read only the lines you need around a hit. "
    f"`from` is the 1-based first line (default 1), `lines` how many (default: the rest, at most {MAX_LINES}; "
    "totalLines says how many the file has). A file that does not exist reads as empty text; paths outside "
    "the agent's memory are refused (unavailable=true)."
)

SEARCH_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "description": "what to look for, in the user's words"},
        "maxResults": {"type": "integer", "minimum": 1, "maximum": 100, "description": "default: search.maxResults"},
        "minScore": {"type": "number", "minimum": 0, "maximum": 1, "description": "default: search.minScore"},
        "after": {
            "type": "string",
            "description": "only notes dated at or after this: YYYY-MM-DD, an ISO date-time, today, yesterday, "
            "or a duration back from now such as 12h, 7d, 2w, 3m (months)",
        },
        "before": {"type": "string", "description": "only notes dated at or before this (same forms as after)"},
        "evergreen": {
            "type": "boolean",
            "description": "keep undated files (MEMORY.md, undated notes) when filtering by date (default true)",
        },
        "agent": {"type": "string", "description": "whose memory (set per server: the configured agents)"},
    },
    "required": ["query"],
    "additionalProperties": False,
}
GET_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": {"type": "string", "description": "workspace-relative path, as memory_search returns it"},
        "from": {"type": "integer", "minimum": 1, "description": "first line, 1-based (default 1)"},
        "lines": {
            "type": "integer",
            "minimum": 0,
            "maximum": MAX_LINES,
            "description": f"number of lines (default: the rest, at most {MAX_LINES})",
        },
        "agent": {"type": "string", "description": "whose memory (set per server: the configured agents)"},
    },
    "required": ["path"],
    "additionalProperties": False,
}


def tools_for(agents: list[str], default: str) -> list[types.Tool]:
    """The two tools, their `agent` argument listing the configured agents (an `enum`, so that a model picks
    one rather than inventing a name) and naming the default."""

    def schema(base: dict[str, Any]) -> dict[str, Any]:
        agent = {
            "type": "string",
            "enum": agents,
            "description": f"whose memory: one of the configured agents (default {default}, this server's own)",
        }
        return {**base, "properties": {**base["properties"], "agent": agent}}

    return [
        types.Tool(
            name="memory_search",
            description=SEARCH_DESCRIPTION,
            input_schema=schema(SEARCH_SCHEMA),
            annotations=types.ToolAnnotations(title="Search memory", read_only_hint=True, open_world_hint=False),
        ),
        types.Tool(
            name="memory_get",
            description=GET_DESCRIPTION,
            input_schema=schema(GET_SCHEMA),
            annotations=types.ToolAnnotations(title="Read memory lines", read_only_hint=True, open_world_hint=False),
        ),
    ]


class ToolArgumentError(MemsiftError, ValueError):
    """An argument is missing, unknown, of the wrong type or out of REST's bounds; the message names it."""

    status = 400  # as REST answers the same argument


_KINDS: dict[str, tuple[type, ...]] = {"string": (str,), "integer": (int,), "number": (int, float), "boolean": (bool,)}


def _argument(args: dict[str, Any], schema: dict[str, Any], name: str) -> Any:
    """The argument checked against its JSON type in `schema` (booleans are not numbers), or None if absent. An
    `integer` is, as JSON Schema has it, any number without a fraction: 2.0 is 2 (REST's api/strict.py too)."""
    value = args.get(name)
    if value is None:
        if name in schema["required"]:
            raise ToolArgumentError(f"{name}: required")
        return None
    kind = schema["properties"][name]["type"]
    if kind == "integer" and isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) != (kind == "boolean") or not isinstance(value, _KINDS[kind]):
        raise ToolArgumentError(f"{name}: expected {kind}, got {value!r}")
    return value


def _check_names(args: dict[str, Any], schema: dict[str, Any]) -> None:
    unknown = sorted(set(args) - set(schema["properties"]))
    if unknown:
        expected = ", ".join(schema["properties"])
        raise ToolArgumentError(f"unknown argument(s): {', '.join(unknown)}; expected {expected}")


class MemoryTools:
    """The two tools over the agents of one configuration; `call` never raises."""

    def __init__(self, config: Config, agent: str = DEFAULT_AGENT, configs: Mapping[str, Config] | None = None) -> None:
        """`config` is the main agent's (its `agents.<id>` are served too, or `configs`); `agent` answers a call
        naming none. An unknown `agent` is a ConfigError, before anything is served."""
        self.agents = Agents(config, agent, configs)
        self._running = 0  # calls in flight, for `settled`
        self._changed = threading.Condition()

    @property
    def catch_ups(self) -> CatchUps:
        return self.agents.catch_ups

    def settled(self, timeout: float) -> bool:
        """Whether the calls running, if any, have ended within `timeout` s (a search's first index or its
        catch-up sync may take minutes)."""
        with self._changed:
            return self._changed.wait_for(lambda: self._running == 0, timeout)

    def close(self) -> None:
        self.agents.close()

    def memory_search(self, args: dict[str, Any]) -> dict[str, Any]:
        _check_names(args, SEARCH_SCHEMA)
        query = _argument(args, SEARCH_SCHEMA, "query")
        if why := query_too_large(query):  # REST's 413: the same bound
            raise ToolArgumentError(why)
        min_score = _argument(args, SEARCH_SCHEMA, "minScore")
        evergreen = _argument(args, SEARCH_SCHEMA, "evergreen")
        options = {
            "max_results": _argument(args, SEARCH_SCHEMA, "maxResults"),
            "min_score": None if min_score is None else float(min_score),
            "after": _argument(args, SEARCH_SCHEMA, "after"),
            "before": _argument(args, SEARCH_SCHEMA, "before"),
            "evergreen": evergreen is not False,
        }
        # REST's path: a leased index, the notes changed since the last sync synced first (api.catch_up)
        _, response = self.agents.search(_argument(args, SEARCH_SCHEMA, "agent"), query, options)
        return response.to_dict()

    def memory_get(self, args: dict[str, Any]) -> dict[str, Any]:
        _check_names(args, GET_SCHEMA)
        path = _argument(args, GET_SCHEMA, "path")
        start = _argument(args, GET_SCHEMA, "from")
        count = _argument(args, GET_SCHEMA, "lines")
        if count is not None and count > MAX_LINES:  # the REST bound: one answer never carries a whole 8 MiB file
            raise ToolArgumentError(f"lines: at most {MAX_LINES}, got {count}; read on with `from`")
        with self.agents.lease(_argument(args, GET_SCHEMA, "agent")) as index:
            return index.get(path, 1 if start is None else start, MAX_LINES if count is None else count)

    def call(self, name: str, args: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        """(the tool's answer, whether it is an error); errors are `{unavailable: true, reason}`."""
        handlers: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
            "memory_search": self.memory_search,
            "memory_get": self.memory_get,
        }
        handler = handlers.get(name)
        with self._changed:
            self._running += 1
        try:
            if handler is None:
                raise ToolArgumentError(f"no tool named {name!r}; the tools are {', '.join(handlers)}")
            return handler(args), False
        except Exception as exc:  # the agent gets the reason as data; nothing escapes as a protocol error
            reason = str(exc) if isinstance(exc, MemsiftError) else f"{type(exc).__name__}: {exc}"
            answer: dict[str, Any] = {"unavailable": True, "reason": reason}
            if name == "memory_search":
                answer["results"] = []
            status = getattr(exc, "status", None)
            if status is not None:
                answer["status"] = status
            return answer, True
        finally:
            with self._changed:
                self._running -= 1
                self._changed.notify_all()


def build_server(tools: MemoryTools) -> Server:
    listed = tools_for(tools.agents.names, tools.agents.default)

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=listed)

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        # abandoned when cancelled (Ctrl-C, SIGTERM): a first index would otherwise hold the server's exit
        args = dict(params.arguments or {})
        reporting = REQUEST_PROGRESS.set(_progress_notifications(ctx.session))
        try:
            answer, failed = await anyio.to_thread.run_sync(tools.call, params.name, args, abandon_on_cancel=True)
        finally:
            REQUEST_PROGRESS.reset(reporting)
        text = json.dumps(answer, ensure_ascii=False)
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=text)], structured_content=answer, is_error=failed
        )

    return Server(
        SERVER_NAME,
        version=version("memsift"),  # the installed package's, as the OpenAPI document reports it
        instructions="Long-term memory of this agent: search it with memory_search before answering about "
        "prior work, decisions, dates, people, preferences or to-dos; read lines with memory_get.",
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


def _progress_notifications(session: Any) -> Progress:
    """A search's first index as `notifications/progress` for the call that runs it, when its client sent
    `_meta.progressToken` (the SDK sends nothing otherwise): a client that shows progress, or resets its request
    timeout on progress (the TypeScript SDK's `resetTimeoutOnProgress`), sees minutes of work rather than a
    silent call. Called on the call's worker thread; `progress` counts files written and chunks embedded, so it
    only grows, as MCP requires (an event that adds nothing is not sent)."""
    sent = [-1]

    def report(event: ProgressEvent) -> None:
        done = event.filesDone + event.chunksDone
        if done <= sent[0]:
            return
        sent[0] = done
        total = event.filesTotal + event.chunksTotal
        message = f"first index of this agent: {event.describe()}"
        try:
            anyio.from_thread.run(session.report_progress, done, total, message)
        except Exception:  # noqa: S110  (the call was cancelled, or the server is stopping: nobody to tell)
            pass

    return report


def run_mcp(
    config: Config,
    *,
    transport: str,
    host: str,
    port: int,
    agent: str = DEFAULT_AGENT,
    configs: Mapping[str, Config] | None = None,
    ready: Callable[[dict[str, str]], None] | None = None,
) -> int:
    """Serve `config` (the main agent's) and its `agents.<id>` until stdin closes (stdio) or the process is
    interrupted (HTTP), syncing the agents' memory files as they change (api.watching); a call that names no
    agent is answered for `agent` (`memsift --agent ID mcp`); `configs`, when given, are the agents served instead.
    Over HTTP, `ready` gets the address once the
    socket listens (`--json`)."""
    from api.first_index import StartupIndexing
    from api.runs import IndexRuns
    from api.serve import STOP_SECONDS, exit_mid_step, http_address, interrupt, is_loopback, listen_socket
    from api.watching import Watch

    tools = MemoryTools(config, agent, configs)  # every agent's configuration is read here, an unknown --agent refused
    tools.agents.say = _say  # a search's first index, as it goes: on stderr, which a client's log keeps
    sock = None
    if transport != "stdio":  # refused before anything starts
        if not config.api.key and not is_loopback(host):
            raise ConfigError(
                f"--host {host}: refusing to serve MCP beyond this machine without an API key; set api.key or "
                "MEMSIFT_API_KEY, or bind to 127.0.0.1"
            )
        sock = listen_socket(host, port, choose="--port")  # a port in use: one line, not uvicorn's exit 3
    server = build_server(tools)
    runs = IndexRuns()
    startup = StartupIndexing(tools.agents, _say)  # before the watcher: its catch-up leaves these agents out
    startup.start()
    watch = Watch(tools.agents.configs, runs, tools.agents.config, _say, first_indexes=startup.due)
    tools.catch_ups.watching = watch.watching
    # Both raise KeyboardInterrupt at once, as in `serve`: SIGTERM then ends in exit 0, not death by signal, and
    # SIGINT no longer goes through asyncio's cancellation, which waited for the thread reading stdin.
    previous = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        if sock is None:
            from mcp.server.stdio import stdio_server

            from api.terminal import whole_lines

            # a terminal on stdin: lines over 4 KiB, whole
            with whole_lines() as terminal, _claimed_stdin(terminal) as stdin:

                async def serve_stdio() -> None:
                    lines: Any = DaemonLines(stdin)  # an async iterable of lines is all stdio_server reads
                    async with stdio_server(lines) as streams, _answering_before_eof(*streams) as (read, write):
                        await server.run(read, write, server.create_initialization_options())

                anyio.run(serve_stdio)
        else:
            import uvicorn

            # The SDK guards only 127.0.0.1, localhost and ::1, and knows no key: `guarded` does it as `serve` does.
            unguarded = TransportSecuritySettings(enable_dns_rebinding_protection=False)
            app = guarded(
                server.streamable_http_app(streamable_http_path=HTTP_PATH, transport_security=unguarded), config.api.key
            )
            address = f"{http_address(host, port)}{HTTP_PATH}"
            _say(f"MCP (streamable HTTP) on {address}; Ctrl-C stops it")  # as `serve` says where it listens
            if ready is not None:
                ready({"mcp": address})
            uvicorn.Server(uvicorn.Config(app, access_log=False, log_level="warning")).run(sockets=[sock])
    except KeyboardInterrupt:
        pass
    finally:
        watch.stop()
        startup.stop()
        runs.close()
        if sock is not None:
            sock.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    # a first index (of a search) or a sync (of the watcher) mid-step: not waited for, as `serve` does
    if not (tools.settled(STOP_SECONDS) and runs.stopped(STOP_SECONDS) and startup.stopped(STOP_SECONDS)):
        exit_mid_step(runs.recorded_in_progress(), _say, "memsift mcp")
    tools.close()
    return 0


def guarded(app: ASGIApp, key: str | None) -> ASGIApp:
    """The MCP HTTP app behind what guards `serve`'s routes: with `api.key`, every request wants
    `Authorization: Bearer <key>` (401 otherwise); without one, a request a web page sent (a Host that is not
    this machine: 421, an Origin of another site: 403; api.local_only). The key was ignored, and the SDK's
    own check of Host and Origin left a server on 127.0.0.2 or [::1] open to any web page. An absolute-form
    target (`POST http://127.0.0.1:PORT/mcp`) is taken as `serve` takes it, its authority standing for the Host
    (api.app.origin_form): it was a 404."""
    from litestar.exceptions import HTTPException

    from api.app import BEARER_CHALLENGE, UNAUTHORIZED, has_key, origin_form, refuse_early
    from api.local_only import check

    async def guarded_app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            scope, not_ours = origin_form(scope)
            if not_ours is not None:
                await refuse_early(send, *not_ours)
                return
            headers = {name.decode("latin-1"): value.decode("latin-1") for name, value in scope["headers"]}
            refusal: tuple[int, str, dict[str, str]] | None = None
            if key:
                if not has_key(headers.get("authorization", ""), key):
                    refusal = (401, UNAUTHORIZED, BEARER_CHALLENGE)
            else:
                try:
                    check(headers)
                except HTTPException as exc:
                    refusal = (exc.status_code, exc.detail, {})
            if refusal is not None:
                status, detail, extra = refusal
                problem = {
                    "type": "about:blank",
                    "title": HTTPStatus(status).phrase,
                    "status": status,
                    "detail": detail,
                }
                await PlainTextResponse(
                    json.dumps(problem), status, headers=extra, media_type="application/problem+json"
                )(scope, receive, send)
                return
        await app(scope, receive, send)

    return guarded_app


@asynccontextmanager
async def _answering_before_eof(
    read: AsyncIterable[Any], write: ObjectSendStream[SessionMessage]
) -> AsyncIterator[tuple[MemoryObjectReceiveStream[Any], MemoryObjectSendStream[SessionMessage]]]:
    """The stdio streams, except that the end of stdin reaches the server only once every request read before
    it has been answered (or cancelled by the client). The `mcp` package cancels the calls in flight when its
    input ends, so a client that writes its requests and closes stdin (`printf ... | memsift mcp`, a
    harness's `subprocess.run(input=...)`) got the handshake back and no search; closing stdin still ends
    the server (MCP's stdio shutdown), after the answers."""
    pending: set[Any] = set()
    answered = [anyio.Event()]  # set, and replaced, after each answer is handed to stdout
    to_server, from_client = anyio.create_memory_object_stream[Any](0)
    to_client, from_server = anyio.create_memory_object_stream[SessionMessage](0)

    async def inbound() -> None:
        async with to_server:
            async for item in read:
                if isinstance(item, Exception):  # a line that is no JSON-RPC message: JSON-RPC's answer to it
                    if (answer := _unreadable(item)) is not None:
                        await write.send(SessionMessage(answer))
                    continue
                message = getattr(item, "message", None)
                if isinstance(message, types.JSONRPCRequest):
                    pending.add(message.id)
                elif isinstance(message, types.JSONRPCNotification) and message.method == "notifications/cancelled":
                    pending.discard((message.params or {}).get("requestId"))
                await to_server.send(item)
            while pending:
                await answered[0].wait()

    async def outbound() -> None:
        async with write, from_server:
            async for item in from_server:
                if isinstance(item.message, types.JSONRPCResponse | types.JSONRPCError):
                    pending.discard(item.message.id)
                await write.send(item)
                answered[0].set()
                answered[0] = anyio.Event()

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(inbound)
        tasks.start_soon(outbound)
        yield from_client, to_client


def _unreadable(exc: Exception) -> types.JSONRPCError | None:
    """The error a line of stdin that is no JSON (-32700) or no JSON-RPC message (-32600) gets, with a null id
    as JSON-RPC 2.0 asks; the `mcp` package dropped it without a word, and the client waited. A blank line is
    no message at all: None, no answer."""
    errors = exc.errors() if hasattr(exc, "errors") else []
    if errors and all(str(error.get("input", "x")).strip() == "" for error in errors):
        return None
    request_id = None
    if invalid := [error for error in errors if error.get("type") == "json_invalid"]:
        request_id = _surrogate_request_id(invalid[0].get("input"))
        message = (
            "Parse error: a \\ud800-\\udfff escape without its pair is no character"
            if request_id is not None
            else "Parse error: the line is not JSON"
        )
        error = types.ErrorData(code=types.PARSE_ERROR, message=message)
    else:
        error = types.ErrorData(code=types.INVALID_REQUEST, message="Invalid Request: not a JSON-RPC 2.0 message")
    return types.JSONRPCError(jsonrpc="2.0", id=request_id, error=error)


def _surrogate_request_id(line: Any) -> str | int | None:
    """The id of a request that is JSON but for a lone surrogate escape (`"\\ud800"`, which Python's parser takes
    and the `mcp` package's refuses), so that its error reaches the caller waiting for that id; else None."""
    try:
        message = json.loads(line)
    except (TypeError, ValueError):
        return None
    if not has_lone_surrogate(message):  # NaN, Infinity: Python's parser takes those too
        return None
    request_id = message.get("id") if isinstance(message, dict) else None
    return request_id if type(request_id) in (str, int) else None


@contextmanager
def _claimed_stdin(terminal: TextIO | None) -> Iterator[TextIO]:
    """The requests' text stream: `terminal` if stdin is one (api.terminal), else fd 0's pipe read through a
    descriptor of its own while fd 0 points at the null device, as the `mcp` package claims it (a child process
    reads EOF, never the protocol); fd 0 is restored on exit. That descriptor is never closed: a reader thread
    may still be blocked on it (DaemonLines)."""
    if terminal is not None:
        yield terminal
        return
    own = os.dup(0)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    try:
        yield open(own, encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115 - see above
    finally:
        os.dup2(own, 0)


class DaemonLines:
    """The lines of `stream`, each read by a daemon thread. The `mcp` package reads stdin in an AnyIO worker
    thread, which a stop cannot cancel and the interpreter's exit waits for: SIGINT or SIGTERM to a server whose
    client kept stdin open (a service manager, a client stopping it by signal) left it waiting for a line that
    never came, idle for minutes until killed. A daemon thread is left blocked in its read: the server ends."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def __aiter__(self) -> DaemonLines:
        return self

    async def __anext__(self) -> str:
        token = anyio.lowlevel.current_token()
        read = anyio.Event()
        got: list[str | BaseException] = []

        def readline() -> None:
            try:
                got.append(self._stream.readline())
            except BaseException as exc:  # handed to the reader, as a read in its own thread would raise it
                got.append(exc)
            try:
                anyio.from_thread.run_sync(read.set, token=token)
            except RuntimeError:  # the event loop has ended: nobody waits for this line
                pass

        threading.Thread(target=readline, name="memsift-stdin", daemon=True).start()
        await read.wait()
        line = got[0]
        if isinstance(line, BaseException):
            raise line
        if not line:
            raise StopAsyncIteration
        return line


def _say(line: str) -> None:
    """The server's own lines go to stderr: stdout carries the protocol."""
    # one write: print() writes the text and its newline apart, and a line from another thread landed between
    sys.stderr.write(f"memsift mcp: {line}\n")
    sys.stderr.flush()
