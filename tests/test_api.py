"""The REST API (SPEC section 4) through Litestar's TestClient: every route with its answers and errors, the
API key, the limits, several agents, searches while rebuilds swap the index file, index runs (a worker
thread, and a served deployment), and a schemathesis run against the OpenAPI schema.

Real parts only: real index files under the test's MEMSIFT_HOME, the real local model, the session's Prefect
test server for index runs.
"""

from __future__ import annotations

import json
import re
import shutil
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from conftest import wait_for
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from litestar import Litestar
from litestar.testing import TestClient
from sample import NOTES as SAMPLE
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from api.app import MAX_BODY_BYTES, create_app
from api.cli import main
from api.schemas import MAX_LINE, MAX_LINES, MAX_QUERY_BYTES
from api.strict import FORMS
from core import MemoryIndex, load_config
from core.config_types import Config
from core.sources.memory import external_roots
from core.sync_plan import SyncReport

NOTES = SAMPLE | {"notes.txt": "not a memory file\n"}
PROBLEM_KEYS = {"type", "title", "status", "detail"}
READY_SECONDS = 60


@pytest.fixture
def ws(workspace) -> Path:
    return workspace(NOTES)


@contextmanager
def serving(config: Config) -> Iterator[TestClient[Litestar]]:
    """The app for `config`, started (lifespan) and ready (model loaded)."""
    app = create_app(config)
    with TestClient(app) as client:
        assert app.state.agents.ready.wait(READY_SECONDS)
        yield client


@pytest.fixture
def client(ws: Path, make_config: Callable[..., Config]) -> Iterator[TestClient[Litestar]]:
    with serving(make_config(ws)) as c:
        yield c


def problem(response: Any, status: int, *needles: str) -> dict[str, Any]:
    """Assert an RFC 9457 answer with that status whose detail mentions every needle."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    doc = response.json()
    assert set(doc) == PROBLEM_KEYS and doc["status"] == status and doc["type"] == "about:blank"
    for needle in needles:
        assert needle in doc["detail"], doc
    return doc


def cli_json(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> dict[str, Any]:
    capsys.readouterr()
    assert main([str(a) for a in argv]) == 0
    return json.loads(capsys.readouterr().out)


# ---------------------------------------------------------------- search


def test_search_answers_200_with_the_cli_document(client, ws: Path, capsys, memsift_home: Path) -> None:
    assert client.get("/v1/status").json()["dirtyReason"] == "never indexed"  # the search indexes first
    assert not (memsift_home / "memory").exists()  # and asking created no index file
    r = client.post("/v1/search", json={"query": "what does Dana drink in the morning"})
    assert r.status_code == 200  # not Litestar's default 201 for POST
    doc = r.json()
    assert doc["results"][0]["path"] == "MEMORY.md"
    assert doc["mode"] == "hybrid" and doc["provider"] == "local" and "degraded" not in doc
    hit = doc["results"][0]
    assert set(hit) == {"path", "startLine", "endLine", "score", "snippet", "source", "citation"}
    assert hit["citation"] == f"MEMORY.md#L{hit['startLine']}-L{hit['endLine']}"

    cli = cli_json(capsys, "--workspace", ws, "search", "what does Dana drink in the morning", "--json")
    for answer in (doc, cli):
        answer.pop("tookMs")
    assert doc == cli


def test_search_options_and_explain(client) -> None:
    r = client.post("/v1/search", json={"query": "deploy", "maxResults": 1, "mode": "keyword", "explain": True})
    doc = r.json()
    assert r.status_code == 200 and doc["mode"] == "keyword" and len(doc["results"]) == 1
    assert set(doc["results"][0]["scores"]) == {"text", "fused", "rerank"}  # the keyword leg, reranked by default

    doc = client.post("/v1/search", json={"query": "deploy", "explain": True, "minScore": 0}).json()
    assert {"vector", "text"} <= set(doc["results"][0]["scores"])

    doc = client.post("/v1/search", json={"query": "Dana deploy", "pathPrefix": "memory/", "minScore": 0}).json()
    assert doc["results"] and all(h["path"].startswith("memory/") for h in doc["results"])

    problem(client.post("/v1/search", json={"query": "deploy", "pathPrefix": "/memory/"}), 400, "pathPrefix")

    doc = client.post("/v1/search", json={"query": "deploy", "rerank": True, "explain": True}).json()
    assert "degraded" not in doc and "rerank" in doc["results"][0]["scores"]
    doc = client.post("/v1/search", json={"query": "deploy", "rerank": False, "explain": True}).json()
    assert "rerank" not in doc["results"][0]["scores"]


@pytest.mark.parametrize("query", ["", "   ", "\n\t", "\x00", "\u200b\x07"])
def test_blank_query_is_400(client, query: str) -> None:
    problem(client.post("/v1/search", json={"query": query}), 400, "query", "blank")


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"query": "x", "maxResults": 101}, "maxResults"),
        ({"query": "x", "maxResults": 0}, "maxResults"),
        ({"query": "x", "minScore": 1.5}, "minScore"),
        ({"query": "x", "mode": "fuzzy"}, "mode"),
        ({"query": 42}, "query"),
        ({"query": "x", "explain": "yes"}, "explain"),
        ({"query": "x", "after": "soon"}, "after: 'soon' is not a date"),
        ({"query": "x", "before": "2026-02-30"}, "before: '2026-02-30'"),
        ({"query": "x", "after": "2026-05-15", "before": "2026-05-14"}, "after: '2026-05-15' is later than before"),
        ({"query": "x", "after": 7}, "after"),
        ({"query": "x", "evergreen": "no"}, "evergreen"),
        ({"query": "x", "max_results": 3}, "max_results"),  # unknown fields are refused, not ignored
        ({}, "query"),
    ],
)
def test_search_validation_errors_name_the_field(client, body: dict[str, Any], field: str) -> None:
    problem(client.post("/v1/search", json=body), 400, field)


def test_an_integer_written_with_a_fraction_of_zero_is_that_integer(client) -> None:
    """JSON has one kind of number, and JSON Schema's (OpenAPI 3.1's) `integer` is one with no fraction: 2.0
    and 1e2 are integers, as a client that keeps every number a float (JavaScript, an LLM's tool call) sends
    them. They were 400 "Expected `int`, got `float`"; 2.5 still is."""
    body = {"query": "Priya offline mode", "minScore": 0}
    assert len(client.post("/v1/search", json=body | {"maxResults": 1.0}).json()["results"]) == 1
    assert client.post("/v1/search", json=body | {"maxResults": 1e2}).status_code == 200
    doc = client.post("/v1/get", json={"path": "MEMORY.md", "from": 2.0, "lines": 1.0}).json()
    assert (doc["from"], doc["lines"]) == (2, 1), doc
    problem(client.post("/v1/search", json=body | {"maxResults": 2.5}), 400, "maxResults")
    problem(client.post("/v1/search", json=body | {"maxResults": 1e3}), 400, "maxResults", "<= 100")
    problem(client.post("/v1/get", json={"path": "MEMORY.md", "from": 0.0}), 400, "from", ">= 1")
    # past 2**53, written as an integer or not, a 400 saying the bound the OpenAPI document gives (1e16 was a
    # 400 "Expected `int | null`, got `float`"); up to it, a line past the end
    for beyond in (1e16, 2**53 + 1, 2**64):
        problem(client.post("/v1/get", json={"path": "MEMORY.md", "from": beyond}), 400, "from", f"<= {MAX_LINE}")
    assert client.post("/v1/get", json={"path": "MEMORY.md", "from": float(MAX_LINE)}).json()["text"] == ""
    problem(client.post("/v1/search", json={"query": "x", "agent": 2.0}), 400, "agent", "got `float`")
    huge = b'{"query": "x", "maxResults": 1e400}'
    problem(client.post("/v1/search", content=huge, headers={"content-type": "application/json"}), 400, "maxResults")


@pytest.mark.parametrize(
    ("route", "body"),
    [("/v1/search", {"query": "Priya"}), ("/v1/get", {"path": "MEMORY.md"}), ("/v1/index", {})],
)
def test_a_query_parameter_on_a_post_route_is_400_not_ignored(client, route: str, body: dict[str, Any]) -> None:
    """The POST routes read their body only: `?agent=bob` answered (or indexed) for main, silently."""
    problem(client.post(f"{route}?agent=bob", json=body), 400, "agent", "JSON body")
    problem(client.post(f"{route}?maxResults=1", json=body), 400, "maxResults")


def test_the_first_and_last_dates_filter_nothing(client) -> None:
    """`after: "0001-01-01"` was a 500 (ValueError: year 0 is out of range)."""
    for bounds in ({"after": "0001-01-01"}, {"before": "9999-12-31"}):
        r = client.post("/v1/search", json={"query": "ERR_SSL_PROTOCOL_ERROR", **bounds})
        assert r.status_code == 200 and r.json()["results"], (bounds, r.text)


def test_malformed_json_is_400(client) -> None:
    problem(client.post("/v1/search", content=b'{"query": ', headers={"content-type": "application/json"}), 400)


def test_a_form_body_is_a_400_saying_json_is_wanted(client) -> None:
    """`curl -d query=tea` sends a form (application/x-www-form-urlencoded), `curl -F` multipart: the detail was
    "JSON is malformed: invalid character (byte 0)", which did not say that a JSON object was wanted."""
    forms = {"application/x-www-form-urlencoded": b"query=tea", "multipart/form-data; boundary=b": b"--b\r\n"}
    for content_type, body in forms.items():
        r = client.post("/v1/search", content=body, headers={"content-type": content_type})
        form = content_type.split(";")[0]
        problem(r, 400, f"a form ({form}) came where a JSON object is wanted", '{"query": "..."}')
    # a JSON body under curl's -d default type is still read as JSON
    r = client.post("/v1/search", content=b'{"query": "tea"}', headers={"content-type": FORMS[0]})
    assert r.status_code == 200, r.text


def test_a_value_outside_a_fields_choices_is_a_400_listing_them(client) -> None:
    """`"mode": "fuzzy"` said only "Invalid enum value 'fuzzy'": not which values the field takes."""
    r = client.post("/v1/search", json={"query": "tea", "mode": "fuzzy"})
    problem(r, 400, "mode: Invalid enum value 'fuzzy'; expected one of hybrid, keyword, vector")


@pytest.mark.parametrize(
    ("route", "body", "field"),
    [
        ("/v1/search", rb'{"query": "\ud800"}', "query"),
        ("/v1/search", rb'{"query": "tea \udfff and \ud83d\ude00"}', "query"),  # a pair is fine, a half is not
        ("/v1/get", rb'{"path": "memory/\ud800.md"}', "path"),
        ("/v1/search", rb'{"query": "tea", "\ud800": 1}', "body"),
    ],
)
def test_a_lone_surrogate_is_a_400_naming_its_field(client, route: str, body: bytes, field: str) -> None:
    """`\ud800` alone is valid JSON syntax but no character: the detail was "Input data was truncated"."""
    detail = problem(client.post(route, content=body, headers={"content-type": "application/json"}), 400)["detail"]
    assert detail == f"{field}: contains a lone surrogate (\\ud800-\\udfff without its pair), which is no character"
    emoji = rb'{"query": "tea \ud83d\ude00"}'
    assert client.post("/v1/search", content=emoji, headers={"content-type": "application/json"}).status_code == 200


@pytest.mark.parametrize(("route", "example"), [("/v1/search", '{"query": "..."}'), ("/v1/get", '{"path": "..."}')])
@pytest.mark.parametrize("body", [b"", b"  \n"])
def test_an_empty_body_is_400_saying_so(client, route: str, example: str, body: bytes) -> None:
    """A route with a required field and no body: the detail was "body: 'data'" (or "Input data was
    truncated"). `/v1/index` has none, and takes no body as `{}` (test_api_server.py). The example is the
    route's own: /v1/get's said `e.g. {"query": "..."}`, a body it refuses."""
    detail = problem(client.post(route, content=body, headers={"content-type": "application/json"}), 400)["detail"]
    assert detail.startswith("body: empty") and "JSON object" in detail, detail
    assert f"e.g. {example}" in detail, detail


def test_limits_body_64k_and_query_4k(client) -> None:
    big = {"query": "a" * (MAX_BODY_BYTES + 1)}
    problem(client.post("/v1/search", json=big), 413, str(MAX_BODY_BYTES))
    problem(client.post("/v1/search", json={"query": "a" * (MAX_QUERY_BYTES + 1)}), 413, "query", "4096")
    problem(client.post("/v1/search", json={"query": "é" * (MAX_QUERY_BYTES // 2 + 1)}), 413, "query")  # bytes
    assert client.post("/v1/search", json={"query": "deploy " * (MAX_QUERY_BYTES // 7)}).status_code == 200


def test_degraded_search_without_an_embedder(ws: Path, make_config) -> None:
    with serving(make_config(ws, **{"embedding.provider": "none"})) as client:
        assert client.get("/readyz").json()["embedder"] == "none"
        r = client.post("/v1/search", json={"query": "ERR_SSL_PROTOCOL_ERROR"})
        doc = r.json()
        assert r.status_code == 200 and doc["mode"] == "keyword" and "no embedder" in doc["degraded"]
        assert doc["results"][0]["path"] == "memory/2026-05-14.md"


def test_a_search_answers_for_the_notes_as_they_are_now(client, ws: Path) -> None:
    """A note written, edited or deleted just before a search, within the watcher's debounce (the test app has
    no watcher at all): the search syncs what changed first, as `memsift search` and `memory_search` do.
    Before, a new note was not found and a deleted one was still a hit, on lines no file held."""
    assert client.post("/v1/search", json={"query": "Priya offline mode"}).json()["results"]  # indexes first
    (ws / "memory" / "2026-05-15.md").unlink()
    (ws / "memory" / "2026-05-16.md").write_text("# 2026-05-16\n\n- The zebra count at the reserve was 41.\n")
    doc = client.post("/v1/search", json={"query": "zebra count at the reserve", "minScore": 0}).json()
    assert (doc["results"][0]["path"], doc["results"][0]["endLine"]) == ("memory/2026-05-16.md", 3)
    paths = {hit["path"] for hit in client.post("/v1/search", json={"query": "Priya offline mode"}).json()["results"]}
    assert "memory/2026-05-15.md" not in paths
    assert client.get("/v1/status").json()["dirty"] is False


def test_a_search_keeps_the_index_of_a_workspace_gone_and_says_so(ws: Path, make_config, tmp_path: Path) -> None:
    """A workspace moved, deleted or on a volume not mounted: the search's catch-up read it as every note
    deleted and emptied the index, in silence (`POST /v1/index` refuses, "is not a folder"). Its notes are not
    known to be gone: the answer comes from the index as it was, and `warning` says why."""
    with serving(make_config(ws)) as client:
        body = {"query": "Priya offline mode"}
        found = [hit["path"] for hit in client.post("/v1/search", json=body).json()["results"]]  # indexes first
        ws.rename(tmp_path / "moved")
        doc = client.post("/v1/search", json=body).json()
        assert [hit["path"] for hit in doc["results"]] == found, doc
        assert f"the workspace {ws} is not a folder" in doc["warning"], doc
        (tmp_path / "moved").rename(ws)
        assert "warning" not in client.post("/v1/search", json=body).json()


def test_a_search_whose_sync_replaced_invalid_utf8_says_so(workspace, make_config, capsys) -> None:
    """The sync a search runs first, an agent's first index or the catch-up of a note changed since, indexed a
    note written in Latin-1 with U+FFFD: REST (and MCP) said nothing, the CLI only on stderr after a catch-up,
    nobody after a first index. The answer's `warning` says it, in REST and in the CLI's --json alike."""
    ws = workspace({"MEMORY.md": "# Memory\n"}, name="latin1")
    (ws / "memory").mkdir()
    (ws / "memory/first.md").write_bytes(b"# Notes\n- The zebra caf\xe9 opened.\n")
    said = "invalid UTF-8 on line 2, bad bytes replaced with U+FFFD"
    body = {"query": "zebra", "mode": "keyword"}
    with serving(make_config(ws)) as client:
        first = client.post("/v1/search", json=body).json()  # the first index, run by the search
        assert first["warning"] == f"memory/first.md: {said}", first
        (ws / "memory/later.md").write_bytes(b"# Later\n- A zebra cr\xe8me.\n")
        assert client.post("/v1/search", json=body).json()["warning"] == f"memory/later.md: {said}"
        assert "warning" not in client.post("/v1/search", json=body).json()  # nothing synced: nothing said

    (ws / "memory/cli.md").write_bytes(b"# CLI\n- A zebra na\xefve.\n")
    cli = cli_json(capsys, "--workspace", ws, "search", "zebra", "--mode", "keyword", "--json")
    assert cli["warning"] == f"memory/cli.md: {said}"
    fresh = workspace({"memory/n.md": "# N\n"}, name="fresh")
    (fresh / "memory/n.md").write_bytes(b"# N\n- The zebra caf\xe9.\n")
    assert main(["--workspace", str(fresh), "search", "zebra", "--mode", "keyword", "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["warning"] == f"memory/n.md: {said}"
    assert err.endswith(f"note: memory/n.md: {said}\n"), err  # after the note that it indexes first


# ---------------------------------------------------------------- get


def test_get_answers_a_line_range(client) -> None:
    r = client.post("/v1/get", json={"path": "memory/2026-05-14.md", "from": 3, "lines": 2})
    assert r.status_code == 200
    assert r.json() == {
        "path": "memory/2026-05-14.md",
        "from": 3,
        "lines": 2,
        "text": "line 3: deploy log entry number 3\nline 4: deploy log entry number 4",
        "totalLines": 11,
    }
    past = client.post("/v1/get", json={"path": "MEMORY.md", "from": 99}).json()
    assert (past["text"], past["lines"], past["totalLines"]) == ("", 0, 3)
    missing = client.post("/v1/get", json={"path": "memory/2030-01-01.md"}).json()
    assert (missing["text"], missing["totalLines"]) == ("", 0)  # a memory file that does not exist yet


def test_get_of_invalid_utf8_says_its_bytes_were_replaced(workspace, make_config, capsys) -> None:
    """U+FFFD in the text, and nothing said: REST's answer has a `warning`, the CLI's a line on stderr."""
    ws = workspace({"MEMORY.md": "# Memory\n"}, name="latin1")
    (ws / "memory").mkdir()
    (ws / "memory/latin1.md").write_bytes(b"# Notes\n- caf\xe9 au lait with Dana\n")
    warning = "invalid UTF-8 on line 2, bad bytes replaced with U+FFFD"
    with serving(make_config(ws)) as client:
        doc = client.post("/v1/get", json={"path": "memory/latin1.md"}).json()
        assert doc["text"] == "# Notes\n- caf\ufffd au lait with Dana" and doc["warning"] == warning
        assert "warning" not in client.post("/v1/get", json={"path": "MEMORY.md"}).json()
    assert cli_json(capsys, "--workspace", ws, "get", "memory/latin1.md", "--json") == doc
    assert main(["--workspace", str(ws), "get", "memory/latin1.md"]) == 0
    out, err = capsys.readouterr()
    assert out == "# Notes\n- caf\ufffd au lait with Dana\n"
    assert err == f"warning: memory/latin1.md: {warning}\n"


def test_get_without_lines_stops_at_the_limit(workspace, make_config, capsys) -> None:
    ws = workspace({"memory/long.md": "".join(f"{i}\n" for i in range(1, MAX_LINES + 101))}, name="long")
    with serving(make_config(ws)) as client:
        doc = client.post("/v1/get", json={"path": "memory/long.md"}).json()
        assert (doc["lines"], doc["totalLines"]) == (MAX_LINES, MAX_LINES + 100)
        problem(client.post("/v1/get", json={"path": "memory/long.md", "lines": MAX_LINES + 1}), 400, "lines")
        problem(client.post("/v1/get", json={"path": "memory/long.md", "from": 0}), 400, "from")
        later = client.post("/v1/get", json={"path": "memory/long.md", "from": 50}).json()
    # SPEC section 3: `get --json` is the REST answer to the same request, the cap included
    assert cli_json(capsys, "--workspace", ws, "get", "memory/long.md", "--json") == doc
    assert cli_json(capsys, "--workspace", ws, "get", "memory/long.md", "--from", "50", "--json") == later
    with pytest.raises(SystemExit) as usage:  # REST's 400, as a usage error
        main(["--workspace", str(ws), "get", "memory/long.md", "--lines", str(MAX_LINES + 1), "--json"])
    assert usage.value.code == 2 and "--lines: at most" in capsys.readouterr().err
    # the plain text is for a person or a pipe: the whole file, as `cat` prints it
    assert main(["--workspace", str(ws), "get", "memory/long.md"]) == 0
    assert capsys.readouterr().out == (ws / "memory/long.md").read_text()


@pytest.fixture
def refusing(workspace, make_config) -> Iterator[TestClient[Litestar]]:
    outside = workspace({"secret.md": "outside secret\n"}, name="outside")
    ws = workspace(NOTES | {"memory/dir.md/x.md": "a folder named like a note\n"})
    (ws / "memory/link.md").symlink_to(ws / "MEMORY.md")
    (ws / "memory/secret.md").symlink_to(outside / "secret.md")
    (ws / "memory/binary.md").write_bytes(b"text\x00with a NUL\n")
    with serving(make_config(ws)) as client:
        yield client


@pytest.mark.parametrize(
    ("path", "status", "needle"),
    [
        ("../outside/secret.md", 403, "'..'"),
        ("memory/../MEMORY.md", 403, "'..'"),
        ("/etc/passwd", 403, "absolute"),
        ("~/MEMORY.md", 403, "absolute"),
        ("memory/link.md", 403, "symlink"),
        ("memory/secret.md", 403, "symlink"),
        ("notes.txt", 403, "not a memory file"),
        ("memory\\2026-05-14.md", 403, "backslash"),
        ("memory/dir.md", 403, "not a regular file"),
        ("memory/binary.md", 422, "cannot be read as text"),
        ("", 400, "blank"),
    ],
)
def test_get_refusals(refusing, path: str, status: int, needle: str) -> None:
    problem(refusing.post("/v1/get", json={"path": path}), status, needle)


# ---------------------------------------------------------------- status, agents


def test_status_is_the_cli_document(client, ws: Path, capsys) -> None:
    assert client.post("/v1/search", json={"query": "deploy"}).status_code == 200  # indexes first
    r = client.get("/v1/status")
    assert r.status_code == 200
    assert r.json() == cli_json(capsys, "--workspace", ws, "status", "--json")
    deep = client.get("/v1/status", params={"deep": "true"}).json()
    assert deep["probe"]["ok"] is True and deep["probe"]["dims"] == 384
    problem(client.get("/v1/status", params={"deep": "maybe"}), 400, "deep")
    # a parameter given twice answered for the last one, in silence
    problem(client.get("/v1/status?agent=main&agent=other"), 400, "agent: given more than once")
    problem(client.get("/v1/status?deep=true&deep=false"), 400, "deep: given more than once")


def test_agents_each_have_their_index_and_unknown_is_404(workspace, tmp_path: Path) -> None:
    main_ws = workspace(NOTES, name="main-ws")
    research = workspace({"MEMORY.md": "# Research\n- The spectrometer calibration drifts above 30 degrees.\n"}, "rs")
    config_file = tmp_path / "memsift.toml"
    config_file.write_text(f'workspace = "{main_ws}"\n\n[agents.research]\nworkspace = "{research}"\n')
    with serving(load_config(config_file)) as client:
        query = {"query": "spectrometer calibration", "minScore": 0}
        assert (
            client.post("/v1/search", json=query | {"agent": "research"})
            .json()["results"][0]["snippet"]
            .startswith("# Research")
        )
        assert all("Research" not in h["snippet"] for h in client.post("/v1/search", json=query).json()["results"])
        status = client.get("/v1/status", params={"agent": "research"}).json()
        assert status["agent"] == "research" and status["workspace"] == str(research)
        assert client.get("/readyz").json()["agents"] == {"main": "ok", "research": "ok"}

        problem(client.post("/v1/search", json={"query": "x", "agent": "nobody"}), 404, "'nobody'", "main, research")
        problem(client.post("/v1/get", json={"path": "MEMORY.md", "agent": "nobody"}), 404, "'nobody'")
        problem(client.get("/v1/status", params={"agent": "nobody"}), 404, "'nobody'")
        problem(client.post("/v1/index", json={"agent": "nobody"}), 404, "'nobody'")
        # an empty agent id is a client's bug, not a request for the default agent
        problem(client.post("/v1/search", json={"query": "x", "agent": ""}), 400, "agent")
        problem(client.post("/v1/get", json={"path": "MEMORY.md", "agent": ""}), 400, "agent")
        problem(client.get("/v1/status?agent="), 400, "agent")
        problem(client.post("/v1/index", json={"agent": ""}), 400, "agent")
        # nor is an id no configuration can have (it was a 404, "not configured", as if it might be)
        for bad in (" ", "\t", "main ", "a b", "../main"):
            problem(client.post("/v1/search", json={"query": "x", "agent": bad}), 400, "agent:", "not a valid agent id")
            problem(client.post("/v1/get", json={"path": "MEMORY.md", "agent": bad}), 400, "agent:", "not a valid")
            problem(client.get("/v1/status", params={"agent": bad}), 400, "agent:", "not a valid agent id")
            problem(client.post("/v1/index", json={"agent": bad}), 400, "agent:", "not a valid agent id")


# ---------------------------------------------------------------- auth


@pytest.mark.parametrize("from_env", [False, True], ids=["api.key", "MEMSIFT_API_KEY"])
def test_api_key_guards_v1_and_leaves_health_open(ws: Path, make_config, monkeypatch, from_env: bool) -> None:
    if from_env:
        monkeypatch.setenv("MEMSIFT_API_KEY", "s3cret-key")
        config = make_config(ws)
    else:
        config = make_config(ws, **{"api.key": "s3cret-key"})
    with serving(config) as client:
        search = {"query": "deploy"}
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic s3cret-key"}):
            r = client.post("/v1/search", json=search, headers=headers)
            problem(r, 401, "API key")
            assert r.headers["www-authenticate"].startswith("Bearer")
        problem(client.get("/v1/status"), 401)
        assert client.head("/v1/status").status_code == 401  # HEAD is GET to the guard too
        problem(client.get(f"/v1/index/{uuid.uuid4()}"), 401)
        # The guard runs before the body is read: no validation detail leaks to a caller without the key.
        problem(client.post("/v1/search", json={"query": 1}), 401)

        good = {"Authorization": "Bearer s3cret-key"}
        assert client.post("/v1/search", json=search, headers=good).status_code == 200
        assert client.get("/v1/status", headers=good).status_code == 200
        for path in ("/healthz", "/readyz", "/metrics", "/schema/openapi.json"):
            assert client.get(path).status_code == 200, path
        schema = client.get("/schema/openapi.json").json()
        assert schema["components"]["securitySchemes"]["bearer"] == {"type": "http", "scheme": "bearer"}
        assert schema["paths"]["/v1/search"]["post"]["security"] == [{"bearer": []}]


# ---------------------------------------------------------------- health, metrics, docs, unknown routes


def test_health_and_readiness(client) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.post("/v1/search", json={"query": "deploy"}).status_code == 200  # the first index
    assert client.get("/readyz").json() == {"ready": True, "embedder": "loaded", "agents": {"main": "ok"}}


def test_readiness_of_an_agent_never_indexed_is_503_and_writes_nothing(ws: Path, make_config) -> None:
    """Not ready until the default agent's first index is complete (`serve` and `mcp` start it at start-up;
    here the app alone, as `memsift up` serves it, whose deployments run it): a server of an agent never indexed
    said ready at once, and its first search then took minutes. /readyz opened the index to ask it, creating an
    empty file: the watcher then took the agent for indexed. Asking must write nothing."""
    config = make_config(ws)
    with serving(config) as client:
        for _ in range(2):
            r = client.get("/readyz")
            assert r.status_code == 503 and r.json() == {
                "ready": False,
                "embedder": "loaded",
                "agents": {"main": "ok"},
                "firstIndex": {"main": "not indexed yet"},
            }
        assert not config.db_path.exists()
        assert client.post("/v1/search", json={"query": "deploy"}).status_code == 200  # the first search indexes
        assert config.db_path.exists()
        assert client.get("/readyz").json() == {"ready": True, "embedder": "loaded", "agents": {"main": "ok"}}


def test_readiness_503_when_the_index_cannot_be_opened(ws: Path, make_config, memsift_home: Path) -> None:
    config = make_config(ws)
    config.db_path.mkdir(parents=True)  # a folder where the index file should be
    with serving(config) as client:
        r = client.get("/readyz")
        assert r.status_code == 503
        doc = r.json()
        assert doc["ready"] is False and doc["embedder"] == "loaded" and config.db_path.name in doc["agents"]["main"]
        assert client.head("/readyz").status_code == 503  # HEAD, as `wget --spider` checks it
        assert client.get("/healthz").status_code == 200
        problem(client.post("/v1/search", json={"query": "deploy"}), 503, config.db_path.name)


def test_every_503_a_route_answers_is_in_the_openapi_document(ws: Path, make_config, tmp_path: Path) -> None:
    """A client generated from the schema must expect the 503s: `get` of an extraPaths file outside the workspace
    asks the index whether it holds the file (an index that cannot be opened: 503), and `POST /v1/index` answers
    503 when the Prefect server holding the deployment does not start the run (api.runs.PrefectUnavailable)."""
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "runbook.md").write_text("# Runbook\n\nrestart the pager\n", encoding="utf-8")
    config = make_config(ws, extraPaths=[str(outside)])
    config.db_path.mkdir(parents=True)  # a folder where the index file should be
    [root] = external_roots(config)
    with serving(config) as client:
        problem(client.post("/v1/get", json={"path": f"{root.prefix}/runbook.md"}), 503, config.db_path.name)
        paths = client.get("/schema/openapi.json").json()["paths"]
    assert "503" in paths["/v1/get"]["post"]["responses"]
    assert "503" in paths["/v1/index"]["post"]["responses"]


def test_metrics_count_requests_per_route_and_describe_the_index(client) -> None:
    assert client.post("/v1/search", json={"query": "deploy"}).status_code == 200
    client.post("/v1/search", json={"query": " "})
    client.get(f"/v1/index/{uuid.uuid4()}")
    r = client.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    # One charset parameter: Prometheus 3 refuses a Content-Type with a duplicate one (Go's mime parser).
    assert r.headers["content-type"].replace(" ", "").count("charset=") == 1, r.headers["content-type"]
    text = r.text
    route = 'method="POST",path="/v1/search",status_code="200"'
    assert re.search(r"memsift_requests_total\{[^}]*" + route, text)
    assert re.search(r"memsift_request_duration_seconds_bucket\{[^}]*" + route, text)
    assert 'path="/v1/search",status_code="400"' in text
    assert 'path="/v1/index/{runId}",status_code="404"' in text  # the template, not the id
    assert re.search(r'memsift_search_seconds_count\{agent="main",mode="hybrid"\} 1\.0', text)
    for stage in ("embed", "keyword", "vector", "fusion", "shaping"):
        assert re.search(r'memsift_search_stage_seconds_count\{stage="' + stage + r'"\} 1\.0', text), stage
    assert re.search(r'memsift_index_chunks\{agent="main"\} [1-9]', text)
    assert re.search(r'memsift_index_size_bytes\{agent="main"\} [1-9]', text)
    assert re.search(r'memsift_index_last_sync_age_seconds\{agent="main"\} \d', text)
    assert "process_resident_memory_bytes" in text


def test_unknown_route_and_method_are_problems(client) -> None:
    problem(client.get("/v2/search"), 404, "/v2/search")
    r = client.put("/v1/search", json={"query": "x"})
    problem(r, 405, "PUT /v1/search; this route answers OPTIONS, POST")  # it named only the method refused
    problem(client.get("/v1/search"), 405, "GET /v1/search; this route answers OPTIONS, POST")
    problem(client.post("/healthz"), 405, "this route answers GET, HEAD, OPTIONS")
    assert set(r.headers["allow"].split(", ")) == {"OPTIONS", "POST"}
    # Every GET route answers HEAD, and its `Allow` says so (it said `GET, OPTIONS`)
    for r in (client.delete("/healthz"), client.post("/v1/status"), client.options(f"/v1/index/{uuid.uuid4()}")):
        assert set(r.headers["allow"].split(", ")) == {"GET", "HEAD", "OPTIONS"}, (r.request.url, r.headers["allow"])


def test_head_answers_every_get_route_as_get_does_without_the_body(client) -> None:
    """`curl -I`, `wget --spider` and load balancers' health checks send HEAD: the status and headers of GET, no
    body (only /healthz and /readyz had a HEAD handler; /v1/status, /metrics and the others answered 405)."""
    for path in (
        "/healthz",
        "/readyz",
        "/metrics",
        "/v1/status",
        "/v1/status?agent=nobody",
        f"/v1/index/{uuid.uuid4()}",
        "/schema",
        "/schema/openapi.json",
    ):
        got, head = client.get(path), client.head(path)
        assert (head.status_code, head.content) == (got.status_code, b""), path
        assert head.headers["content-type"] == got.headers["content-type"], path
        if path in ("/healthz", "/schema/openapi.json"):  # the same body each time: the same length
            assert head.headers["content-length"] == got.headers["content-length"] != "0", path
    # a route without GET keeps its methods
    r = client.head("/v1/search")
    assert (r.status_code, r.content) == (405, b"") and "POST" in r.headers["allow"]


def test_metrics_count_a_head_as_head(client) -> None:
    """A HEAD is answered as a GET, and was counted as one: a load balancer's HEAD probes swelled the GET series
    of /healthz and /readyz. Counted by the method sent, a HEAD probe's 503 shows as such."""

    def count(method: str, path: str, status: int) -> float:
        series = f'method="{method}",path="{path}",status_code="{status}"'
        found = re.search(
            r"memsift_requests_total\{[^}]*" + re.escape(series) + r"[^}]*\} (\S+)", client.get("/metrics").text
        )
        return float(found[1]) if found else 0.0

    gets, heads = count("GET", "/healthz", 200), count("HEAD", "/healthz", 200)
    assert client.head("/healthz").status_code == client.head("/healthz").status_code == 200
    assert (count("GET", "/healthz", 200), count("HEAD", "/healthz", 200)) == (gets, heads + 2)
    assert client.get("/healthz").status_code == 200
    assert (count("GET", "/healthz", 200), count("HEAD", "/healthz", 200)) == (gets + 1, heads + 2)
    assert re.search(
        r'memsift_request_duration_seconds_count\{[^}]*method="HEAD",path="/healthz"', client.get("/metrics").text
    )


def test_openapi_schema_and_offline_docs_page(client) -> None:
    schema = client.get("/schema/openapi.json").json()
    assert schema["openapi"].startswith("3.1")
    assert {"/v1/search", "/v1/get", "/v1/status", "/v1/index", "/v1/index/{runId}", "/healthz", "/readyz"} <= set(
        schema["paths"]
    )
    props = schema["components"]["schemas"]["SearchRequest"]["properties"]
    assert {"query", "agent", "maxResults", "minScore", "mode", "rerank", "pathPrefix", "explain"} | {
        "after",
        "before",
        "evergreen",
    } == set(props)
    assert "from" in schema["components"]["schemas"]["GetRequest"]["properties"]
    # SPEC section 4's shapes, by the names it gives them: Result, with its fields, and the search answer
    components = schema["components"]["schemas"]
    answer = components["SearchAnswer"]
    assert answer["properties"]["results"]["items"] == {"$ref": "#/components/schemas/Result"}
    assert {"results", "mode", "provider", "model", "tookMs"} == set(answer["required"])
    assert {"degraded"} < set(answer["properties"]) - set(answer["required"])
    result = components["Result"]
    assert set(result["required"]) == {"path", "startLine", "endLine", "score", "snippet", "source", "citation"}
    assert set(result["properties"]) - set(result["required"]) == {"scores"}
    assert {"vector", "text", "rerank", "decay"} <= set(components["Scores"]["properties"])
    assert not components["Scores"].get("required")
    assert set(components["GetAnswer"]["required"]) == {"path", "from", "lines", "text", "totalLines"}
    assert {"runId", "state"} <= set(components["IndexRun"]["required"])
    # `degraded` says every reason an answer is less than asked, a failed rerank too, not only the vector leg's
    degraded = schema["components"]["schemas"]["SearchAnswer"]["properties"]["degraded"]["description"]
    assert "vector leg" in degraded and "reranker failed" in degraded
    # Every bound the server enforces, 0 included (Litestar drops a bound of 0: `minScore: -0.1` passed a client
    # generated from the schema and met a 400)
    bounds = {
        ("SearchRequest", "maxResults"): (1, 100),
        ("SearchRequest", "minScore"): (0, 1),
        ("GetRequest", "from"): (1, MAX_LINE),
        ("GetRequest", "lines"): (0, MAX_LINES),
    }
    for (name, field), (low, high) in bounds.items():
        prop = schema["components"]["schemas"][name]["properties"][field]
        assert (prop.get("minimum"), prop.get("maximum")) == (low, high), (name, field, prop)
    # POST /v1/index takes no body as `{}` (SPEC: every field optional); the others need theirs.
    assert schema["paths"]["/v1/index"]["post"]["requestBody"]["required"] is False
    assert schema["paths"]["/v1/search"]["post"]["requestBody"]["required"] is True

    page = client.get("/schema")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    html = page.text
    assert "Content-Security-Policy" in html
    # Nothing the page loads comes from another host: every src/href is local (or a data: URL).
    for url in re.findall(r"""(?:src|href)=['"]([^'"]+)['"]""", html):
        assert url.startswith(("/", "data:")), url
    script = re.search(r"""<script src="([^"]+)\"""", html)[1]
    asset = client.get(script)
    assert asset.status_code == 200 and "javascript" in asset.headers["content-type"]
    assert b"Redoc" in asset.content[:4096]


# ---------------------------------------------------------------- a search while rebuilds swap the index file


def test_searches_stay_200_while_rebuilds_swap_the_index(ws: Path, make_config) -> None:
    config = make_config(ws)
    with MemoryIndex(config) as index:
        index.sync()
    answers: list[int] = []
    progress = threading.Condition()
    stop = threading.Event()

    with serving(config) as client:

        def reader() -> None:
            while not stop.is_set():
                r = client.post("/v1/search", json={"query": "deploy certificate zephyrine", "minScore": 0})
                with progress:
                    answers.append(r.status_code)
                    progress.notify_all()

        def wait_for_answers(n: int) -> None:
            with progress:
                assert progress.wait_for(lambda: len(answers) >= n, timeout=30), answers

        thread = threading.Thread(target=reader, name="reader")
        thread.start()
        try:
            for round_ in range(4):
                wait_for_answers(len(answers) + 2)  # searches before and between the swaps
                if round_ == 3:  # new text, only in the file the last rebuild swaps in
                    (ws / "memory" / "2026-05-16.md").write_text("- The zephyrine rollout starts on Monday.\n")
                before = config.db_path.stat().st_ino
                with MemoryIndex(config) as writer:
                    assert writer.sync(force=True).rebuilt
                assert config.db_path.stat().st_ino != before  # a new file was swapped in
            wait_for_answers(len(answers) + 3)  # the reader keeps going on the last swapped-in file
        finally:
            stop.set()
            thread.join(30)
        assert answers and set(answers) == {200}, answers
        # The pooled indexes reopened the new file: the note only it holds is found, without a restart.
        doc = client.post("/v1/search", json={"query": "zephyrine rollout", "mode": "keyword"}).json()
        assert doc["results"][0]["path"] == "memory/2026-05-16.md"


# ---------------------------------------------------------------- index runs (Prefect flow runs)


UUID_RE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


@pytest.mark.usefixtures("prefect_harness")
def test_index_runs_the_sync_flow_in_a_worker_thread(ws: Path, make_config) -> None:
    with serving(make_config(ws)) as client:
        r = client.post("/v1/index", json={})
        assert r.status_code == 202
        run = r.json()
        assert UUID_RE.match(run["runId"]) and run["state"] in ("PENDING", "RUNNING") and run["agent"] == "main"
        client.app.state.runs.wait(run["runId"], 120)
        done = client.get(f"/v1/index/{run['runId']}").json()
        assert done["state"] == "COMPLETED", done
        assert done["summary"]["added"] == 3 and done["summary"]["rebuilt"] is True

        forced = client.post("/v1/index", json={"force": True, "agent": "main"}).json()
        client.app.state.runs.wait(forced["runId"], 120)
        summary = client.get(f"/v1/index/{forced['runId']}").json()["summary"]
        assert summary["rebuilt"] is True and summary["chunksEmbedded"] == 0  # the cache serves a rebuild
        assert client.post("/v1/search", json={"query": "ERR_SSL_PROTOCOL_ERROR"}).json()["results"]

        problem(client.get(f"/v1/index/{uuid.uuid4()}"), 404, "no index run")
        problem(client.post("/v1/index", json={"force": "yes"}), 400, "force")
        # a parameter this route does not read (a client polling with `?wait=30`) is refused, not ignored
        problem(client.get(f"/v1/index/{run['runId']}?wait=30"), 400, "wait: unknown query parameter")

        shutil.rmtree(ws)  # the flow loads the configuration again, and the workspace is gone
        failing = client.post("/v1/index", json={}).json()
        client.app.state.runs.wait(failing["runId"], 120)
        failed = client.get(f"/v1/index/{failing['runId']}").json()
        assert failed["state"] == "FAILED" and "workspace" in failed["error"] and "summary" not in failed


def test_index_without_a_prefect_server_runs_the_sync_in_process(
    ws: Path, make_config, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`memsift serve` with no Prefect server to record the run (here PREFECT_API_URL names a port nobody
    listens on) syncs in-process as `memsift index` does; handing the run to Prefect failed it instead
    ("Timed out while attempting to connect to ephemeral Prefect API server" when PREFECT_API_URL is unset)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv("PREFECT_API_URL", f"http://127.0.0.1:{port}/api")
    with serving(make_config(ws)) as client:
        run = client.post("/v1/index", json={}).json()
        client.app.state.runs.wait(run["runId"], 120)
        done = client.get(f"/v1/index/{run['runId']}").json()
        assert done["state"] == "COMPLETED", done
        assert done["summary"]["added"] == 3 and done["summary"]["rebuilt"] is True


@pytest.mark.usefixtures("prefect_harness")
def test_index_goes_through_a_served_deployment(ws: Path, make_config) -> None:
    from prefect.client.orchestration import get_client
    from prefect.flow_engine import run_flow

    from flows.sync import sync_flow

    (ws / "memory" / "back\\slash.md").write_text("a file name search could not hand to get: skipped\n")
    deployment_id = sync_flow.to_deployment(name="main").apply()
    try:
        with serving(make_config(ws)) as client, get_client(sync_client=True) as prefect:
            prefect.get_scheduled_flow_runs_for_deployments([deployment_id])  # a runner's poll: it is served
            run = client.post("/v1/index", json={"force": True}).json()
            assert run["state"] == "SCHEDULED"
            flow_run = prefect.read_flow_run(uuid.UUID(run["runId"]))  # the run id is the flow run's
            assert flow_run.deployment_id == deployment_id
            assert flow_run.parameters == {"agent": "main", "workspace": str(ws), "config_path": None, "force": True}
            assert client.get(f"/v1/index/{run['runId']}").json()["state"] == "SCHEDULED"
            # What the deployment's runner does with the run, in this process: the same engine call.
            run_flow(sync_flow, flow_run=flow_run, parameters=flow_run.parameters)
            done = client.get(f"/v1/index/{run['runId']}").json()
            assert done["state"] == "COMPLETED", done
            assert done["summary"]["rebuilt"] is True and done["summary"]["added"] == 3  # from the run's artifact
            # The shape of an in-process run's summary: it was flat ("plan.chunks": 3) and had no `warnings`.
            assert set(done["summary"]) == set(SyncReport().to_dict()), done
            assert done["summary"]["plan"]["chunks"] == 3
            assert len(done["summary"]["warnings"]) == 1 and "slash.md" in done["summary"]["warnings"][0]
    finally:
        with get_client(sync_client=True) as prefect:
            prefect.delete_deployment(deployment_id)


@pytest.mark.usefixtures("prefect_harness")
def test_a_deployment_no_runner_polls_is_passed_by(ws: Path, make_config) -> None:
    """A deployment left on the server by an `up` that has stopped (never polled here) would hold the run
    Scheduled forever: the run is made in this process instead, and completes."""
    from prefect.client.orchestration import get_client

    from flows.sync import sync_flow

    deployment_id = sync_flow.to_deployment(name="main").apply()
    try:
        with serving(make_config(ws)) as client:
            run = client.post("/v1/index", json={}).json()
            client.app.state.runs.wait(run["runId"], 120)
            done = client.get(f"/v1/index/{run['runId']}").json()
        assert done["state"] == "COMPLETED" and done["summary"]["added"] == 3, done
        with get_client(sync_client=True) as prefect:
            assert not [r for r in prefect.read_flow_runs() if r.deployment_id == deployment_id]  # none was made
    finally:
        with get_client(sync_client=True) as prefect:
            prefect.delete_deployment(deployment_id)


# ---------------------------------------------------------------- schemathesis against /schema/openapi.json


def test_schemathesis_finds_no_server_error_and_no_off_schema_answer(ws: Path, make_config) -> None:
    """Valid and invalid requests drawn from the published schema, through the ASGI app (schemathesis'
    pytest integration, `from_fixture`, does not run under pytest 9: it reads `Function._nodeid`, gone)."""
    app = create_app(make_config(ws))
    # POST /v1/index is left out: every call would start a real flow run (it has its own tests above).
    schema = schemathesis.openapi.from_asgi("/schema/openapi.json", app).exclude(method="POST", path="/v1/index")
    cases = st.one_of(schema.as_strategy(GenerationMode.POSITIVE), schema.as_strategy(GenerationMode.NEGATIVE))
    checks = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]

    @given(case=cases)
    @settings(max_examples=300, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
    def check(case: schemathesis.Case) -> None:
        case.call_and_validate(checks=checks)

    check()


def test_closing_the_runs_stops_a_long_sync_at_its_next_step(workspace, memsift_home) -> None:
    """A server stopping (Ctrl-C) must not wait for a first index or a rebuild of its worker to finish: the
    sync stops after its current embedding request, and the run says CANCELLED."""
    from api.runs import IndexRuns

    notes = {
        f"memory/2025-01-{1 + i % 28:02d}-{i}.md": f"# note {i}\n- {i} zebras crossed the river.\n" for i in range(200)
    }
    config = load_config(workspace=workspace(notes))
    runs = IndexRuns()
    run = runs.start(config, force=False)
    wait_for(lambda: run.state == "RUNNING", 60, "the sync to start")
    runs.close()
    assert runs.wait(run.id, 60).state == "CANCELLED", run  # not after its 200 notes
    assert run.error == "the server is stopping"
    with MemoryIndex(config) as index:  # the writer lock is free again, and what was written stays readable
        assert index.status()["files"].get("memory", 0) < 200
