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
import signal
import sys
from collections.abc import Callable, Mapping
from http import HTTPStatus
from importlib.metadata import version
from typing import Any

import anyio
import anyio.from_thread
import anyio.lowlevel
import mcp_types as types
from mcp.server import Server
from mcp.server.transport_security import TransportSecuritySettings
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from api.agents import DEFAULT_AGENT
from api.mcp_stdio import DaemonLines, answering_before_eof, claimed_stdin
from api.mcp_tools import MemoryTools, tools_for
from api.progress import REQUEST_PROGRESS
from core import Config, ConfigError
from core.progress import Progress, ProgressEvent

SERVER_NAME = "memsift"
HTTP_PATH = "/mcp"


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
            with whole_lines() as terminal, claimed_stdin(terminal) as stdin:

                async def serve_stdio() -> None:
                    lines: Any = DaemonLines(stdin)  # an async iterable of lines is all stdio_server reads
                    async with stdio_server(lines) as streams, answering_before_eof(*streams) as (read, write):
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


def _say(line: str) -> None:
    """The server's own lines go to stderr: stdout carries the protocol."""
    # one write: print() writes the text and its newline apart, and a line from another thread landed between
    sys.stderr.write(f"memsift mcp: {line}\n")
    sys.stderr.flush()
