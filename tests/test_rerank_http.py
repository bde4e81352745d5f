"""The Cohere-style rerank client against a real HTTP server on 127.0.0.1 (tests/fake_rerank.py): each
dialect's request, each answer shape, and the faults of a hosted service."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from core import load_config
from core.config import ConfigError
from core.config_types import RerankConfig
from core.rerankers import RerankError, create_reranker
from core.rerankers.cohere import CohereReranker, relevance_scores, rerank_url
from tests.fake_rerank import SHAPES, FakeReranker, fake_relevance

KEY = "rk-test-SECRET-0123456789abcdef"
QUERY = "when did alice adopt the cat"
DOCUMENTS = ["Bob fixed the billing bug.", "Alice did adopt a cat in May.", "The cat sleeps.", "Nothing here."]
EXPECTED = [fake_relevance(QUERY, d) for d in DOCUMENTS]


@pytest.fixture
def fake() -> Iterator[FakeReranker]:
    server = FakeReranker()
    yield server
    server.close()


@pytest.fixture(autouse=True)
def _keys(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("MEMSIFT_RERANK_API_KEY", "COHERE_API_KEY", "JINA_API_KEY", "VOYAGE_API_KEY"):
        monkeypatch.delenv(name, raising=False)


def rerank_config(tmp_path: Path, env: dict[str, str] | None = None, **rerank: Any) -> RerankConfig:
    overrides = {"rerank.provider": "cohere", "rerank.timeoutSeconds": 0.5, "rerank.retries": 2}
    overrides.update({f"rerank.{k}": v for k, v in rerank.items()})
    return load_config(workspace=tmp_path, env=env or {}, overrides=overrides).rerank


@pytest.fixture
def reranker(
    fake: FakeReranker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[..., CohereReranker]]:
    """A reranker against the fake with the key in MEMSIFT_RERANK_API_KEY; closed after the test."""
    made: list[CohereReranker] = []

    def make(**rerank: Any) -> CohereReranker:
        monkeypatch.setenv("MEMSIFT_RERANK_API_KEY", KEY)
        made.append(CohereReranker(rerank_config(tmp_path, baseUrl=fake.url, **rerank)))
        return made[-1]

    yield make
    for made_one in made:
        made_one.close()


# -- dialects and answer shapes --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("dialect", "path", "count_field", "model"),
    [
        ("cohere", "/v2/rerank", "top_n", "rerank-v3.5"),
        ("jina", "/v1/rerank", "top_n", "jina-reranker-v2-base-multilingual"),
        ("voyage", "/v1/rerank", "top_k", "rerank-2.5"),
        ("tei", "/rerank", None, None),
    ],
)
def test_each_dialect_asks_for_every_document_in_its_own_words(
    fake: FakeReranker, reranker: Callable[..., CohereReranker], dialect, path, count_field, model
):
    fake.shape = dialect
    scores = reranker(dialect=dialect).score(QUERY, DOCUMENTS)
    assert scores == pytest.approx(EXPECTED)
    (request,) = fake.requests
    assert request.path == path and request.headers["Authorization"] == f"Bearer {KEY}"
    assert request.body["query"] == QUERY
    documents_field = "texts" if dialect == "tei" else "documents"
    assert request.body[documents_field] == DOCUMENTS
    if count_field:
        assert request.body[count_field] == len(DOCUMENTS) and request.body["model"] == model
    else:
        assert "model" not in request.body and request.body["truncate"] is True


@pytest.mark.parametrize("shape", SHAPES)
def test_any_known_answer_shape_is_read_whatever_the_dialect(
    fake: FakeReranker, reranker: Callable[..., CohereReranker], shape
):
    fake.shape = shape
    scores = reranker(dialect="cohere").score(QUERY, DOCUMENTS)
    assert scores == pytest.approx(EXPECTED)
    assert scores.index(max(scores)) == 1  # the server answered best first: the order is the input's again


def test_tei_gets_batches_it_accepts_and_scores_come_back_in_order(
    fake: FakeReranker, reranker: Callable[..., CohereReranker]
):
    fake.shape = "tei"
    documents = [f"note {i} about the cat" if i % 7 == 0 else f"note {i}" for i in range(40)]
    scores = reranker(dialect="tei").score("cat", documents)
    assert [len(r.body["texts"]) for r in fake.requests] == [32, 8]
    assert scores == pytest.approx([fake_relevance("cat", d) for d in documents])
    assert reranker().score("cat", []) == [] and len(fake.requests) == 2  # nothing to score: no request


@pytest.mark.parametrize(
    ("base_url", "dialect", "endpoint"),
    [
        ("https://api.cohere.com", "cohere", "https://api.cohere.com/v2/rerank"),
        ("https://api.cohere.com/v1", "cohere", "https://api.cohere.com/v1/rerank"),
        ("https://api.jina.ai/v1/", "jina", "https://api.jina.ai/v1/rerank"),
        ("http://gpu:8080", "tei", "http://gpu:8080/rerank"),
        ("http://gpu:8000/proxy/v1/rerank", "cohere", "http://gpu:8000/proxy/v1/rerank"),
        ("http://gpu:8000/proxy", "voyage", "http://gpu:8000/proxy/v1/rerank"),
    ],
)
def test_the_endpoint_follows_the_base_url(base_url, dialect, endpoint):
    assert rerank_url(base_url, dialect) == endpoint


@pytest.mark.parametrize(
    ("payload", "words"),
    [
        ({"results": [{"index": 0, "relevance_score": 0.5}]}, r"no score for 1 of 2 documents \(index 1\)"),
        ([{"index": 0, "score": 1}, {"index": 2, "score": 1}], "index 2 is not one of the 2 documents"),
        ([{"index": 0, "score": 1}, {"index": 0, "score": 2}], "index 0 is scored twice"),
        ([{"index": 0, "score": "high"}, {"index": 1, "score": 1}], "document 0 has no numeric"),
        ({"ranking": []}, "no `results` or `data`"),
    ],
)
def test_a_wrong_answer_is_named(payload, words):
    with pytest.raises(ValueError, match=words):
        relevance_scores(payload, 2)


# -- faults ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fault", "min_wait", "max_wait"),
    [
        ("429", 0.95, 1.6),  # Retry-After: 1
        ("429-date", 0.9, 2.6),  # Retry-After: an HTTP date ~2 s ahead (1-second resolution)
        ("500", 0.45, 1.6),  # backoff 0.5 s + jitter up to 0.5 s
        ("drop", 0.45, 1.6),
        ("malformed", 0.45, 1.6),  # unreadable JSON is retried as a transient fault
    ],
)
def test_transient_fault_is_retried(
    fake: FakeReranker, reranker: Callable[..., CohereReranker], fault, min_wait, max_wait
):
    fake.fault = lambda n: fault if n == 1 else None
    ranker = reranker(timeoutSeconds=3.0)
    assert ranker.score(QUERY, DOCUMENTS) == pytest.approx(EXPECTED)
    assert len(fake.requests) == 2 and ranker.retries == 1 and ranker.calls == 2
    assert min_wait <= fake.gaps()[0] <= max_wait


@pytest.mark.parametrize(("fault", "words"), [("stall", "timed out"), ("429-date", "HTTP 429")])
def test_a_rerank_fits_in_one_timeout_so_a_search_does_not_hang(
    fake: FakeReranker, reranker: Callable[..., CohereReranker], fault, words
):
    """A search waits on the rerank: its attempts and waits fit in `timeoutSeconds`. A stalled service held a
    search for every attempt's timeout and the backoff between them (2 x 10 s + backoff by default); a
    Retry-After past what is left is not waited for, since no retry could fit after it."""
    fake.fault = lambda n: fault  # 429-date asks for ~2 s
    fake.stall_seconds = 5.0
    ranker = reranker(timeoutSeconds=0.5, retries=3)
    started = time.monotonic()
    with pytest.raises(RerankError, match="after 1 attempt in the 0.5 s allowed") as err:
        ranker.score(QUERY, DOCUMENTS)
    assert words in str(err.value) and time.monotonic() - started < 1.5 and len(fake.requests) == 1


def test_faults_that_outlast_the_retries_are_a_rerank_error_without_the_key(
    fake: FakeReranker, reranker: Callable[..., CohereReranker]
):
    fake.fault = lambda n: "500"
    with pytest.raises(RerankError, match="cohere: HTTP 500 after 2 attempts: upstream trouble"):
        reranker(retries=1, timeoutSeconds=3.0).score(QUERY, DOCUMENTS)
    fake.fault = lambda n: "429"
    with pytest.raises(RerankError, match="429 .*quota.*rerank.candidates") as err:
        reranker(retries=0).score(QUERY, DOCUMENTS)
    assert KEY not in str(err.value)


@pytest.mark.parametrize(("fault", "status", "server_says"), [("400", 400, "too long"), ("401", 401, "Bearer ***")])
def test_client_errors_are_not_retried_and_never_show_the_key(
    fake: FakeReranker, reranker: Callable[..., CohereReranker], fault, status, server_says
):
    fake.fault = lambda n: fault
    ranker = reranker()
    with pytest.raises(RerankError) as err:
        ranker.score(QUERY, DOCUMENTS)
    assert len(fake.requests) == 1 and ranker.retries == 0
    message = str(err.value)
    assert f"HTTP {status}" in message and server_says in message and KEY not in message


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"COHERE_API_KEY": KEY}, "the key from COHERE_API_KEY was refused"),
        ({"MEMSIFT_RERANK_API_KEY": KEY, "COHERE_API_KEY": "x"}, "the key from MEMSIFT_RERANK_API_KEY was refused"),
        ({}, "no key was sent: set MEMSIFT_RERANK_API_KEY or COHERE_API_KEY"),
    ],
)
def test_a_refused_key_names_the_variable_it_came_from(
    fake: FakeReranker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, env, named
):
    """ "invalid API key" alone left the user to guess which of two variables was read."""
    fake.key = "the-key-the-service-wants-0123"
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    ranker = CohereReranker(rerank_config(tmp_path, baseUrl=fake.url))
    with pytest.raises(RerankError, match=named) as err:
        ranker.score(QUERY, DOCUMENTS)
    ranker.close()
    assert len(fake.requests) == 1 and KEY not in str(err.value)


@pytest.mark.parametrize("shape", SHAPES)
def test_each_service_error_body_is_read_as_its_message(
    fake: FakeReranker, reranker: Callable[..., CohereReranker], shape
):
    """Cohere answers `{message}`, Jina and Voyage `{detail}`, TEI `{error, error_type}`: the error says the
    message itself, where Cohere's was shown as a Python dict (`{'message': 'input is too long'}`)."""
    fake.shape, fake.fault = shape, lambda n: "400"
    with pytest.raises(RerankError) as err:
        reranker(dialect=shape).score(QUERY, DOCUMENTS)
    assert str(err.value) == f"cohere: HTTP 400 from {fake.url}: input is too long"


@pytest.mark.parametrize(("fault", "words"), [("count", "no score for 1 of 4"), ("index", "index 4 is not one")])
def test_wrong_indexes_are_an_error_not_a_partial_ranking(
    fake: FakeReranker, reranker: Callable[..., CohereReranker], fault, words
):
    fake.fault = lambda n: fault
    with pytest.raises(RerankError, match=f"unexpected answer from {fake.url}/v2/rerank: {words}"):
        reranker().score(QUERY, DOCUMENTS)
    assert len(fake.requests) == 1  # a wrong answer is not a transient fault


# -- key, configuration, factory -------------------------------------------------------------------------


def test_the_key_comes_from_the_environment_and_the_generic_one_wins(
    fake: FakeReranker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    with pytest.raises(RerankError, match="set MEMSIFT_RERANK_API_KEY or COHERE_API_KEY"):
        CohereReranker(rerank_config(tmp_path))  # the hosted service, and no key
    for name, key in (("VOYAGE_API_KEY", "voyage-key"), ("MEMSIFT_RERANK_API_KEY", "generic-key")):
        monkeypatch.setenv(name, key)
        ranker = CohereReranker(rerank_config(tmp_path, baseUrl=fake.url, dialect="voyage"))
        ranker.score("q", ["d"])
        ranker.close()
    assert [r.headers["Authorization"] for r in fake.requests] == ["Bearer voyage-key", "Bearer generic-key"]
    with pytest.raises(RerankError, match="rerank.baseUrl: the tei dialect needs"):
        CohereReranker(rerank_config(tmp_path, dialect="tei"))


def test_configuration_from_file_and_environment(tmp_path: Path):
    (tmp_path / "memsift.toml").write_text(
        '[rerank]\nprovider = "cohere"\ndialect = "jina"\n[rerank.headers]\nX-Team = "search"\n'
    )
    env = {"MEMSIFT_RERANK_TIMEOUT_SECONDS": "2.5", "MEMSIFT_RERANK_RETRIES": "0", "MEMSIFT_RERANK_API_KEY": KEY}
    config = load_config(workspace=tmp_path, env=env).rerank
    assert (config.dialect, config.headers, config.timeoutSeconds, config.retries) == (
        "jina",
        {"X-Team": "search"},
        2.5,
        0,
    )
    named = r"^MEMSIFT_RERANK_DIALECT \(rerank.dialect\): 'openai' is not one of cohere, jina, voyage, tei"
    with pytest.raises(ConfigError, match=named):
        load_config(workspace=tmp_path, env={"MEMSIFT_RERANK_DIALECT": "openai"})


def test_the_factory_builds_it_and_the_fingerprint_has_identity_but_no_secrets(
    fake: FakeReranker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("MEMSIFT_RERANK_API_KEY", KEY)
    headers = {"X-Team": "search", "X-Api-Key": "hunter2"}
    ranker = create_reranker(rerank_config(tmp_path, baseUrl=fake.url, headers=headers))
    assert isinstance(ranker, CohereReranker) and (ranker.provider, ranker.model) == ("cohere", "rerank-v3.5")
    assert f"{fake.url}/v2/rerank" in ranker.fingerprint and '"X-Team": "search"' in ranker.fingerprint
    assert KEY not in ranker.fingerprint and "hunter2" not in ranker.fingerprint
    other = CohereReranker(rerank_config(tmp_path, baseUrl=fake.url, model="rerank-english-v3.0"))
    assert other.fingerprint != ranker.fingerprint
    other.close()
    ranker.score("q", ["d"])
    assert fake.requests[-1].headers["X-Api-Key"] == "hunter2"
    assert fake.requests == fake.requests[:1]  # building the rerankers sent nothing
    ranker.close()


# -- through search ----------------------------------------------------------------------------------------


def test_search_reranks_through_the_service_caches_and_degrades(
    fake: FakeReranker, workspace, make_config, open_index, monkeypatch: pytest.MonkeyPatch
):
    from tests.sample import NOTES

    monkeypatch.setenv("MEMSIFT_RERANK_API_KEY", KEY)
    settings = {"rerank.enabled": True, "rerank.provider": "cohere", "rerank.baseUrl": fake.url, "rerank.retries": 0}
    index = open_index(make_config(workspace(NOTES), **settings))
    query = "deploy failed certificate expired"
    response = index.search(query, explain=True)
    assert response.degraded is None and len(fake.requests) == 1
    assert fake.requests[0].body["query"] == query
    for hit in response.results:
        text = index.get(hit.path, hit.startLine, hit.endLine - hit.startLine + 1)["text"].rstrip("\n")
        assert hit.scores["rerank"] == pytest.approx(fake_relevance(query, text))
    assert index.search(query, explain=True).results == response.results  # every score from the cache
    assert len(fake.requests) == 1
    assert index.reranker() is index.reranker()  # one client for the index's life, not one per search

    fake.fault = lambda n: "500"
    fused = index.search("the on-call SRE this quarter", rerank=False)
    failed = index.search("the on-call SRE this quarter")
    assert "reranking failed" in failed.degraded and KEY not in failed.degraded
    assert [h.path for h in failed.results] == [h.path for h in fused.results]


def test_only_the_fused_shortlist_of_rerank_candidates_is_sent(
    fake: FakeReranker, workspace, make_config, open_index, monkeypatch: pytest.MonkeyPatch
):
    from tests.sample import NOTES

    monkeypatch.setenv("MEMSIFT_RERANK_API_KEY", KEY)
    settings = {"rerank.enabled": True, "rerank.provider": "cohere", "rerank.baseUrl": fake.url}
    index = open_index(make_config(workspace(NOTES), **settings, **{"rerank.candidates": 2, "search.minScore": 0}))
    query = "deploy failed certificate expired"
    fused = index.search(query, rerank=False, explain=True).results
    index.search(query, explain=True)
    (request,) = fake.requests
    sent = [index.get(h.path, h.startLine, h.endLine - h.startLine + 1)["text"].rstrip("\n") for h in fused[:2]]
    assert len(fused) > 2 and request.body["documents"] == sent and request.body["top_n"] == 2


def test_a_search_with_a_stalled_reranker_answers_within_the_timeout_unreranked(
    fake: FakeReranker, workspace, make_config, open_index, monkeypatch: pytest.MonkeyPatch
):
    """The rerank of a search against a stalled service: one attempt filling `rerank.timeoutSeconds`, then the
    fused order with the reason in `degraded`, where it waited for every retry's timeout and the backoff."""
    from tests.sample import NOTES

    monkeypatch.setenv("MEMSIFT_RERANK_API_KEY", KEY)
    fake.fault, fake.stall_seconds = (lambda n: "stall"), 10.0
    settings = {"rerank.enabled": True, "rerank.provider": "cohere", "rerank.baseUrl": fake.url}
    index = open_index(make_config(workspace(NOTES), **settings, **{"rerank.timeoutSeconds": 1.0}))
    index.sync()
    fused = index.search("the on-call SRE this quarter", rerank=False)
    answer = index.search("the on-call SRE this quarter")
    assert len(fake.requests) == 1  # the default retry did not fit in the second left
    assert "reranking failed" in answer.degraded and "after 1 attempt in the 1 s allowed: timed out" in answer.degraded
    assert answer.results == fused.results and answer.tookMs < fused.tookMs + 2500


def test_status_names_the_service_searches_call_and_the_blend_they_use(
    fake: FakeReranker, workspace, capsys, monkeypatch: pytest.MonkeyPatch
):
    """`status` showed a hosted reranker as `model=—, method=learned, ranker=<fingerprint>`: the learned ranker
    orders only a MaxSim rerank (a Cohere-style one is blended), and the service was sent `rerank-v3.5`."""
    from api.cli import main
    from tests.sample import NOTES

    monkeypatch.setenv("MEMSIFT_RERANK_API_KEY", KEY)
    ws = workspace(NOTES)
    (ws / "memsift.toml").write_text(
        f'[rerank]\nenabled = true\nprovider = "cohere"\nbaseUrl = "http://user:{KEY}@{fake.url[7:]}/rerank?k={KEY}"\n'
    )
    assert main(["--workspace", str(ws), "status", "--json"]) == 0
    out = capsys.readouterr().out
    rerank = json.loads(out)["rerank"]
    assert (rerank["provider"], rerank["model"], rerank["method"], rerank["ranker"]) == (
        "cohere",
        "rerank-v3.5",
        "blend",
        None,
    )
    assert rerank["endpoint"] == f"http://user:<set>@{fake.url[7:]}/rerank" and KEY not in out


def test_metrics_count_searches_the_reranker_failed(
    fake: FakeReranker, workspace, make_config, monkeypatch: pytest.MonkeyPatch, capsys, caplog
):
    """A rerank service refusing the key degrades every answer and fails nothing: /metrics counted the searches
    and their time, but nothing showed that none was reranked. Each degraded part is counted; no log shows the
    key the server echoed."""
    from test_api import serving

    from tests.sample import NOTES

    monkeypatch.setenv("MEMSIFT_RERANK_API_KEY", KEY)
    fake.fault = lambda n: "401" if n > 1 else None
    settings = {"rerank.enabled": True, "rerank.provider": "cohere", "rerank.baseUrl": fake.url}
    with serving(make_config(workspace(NOTES), **settings)) as client:
        assert "degraded" not in client.post("/v1/search", json={"query": "deploy certificate"}).json()
        for query in ("deploy certificate expired", "the on-call SRE"):
            answer = client.post("/v1/search", json={"query": query}).json()
            assert "reranking failed" in answer["degraded"] and "Bearer ***" in answer["degraded"]
        client.post("/v1/search", json={"query": "deploy", "mode": "keyword", "rerank": False})
        text = client.get("/metrics").text
    assert 'memsift_search_degraded_total{agent="main",part="rerank"} 2.0' in text
    assert 'part="vector"' not in text
    said = capsys.readouterr()
    assert KEY not in said.out + said.err + caplog.text
