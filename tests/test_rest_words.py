"""The REST API as its users meet it (issue 14, point 9), on a real `memsift serve` over examples/workspace:
strict types, the docs address printed at start, the docs page at /docs, and sample requests that work."""

from __future__ import annotations

import os
import select
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import stop_process
from conftest import wait_for as poll
from test_api_server import START_SECONDS, free_port, wait_for

MEMSIFT = Path(sys.executable).parent / "memsift"
EXAMPLE = Path(__file__).parent.parent / "examples" / "workspace"


@pytest.fixture
def served(prefect_harness, tmp_path: Path, memsift_home: Path) -> Iterator[tuple[str, str]]:
    """(base URL, the first line `serve` printed) of a server on a copy of examples/workspace; its index runs
    go to the session's Prefect server."""
    from prefect.settings import PREFECT_API_URL

    ws = shutil.copytree(EXAMPLE, tmp_path / "workspace")
    port = free_port()
    env = dict(os.environ, MEMSIFT_HOME=str(memsift_home), PREFECT_API_URL=str(PREFECT_API_URL.value()))
    # stderr to a file: an index run logs there, and a pipe nobody reads blocks the server once it is full
    with open(tmp_path / "serve.log", "w") as log:
        proc = subprocess.Popen(
            [MEMSIFT, "--workspace", ws, "serve", "--port", str(port)],
            stdout=subprocess.PIPE, stderr=log, env=env, text=True,
        )  # fmt: skip
    try:
        # printed before the server starts listening; a server that prints nothing must not hang the test
        ready, _, _ = select.select([proc.stdout], [], [], START_SECONDS)
        first = proc.stdout.readline() if ready else ""
        base = f"http://127.0.0.1:{port}"
        wait_for(proc, f"{base}/readyz")
        yield base, first
    finally:
        stop_process(proc)


def test_wrong_types_are_refused_naming_the_field(served) -> None:
    base, _ = served
    for path, body, field in [
        ("/v1/search", {"query": "deploy", "maxResults": "2"}, "maxResults"),
        ("/v1/search", {"query": "deploy", "minScore": "0.9"}, "minScore"),
        ("/v1/search", {"query": "deploy", "explain": "true"}, "explain"),
        ("/v1/search", {"query": "deploy", "rerank": 1}, "rerank"),
        ("/v1/search", {"query": 7}, "query"),
        ("/v1/get", {"path": "MEMORY.md", "lines": "3"}, "lines"),
        ("/v1/get", {"path": "MEMORY.md", "from": 1.5}, "from"),
        ("/v1/index", {"force": "yes"}, "force"),
    ]:
        r = httpx.post(base + path, json=body, timeout=60)
        assert r.status_code == 400, (body, r.text)
        assert r.headers["content-type"].startswith("application/problem+json")
        assert r.json()["detail"].startswith(f"{field}: Expected `"), r.json()
    r = httpx.post(f"{base}/v1/search", json={"query": "deploy", "maxResults": 2, "minScore": 0}, timeout=60)
    assert r.status_code == 200 and len(r.json()["results"]) == 2  # right types still pass; an int is a number


def test_an_unknown_status_query_parameter_is_refused(served) -> None:
    """`?deeep=true` is a 400 naming it, as an unknown body field is; it answered as if no probe was asked."""
    base, _ = served
    r = httpx.get(f"{base}/v1/status", params={"deeep": "true"}, timeout=60)
    assert r.status_code == 400 and r.json()["detail"].startswith("deeep: unknown query parameter"), r.text
    r = httpx.get(f"{base}/v1/status", params={"agent": "main", "deep": "true"}, timeout=60)
    assert r.status_code == 200 and r.json()["probe"]["ok"] is True, r.text


def test_null_is_an_absent_optional_field(served) -> None:
    """A client that sends every field, None as null, gets each default, for every optional field alike
    (`from`, `evergreen`, `explain` and `force` were a 400 "Expected `int`, got `null`" while `lines` and
    `maxResults` took null)."""
    base, _ = served
    nulls = {"agent", "maxResults", "minScore", "mode", "rerank", "pathPrefix", "after", "before", "evergreen"}
    plain = httpx.post(f"{base}/v1/search", json={"query": "deploy"}, timeout=60).json()
    r = httpx.post(f"{base}/v1/search", json={"query": "deploy", "explain": None} | dict.fromkeys(nulls), timeout=60)
    assert r.status_code == 200, r.text
    assert [h["path"] for h in r.json()["results"]] == [h["path"] for h in plain["results"]]
    assert "scores" not in r.json()["results"][0]
    r = httpx.post(f"{base}/v1/get", json={"path": "MEMORY.md", "agent": None, "from": None, "lines": None}, timeout=60)
    assert r.status_code == 200 and r.json()["from"] == 1 and r.json()["text"].startswith("# MEMORY"), r.text
    r = httpx.post(f"{base}/v1/index", json={"agent": None, "force": None}, timeout=60)
    assert r.status_code == 202, r.text


def test_the_docs_address_is_printed_and_served(served) -> None:
    base, first = served
    assert first == f"memsift serve: REST API on {base}, docs at {base}/docs; Ctrl-C stops it\n"
    for path in ("/docs", "/schema"):
        page = httpx.get(base + path, timeout=30)
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assert "/static/redoc.standalone.js" in page.text
        assert "SPEC" not in page.text  # the page speaks to the API's users, not to memsift's contract
    assert httpx.get(f"{base}/static/redoc.standalone.js", timeout=30).status_code == 200


def _sample(schema: dict[str, Any], components: dict[str, Any]) -> dict[str, Any]:
    """The request body the docs page shows: each property's first example, as Redoc's sampler takes it."""
    schema = components[schema["$ref"].rsplit("/", 1)[1]]
    body = {}
    for name, prop in schema["properties"].items():
        assert prop.get("examples"), f"{schema['title']}.{name} has no example: the docs would show a placeholder"
        body[name] = prop["examples"][0]
    return body


def test_every_sample_request_on_the_docs_page_works(served, tmp_path: Path) -> None:
    base, _ = served
    doc = httpx.get(f"{base}/schema/openapi.json", timeout=30).json()
    components = doc["components"]["schemas"]
    sent = set()
    for path, operations in doc["paths"].items():
        body_spec = operations.get("post", {}).get("requestBody")
        if body_spec is None:
            continue
        body = _sample(body_spec["content"]["application/json"]["schema"], components)
        r = httpx.post(base + path, json=body, timeout=120)
        sent.add(path)
        if path == "/v1/search":
            assert r.status_code == 200, (body, r.text)
            assert r.json()["results"], body
        elif path == "/v1/get":
            assert r.status_code == 200, (body, r.text)
            assert r.json()["text"].strip() and r.json()["lines"] > 0, body
        else:  # /v1/index starts a run, which completes
            assert r.status_code == 202, (body, r.text)
            run = f"{base}/v1/index/{r.json()['runId']}"
            try:
                done = poll(
                    lambda run=run: (
                        (job := httpx.get(run, timeout=30).json())["state"] not in ("SCHEDULED", "PENDING", "RUNNING")
                        and job
                    ),
                    120,
                    "the index run to end",
                    every=0.2,
                )
            except AssertionError as exc:
                log = (tmp_path / "serve.log").read_text()[-4000:]
                raise AssertionError(f"{exc}; the server's log:\n{log}") from None
            assert done["state"] == "COMPLETED", done
    assert sent == {"/v1/search", "/v1/get", "/v1/index"}
