"""`memsift mcp` (api/mcp.py): a real `memsift mcp` process, driven by the `mcp` package's own client over
stdio and over streamable HTTP; every failure comes back as a result with `unavailable` and a reason."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from conftest import stop_process, wait_for
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from api.mcp_tools import MemoryTools, tools_for
from core import load_config
from core.memory import MemoryIndex
from tests.fake_provider import FakeProvider
from tests.sample import NOTES

MEMSIFT = Path(sys.executable).parent / "memsift"


@pytest.fixture
def ws(workspace, memsift_home) -> Path:
    root = workspace(NOTES)
    with MemoryIndex(load_config(workspace=root)) as index:
        index.sync()
    return root


def _env(memsift_home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMSIFT_", "PREFECT_API_URL"))}
    env["MEMSIFT_HOME"] = str(memsift_home)
    return env


async def _call(client: Client, name: str, args: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    result = await client.call_tool(name, args)
    assert json.loads(result.content[0].text) == result.structured_content  # the same answer, as text for agents
    return result.structured_content, result.is_error


async def _exercise(client: Client) -> None:
    """The checks both transports must pass."""
    tools = {t.name: t for t in (await client.list_tools()).tools}
    assert set(tools) == {"memory_search", "memory_get"}
    search_text = tools["memory_search"].description.lower()
    for word in ("before answering", "decisions", "dates", "people", "preferences", "to-dos"):
        assert word in search_text
    assert tools["memory_search"].input_schema["required"] == ["query"]
    assert set(tools["memory_get"].input_schema["properties"]) == {"path", "from", "lines", "agent"}
    assert {"after", "before", "evergreen"} <= set(tools["memory_search"].input_schema["properties"])

    answer, failed = await _call(client, "memory_search", {"query": "flat white", "maxResults": 3, "minScore": 0})
    assert not failed
    assert set(answer) >= {"results", "mode", "provider", "model", "tookMs"}
    top = answer["results"][0]
    assert set(top) >= {"path", "startLine", "endLine", "score", "snippet", "source", "citation"}
    assert (top["path"], top["source"]) == ("MEMORY.md", "memory") and len(answer["results"]) <= 3

    answer, failed = await _call(client, "memory_get", {"path": "memory/2026-05-14.md", "from": 2, "lines": 2})
    assert not failed
    assert answer == {"path": "memory/2026-05-14.md", "from": 2, "lines": 2, "totalLines": 11,
                      "text": "line 2: deploy log entry number 2\nline 3: deploy log entry number 3"}  # fmt: skip

    # Time filters: daily notes by the date in their name; MEMORY.md (evergreen) kept unless evergreen is false.
    answer, failed = await _call(
        client, "memory_search", {"query": "deploy Priya", "after": "2026-05-15", "minScore": 0}
    )
    assert not failed and {h["path"] for h in answer["results"]} == {"MEMORY.md", "memory/2026-05-15.md"}, answer
    args = {"query": "deploy Priya", "before": "2026-05-14", "evergreen": False, "minScore": 0}
    answer, failed = await _call(client, "memory_search", args)
    assert not failed and {h["path"] for h in answer["results"]} == {"memory/2026-05-14.md"}, answer

    for name, args, reason in [
        ("memory_search", {"query": "x", "after": "soon"}, "after: 'soon' is not a date"),
        ("memory_search", {"query": "x", "after": "1d", "before": "2d"}, "after: '1d' is later than before: '2d'"),
        ("memory_search", {"query": "x", "evergreen": "no"}, "evergreen: expected boolean"),
        ("memory_search", {"query": "x", "before": 7}, "before: expected string"),
        ("memory_search", {"query": "   "}, "query: must not be blank"),
        ("memory_search", {"query": "x", "maxResults": "five"}, "maxResults: expected integer"),
        ("memory_search", {"query": "x", "maxResults": 500}, "maxResults: 500 is out of range"),
        ("memory_search", {"query": "x", "limit": 5}, "unknown argument(s): limit"),
        ("memory_get", {"path": "/etc/passwd"}, "absolute paths are refused"),
        ("memory_get", {"path": "memory/2026-05-14.md", "from": 0}, "from: must be 1 or more"),
        ("memory_forget", {}, "no tool named 'memory_forget'"),
    ]:
        answer, failed = await _call(client, name, args)
        assert failed and answer["unavailable"] is True and reason in answer["reason"], (args, answer)
    answer, _ = await _call(client, "memory_search", {"query": ""})
    assert answer["results"] == []  # an agent reading `results` sees none
    answer, failed = await _call(client, "memory_search", {"query": "ERR_SSL_PROTOCOL_ERROR"})
    assert not failed and answer["results"][0]["path"] == "memory/2026-05-14.md"  # still serving after errors


def test_stdio_server_with_the_mcp_client(ws: Path, memsift_home: Path) -> None:
    params = StdioServerParameters(
        command=str(MEMSIFT), args=["--workspace", str(ws), "mcp"], env=_env(memsift_home), cwd=str(ws)
    )

    async def main() -> None:
        async with Client(params, read_timeout_seconds=120) as client:
            await _exercise(client)

    anyio.run(main)


def test_requests_written_before_stdin_closes_are_all_answered(ws: Path, memsift_home: Path) -> None:
    """A client may write its requests and close stdin at once (`printf ... | memsift mcp`): every request
    gets its answer before the server exits, a search (which loads the model) included, a line that is no
    JSON-RPC message gets JSON-RPC's error (it got nothing; one with a lone surrogate, the error with its id),
    and stdout holds nothing but those answers."""
    opening = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "pipe", "version": "1"}}
    calls = {
        2: ("memory_search", {"query": "flat white", "minScore": 0}),
        "three": ("memory_get", {"path": "MEMORY.md", "lines": 1}),
        4: ("memory_search", {"query": ""}),
    }
    messages = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": opening},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        *(
            {"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {"name": name, "arguments": args}}
            for i, (name, args) in calls.items()
        ),
    ]
    lines = [json.dumps(m) for m in messages]
    lines[2:2] = ["not json", "", '{"method": "tools/list"}']  # no JSON; a blank line; no JSON-RPC message
    # JSON but for a lone surrogate, which the `mcp` package refuses: its error carries the id the client awaits
    lines.append('{"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "memory_search", '
                 '"arguments": {"query": "tea \\ud800"}}}')  # fmt: skip
    proc = subprocess.run(
        [str(MEMSIFT), "--workspace", str(ws), "mcp"],
        input="".join(line + "\n" for line in lines),
        capture_output=True,
        text=True,
        env=_env(memsift_home),
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    unreadable: list[int] = []
    answers: dict[Any, dict[str, Any]] = {}
    for answer in map(json.loads, proc.stdout.splitlines()):
        if answer["id"] is None:  # JSON-RPC's answer to a line it cannot read: the client is not left waiting
            unreadable.append(answer["error"]["code"])
        else:
            answers[answer["id"]] = answer
    assert unreadable == [-32700, -32600], proc.stdout
    assert set(answers) == {1, *calls, 5}, proc.stdout
    assert answers[2]["result"]["structuredContent"]["results"], answers[2]
    assert answers["three"]["result"]["structuredContent"]["text"] == "# Memory"
    assert answers[4]["result"]["isError"] is True
    assert answers[5]["error"] == {
        "code": -32700,
        "message": "Parse error: a \\ud800-\\udfff escape without its pair is no character",
    }


def test_stdio_server_syncs_what_the_agent_writes(ws: Path, memsift_home: Path) -> None:
    """A note written while no server ran is caught up at start; one the agent writes while it runs is found
    a debounce later, with nothing but the MCP server running (api/watching.py)."""
    (ws / "memory" / "2026-06-01.md").write_text("# 2026-06-01\n- The zebra count at the reserve was 41.\n")
    env = _env(memsift_home) | {"MEMSIFT_SYNC_WATCHDEBOUNCEMS": "100"}
    params = StdioServerParameters(command=str(MEMSIFT), args=["--workspace", str(ws), "mcp"], env=env, cwd=str(ws))

    async def found(client: Client, query: str, path: str, what: str) -> None:
        deadline = time.monotonic() + 60
        while True:
            answer, failed = await _call(client, "memory_search", {"query": query, "minScore": 0})
            if not failed and path in {hit["path"] for hit in answer["results"]}:
                return
            assert time.monotonic() < deadline, f"timed out waiting for {what}: {answer}"
            await anyio.sleep(0.1)  # polling the server's state, not synchronising with it

    async def main() -> None:
        async with Client(params, read_timeout_seconds=120) as client:
            await found(client, "zebra count", "memory/2026-06-01.md", "the note written while no server ran")
            (ws / "memory" / "2026-06-02.md").write_text("# 2026-06-02\n- The yak shaving ended on Tuesday.\n")
            await found(client, "yak shaving", "memory/2026-06-02.md", "the note written while serving")

    anyio.run(main)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_streamable_http_server_with_the_mcp_client(ws: Path, memsift_home: Path) -> None:
    port = _free_port()
    proc = subprocess.Popen(
        [MEMSIFT, "--workspace", ws, "mcp", "--transport", "http", "--port", str(port)],
        env=_env(memsift_home), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        deadline = time.monotonic() + 60
        while True:  # wait until the port answers; between tries, wait on the process (it must not exit)
            try:
                httpx.get(url, timeout=1)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "the MCP HTTP server did not start"
            with pytest.raises(subprocess.TimeoutExpired):
                proc.wait(timeout=0.1)

        async def main() -> None:
            async with Client(url, read_timeout_seconds=120) as client:
                await _exercise(client)

        anyio.run(main)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.mark.parametrize(("host", "shown"), [("127.0.0.1", "127.0.0.1"), ("[::1]", "[::1]"), ("::1", "[::1]")])
def test_http_says_where_it_listens_and_json_prints_the_address(
    ws: Path, memsift_home: Path, host: str, shown: str
) -> None:
    """`mcp --http` said only "watching main": not where, nor when it answers, as `serve` does; with `--json`
    stdout held nothing, where `serve --json` holds one document of its addresses. `--host [::1]` was
    shown as `http://[[::1]]:P/mcp`, an address no client takes."""
    if ":" in host and not socket.has_ipv6:
        pytest.skip("no IPv6")
    port = _free_port()
    proc = subprocess.Popen(
        [MEMSIFT, "--workspace", ws, "mcp", "--http", "--host", host, "--port", str(port), "--json"],
        env=_env(memsift_home), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    url = f"http://{shown}:{port}/mcp"
    try:
        wait_for(lambda: _answers(url) or proc.poll() is not None, 60, "the MCP HTTP server to answer")
        assert proc.poll() is None, proc.stderr.read()
    finally:
        proc.terminate()
        out, err = proc.communicate(timeout=30)
    assert json.loads(out) == {"mcp": url} and out.count("\n") == 1, out
    assert f"memsift mcp: MCP (streamable HTTP) on {url}; Ctrl-C stops it\n" in err, err


def _answers(url: str) -> bool:
    try:
        httpx.get(url, timeout=1)
    except httpx.TransportError:
        return False
    return True


def test_http_refuses_an_address_beyond_this_machine(ws: Path, memsift_home: Path) -> None:
    proc = subprocess.run(
        [MEMSIFT, "--workspace", ws, "mcp", "--http", "--host", "0.0.0.0"],
        capture_output=True, text=True, env=_env(memsift_home), timeout=60,
    )  # fmt: skip
    assert proc.returncode == 1 and "without an API key" in proc.stderr and "Traceback" not in proc.stderr


def test_http_on_a_port_in_use_fails_in_one_line(ws: Path, memsift_home: Path) -> None:
    """Exit 1 and one line naming the port (it was uvicorn's exit 3 and its `[Errno 98]` log line)."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.run(
            [MEMSIFT, "--workspace", ws, "mcp", "--http", "--port", str(port)],
            capture_output=True, text=True, env=_env(memsift_home), timeout=60,
        )  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    in_use = f"--port {port}: 127.0.0.1:{port} is in use by another process (choose another with --port)"
    assert proc.stderr == f"memsift: error: {in_use}\n"


def test_an_index_that_cannot_be_opened_is_a_result(ws: Path, memsift_home: Path) -> None:
    config = load_config(workspace=ws)
    config.db_path.write_bytes(b"this is not a database" * 100)
    tools = MemoryTools(config)
    try:
        answer, failed = tools.call("memory_search", {"query": "flat white"})
    finally:
        tools.close()
    assert failed and answer["unavailable"] is True and answer["results"] == [] and answer["reason"]


def test_a_note_written_just_before_a_search_is_found_by_it(ws: Path, memsift_home: Path) -> None:
    """An agent writes a note and searches at once, within the watcher's debounce: the search syncs what
    changed first, and no hit names lines the edited note no longer holds."""
    (ws / "memory" / "2026-05-15.md").write_text("# 2026-05-15\n\n- The zebra count at the reserve was 41.\n")
    tools = MemoryTools(load_config(workspace=ws))
    try:
        answer, failed = tools.call("memory_search", {"query": "zebra count", "minScore": 0})
    finally:
        tools.close()
    assert not failed, answer
    assert (answer["results"][0]["path"], answer["results"][0]["endLine"]) == ("memory/2026-05-15.md", 3)
    assert "Priya" not in " ".join(hit["snippet"] for hit in answer["results"])


def test_a_search_whose_sync_replaced_invalid_utf8_says_so(ws: Path, memsift_home: Path) -> None:
    """A note the agent wrote in Latin-1, synced by the search with U+FFFD: the answer's `warning` says so, as
    REST's does (it said nothing)."""
    (ws / "memory" / "2026-05-16.md").write_bytes(b"# 2026-05-16\n- The zebra caf\xe9 opened.\n")
    tools = MemoryTools(load_config(workspace=ws))
    try:
        answer, failed = tools.call("memory_search", {"query": "zebra", "minScore": 0})
        again, _ = tools.call("memory_search", {"query": "zebra", "minScore": 0})
    finally:
        tools.close()
    assert not failed and answer["results"][0]["snippet"].endswith("caf\ufffd opened."), answer
    assert answer["warning"] == "memory/2026-05-16.md: invalid UTF-8 on line 2, bad bytes replaced with U+FFFD"
    assert "warning" not in again


def test_memory_get_answers_at_most_the_rest_api_s_lines(workspace, memsift_home: Path) -> None:
    """Without `lines`, memory_get answers the rest of the file up to MAX_LINES, as POST /v1/get does; it
    answered the whole file (up to 8 MiB into the agent's context), and `lines` had no bound."""
    from api.schemas import MAX_LINES

    ws = workspace({"memory/long.md": "".join(f"{i}\n" for i in range(1, MAX_LINES + 101))})
    tools = MemoryTools(load_config(workspace=ws))
    try:
        answer, failed = tools.call("memory_get", {"path": "memory/long.md"})
        assert not failed and (answer["lines"], answer["totalLines"]) == (MAX_LINES, MAX_LINES + 100)
        answer, _ = tools.call("memory_get", {"path": "memory/long.md", "from": MAX_LINES + 1})
        assert answer["lines"] == 100 and answer["text"].endswith(f"{MAX_LINES + 100}")
        answer, failed = tools.call("memory_get", {"path": "memory/long.md", "lines": MAX_LINES + 1})
        assert failed and answer["reason"] == f"lines: at most {MAX_LINES}, got {MAX_LINES + 1}; read on with `from`"
    finally:
        tools.close()


def test_stdio_from_a_terminal_takes_requests_over_4_kib_and_ctrl_d_still_ends_it(ws: Path, memsift_home: Path) -> None:
    """A terminal (or a client's pseudo-terminal) on stdin: its line discipline kept 4,095 bytes of a line, so
    a search with a long query reached the server cut, got a parse error with a null id, and the client waited
    for its answer forever. Now the request is whole; Ctrl-D at the start of a line ends the server, and the
    terminal's settings are as they were."""
    import pty
    import select
    import termios

    master, slave = pty.openpty()
    attrs = termios.tcgetattr(slave)
    attrs[3] &= ~termios.ECHO  # no echo of the requests into the terminal's output
    termios.tcsetattr(slave, termios.TCSANOW, attrs)
    before = termios.tcgetattr(slave)
    proc = subprocess.Popen(
        [MEMSIFT, "--workspace", ws, "mcp"], stdin=slave, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env=_env(memsift_home),
    )  # fmt: skip
    answers = b""

    def send(message: dict[str, Any]) -> None:
        data = (json.dumps(message) + "\n").encode()
        while data:  # the terminal takes a few KiB at a time, as the server reads them
            assert select.select([], [master], [], 30)[1], "the terminal stopped taking input"
            data = data[os.write(master, data[:1024]) :]

    def answer() -> dict[str, Any]:
        nonlocal answers
        while b"\n" not in answers:
            assert select.select([proc.stdout], [], [], 60)[0], "no answer within 60 s"
            chunk = os.read(proc.stdout.fileno(), 1 << 20)
            assert chunk, proc.stderr.read().decode()
            answers += chunk
        line, _, answers = answers.partition(b"\n")
        return json.loads(line)

    try:
        init = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
        send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init})
        assert answer()["id"] == 1
        send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        query = "flat white " + "é" * 2000  # 4,011 bytes, under the 4 KiB bound; as JSON (\u00e9) a 12 KiB line
        call = {"name": "memory_search", "arguments": {"query": query, "minScore": 0}}
        send({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": call})
        found = answer()
        assert found["id"] == 2 and not found["result"]["isError"], found
        assert found["result"]["structuredContent"]["results"][0]["path"] == "MEMORY.md"
        os.write(master, b"\x04")  # Ctrl-D after the last request's newline
        assert proc.wait(timeout=60) == 0
        assert termios.tcgetattr(slave) == before
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
        os.close(slave)


def test_memory_search_refuses_a_query_over_rest_s_4_kib_with_a_status(workspace, memsift_home: Path) -> None:
    """REST answers a query over 4 KiB 413 and a wrong type 400; memory_search searched the first and gave the
    second no status."""
    from api.schemas import MAX_QUERY_BYTES

    tools = MemoryTools(load_config(workspace=workspace({"MEMORY.md": "- Dana drinks a flat white.\n"})))
    try:
        answer, failed = tools.call("memory_search", {"query": "é" * (MAX_QUERY_BYTES // 2 + 1)})
        assert failed and answer["results"] == [] and answer["status"] == 400
        assert answer["reason"] == f"query: {MAX_QUERY_BYTES + 2} bytes, over the limit of {MAX_QUERY_BYTES}"
        answer, failed = tools.call("memory_search", {"query": "flat white", "maxResults": "five"})
        assert failed and answer["status"] == 400 and "maxResults: expected integer" in answer["reason"]
        answer, failed = tools.call("memory_search", {"query": "é" * (MAX_QUERY_BYTES // 2)})  # at the limit
        assert not failed
    finally:
        tools.close()


def test_an_integer_argument_written_with_a_fraction_of_zero_is_that_integer(workspace, memsift_home: Path) -> None:
    """The tools' input schemas say `integer`, which JSON Schema takes to be any number without a fraction: an
    agent runtime keeping every number a float sends `maxResults: 2.0`, refused as "expected integer"."""
    notes = {"MEMORY.md": "- Dana drinks a flat white.\n- Dana walks to work.\n- Dana bikes home.\n"}
    tools = MemoryTools(load_config(workspace=workspace(notes)))
    try:
        answer, failed = tools.call("memory_search", {"query": "Dana", "maxResults": 1.0, "minScore": 0})
        assert not failed and len(answer["results"]) == 1, answer
        answer, failed = tools.call("memory_get", {"path": "MEMORY.md", "from": 2.0, "lines": 1.0})
        assert not failed and (answer["from"], answer["lines"], answer["text"]) == (2, 1, "- Dana walks to work.")
        answer, failed = tools.call("memory_search", {"query": "Dana", "maxResults": 1.5})
        assert failed and answer["status"] == 400 and "maxResults: expected integer, got 1.5" in answer["reason"]
    finally:
        tools.close()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_stopped_during_its_first_index_it_exits_at_once_with_0(
    workspace, memsift_home: Path, sig: signal.Signals
) -> None:
    """Ctrl-C (or SIGTERM, as a client or a service manager stops it) while the agent's first index runs (the
    server's, begun at start-up; a search waits for it), waiting on an embedding request (held here; the
    provider's timeout is 600 s): the server exits at once with 0 and says so, as `memsift serve` does. Ctrl-C
    waited for the whole first index (250 s for 200 notes on a loaded machine), and SIGTERM killed the process
    (status -15) without a word."""
    provider = FakeProvider(hold_text="The pump1 is")  # a request of the first index, past its first
    notes = {f"memory/pump-{n}.md": f"# pump {n}\n- The pump{n} is in bay {n}.\n" for n in range(8)}
    root = workspace(notes)
    (root / "memsift.toml").write_text(
        f'[embedding]\nprovider = "openai"\nbaseUrl = "{provider.url}"\nmodel = "fake-model"\n'
        "batchMaxInputs = 1\nconcurrency = 1\nretries = 0\ntimeoutSeconds = 600\n"
    )
    opening = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "pipe", "version": "1"}}
    search = {"name": "memory_search", "arguments": {"query": "pump bay"}}
    lines = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": opening},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": search},
    ]
    proc = subprocess.Popen(
        [MEMSIFT, "--workspace", root, "mcp"], env=_env(memsift_home) | {"OPENAI_API_KEY": "sk-test"},
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        proc.stdin.write("".join(json.dumps(line) + "\n" for line in lines))
        proc.stdin.flush()  # stdin stays open: the client is still there
        assert provider.held.wait(120), "the first index never started"
        proc.send_signal(sig)
        code = proc.wait(30)  # a deadline, not a measure: before, the server waited for the held request
        err = proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        provider.close()
    assert code == 0, err
    assert "memsift mcp: stopped during an index run: the index is as its last completed batch left it" in err
    assert "Traceback" not in err


def _http_mcp(ws: Path, env: dict[str, str], host: str = "127.0.0.1") -> tuple[subprocess.Popen[str], str]:
    """`memsift mcp --http` on a free port of `host`, once it answers: (the process, its URL)."""
    port = _free_port()
    proc = subprocess.Popen(
        [MEMSIFT, "--workspace", ws, "mcp", "--http", "--host", host, "--port", str(port)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    url = f"http://{host}:{port}/mcp"
    wait_for(lambda: _answers(url) or proc.poll() is not None, 60, "the MCP HTTP server to answer")
    assert proc.poll() is None, proc.stderr.read()
    return proc, url


INITIALIZE = {
    "jsonrpc": "2.0", "id": 1, "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "curl", "version": "1"}},
}  # fmt: skip
ACCEPT = {"accept": "application/json, text/event-stream"}


def test_http_with_an_api_key_wants_the_bearer(ws: Path, memsift_home: Path) -> None:
    """With `api.key` (MEMSIFT_API_KEY) set, every request wants `Authorization: Bearer <key>`, as `serve`'s
    routes do; the key was ignored and anyone who could reach the port read the memory."""
    proc, url = _http_mcp(ws, _env(memsift_home) | {"MEMSIFT_API_KEY": "k-mcp-1"})
    try:
        for headers in ({}, {"authorization": "Bearer wrong"}, {"authorization": "k-mcp-1"}):
            r = httpx.post(url, json=INITIALIZE, headers=ACCEPT | headers, timeout=30)
            assert r.status_code == 401 and r.headers["www-authenticate"] == 'Bearer realm="memsift"', r.text
            assert "missing or wrong API key" in r.json()["detail"]

        async def main() -> None:
            http = httpx2.AsyncClient(headers={"authorization": "Bearer k-mcp-1"}, timeout=120)
            async with http, Client(streamable_http_client(url, http_client=http)) as client:
                answer, failed = await _call(client, "memory_search", {"query": "flat white", "minScore": 0})
                assert not failed and answer["results"][0]["path"] == "MEMORY.md", answer

        anyio.run(main)
    finally:
        stop_process(proc)


@pytest.mark.parametrize("host", ["127.0.0.2", "[::1]"])
def test_http_on_any_loopback_address_refuses_a_web_page(ws: Path, memsift_home: Path, host: str) -> None:
    """Without a key, a Host that is not this machine is a 421 and another site's Origin a 403 on every
    loopback address, as `serve` answers them (api.local_only). The SDK guards only 127.0.0.1, localhost and
    ::1: on 127.0.0.2 or [::1] a page rebinding its own name to the address read the memory."""
    if host == "[::1]" and not socket.has_ipv6:
        pytest.skip("no IPv6")
    proc, url = _http_mcp(ws, _env(memsift_home), host)
    try:
        refused = [({"host": "evil.example"}, 421), ({"origin": "http://evil.example"}, 403), ({"origin": "null"}, 403)]
        for headers, status in [*refused, ({}, 200), ({"origin": "http://localhost:3000"}, 200)]:
            r = httpx.post(url, json=INITIALIZE, headers=ACCEPT | headers, timeout=30)
            assert r.status_code == status, (headers, r.status_code, r.text)
    finally:
        stop_process(proc)


def test_http_takes_an_absolute_form_target_with_its_authority_as_the_host(ws: Path, memsift_home: Path) -> None:
    """`POST http://127.0.0.1:PORT/mcp HTTP/1.1` (RFC 9112 section 3.2.2) was a 404; it is answered as its
    path, as `serve` answers it, and its authority meets the loopback guard in place of the Host header sent."""
    proc, url = _http_mcp(ws, _env(memsift_home))
    try:
        parts = httpx.URL(url)
        body = json.dumps(INITIALIZE).encode()

        def post(target: str) -> tuple[int, str]:
            with socket.create_connection((parts.host, parts.port), timeout=30) as sock:
                head = (
                    f"POST {target} HTTP/1.1\r\nHost: {parts.host}:{parts.port}\r\nConnection: close\r\n"
                    f"Content-Type: application/json\r\nAccept: {ACCEPT['accept']}\r\n"
                    f"Content-Length: {len(body)}\r\n\r\n"
                )
                sock.sendall(head.encode() + body)
                answer = b"".join(iter(lambda: sock.recv(65536), b""))
            status_line, _, rest = answer.partition(b"\r\n")
            return int(status_line.split()[1]), rest.decode(errors="replace")

        ours, answered = post(f"http://{parts.host}:{parts.port}{parts.path}")
        assert ours == 200 and '"serverInfo"' in answered, answered
        assert post(f"http://evil.example:{parts.port}{parts.path}")[0] == 421  # the guard reads the authority
        assert post(f"http://{parts.host}:{parts.port + 1}{parts.path}")[0] == 421  # another server: no proxy
    finally:
        stop_process(proc)


def test_calls_during_the_start_up_first_index_answer_within_a_bound(workspace, memsift_home: Path) -> None:
    """While the agent's first index runs (the server's, begun at start-up; an embedding request held here;
    minutes for thousands of notes), a `memory_get` reads its lines at once, and a search waits for the index
    `sync.lockTimeoutSeconds` (2 s here) at most, then answers from what is indexed so far, saying so, as REST
    answers them. A first search ran the whole first index itself, and every call behind it waited: on 229
    notes 470 s, far past an MCP client's request timeout (60 s in the TypeScript SDK)."""
    provider = FakeProvider(hold_text="The pump1 is")  # a request of the first index, past its first
    notes = {f"memory/pump-{n}.md": f"# pump {n}\n- The pump{n} is in bay {n}.\n" for n in range(8)}
    root = workspace({"MEMORY.md": "# Memory\n- Dana drinks a flat white.\n", **notes})
    (root / "memsift.toml").write_text(
        f'[embedding]\nprovider = "openai"\nbaseUrl = "{provider.url}"\nmodel = "fake-model"\n'
        "batchMaxInputs = 1\nconcurrency = 1\nretries = 0\ntimeoutSeconds = 600\n[sync]\nlockTimeoutSeconds = 2\n"
    )
    env = _env(memsift_home) | {"OPENAI_API_KEY": "sk-test"}
    params = StdioServerParameters(command=str(MEMSIFT), args=["--workspace", str(root), "mcp"], env=env)

    async def main() -> None:
        async with Client(params, read_timeout_seconds=120) as client:
            assert await anyio.to_thread.run_sync(provider.held.wait, 120), "the first index never started"
            with anyio.fail_after(60):  # a deadline, not a measure: before, both waited for the held request
                got, failed = await _call(client, "memory_get", {"path": "MEMORY.md", "lines": 2})
                assert not failed and got["text"] == "# Memory\n- Dana drinks a flat white.", got
                started = time.monotonic()
                found, failed = await _call(client, "memory_search", {"query": "pump bay", "minScore": 0})
                assert time.monotonic() - started >= 2  # it waited for the index, sync.lockTimeoutSeconds
                assert not failed and "the first index of this agent is running" in found["degraded"], found
            provider.release()
            with anyio.fail_after(60):  # each search waits 2 s at most for the rest of the index
                while "degraded" in found:
                    found, failed = await _call(client, "memory_search", {"query": "pump bay", "minScore": 0})
            assert not failed and len(found["results"]) > 1, found

    try:
        anyio.run(main)
    finally:
        provider.close()


def test_a_call_names_another_configured_agent(workspace, memsift_home: Path) -> None:
    """Each tool takes an optional `agent`, as REST's bodies do: one of the configured agents (the schema lists
    them), the server's own by default; an unknown one is a tool error with REST's 404, an invalid id REST's 400.
    `memsift mcp` answered for its one agent and refused the argument."""
    work = workspace({"memory/2026-12-01.md": "# Work\n- The budget review is with Dana on Friday.\n"}, "work")
    root = workspace({"MEMORY.md": "# Memory\n- Dana drinks a flat white.\n"})
    (root / "memsift.toml").write_text(f'[agents.work]\nworkspace = "{work}"\n')
    tools = MemoryTools(load_config(workspace=root))
    try:
        listed = {tool.name: tool.input_schema["properties"]["agent"] for tool in tools_for(["main", "work"], "main")}
        assert listed["memory_search"]["enum"] == listed["memory_get"]["enum"] == ["main", "work"]
        answer, failed = tools.call("memory_search", {"query": "budget review", "agent": "work", "minScore": 0})
        assert not failed and [h["path"] for h in answer["results"]] == ["memory/2026-12-01.md"], answer
        answer, failed = tools.call("memory_search", {"query": "budget review", "minScore": 0})
        assert not failed and {h["path"] for h in answer["results"]} == {"MEMORY.md"}, answer  # main's own
        answer, failed = tools.call("memory_get", {"path": "memory/2026-12-01.md", "agent": "work", "lines": 1})
        assert not failed and answer["text"] == "# Work", answer
        for args, status, reason in [
            ({"agent": "play"}, 404, "agent 'play' is not configured (known: main, work)"),
            ({"agent": "a b"}, 400, "agent: 'a b' is not a valid agent id"),
            ({"agent": 5}, 400, "agent: expected string, got 5"),
        ]:
            for name, base in [("memory_search", {"query": "budget"}), ("memory_get", {"path": "MEMORY.md"})]:
                answer, failed = tools.call(name, base | args)
                assert failed and answer["status"] == status and reason in answer["reason"], (name, args, answer)
    finally:
        tools.close()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_stopped_while_idle_with_stdin_open_it_exits_with_0(ws: Path, memsift_home: Path, sig: signal.Signals) -> None:
    """A client (or a service manager) that stops the server by a signal keeps its end of stdin open: the
    server exits with 0 all the same. It waited for a line that never came (the `mcp` package reads stdin in a
    thread that neither a stop nor the interpreter's exit would leave), still running 180 s later."""
    opening = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "pipe", "version": "1"}}
    # No watcher: its start-up sync, if still running at the signal, ends the process at once (exit_mid_step)
    env = _env(memsift_home) | {"MEMSIFT_SYNC_WATCH": "false"}
    proc = subprocess.Popen(
        [MEMSIFT, "--workspace", ws, "mcp"], env=env,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        proc.stdin.write(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": opening}) + "\n")
        proc.stdin.flush()  # and stays open: the client is still there
        assert json.loads(proc.stdout.readline())["id"] == 1  # serving, idle
        proc.send_signal(sig)
        code = proc.wait(60)  # a deadline, not a measure: before, it never ended
        err = proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert code == 0, err
    assert "Traceback" not in err
