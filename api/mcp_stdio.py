"""`memsift mcp`'s stdio transport: stdin read by a daemon thread (a blocked read must not hold the exit), a
line that is not JSON-RPC answered as a JSON-RPC error, and the end of stdin passed on only once the requests
read before it are answered."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import AsyncIterable, AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any, TextIO

import anyio
import anyio.from_thread
import anyio.lowlevel
import mcp_types as types
from anyio.abc import ObjectSendStream
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.shared.message import SessionMessage

from api.schemas import has_lone_surrogate


@asynccontextmanager
async def answering_before_eof(
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
def claimed_stdin(terminal: TextIO | None) -> Iterator[TextIO]:
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
