"""API security: the key on every `/v1` route, compared in constant time; no secret in any log line, error,
status or index file; `get` refuses traversal in every spelling; request size limits; schemathesis with the key.

The routes are enumerated from the app itself, so a route added later is covered without editing this file.
"""

from __future__ import annotations

import hmac
import json
import logging
import re
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from litestar import Litestar
from litestar.testing import TestClient
from sample import NOTES
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from test_api import problem, serving

from api.app import MAX_BODY_BYTES, create_app
from api.cli import main
from core import MemoryIndex, load_config
from tests.fake_provider import FakeProvider

API_KEY = "msk-live-" + uuid.uuid4().hex
PROVIDER_KEY = "sk-proj-" + uuid.uuid4().hex
AUTH = {"Authorization": f"Bearer {API_KEY}"}
WRONG = [
    {},
    {"Authorization": "Bearer"},
    {"Authorization": "Bearer wrong"},
    {"Authorization": f"Bearer {API_KEY[:-1]}"},  # a prefix of the key
    {"Authorization": f"Bearer {API_KEY}x"},
    {"Authorization": f"Basic {API_KEY}"},
    {"Authorization": API_KEY},
    {"X-Api-Key": API_KEY},
]


@pytest.fixture
def ws(workspace) -> Path:
    return workspace(NOTES)


@pytest.fixture
def client(ws: Path, make_config) -> Iterator[TestClient[Litestar]]:
    with serving(make_config(ws, **{"api.key": API_KEY})) as c:
        yield c


def v1_routes(app: Litestar) -> list[tuple[str, str]]:
    """(method, path with its parameters filled) of every /v1 route the app serves."""
    found = []
    for route in app.routes:
        if not route.path.startswith("/v1"):
            continue
        path = re.sub(r"\{[^}]+\}", str(uuid.uuid4()), route.path)
        found += [(method, path) for method in sorted(route.methods - {"HEAD", "OPTIONS"})]
    return found


def test_every_v1_route_needs_the_key_compared_in_constant_time(client, monkeypatch) -> None:
    routes = v1_routes(client.app)
    assert {p.split("/")[2] for _, p in routes} >= {"search", "get", "status", "index"}
    compared: list[tuple[bytes, bytes]] = []
    compare_digest = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        compared.append((a, b))
        return compare_digest(a, b)

    monkeypatch.setattr(hmac, "compare_digest", spy)
    for method, path in routes:
        for headers in WRONG:
            r = client.request(method, path, headers=headers, json={})
            problem(r, 401, "API key")
            assert API_KEY not in r.text
        # With the key, the request passes the guard (an empty body is then a 400, not a started index run).
        assert client.request(method, path, headers=AUTH, json={"unknown": 1}).status_code != 401
    assert (API_KEY.encode(), API_KEY.encode()) in compared  # hmac.compare_digest made the decision
    assert (b"wrong", API_KEY.encode()) in compared
    assert client.get("/healthz").status_code == 200  # liveness stays open


@pytest.mark.parametrize("key", ["pässwörd-msk-7f3a9c", "鍵-msk-7f3a9c"], ids=["latin1", "cjk"])
def test_a_key_beyond_ascii_is_accepted_as_clients_send_it(ws: Path, make_config, key: str) -> None:
    """A client sends the header's bytes in UTF-8 (curl does); the server decoded them as Latin-1 and compared
    their UTF-8 re-encoding with the key: 401 for the right key, whatever the client did."""
    with serving(make_config(ws, **{"api.key": key})) as c:
        assert c.get("/v1/status", headers={"Authorization": f"Bearer {key}".encode()}).status_code == 200
        if key.startswith("p"):  # Latin-1, as Python's http.client sends a str header
            assert c.get("/v1/status", headers={"Authorization": f"Bearer {key}".encode("latin-1")}).status_code == 200
        wrong = f"Bearer {key}x".encode()
        problem(c.get("/v1/status", headers={"Authorization": wrong}), 401, "API key")


def test_no_secret_in_logs_errors_status_or_the_index(
    ws: Path, memsift_home: Path, monkeypatch, caplog, capsys
) -> None:
    """The API key and a provider key, with a provider that echoes the key back in its errors."""
    down = {"now": False}
    provider = FakeProvider(fault=lambda n: "401" if down["now"] else None)
    try:
        monkeypatch.setenv("OPENAI_API_KEY", PROVIDER_KEY)
        monkeypatch.setenv("MEMSIFT_API_KEY", API_KEY)
        (ws / "memsift.toml").write_text(
            f'[embedding]\nprovider = "openai"\nbaseUrl = "{provider.url}"\nmodel = "fake-model"\nretries = 0\n'
            f'headers = {{ "X-Api-Key" = "{PROVIDER_KEY}" }}\n'
        )
        caplog.set_level(logging.DEBUG)
        seen: list[str] = []
        config = load_config(workspace=ws)
        seen += [repr(config), str(config)]
        with MemoryIndex(config) as running:  # a long-lived process: its provider started while it answered
            running.sync()
            down["now"] = True  # now it answers 401 with the key in its message
            (ws / "memory" / "2026-05-16.md").write_text("- A note written while the provider refuses the key.\n")
            report = running.sync()
            assert report.vectorsPending  # the reason is recorded in the index
            seen.append(json.dumps(report.to_dict()))
        cli = ["--workspace", str(ws)]
        assert main([*cli, "index", "--no-prefect"]) == 0  # a new process: keyword-only, the reason recorded
        assert main([*cli, "index", "--no-prefect", "--force"]) == 1
        assert main([*cli, "status", "--json", "--deep"]) == 1  # the probe fails, and says why on stderr too
        assert main([*cli, "search", "flat white", "--json"]) == 0
        assert main([*cli, "--debug", "get", "../etc/passwd"]) == 1
        out = capsys.readouterr()
        seen += [out.out, out.err]
        assert "Incorrect API key provided" in out.err  # the provider's message did arrive, redacted

        with serving(config) as client:
            for r in (
                client.get("/v1/status", headers=AUTH),
                client.get("/v1/status?deep=true", headers=AUTH),
                client.post("/v1/search", headers=AUTH, json={"query": "flat white"}),
                client.post("/v1/get", headers=AUTH, json={"path": "/etc/passwd"}),
                client.post("/v1/search", headers={"Authorization": "Bearer nope"}, json={"query": "x"}),
                client.post(
                    "/v1/search",
                    headers=AUTH,
                    content=b"{",
                ),
            ):
                assert r.status_code < 500, r.text
                seen.append(r.text)
        seen += [record.getMessage() + (record.exc_text or "") for record in caplog.records]
        seen.append(caplog.text)
        with MemoryIndex(config) as index:
            seen.append(json.dumps(index.status()))
        stored = b"".join(p.read_bytes() for p in memsift_home.rglob("*") if p.is_file())
    finally:
        provider.close()
    text = "\n".join(seen)
    for secret in (API_KEY, PROVIDER_KEY):
        assert secret not in text, [t[max(0, t.find(secret) - 300) : t.find(secret) + 50] for t in seen if secret in t]
        assert secret.encode() not in stored, "a secret is in a file under MEMSIFT_HOME"


def test_a_password_in_a_base_url_is_never_shown_or_stored(ws: Path, memsift_home: Path, capsys) -> None:
    """`baseUrl = "http://user:pass@proxy/v1"`: the password was in the index (the provider fingerprint), in
    `status` and in every connection error ("cannot connect to http://user:pass@...")."""
    password = "pw-" + uuid.uuid4().hex
    provider = FakeProvider()
    url = provider.url.replace("http://", f"http://memsift:{password}@")
    (ws / "memsift.toml").write_text(
        f'[embedding]\nprovider = "openai"\nbaseUrl = "{url}"\nmodel = "fake-model"\nretries = 0\n'
    )
    cli = ["--workspace", str(ws)]
    try:
        assert main([*cli, "index", "--no-prefect"]) == 0
        assert main([*cli, "status", "--json"]) == 0
    finally:
        provider.close()
    assert main([*cli, "index", "--no-prefect", "--force"]) == 1  # nobody listens there now
    assert main([*cli, "status", "--json", "--deep"]) == 1  # the probe fails, and says why on stderr too
    out = capsys.readouterr()
    assert "request failed after 1 attempt: cannot connect to http://memsift:<set>@127.0.0.1:" in out.err, out.err
    assert password not in out.out + out.err
    assert password.encode() not in b"".join(p.read_bytes() for p in memsift_home.rglob("*") if p.is_file())


@pytest.fixture
def fenced(workspace, make_config) -> Iterator[TestClient[Litestar]]:
    outside = workspace({"secret.md": "- the outside secret kestrel\n", "dir/inner.md": "- inner kestrel\n"}, "out")
    ws = workspace(NOTES | {"notes/extra.md": "- extra path note\n"})
    (ws / "memory" / "outdir").symlink_to(outside / "dir", target_is_directory=True)
    (ws / "memory" / "secret.md").symlink_to(outside / "secret.md")
    (ws / "notes" / "passwd.md").symlink_to("/etc/passwd")
    with serving(make_config(ws, **{"api.key": API_KEY, "extraPaths": ["notes"]})) as client:
        yield client


@pytest.mark.parametrize(
    ("path", "status"),
    [
        ("../out/secret.md", 403),
        ("memory/../../out/secret.md", 403),
        ("memory/./2026-05-14.md", 403),
        ("memory//2026-05-14.md", 403),
        ("/etc/passwd", 403),
        ("//etc/passwd", 403),
        ("~root/.ssh/id_rsa.md", 403),
        ("C:/Windows/win.ini", 403),
        ("C:\\Windows\\win.ini", 403),
        ("..\\..\\out\\secret.md", 403),
        ("memory\\..\\..\\out\\secret.md", 403),
        ("\\\\server\\share\\secret.md", 403),
        ("memory/outdir/inner.md", 403),
        ("memory/secret.md", 403),
        ("notes/passwd.md", 403),
        ("memory/\x00../../out/secret.md", 400),
    ],
)
def test_get_refuses_traversal_in_every_spelling(fenced, path: str, status: int) -> None:
    r = fenced.post("/v1/get", headers=AUTH, json={"path": path})
    problem(r, status)
    assert "kestrel" not in r.text and "root:" not in r.text


@pytest.mark.parametrize(
    "path",
    ["memory/%2e%2e/%2e%2e/out/secret.md", "memory/%252e%252e/secret.md", "memory/\uff0e\uff0e/secret.md"],
)
def test_encoded_dots_are_never_decoded_into_a_traversal(fenced, path: str) -> None:
    """A JSON string is taken literally: `%2e%2e` and full-width dots name a (missing) folder, not `..`."""
    r = fenced.post("/v1/get", headers=AUTH, json={"path": path})
    assert r.status_code == 200 and r.json() == {"path": path, "from": 1, "lines": 0, "text": "", "totalLines": 0}
    escaped = fenced.post(
        "/v1/get",
        headers=AUTH | {"content-type": "application/json"},
        content=b'{"path": "memory/\\u002e\\u002e/x.md"}',
    )
    problem(escaped, 403, "'..'")  # a JSON escape is decoded before the check, and refused


def test_request_size_limits(client) -> None:
    problem(client.post("/v1/get", headers=AUTH, json={"path": "memory/" + "a" * 5000 + ".md"}), 400, "path")
    problem(client.post("/v1/get", headers=AUTH, json={"path": "MEMORY.md", "lines": 10**9}), 400, "lines")

    def chunks() -> Iterator[bytes]:  # no Content-Length: the limit holds on the bytes that arrive
        yield b'{"query": "'
        for _ in range(MAX_BODY_BYTES // 1024 + 1):
            yield b"a" * 1024
        yield b'"}'

    problem(client.post("/v1/search", headers=AUTH | {"content-type": "application/json"}, content=chunks()), 413)
    deep = b'{"query": ' + b"[" * 5000 + b"]" * 5000 + b"}"
    # the strict decode (api/strict.py) refuses the wrong type before it descends into the nesting
    problem(client.post("/v1/search", headers=AUTH | {"content-type": "application/json"}, content=deep), 400, "query")


@pytest.mark.parametrize(
    ("headers", "status", "needle"),
    [
        ({"Host": "rebound.example.com:8000"}, 421, "Host 'rebound.example.com:8000'"),  # DNS rebinding
        ({"Host": "127.0.0.1@rebound.example.com"}, 421, "Host"),
        ({"Host": "[::1"}, 421, "Host"),
        ({"Origin": "https://rebound.example.com"}, 403, "Origin"),  # a page of another site, Host left as sent
        ({"Origin": "null"}, 403, "Origin"),  # a sandboxed frame or a file: page
        ({"Origin": "http://localhost.example.com"}, 403, "Origin"),
    ],
)
def test_a_server_on_loopback_without_a_key_refuses_a_web_pages_requests(
    ws: Path, make_config, headers: dict[str, str], status: int, needle: str
) -> None:
    """A page the user opens can POST to 127.0.0.1 without asking (text/plain), and by DNS rebinding read the
    answers: `/v1/get` would hand the memory to that site. Its Host and Origin give it away."""
    with TestClient(create_app(make_config(ws), loopback_only=True), base_url="http://127.0.0.1:8000") as client:
        for method, path, body in [("POST", "/v1/get", {"path": "MEMORY.md"}), ("GET", "/metrics", None)]:
            r = client.request(method, path, json=body, headers={"content-type": "text/plain"} | headers)
            problem(r, status, needle)
        mine = {"Host": f"{socket.gethostname()}:8000"}  # `curl http://$(hostname):8000`
        for ok in [{}, {"Host": "localhost:8000"}, {"Host": "[::1]:8000"}, {"Host": "0.0.0.0:8000"}, mine]:
            assert client.post("/v1/get", json={"path": "MEMORY.md"}, headers=ok).status_code == 200, ok
            assert client.get("/docs", headers=ok).status_code == 200, ok
        assert client.post(
            "/v1/get", json={"path": "MEMORY.md"}, headers={"Origin": "http://127.0.0.1:8000"}
        ).is_success
        refused = f'memsift_requests_total{{app_name="memsift",method="POST",path="/v1/get",status_code="{status}"}}'
        assert refused in client.get("/metrics").text  # counted as any error (Prometheus' counts are per process)


def test_every_route_lists_the_421_and_403_it_answers_in_the_openapi_document(ws: Path, make_config) -> None:
    """A client generated from the schema met a 421 (a foreign Host) or a 403 (a foreign Origin) that no
    operation listed: each operation of the document is asked with both, and lists both as problems."""
    with TestClient(create_app(make_config(ws), loopback_only=True), base_url="http://127.0.0.1:8000") as client:
        paths = client.get("/schema/openapi.json").json()["paths"]
        for path, operations in paths.items():
            for method, operation in operations.items():
                url = path.replace("{runId}", "run-1")
                for headers, status in [({"Host": "rebound.example.com"}, 421), ({"Origin": "null"}, 403)]:
                    assert client.request(method, url, json={}, headers=headers).status_code == status, (url, headers)
                    answer = operation["responses"].get(str(status), {})
                    assert "application/problem+json" in answer.get("content", {}), (method, path, status)
    assert {"/v1/search", "/v1/get", "/v1/status", "/v1/index", "/healthz", "/readyz", "/metrics"} <= set(paths)


def test_a_server_with_a_key_or_beyond_loopback_checks_no_host(ws: Path, make_config) -> None:
    """With a key a page cannot use the API, and a proxy in front may pass its own Host through."""
    with TestClient(create_app(make_config(ws, **{"api.key": API_KEY}))) as client:
        r = client.post("/v1/get", json={"path": "MEMORY.md"}, headers=AUTH | {"Host": "memory.example.com"})
        assert r.status_code == 200, r.text


def test_schemathesis_with_the_key_finds_no_server_error_and_no_off_schema_answer(ws: Path, make_config) -> None:
    app = create_app(make_config(ws, **{"api.key": API_KEY}))
    schema = schemathesis.openapi.from_asgi("/schema/openapi.json", app).exclude(method="POST", path="/v1/index")
    cases = st.one_of(schema.as_strategy(GenerationMode.POSITIVE), schema.as_strategy(GenerationMode.NEGATIVE))
    checks = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
    statuses: set[int] = set()

    @given(case=cases)
    @settings(max_examples=150, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
    def check(case: schemathesis.Case) -> None:
        response = case.call_and_validate(headers=AUTH, checks=checks)
        statuses.add(response.status_code)
        if case.path.startswith("/v1"):
            unauthenticated = case.call(headers={"Authorization": "Bearer wrong"})
            assert unauthenticated.status_code == 401

    check()
    assert 200 in statuses  # the key let requests through to the handlers
