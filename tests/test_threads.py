"""The numeric libraries' threads are what `core.threads` says, where a search runs (issue 17's tail)."""

from __future__ import annotations

import numpy as np
import pytest
from threadpoolctl import threadpool_info

from core import ConfigError, threads
from core.embedders.local import LocalEmbedder
from tests.conftest import CountingEmbedder

NOTES = {
    "MEMORY.md": "# Memory\n\nDana drinks a flat white every morning before stand-up.\n",
    "memory/2026-05-14.md": "# 2026-05-14\n\nThe load balancer certificate expired; renewed it with certbot.\n",
}


class BlasSpy(CountingEmbedder):
    """The real model; records numpy's BLAS thread counts each time a search embeds its query."""

    def __init__(self) -> None:
        super().__init__()
        self.blas: list[list[int]] = []

    def embed_query(self, text: str) -> np.ndarray:
        self.blas.append([p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"])
        return super().embed_query(text)


@pytest.mark.parametrize("setting, expected", [(None, 1), ("2", 2)])
def test_a_search_runs_with_the_configured_blas_threads(
    setting, expected, workspace, make_config, open_index, monkeypatch
):
    if setting is not None:
        monkeypatch.setenv(threads.BLAS_ENV, setting)
    spy = BlasSpy()
    index = open_index(make_config(workspace(NOTES)), embedder=spy)
    index.sync()
    response = index.search("when did the certificate expire", explain=True, rerank=True)
    assert response.results and "rerank" in response.results[0].scores
    assert spy.blas and all(counts and set(counts) == {expected} for counts in spy.blas)
    monkeypatch.delenv(threads.BLAS_ENV, raising=False)
    threads.limit_blas()  # back to the default for the tests that follow


def test_queries_run_on_one_onnx_thread_and_documents_on_every_core():
    embedder = LocalEmbedder()
    assert embedder._session.get_session_options().intra_op_num_threads == 1
    assert "_documents_session" not in embedder.__dict__  # a process that only searches never builds the pool
    embedder.embed_documents(["a short note about coffee"])
    options = embedder._documents_session.get_session_options()
    assert options.intra_op_num_threads == threads.cores() and options.inter_op_num_threads == 1


def test_onnx_threads_are_overridable(monkeypatch):
    monkeypatch.setenv(threads.QUERY_ENV, "2")
    monkeypatch.setenv(threads.DOCUMENTS_ENV, "3")
    embedder = LocalEmbedder()
    embedder.embed_documents(["a short note about coffee"])
    assert embedder._session.get_session_options().intra_op_num_threads == 2
    assert embedder._documents_session.get_session_options().intra_op_num_threads == 3


@pytest.mark.parametrize("value", ["two", "-1", "1.5"])
def test_a_bad_thread_count_is_a_config_error_naming_the_variable(value, monkeypatch):
    monkeypatch.setenv(threads.BLAS_ENV, value)
    with pytest.raises(ConfigError, match=threads.BLAS_ENV):
        threads.blas_threads()
