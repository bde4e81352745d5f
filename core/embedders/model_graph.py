"""The optimised MiniLM graph: rebuilt once from the shipped file, cached, verified, else not used.

The shipped `model.onnx` stores int8 weights but computes in fp32: every weight is a `Cast` + `Mul` by its
scale at run time, and attention, GELU and layer norms are dozens of small ops. Rebuilding it once, without
PyTorch, gives 1.7-2.4 times the throughput, half the query latency and about 0.7 times the resident memory
(bench/README.md, "Embedder"):

1. dequantise: fold each `Cast(int8) * scale` into one fp32 initialiser (onnx + numpy);
2. fuse: onnxruntime's BERT optimiser replaces the op soup with its contrib kernels
   (SkipLayerNormalization, BiasGelu; the attention of this dynamo export stays unfused);
3. quantise: dynamic int8 with `per_channel=True` (per tensor loses too much: cosine ~0.93, issue 7) and
   7-bit weights (`reduce_range`). x86 CPUs without VNNI multiply uint8 activations by int8 weights with
   `VPMADDUBSW`, which saturates a pair of products past 32,767; with weights within +-64 no pair can, so
   the integer arithmetic is exact on every CPU and a vector, hence a score, is the same on every machine
   (full-range weights agree 0.4 point more with the shipped graph, the same in ranking: bench/README.md
   "One vector per text, on every CPU").

The result is cached under `models_dir()` keyed by the shipped file's SHA-256, the onnxruntime version
(a new runtime may fuse differently) and `RECIPE` (these steps), built under an inter-process lock into a
temp file renamed into place, readable by all as a packaged file is (an image builds it as one user for
another), and kept only if `verify` (the caller's check against the shipped graph on fixed texts) passes;
a rejected build leaves a `.rejected` note so that every start does not rebuild it.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import logging
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from ..config_home import memsift_home
from ..errors import GraphBuildError
from ..locking import file_lock

log = logging.getLogger("memsift")

#: The smallest cosine, per fixed text, between optimised and shipped vectors for the optimised graph to be used.
MIN_AGREEMENT = 0.99
#: Names the build steps above in the cached file's name and the embedder's fingerprint: a change of steps
#: builds a new graph and rebuilds indexes instead of reusing a graph made the old way.
RECIPE = "s7"
NUM_HEADS = 12  # all-MiniLM-L6-v2: 384 hidden = 12 heads x 32
HIDDEN_SIZE = 384


def models_dir(env: dict[str, str] | None = None) -> Path:
    """`$MEMSIFT_MODEL_CACHE`, else `$MEMSIFT_HOME/models`. The separate variable lets an image build the graph
    at build time outside a `MEMSIFT_HOME` that a volume will hide at run time."""
    env = dict(os.environ) if env is None else env
    cache = env.get("MEMSIFT_MODEL_CACHE")
    return Path(cache).expanduser() if cache else memsift_home(env) / "models"


def ort_version() -> str:
    """onnxruntime's version, read without importing it (~0.1 s): a sync with nothing to embed needs only the
    model's identity, which names it."""
    return importlib.metadata.version("onnxruntime")


def cached_graph_path(shipped_sha256: str, directory: Path | None = None) -> Path:
    return (directory or models_dir()) / f"minilm-opt-{shipped_sha256[:16]}-ort{ort_version()}-{RECIPE}.onnx"


def _rejected_note(target: Path) -> Path:
    return target.with_name(target.name + ".rejected")


def _verified_note(target: Path) -> Path:
    return target.with_name(target.name + ".verified")


def verification(target: Path) -> dict[str, float] | None:
    """What the build of `target` measured against the shipped graph (`memsift model build` prints it)."""
    note = _verified_note(target)
    return json.loads(note.read_text(encoding="utf-8")) if note.is_file() else None


def optimized_graph(
    shipped: Path, shipped_sha256: str, verify: Callable[[Path], float], *, rebuild: bool = False
) -> Path:
    """The verified optimised graph, built first if needed. `verify(candidate)` returns the smallest cosine
    against the shipped graph. Raises GraphBuildError (the caller falls back to the shipped graph)."""
    target = cached_graph_path(shipped_sha256)
    rejected = _rejected_note(target)
    with file_lock(target.with_name(target.name + ".lock")):
        if rebuild:
            for path in (target, rejected, _verified_note(target)):
                path.unlink(missing_ok=True)
        if target.is_file():
            return target
        if rejected.is_file():
            raise GraphBuildError(f"an earlier build was rejected: {rejected.read_text(encoding='utf-8').strip()}")
        fd, tmp_name = tempfile.mkstemp(prefix=target.name + ".", suffix=".tmp", dir=target.parent)
        os.close(fd)
        tmp = Path(tmp_name)
        try:
            build_graph(shipped, tmp)
            agreement = verify(tmp)
            note = json.dumps({"minCosine": round(agreement, 4), "required": MIN_AGREEMENT}) + "\n"
            if agreement < MIN_AGREEMENT:
                rejected.write_text(note, encoding="utf-8")
                raise GraphBuildError(f"the optimised graph disagrees with the shipped one: {note.strip()}")
            _verified_note(target).write_text(note, encoding="utf-8")
            os.chmod(tmp, 0o644)
            os.replace(tmp, target)
        finally:
            tmp.unlink(missing_ok=True)
    log.info("built the optimised embedder graph %s (min cosine %.4f)", target, agreement)
    return target


def build_graph(shipped: Path, out: Path) -> None:
    """Dequantise, fuse, requantise `shipped` into `out` (see the module docstring)."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.transformers.fusion_options import FusionOptions
    from onnxruntime.transformers.optimizer import optimize_model

    with tempfile.TemporaryDirectory(dir=out.parent) as work, _quiet_build():
        fp32, fused = Path(work) / "fp32.onnx", Path(work) / "fused.onnx"
        model = onnx.load(str(shipped))
        _dequantize(model)
        onnx.save(model, str(fp32))
        del model
        options = FusionOptions("bert")
        # Symbolic shape inference needs sympy, which nothing else needs; the fusions here do not.
        options.enable_shape_inference = False
        optimized = optimize_model(
            str(fp32),
            model_type="bert",
            num_heads=NUM_HEADS,
            hidden_size=HIDDEN_SIZE,
            opt_level=0,
            optimization_options=options,
        )
        optimized.save_model_to_file(str(fused))
        del optimized
        quantize_dynamic(str(fused), str(out), per_channel=True, reduce_range=True, weight_type=QuantType.QInt8)


@contextlib.contextmanager
def _quiet_build() -> Iterator[None]:
    """onnxruntime's optimiser and quantiser warn about steps skipped on purpose (shape inference,
    pre-processing), and the quantiser does so with `logging.warning`, which would give the root logger a
    stderr handler for the rest of the process. Neither reaches the user: the build's outcome is logged."""
    root = logging.getLogger()
    guard = logging.NullHandler()
    root.addHandler(guard)
    logging.disable(logging.WARNING)
    try:
        yield
    finally:
        logging.disable(logging.NOTSET)
        root.removeHandler(guard)


def _dequantize(model) -> None:
    """Replace each `Mul(Cast(int8 initialiser), scale)` by the fp32 initialiser it computes."""
    from onnx import TensorProto, numpy_helper

    graph = model.graph
    initializers = {init.name: init for init in graph.initializer}
    consumers: dict[str, list] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    folded_nodes, dropped, added = [], set(), []
    for cast in graph.node:
        source = initializers.get(cast.input[0]) if cast.op_type == "Cast" else None
        if source is None or source.data_type != TensorProto.INT8:
            continue
        (mul,) = consumers[cast.output[0]]
        (scale_name,) = [name for name in mul.input if name != cast.output[0]]
        if mul.op_type != "Mul" or scale_name not in initializers:
            raise GraphBuildError(f"unexpected use of the int8 weight {source.name}: {mul.op_type}")
        weight = numpy_helper.to_array(source).astype(np.float32) * numpy_helper.to_array(initializers[scale_name])
        added.append(numpy_helper.from_array(weight.astype(np.float32), mul.output[0]))
        folded_nodes += [cast, mul]
        dropped |= {source.name, scale_name}
    if not added:
        raise GraphBuildError("the shipped graph has no int8 weights to dequantise")
    for node in folded_nodes:
        graph.node.remove(node)
    kept = [init for init in graph.initializer if init.name not in dropped]
    del graph.initializer[:]
    graph.initializer.extend(kept + added)
