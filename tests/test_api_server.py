"""`memsift serve` as a real process on a free loopback port, talked to over HTTP; and its bind rules."""

from __future__ import annotations

import gzip
import json
import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from conftest import stop_process
from conftest import wait_for as poll

from api.cli import main
from api.prefect_server import free_port
from api.serve import is_loopback

MEMSIFT = Path(sys.executable).parent / "memsift"
START_SECONDS = 60


def wait_for(proc: subprocess.Popen[bytes], url: str, status: int = 200) -> httpx.Response:
    """Poll `url` until it answers `status`, within a deadline; between tries, wait on the process itself, so
    a server that dies is reported at once instead of at the deadline."""
    for _ in range(int(START_SECONDS / 0.1)):
        try:
            r = httpx.get(url, timeout=5)
            if r.status_code == status:
                return r
        except httpx.TransportError:
            pass
        try:
            code = proc.wait(timeout=0.1)
        except subprocess.TimeoutExpired:
            continue
        pytest.fail(f"memsift serve exited with {code}:\n{proc.stderr.read().decode(errors='replace')[-3000:]}")
    pytest.fail(f"{url} did not answer {status} within {START_SECONDS} s")


@pytest.fixture
def server(workspace, memsift_home: Path) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    ws = workspace(
        {
            "MEMORY.md": "# Memory\n- Dana Whitfield starts every morning with a flat white, no sugar.\n",
            "memory/2026-05-14.md": "# 2026-05-14\n- The deploy failed with ERR_SSL_PROTOCOL_ERROR.\n",
        }
    )
    port = free_port()
    env = dict(os.environ, MEMSIFT_HOME=str(memsift_home))
    proc = subprocess.Popen(
        [MEMSIFT, "--workspace", ws, "serve", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
    )
    try:
        yield f"http://127.0.0.1:{port}", proc
    finally:
        stop_process(proc)


def test_serve_answers_over_http_and_stops_on_sigterm(server) -> None:
    base, proc = server
    assert wait_for(proc, f"{base}/healthz").json() == {"status": "ok"}
    assert wait_for(proc, f"{base}/readyz").json()["ready"] is True  # the model is loaded

    with httpx.Client(base_url=base, timeout=30) as http:
        r = http.post("/v1/search", json={"query": "what does Dana drink in the morning"})
        assert r.status_code == 200 and r.json()["results"][0]["path"] == "MEMORY.md"
        r = http.post("/v1/get", json={"path": "memory/2026-05-14.md", "from": 2, "lines": 1})
        assert r.json()["text"] == "- The deploy failed with ERR_SSL_PROTOCOL_ERROR."
        assert http.get("/v1/status").json()["files"] == {"memory": 2}
        r = http.post("/v1/search", json={"query": "x", "maxResults": 101})
        assert r.status_code == 400 and r.headers["content-type"].startswith("application/problem+json")
        assert "memsift_requests_total" in http.get("/metrics").text

    os.kill(proc.pid, signal.SIGTERM)
    assert proc.wait(timeout=30) == 0  # a graceful shutdown, and a normal exit (atexit handlers ran)
    assert b"Application shutdown complete" in proc.stderr.read()


def test_health_routes_answer_head_as_health_checks_send_it(server) -> None:
    """`wget --spider` (a container's health check where curl is missing) and `curl -I` send HEAD: the status
    of GET, no body (it was 405), on every GET route."""
    base, proc = server
    wait_for(proc, f"{base}/readyz")
    for path in ("/healthz", "/readyz", "/v1/status", "/metrics"):
        r = httpx.head(f"{base}{path}", timeout=30)
        assert (r.status_code, r.content) == (200, b""), path
    assert httpx.head(f"{base}/v1/search", timeout=30).status_code == 405  # a route without GET keeps its methods


def test_serve_on_loopback_answers_no_request_a_web_page_sent(server) -> None:
    """No key, loopback: a page that re-points its host name at 127.0.0.1 (DNS rebinding) read `/v1/get` as its
    own origin, and any page could start syncs with a text/plain POST (api/local_only.py)."""
    base, proc = server
    wait_for(proc, f"{base}/readyz")
    rebound = {"Host": "rebound.example.com", "content-type": "text/plain"}
    r = httpx.post(f"{base}/v1/get", content=b'{"path": "MEMORY.md"}', headers=rebound, timeout=30)
    assert r.status_code == 421 and "Dana" not in r.text, r.text
    r = httpx.post(f"{base}/v1/index", headers={"Origin": "https://evil.example.com"}, timeout=30)
    assert r.status_code == 403, r.text
    assert httpx.post(f"{base}/v1/get", json={"path": "MEMORY.md"}, timeout=30).status_code == 200


def test_index_with_no_body_starts_a_sync(server) -> None:
    """`curl -X POST .../v1/index`: SPEC's body `{agent?, force?}` has no required field, so no body is `{}`
    (it was a 400 "body: empty")."""
    base, proc = server
    wait_for(proc, f"{base}/readyz")
    r = httpx.post(f"{base}/v1/index", timeout=60)  # no body and no Content-Type, as curl sends it
    assert r.status_code == 202, r.text
    run = f"{base}/v1/index/{r.json()['runId']}"
    done = poll(
        lambda: (job := httpx.get(run, timeout=30).json())["state"] not in ("SCHEDULED", "PENDING", "RUNNING") and job,
        120,
        "the index run to end",
        every=0.2,
    )
    assert done["state"] == "COMPLETED" and done["agent"] == "main", done
    assert done["summary"]["filesScanned"] == 2, done


def test_serve_syncs_memory_files_as_they_change(workspace, memsift_home: Path) -> None:
    """With `sync.watch` on (the default), no POST /v1/index is needed: a note written while no server ran is
    caught up at start, one written while it runs is found a debounce later, and one deleted leaves."""
    ws = workspace({"MEMORY.md": "# Memory\n- Dana Whitfield starts every morning with a flat white.\n"})
    assert main(["--workspace", str(ws), "index"]) == 0
    (ws / "memory").mkdir()
    (ws / "memory" / "2026-05-01.md").write_text("# 2026-05-01\n- The zebra count at the reserve was 41.\n")
    port = free_port()
    env = dict(os.environ, MEMSIFT_SYNC_WATCHDEBOUNCEMS="100")
    proc = subprocess.Popen(
        [MEMSIFT, "--workspace", ws, "serve", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
    )
    base = f"http://127.0.0.1:{port}"

    def paths(query: str) -> set[str]:
        r = httpx.post(f"{base}/v1/search", json={"query": query, "minScore": 0}, timeout=30)
        return {hit["path"] for hit in r.json()["results"]}

    try:
        wait_for(proc, f"{base}/readyz")
        poll(lambda: "memory/2026-05-01.md" in paths("zebra count"), 60, "the note written while no server ran")
        # with a byte of Latin-1 in it: indexed as U+FFFD, and the server says so
        (ws / "memory" / "2026-05-02.md").write_bytes(b"# 2026-05-02\n- The yak shaving ended on Tuesday, caf\xe9.\n")
        files = lambda: httpx.get(f"{base}/v1/status", timeout=30).json()["files"]  # noqa: E731
        poll(lambda: files() == {"memory": 3}, 60, "the watcher's sync (before a search's catch-up syncs it)")
        poll(lambda: "memory/2026-05-02.md" in paths("yak shaving"), 60, "the note written while serving")
        (ws / "memory" / "2026-05-02.md").unlink()
        poll(lambda: "memory/2026-05-02.md" not in paths("yak shaving"), 60, "the deleted note to leave")
    finally:
        proc.send_signal(signal.SIGTERM)
        err = proc.communicate(timeout=30)[1].decode()
    assert "watching main (debounce 100 ms)" in err, err
    assert "files changed: sync of main started here" in err and "sync of main done: 1 added" in err, err
    assert "sync of main: warning: memory/2026-05-02.md: invalid UTF-8 on line 2, bad bytes replaced" in err, err


def test_a_server_error_leaves_its_traceback_in_the_server_log(workspace, memsift_home: Path) -> None:
    """A 500 tells the client "the server log has the details": they were never there, since the root logger
    ends with Prefect's console handler quieted to CRITICAL. Here the keyword index's table dropped by hand
    fails a search inside the running server (a damaged page is a 503 saying what to do, not a 500)."""
    import apsw

    ws = workspace({"MEMORY.md": "# Memory\n- Dana Whitfield starts every morning with a flat white.\n"})
    assert main(["--workspace", str(ws), "index", "--no-prefect"]) == 0
    (db,) = (memsift_home / "memory").glob("*.sqlite")
    conn = apsw.Connection(str(db))
    conn.execute("DROP TABLE chunks_fts")
    conn.close()
    port = free_port()
    proc = subprocess.Popen(
        [MEMSIFT, "--workspace", ws, "serve", "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        wait_for(proc, f"http://127.0.0.1:{port}/readyz")
        r = httpx.post(f"http://127.0.0.1:{port}/v1/search", json={"query": "flat white"}, timeout=60)
    finally:
        proc.send_signal(signal.SIGTERM)
        err = proc.communicate(timeout=30)[1].decode()
    assert r.status_code == 500 and "the server log has the details" in r.json()["detail"], r.text
    assert "memsift.api: POST /v1/search failed" in err and "apsw.SQLError" in err, err[-3000:]


def test_serve_refuses_a_public_address_without_a_key(capsys, workspace) -> None:
    ws = workspace({"MEMORY.md": "# Memory\n"})
    assert main(["--workspace", str(ws), "serve", "--host", "0.0.0.0"]) == 1
    err = capsys.readouterr().err
    assert "refusing" in err and "MEMSIFT_API_KEY" in err and "--insecure" in err and "Traceback" not in err
    assert err.startswith("memsift: error: --host 0.0.0.0:"), err
    # The address from the configuration is named as such, not as a flag nobody passed.
    (ws / "memsift.toml").write_text('[api]\nhost = "0.0.0.0"\n')
    assert main(["--workspace", str(ws), "serve"]) == 1
    assert capsys.readouterr().err.startswith("memsift: error: api.host 0.0.0.0: refusing")


def test_serve_reads_every_agent_before_announcing_an_address(capsys, workspace, tmp_path: Path) -> None:
    ws = workspace({"MEMORY.md": "# Memory\n", "memsift.toml": f'[agents.work]\nworkspace = "{tmp_path}/gone"\n'})
    assert main(["--workspace", str(ws), "serve"]) == 1
    out, err = capsys.readouterr()
    assert out == "" and "agents.work.workspace" in err and "Traceback" not in err, (out, err)


def test_serve_on_a_port_in_use_fails_in_one_line(workspace, memsift_home: Path) -> None:
    """Exit 1 and one line naming the port, before the address is announced; it was uvicorn's exit 3, after
    `REST API on http://...` had been printed and the model loaded."""
    import socket

    ws = workspace({"MEMORY.md": "# Memory\n"})
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.run(
            [MEMSIFT, "--workspace", ws, "serve", "--port", str(port)],
            capture_output=True,
            text=True,
            env=dict(os.environ, MEMSIFT_HOME=str(memsift_home)),
            timeout=120,
        )
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout == ""
    assert proc.stderr.startswith("memsift: error: ") and proc.stderr.count("\n") == 1, proc.stderr
    assert str(port) in proc.stderr and "in use" in proc.stderr and "Traceback" not in proc.stderr


def test_serve_on_an_address_it_cannot_bind_names_the_host(capsys, workspace) -> None:
    ws = workspace({"MEMORY.md": "# Memory\n"})
    argv = ["--workspace", str(ws), "serve", "--host", "192.0.2.1", "--port", "8000", "--insecure"]  # TEST-NET-1
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.startswith("memsift: error: --host 192.0.2.1 --port 8000: cannot listen there") and err.count("\n") == 1


def test_serve_names_the_setting_of_an_address_it_cannot_bind(capsys, workspace, monkeypatch) -> None:
    """An address from the configuration was named as flags never given: "--host 192.0.2.1 --port 8000"."""
    ws = workspace({"MEMORY.md": "# Memory\n"})
    monkeypatch.setenv("MEMSIFT_API_HOST", "192.0.2.1")  # TEST-NET-1: no interface of this machine
    monkeypatch.setenv("MEMSIFT_API_PORT", "8000")
    assert main(["--workspace", str(ws), "serve", "--insecure"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("memsift: error: api.host 192.0.2.1 api.port 8000: cannot listen there"), err
    assert main(["--workspace", str(ws), "serve", "--insecure", "--port", "8001"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("memsift: error: api.host 192.0.2.1 --port 8001: cannot listen there"), err


@pytest.mark.parametrize(
    ("host", "loopback"),
    [("127.0.0.1", True), ("127.3.4.5", True), ("::1", True), ("[::1]", True), ("localhost", True)]
    + [("0.0.0.0", False), ("::", False), ("192.168.1.10", False), ("example.org", False)],
)
def test_loopback_addresses(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_serve_answers_requests_naming_no_agent_for_the_agent_of_agent(
    capsys, workspace, memsift_home: Path, tmp_path: Path
) -> None:
    """`memsift --agent work serve`: a request without `agent` is work's; `--agent` was ignored (main's answers)
    and an unknown one started a server all the same."""
    work = workspace({"MEMORY.md": "# Work\n- The work agent drinks cortado.\n"}, name="work")
    ws = workspace(
        {
            "MEMORY.md": "# Main\n- The main agent drinks rooibos.\n",
            "memsift.toml": f'[embedding]\nprovider = "none"\n[agents.work]\nworkspace = "{work}"\n',
        }
    )
    assert main(["--workspace", str(ws), "--agent", "nope", "serve", "--port", str(free_port())]) == 1
    assert capsys.readouterr().err.startswith("memsift: error: --agent: unknown agent 'nope' (known: main, work")
    port = free_port()
    proc = subprocess.Popen(
        [MEMSIFT, "--workspace", ws, "--agent", "work", "serve", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=dict(os.environ, MEMSIFT_HOME=str(memsift_home)),
    )
    try:
        base = f"http://127.0.0.1:{port}"
        wait_for(proc, f"{base}/readyz")
        with httpx.Client(base_url=base, timeout=30) as http:
            assert http.post("/v1/get", json={"path": "MEMORY.md"}).json()["text"].startswith("# Work")
            answer = http.post("/v1/get", json={"path": "MEMORY.md", "agent": "main"}).json()
            assert answer["text"].startswith("# Main")
            hits = http.post("/v1/search", json={"query": "cortado"}).json()["results"]
            assert [h["snippet"].splitlines()[0] for h in hits] == ["# Work"]
            assert http.get("/v1/status").json()["agent"] == "work"
            assert http.get("/v1/status", params={"agent": "main"}).json()["agent"] == "main"
    finally:
        stop_process(proc)


def test_a_body_that_is_no_json_is_a_400_saying_how(server) -> None:
    """msgspec says "JSON is malformed" of a syntax error, but of a body cut short only "Input data was
    truncated", of Latin-1 "Invalid UTF-8 encoded string" and of a UTF-8 byte order mark or UTF-16 "invalid
    character (byte 0)": details naming neither the body nor JSON, on every POST route."""
    base, proc = server
    wait_for(proc, f"{base}/readyz")
    bodies = {
        b'{"%s": "flat white"': "ends before the JSON value does",
        b'{"%s": "caf\xe9"}': "not UTF-8",
        b'\xef\xbb\xbf{"%s": "flat white"}': "byte order mark",
        b'{"%s": "flat white",}': "trailing comma",
    }
    for route, field in (("/v1/search", b"query"), ("/v1/get", b"path"), ("/v1/index", b"agent")):
        # UTF-16, with its byte order mark (Python's "utf-16", PowerShell's Unicode) or without: "invalid
        # character (byte 0)"
        text = (b'{"%s": "flat white"}' % field).decode()
        utf16 = {text.encode(code): "not UTF-8" for code in ("utf-16", "utf-16-be")}
        for body, why in [*((body % field, why) for body, why in bodies.items()), *utf16.items()]:
            r = httpx.post(f"{base}{route}", content=body, headers={"content-type": "application/json"}, timeout=30)
            assert r.status_code == 400 and r.headers["content-type"].startswith("application/problem+json"), r.text
            assert r.json()["detail"].startswith("body: JSON is malformed: ") and why in r.json()["detail"], r.text


def test_a_compressed_body_is_a_415_saying_to_send_it_uncompressed(server) -> None:
    """A client that gzips its request bodies got "400 body: JSON is malformed: invalid character (byte 0)",
    a status the OpenAPI document did not say and a detail naming neither the compression nor the fix."""
    base, proc = server
    wait_for(proc, f"{base}/readyz")
    doc = httpx.get(f"{base}/schema/openapi.json", timeout=30).json()
    for route, body in (("/v1/search", {"query": "flat white"}), ("/v1/get", {"path": "MEMORY.md"}), ("/v1/index", {})):
        headers = {"content-type": "application/json", "content-encoding": "gzip"}
        r = httpx.post(f"{base}{route}", content=gzip.compress(json.dumps(body).encode()), headers=headers, timeout=30)
        assert r.status_code == 415 and r.headers["content-type"].startswith("application/problem+json"), r.text
        assert "Content-Encoding 'gzip'" in r.json()["detail"] and "uncompressed" in r.json()["detail"], r.text
        assert r.headers["accept-encoding"] == "identity"  # RFC 9110: the codings the server takes
        assert "415" in doc["paths"][route]["post"]["responses"], route
        # `identity` is no compression at all: the body is read
        r = httpx.post(f"{base}{route}", json=body, headers={"content-encoding": "identity"}, timeout=60)
        assert r.status_code in (200, 202), r.text


def test_the_openapi_document_says_unknown_body_fields_are_refused(server) -> None:
    """The server answers 400 to a field a body does not know (`max_results`), but the OpenAPI document let
    every request body have any other property: a client generated from it, or a validator, sent them."""
    base, proc = server
    wait_for(proc, f"{base}/readyz")
    doc = httpx.get(f"{base}/schema/openapi.json", timeout=30).json()
    for route, body in (("/v1/search", {"query": "flat white"}), ("/v1/get", {"path": "MEMORY.md"}), ("/v1/index", {})):
        ref = doc["paths"][route]["post"]["requestBody"]["content"]["application/json"]["schema"]["$ref"]
        assert doc["components"]["schemas"][ref.rsplit("/", 1)[1]]["additionalProperties"] is False, route
        r = httpx.post(f"{base}{route}", json={**body, "max_results": 2}, timeout=30)
        assert r.status_code == 400 and "unknown field `max_results`" in r.json()["detail"], r.text


def test_a_query_flag_that_is_no_boolean_says_which_words_are(server) -> None:
    """`?deep=yes` answered "deep: Expected `bool`, got `str`": every query value is text, so the detail said
    nothing the client could act on."""
    base, proc = server
    wait_for(proc, f"{base}/readyz")
    for value in ("yes", ""):
        r = httpx.get(f"{base}/v1/status", params={"deep": value}, timeout=30)
        assert r.status_code == 400 and r.json()["detail"] == f"deep: expected true or false, got {value!r}", r.text
    assert httpx.get(f"{base}/v1/status", params={"deep": "false"}, timeout=30).status_code == 200


def test_the_openapi_document_gives_the_agent_id_rule(server) -> None:
    """The server refuses `"agent": "a b"` (400: letters, digits, '-', '_'), but the OpenAPI document allowed
    any string of 1 to 64 characters there: a client checked against it sent them."""
    base, proc = server
    wait_for(proc, f"{base}/readyz")
    doc = httpx.get(f"{base}/schema/openapi.json", timeout=30).json()
    schemas = [doc["components"]["schemas"][k]["properties"]["agent"] for k in ("SearchRequest", "GetRequest")]
    schemas += [p["schema"] for p in doc["paths"]["/v1/status"]["get"]["parameters"] if p["name"] == "agent"]
    for schema in schemas:
        rule = re.compile(schema["pattern"])
        assert rule.search("work-2_b") and not rule.search("a b") and not rule.search("é"), schema
    r = httpx.post(f"{base}/v1/search", json={"query": "flat white", "agent": "a b"}, timeout=30)
    assert r.status_code == 400 and "not a valid agent id" in r.json()["detail"], r.text


def test_get_of_a_name_too_long_for_the_file_system_is_a_file_that_does_not_exist(server) -> None:
    """A component over the file system's 255 bytes: `lstat` raised ENAMETOOLONG, a 500. No such file can
    exist, so it reads as any missing memory file does (SPEC section 4: empty text)."""
    base, proc = server
    wait_for(proc, f"{base}/readyz")
    path = f"memory/{'a' * 300}.md"
    r = httpx.post(f"{base}/v1/get", json={"path": path}, timeout=30)
    assert r.status_code == 200, r.text
    assert r.json() == {"path": path, "from": 1, "lines": 0, "text": "", "totalLines": 0}


def test_a_host_with_a_port_that_is_no_number_is_a_400(server) -> None:
    """`Host: localhost:abc` (or `:99999`): the request metrics read the URL, whose port raised ValueError,
    and so did the error handler: a text/plain "Internal Server Error" 500, on every route."""
    base, proc = server
    wait_for(proc, f"{base}/readyz")
    for host in ("localhost:abc", "localhost:99999", "127.0.0.1:1:2"):
        for method, path in (("GET", "/healthz"), ("POST", "/v1/search")):
            r = httpx.request(method, f"{base}{path}", json={"query": "x"}, headers={"Host": host}, timeout=30)
            assert r.status_code == 400 and r.headers["content-type"] == "application/problem+json", (host, r.text)
            assert r.json()["detail"].startswith(f"Host {host!r}: "), r.text
    assert httpx.get(f"{base}/healthz", headers={"Host": "localhost:8000"}, timeout=30).status_code == 200


def _raw(base: str, target: str, host: str) -> tuple[int, str]:
    """One HTTP/1.1 request sent as written (httpx sends only origin-form targets): its status and body."""
    authority = urlsplit(base)
    with socket.create_connection((authority.hostname, authority.port), timeout=30) as sock:
        sock.sendall(f"GET {target} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
        answer = b"".join(iter(lambda: sock.recv(65536), b""))
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split()[1]), body.decode()


def test_an_absolute_form_target_for_this_server_is_answered_as_its_path(server) -> None:
    """`GET http://127.0.0.1:PORT/v1/status HTTP/1.1` (RFC 9112 section 3.2.2: what a client set to use a proxy,
    and some proxies, send) was a 404 on every route: uvicorn passed the whole URL on as the path. Its authority
    stands for the Host, so the loopback guard still refuses another name, whatever Host the request also sent;
    another port or scheme is a request for another server (421), a user in it a 400."""
    base, proc = server
    wait_for(proc, f"{base}/readyz")
    port = urlsplit(base).port
    status, body = _raw(base, f"http://127.0.0.1:{port}/v1/status?deep=false", f"127.0.0.1:{port}")
    assert status == 200 and json.loads(body)["agent"] == "main", body
    assert _raw(base, f"HTTP://localhost:{port}/healthz", "rebound.example.com") == (200, '{"status":"ok"}')
    refused = {
        f"http://rebound.example.com:{port}/v1/status": (421, "Host 'rebound.example.com:"),  # the guard's
        f"http://127.0.0.1:{port + 1}/v1/status": (421, f"answers http on port {port} (it is no proxy)"),
        f"https://127.0.0.1:{port}/healthz": (421, "it is no proxy"),
        f"http://me@127.0.0.1:{port}/healthz": (400, "no user"),
        "http:///healthz": (400, "names a host"),
    }
    for target, (expected, needle) in refused.items():
        status, body = _raw(base, target, f"127.0.0.1:{port}")
        assert status == expected and needle in json.loads(body)["detail"], (target, body)


def test_serve_json_prints_its_addresses_as_one_document_on_stdout(workspace, memsift_home: Path) -> None:
    """`memsift --json serve` printed "memsift serve: REST API on ..." on stdout, which SPEC's `--json` keeps
    for one JSON document: a supervisor reading it got text. Its lines go to stderr now. The document comes once
    the server answers (README), so a supervisor may call it at once: it came before uvicorn listened, and such
    a request was refused (connection refused)."""
    ws = workspace({"MEMORY.md": "# Memory\n"})
    port = free_port()
    proc = subprocess.Popen(
        [MEMSIFT, "--workspace", ws, "--json", "serve", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=dict(os.environ, MEMSIFT_HOME=str(memsift_home)),
    )
    try:
        doc = json.loads(proc.stdout.readline())  # EOF ("") if it died: a JSONDecodeError, not a hang
        assert doc == {"restApi": f"http://127.0.0.1:{port}", "docs": f"http://127.0.0.1:{port}/docs"}
        assert httpx.get(f"{doc['restApi']}/healthz", timeout=30).status_code == 200
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        assert proc.stdout.read() == b""  # nothing after the document
        assert b"memsift serve: REST API on" in proc.stderr.read()
    finally:
        stop_process(proc)


def test_an_index_file_overwritten_while_serving_is_a_503_saying_what_to_do(workspace, memsift_home: Path) -> None:
    """The index file overwritten in place (a disk fault, a bad copy) under the connections a running server
    holds: every search and status answer says what is wrong and what to do, as the CLI does (it was a 500,
    `internal error (CorruptError)`, and a traceback in the log per request); `memsift index --force` sets
    the file aside and rebuilds, and the same server answers from the new one."""
    ws = workspace({"MEMORY.md": "# Memory\n- Dana Whitfield starts every morning with a flat white, no sugar.\n"})
    env = dict(os.environ, MEMSIFT_HOME=str(memsift_home))
    index = [MEMSIFT, "--workspace", ws, "index", "--no-prefect"]
    subprocess.run(index, check=True, capture_output=True, env=env, timeout=120)  # all of it in the file: no WAL
    (db,) = (memsift_home / "memory").glob("*.sqlite")
    port = free_port()
    proc = subprocess.Popen(
        [MEMSIFT, "--workspace", ws, "serve", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        assert wait_for(proc, f"{base}/readyz").json()["agents"] == {"main": "ok"}  # its index is open
        with db.open("r+b") as file:  # in place: the server's connection keeps the same inode
            file.write(b"this is not a database" * (db.stat().st_size // 22 + 1))
        with httpx.Client(base_url=base, timeout=30) as http:
            for answer in (http.post("/v1/search", json={"query": "flat white"}), http.get("/v1/status")):
                assert answer.status_code == 503, answer.text
                assert f"cannot open the index {db}" in answer.json()["detail"]
                assert "`memsift index --force` sets it aside and rebuilds it" in answer.json()["detail"]
            forced = subprocess.run([*index, "--force"], capture_output=True, text=True, env=env, timeout=120)
            assert forced.returncode == 0, forced.stderr
            answer = http.post("/v1/search", json={"query": "flat white"})
            assert answer.status_code == 200 and answer.json()["results"][0]["path"] == "MEMORY.md", answer.text
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        log = proc.communicate(timeout=30)[1].decode()
    assert "Traceback" not in log, log


def test_a_watched_change_waiting_on_another_processs_sync_is_synced_once_that_ends(
    workspace, memsift_home: Path
) -> None:
    """A note edited while another process syncs or rebuilds the agent (`memsift index --force`, minutes): the
    watcher's sync waited `sync.lockTimeoutSeconds`, said `sync of main failed: LockTimeout` and nothing synced
    the note after (`status` dirty until the next edit or search). It says it waits, and syncs once the lock
    is free. The other process here is this test, holding the agent's writer lock."""
    import queue
    import threading

    from core import load_config
    from core.locking import writer_lock

    ws = workspace({"MEMORY.md": "# Memory\n- Dana Whitfield starts every morning with a flat white.\n"})
    (ws / "memsift.toml").write_text("[sync]\nlockTimeoutSeconds = 0.2\nwatchDebounceMs = 100\n")
    assert main(["--workspace", str(ws), "index", "--no-prefect"]) == 0
    port = free_port()
    proc = subprocess.Popen(
        [MEMSIFT, "--workspace", ws, "serve", "--port", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=dict(os.environ, MEMSIFT_HOME=str(memsift_home)),
    )  # fmt: skip
    lines: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(line.decode()) for line in proc.stderr], daemon=True)
    reader.start()
    said: list[str] = []

    def line_with(text: str) -> str:
        while True:
            said.append(lines.get(timeout=60))  # queue.Empty: the line never came
            if text in said[-1]:
                return said[-1]

    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(proc, f"{base}/readyz")
        line_with("watching main")
        with writer_lock(load_config(workspace=ws).db_path, timeout=60):
            (ws / "memory").mkdir()
            (ws / "memory" / "2026-05-01.md").write_text("# 2026-05-01\n- The zebra count at the reserve was 41.\n")
            waits = line_with(f"another sync or rebuild of this index is running (pid {os.getpid()})")
            assert "failed" not in waits and "again" in waits, said
        assert "1 added" in line_with("sync of main done"), said
        assert httpx.get(f"{base}/v1/status", timeout=30).json()["dirty"] is False
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    assert sum("another sync or rebuild" in line for line in said) == 1, said  # said once, not every 0.2 s


def test_sigterm_while_the_model_loads_is_a_clean_exit(workspace, memsift_home: Path) -> None:
    """SIGTERM as soon as the server answers (a supervisor's restart) came while its warm-up thread was inside
    onnxruntime: the interpreter's exit under it aborted the process ("terminate called without an active
    exception", status 134) where a stop is status 0. Three starts, as the window is short."""
    ws = workspace({"MEMORY.md": "# Memory\n- Dana drinks a flat white.\n"})
    env = dict(os.environ, MEMSIFT_HOME=str(memsift_home))
    subprocess.run([MEMSIFT, "--workspace", ws, "index", "--no-prefect"], env=env, check=True, capture_output=True)
    for _ in range(3):
        port = free_port()
        proc = subprocess.Popen(
            [MEMSIFT, "--workspace", ws, "--json", "serve", "--port", str(port)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        try:
            assert json.loads(proc.stdout.readline())["restApi"]  # the server answers from here on
            os.kill(proc.pid, signal.SIGTERM)
            assert proc.wait(timeout=30) == 0, proc.stderr.read().decode(errors="replace")[-2000:]
        finally:
            stop_process(proc)


def test_sigterm_as_serve_starts_is_a_clean_exit(workspace, memsift_home: Path) -> None:
    """A SIGTERM right after the server's first line (it came before the watcher started) ended in "memsift:
    error: interrupted" and a failure's status; a stop at any point of the start is status 0."""
    ws = workspace({"MEMORY.md": "# Memory\n- Dana drinks a flat white.\n"})
    proc = subprocess.Popen(
        [MEMSIFT, "--workspace", ws, "serve", "--port", str(free_port())],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=dict(os.environ, MEMSIFT_HOME=str(memsift_home)),
    )
    try:
        assert proc.stdout.readline().startswith(b"memsift serve: REST API on")
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        assert b"error" not in proc.stderr.read()
    finally:
        stop_process(proc)


def test_serve_on_a_hosted_provider_warms_nothing_up_and_pays_for_no_query(workspace, memsift_home: Path) -> None:
    """The warm-up ran a query on its own client of the provider (a paid request at every start, and a client
    kept open for the server's life); a hosted provider's warm-up is its start-up probe, then the client is
    closed: the probes are the only requests a start makes."""
    from tests.fake_provider import FakeProvider

    provider = FakeProvider()
    ws = workspace({"MEMORY.md": "# Memory\n- Dana drinks a flat white.\n"})
    (ws / "memsift.toml").write_text(
        f'[embedding]\nprovider = "openai"\nbaseUrl = "{provider.url}/v1"\nmodel = "m"\n[sync]\nwatch = false\n'
    )
    port = free_port()
    env = dict(os.environ, MEMSIFT_HOME=str(memsift_home))
    cmd = [MEMSIFT, "--workspace", ws, "serve", "--port", str(port)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    try:
        wait_for(proc, f"http://127.0.0.1:{port}/readyz")
        found = httpx.post(f"http://127.0.0.1:{port}/v1/search", json={"query": "flat white"}, timeout=60).json()
    finally:
        stop_process(proc)
        provider.close()
    assert found["provider"] == "openai" and "degraded" not in found
    queries = [r.body["input"] for r in provider.requests if r.body["input"] != ["memsift probe"]]
    assert ["memsift warm-up"] not in queries and ["flat white"] in queries


def test_every_answer_of_a_real_server_is_one_its_openapi_document_describes(server) -> None:
    """A client generated from `/schema/openapi.json` must be able to read every answer: for each route, the
    answers to good requests and to the errors a client meets, through a real `memsift serve`, each checked
    against the document the same server publishes: a status listed for that route, a media type listed for
    that status, a body valid against its schema (JSON Schema 2020-12, as OpenAPI 3.1 is), names camelCase
    (SPEC section 4), and errors problem details. The schemathesis run (tests/test_api.py) draws its requests
    from the schema through the ASGI app and leaves `POST /v1/index` out; this one runs a sync to its end."""
    from jsonschema import Draft202012Validator
    from prometheus_client.parser import text_string_to_metric_families

    base, proc = server
    wait_for(proc, f"{base}/readyz")
    doc = httpx.get(f"{base}/schema/openapi.json", timeout=30).json()
    maps = {"files", "chunks", "agents", "summary", "timings", "prefect"}  # keyed by data, not field names

    def names(value: Any, key: str = "") -> Iterator[str]:
        if isinstance(value, dict):
            for k, v in value.items():
                if key not in maps:
                    yield k
                yield from names(v, k)
        elif isinstance(value, list):
            for v in value:
                yield from names(v, key)

    def check(method: str, route: str, path: str, status: int, **kwargs: Any) -> httpx.Response:
        r = httpx.request(method, f"{base}{path}", timeout=60, **kwargs)
        assert r.status_code == status, (method, path, r.text)
        answer = doc["paths"][route][method.lower()]["responses"].get(str(status))
        assert answer is not None, f"{method} {route}: {status} is not in the OpenAPI document"
        media = r.headers["content-type"].split(";")[0]
        [(listed, content)] = [(k, v) for k, v in answer["content"].items() if k.split(";")[0] == media] or [
            (None, None)
        ]
        assert content is not None, f"{method} {route} {status}: {media} is not in {list(answer['content'])}"
        if media == "text/plain":
            return r
        body = r.json()
        schema = {**content["schema"], "components": doc["components"]}
        errors = [f"{e.json_path}: {e.message}" for e in Draft202012Validator(schema).iter_errors(body)]
        assert not errors, (method, path, status, errors, body)
        assert not [n for n in names(body) if not re.fullmatch(r"[a-z][A-Za-z0-9]*", n)], body
        if status >= 400:
            assert media == "application/problem+json" and body["status"] == status, body
        return r

    check("GET", "/healthz", "/healthz", 200)
    check("GET", "/readyz", "/readyz", 200)
    check("GET", "/v1/status", "/v1/status", 200)
    check("GET", "/v1/status", "/v1/status?deep=true", 200)
    check("GET", "/v1/status", "/v1/status?agent=nobody", 404)
    check("GET", "/v1/status", "/v1/status?deep=maybe", 400)
    search = "/v1/search"
    assert check("POST", search, search, 200, json={"query": "flat white", "explain": True}).json()["results"]
    check("POST", search, search, 200, json={"query": "deploy", "mode": "keyword", "maxResults": 1})
    assert (
        check("POST", search, search, 200, json={"query": "zzzq", "mode": "vector", "minScore": 1}).json()["results"]
        == []
    )
    check("POST", search, search, 400, json={"query": " "})
    check("POST", search, search, 400, json={"query": "x", "maxResults": 101})
    check("POST", search, search, 404, json={"query": "x", "agent": "nobody"})
    check("POST", search, search, 413, json={"query": "x" * 5000})
    check("POST", search, search, 415, content=gzip.compress(b"{}"), headers={"content-encoding": "gzip"})
    get = "/v1/get"
    check("POST", get, get, 200, json={"path": "memory/2026-05-14.md", "from": 2, "lines": 1})
    check("POST", get, get, 200, json={"path": "memory/2026-01-01.md"})  # no such note: empty text
    check("POST", get, get, 403, json={"path": "/etc/passwd"})
    check("POST", get, get, 400, json={"path": "MEMORY.md", "lines": -1})
    run = check("POST", "/v1/index", "/v1/index", 202, json={}).json()["runId"]
    done = poll(
        lambda: (r := check("GET", "/v1/index/{runId}", f"/v1/index/{run}", 200).json())["state"] == "COMPLETED" and r,
        120,
        "the index run to complete",
        every=0.2,
    )
    assert done["summary"]["filesScanned"] == 2, done
    check("GET", "/v1/index/{runId}", "/v1/index/no-such-run", 404)
    check("POST", "/v1/index", "/v1/index", 400, json={"force": "yes"})
    metrics = check("GET", "/metrics", "/metrics", 200).text
    families = {family.name for family in text_string_to_metric_families(metrics)}
    assert {"memsift_requests", "memsift_search_seconds"} <= families, families
