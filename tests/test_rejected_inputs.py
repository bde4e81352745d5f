"""Skip, don't stop: an input the provider refuses (HTTP 400 naming it) never fails the whole run.

The fake provider's `reject` switch answers 400 to any request holding a bad input, as OpenAI does for an
input over the model's context length. The request's halves are retried apart, a lone input too long by the
server's count is split and averaged, and one refused even so is indexed for keyword search only, with a
warning naming its file and lines; transient faults keep their retries.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from index_checks import chunks_without_vectors, integrity

from api.cli import main
from core.config_home import db_path
from tests.fake_provider import FakeProvider

PROBE = "memsift probe"
#: What the fake refuses wherever it is cut: splitting it cannot cure it.
POISON = "- poison " + "☠ " * 20 + "\n"
NOTES = {f"memory/note-{n:02d}.md": f"# note {n}\n- The relay {n} sits in bay {n * 3}.\n" for n in range(12)}


@pytest.fixture
def provider() -> Iterator[FakeProvider]:
    server = FakeProvider()
    yield server
    server.close()


def configured(workspace, provider: FakeProvider, files: dict[str, str]) -> Path:
    ws = workspace(files)
    (ws / "memsift.toml").write_text(
        f'[embedding]\nprovider = "openai"\nbaseUrl = "{provider.url}"\nmodel = "fake-model"\nretries = 2\n'
    )
    return ws


def index(capsys, ws: Path, *extra: str) -> dict:
    capsys.readouterr()
    code = main(["--workspace", str(ws), "index", "--no-prefect", "--json", *extra])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


def test_a_refused_input_is_skipped_with_a_warning_naming_its_lines_and_the_run_completes(
    capsys, workspace, provider: FakeProvider, memsift_home: Path
) -> None:
    bad = "# bad\n- Fine words first.\n" + POISON
    ws = configured(workspace, provider, NOTES | {"memory/bad.md": bad})
    provider.reject = lambda text: "☠" in text
    provider.fault = lambda n: "503" if n == 2 else None  # and a transient fault, retried as ever
    report = index(capsys, ws)  # a first index: a rebuild, which used to fail whole on one bad input
    assert report["rebuilt"] and report["chunksWritten"] == 13
    assert report["chunksRejected"] == 1 and report["chunksEmbedded"] == 12
    [warning] = report["warnings"]
    assert warning.startswith("skipped embedding memory/bad.md:1-3 (keyword search only): openai: HTTP 400")
    assert "input[" in warning and "maximum context length" in warning
    db = db_path(memsift_home, "main", ws.resolve())
    assert integrity(db) == ["ok"] and chunks_without_vectors(db) == 1
    assert sum(1 for r in provider.requests if r.fault == "503") == 1

    capsys.readouterr()
    assert main(["--workspace", str(ws), "search", "poison", "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert found["results"][0]["path"] == "memory/bad.md"  # keyword search finds it

    provider.embedded.clear()
    again = index(capsys, ws, "--force")  # the good vectors are cached; the bad one is tried again, and skipped
    assert again["chunksRejected"] == 1 and again["chunksEmbedded"] == 0 and again["cacheHits"] == 12


def test_an_input_too_long_by_the_server_s_count_is_split_and_embedded(
    capsys, workspace, provider: FakeProvider, memsift_home: Path
) -> None:
    long_note = "# long\n" + "".join(f"- Line {i} of a long note about the harbour crane.\n" for i in range(8))
    ws = configured(workspace, provider, NOTES | {"memory/long.md": long_note})
    provider.reject = lambda text: len(text.encode()) > 200  # the server counts tighter than our guess
    report = index(capsys, ws)
    assert report["chunksRejected"] == 0 and report["chunksEmbedded"] == 13 and not report["warnings"]
    assert chunks_without_vectors(db_path(memsift_home, "main", ws.resolve())) == 0
    pieces = [t for r in provider.requests if r.fault is None for t in r.body["input"] if t != PROBE]
    assert any(t in long_note and t != long_note.strip() for t in pieces)  # it went out in pieces


def test_a_request_every_input_of_which_is_refused_stops_the_run(capsys, workspace, provider: FakeProvider) -> None:
    """Everything refused is the request's fault (a parameter, the model), not the inputs': no silent index
    without vectors."""
    ws = configured(workspace, provider, NOTES)
    provider.reject = lambda text: text != PROBE
    capsys.readouterr()
    assert main(["--workspace", str(ws), "index", "--no-prefect"]) == 1
    assert "HTTP 400" in capsys.readouterr().err


def test_a_provider_refusing_every_request_stops_the_run_without_a_split_storm(
    capsys, workspace, provider: FakeProvider
) -> None:
    """A server that took the start-up probe, then answers 400 to every request (a proxy or a plan refusing
    them): each request was halved and its inputs split, 666 paid requests for 41 chunks before the run
    stopped. One request more, the probe text again, tells the request from its inputs: the run stops."""
    ws = configured(workspace, provider, NOTES)
    (ws / "memsift.toml").write_text((ws / "memsift.toml").read_text() + "batchMaxInputs = 2\nconcurrency = 1\n")
    provider.fault = lambda n: "400" if n > 1 else None
    capsys.readouterr()
    assert main(["--workspace", str(ws), "index", "--no-prefect"]) == 1
    assert "HTTP 400" in capsys.readouterr().err
    assert len(provider.requests) == 3  # the start's probe, the first batch, the probe again


@pytest.mark.usefixtures("prefect_harness")
def test_the_flow_completes_and_reports_the_skipped_input(workspace, provider: FakeProvider) -> None:
    from flows.sync import run_sync

    ws = configured(workspace, provider, NOTES | {"memory/bad.md": POISON})
    provider.reject = lambda text: "☠" in text
    report = run_sync("main", workspace=str(ws))
    assert report.rebuilt and report.chunksRejected == 1 and report.chunksEmbedded == 12
    assert report.warnings[0].startswith("skipped embedding memory/bad.md:1-1")


def test_a_refused_input_does_not_keep_the_vectors_an_outage_left_waiting_from_being_embedded(
    capsys, workspace, provider: FakeProvider, memsift_home: Path
) -> None:
    """After an outage the next sync embeds the text that waited, which includes the refused chunk (it has no
    vector either): refused again, it stays keyword-only and the rest gets its vectors. Before, the refusal
    failed that catch-up whole: every later sync sent both again, kept neither, and the index stayed dirty."""
    ws = configured(workspace, provider, NOTES | {"memory/bad.md": POISON})
    provider.reject = lambda text: "☠" in text
    index(capsys, ws)
    (ws / "memory" / "new.md").write_text("# new\n- The heron count was 41.\n")
    provider.fault = lambda n: "503"  # down, the start-up probe included
    assert index(capsys, ws)["vectorsPending"]

    provider.fault = lambda n: None
    report = index(capsys, ws)
    assert not report["vectorsPending"] and report["chunksEmbedded"] == 1 and report["chunksRejected"] == 1
    assert chunks_without_vectors(db_path(memsift_home, "main", ws.resolve())) == 1  # the refused one alone
    assert main(["--workspace", str(ws), "status", "--json"]) == 0
    assert not json.loads(capsys.readouterr().out)["dirty"]


def test_status_and_search_count_refused_chunks_apart_from_those_waiting_for_a_vector(
    capsys, workspace, provider: FakeProvider
) -> None:
    """During an outage, "N chunks pending vectors" counted the chunk the provider refused too, which no sync
    will ever embed: the count never reached 0. The refused ones are counted apart (`vector.refused`), in
    status (CLI and REST document) and in a search's `degraded` line."""
    ws = configured(workspace, provider, NOTES | {"memory/bad.md": POISON})
    provider.reject = lambda text: "☠" in text
    index(capsys, ws)
    assert main(["--workspace", str(ws), "status", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["vector"]["refused"] == 1 and doc["vectorsPending"] is None and not doc["dirty"]

    (ws / "memory" / "new.md").write_text("# new\n- The heron count was 41.\n")
    provider.fault = lambda n: "503"  # down, the start-up probe included
    assert index(capsys, ws)["vectorsPending"]
    assert main(["--workspace", str(ws), "status", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["vectorsPending"]["chunks"] == 1 and doc["vector"]["refused"] == 1
    assert doc["dirtyReason"].startswith("1 of 14 chunks has no vector")
    assert "(1 more the provider refused stays keyword-only)" in doc["dirtyReason"]

    from litestar.testing import TestClient

    from api.app import create_app
    from core import load_config

    with TestClient(create_app(load_config(workspace=ws))) as client:  # the REST document says the same
        rest = client.get("/v1/status").json()
    assert rest["vectorsPending"]["chunks"] == 1 and rest["vector"]["refused"] == 1

    provider.fault = lambda n: None  # back: a search embeds its query, the pending chunk is still without one
    assert main(["--workspace", str(ws), "search", "heron", "--json"]) == 0
    degraded = json.loads(capsys.readouterr().out)["degraded"]
    assert degraded.startswith("1 chunk has no vector yet") and "1 more the provider refused stays" in degraded

    index(capsys, ws)  # the pending chunk gets its vector; the refused one stays refused
    assert main(["--workspace", str(ws), "status", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["vectorsPending"] is None and doc["vector"]["refused"] == 1 and not doc["dirty"]
