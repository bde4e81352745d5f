"""`rerank.model = "<folder>"`: any cross-encoder the user brings, as ONNX, run locally with no network.

No cross-encoder ships in a package we can install offline, so memsift loads one from a folder the user
names: `model.onnx` (or `onnx/model.onnx`, the Hugging Face export layout) and the model's own
`tokenizer.json`. A cross-encoder reads the query and the document together (`[CLS] query [SEP] document
[SEP]`, segments told apart by token_type_ids), so its score sees both at once, unlike two separate vectors.

The pair is cut to the model's length (the smallest of `model_max_length` in tokenizer_config.json and
`max_position_embeddings` in config.json, 512 when neither is there), the longer side first, so a long
chunk loses its tail and the query stays whole. The score is the first logit, or the positive class's when
the model has two outputs per pair (a binary classifier head).
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import RerankError

MODEL_FILES = ("model.onnx", "onnx/model.onnx")
TOKENIZER_FILE = "tokenizer.json"
DEFAULT_MAX_LENGTH = 512
#: Pairs per model call: enough to keep the cores busy, little padding once sorted by length.
BATCH_PAIRS = 16
#: `model_max_length` values above this are the transformers "no limit" sentinel, not a length.
_SANE_LENGTH = 1_000_000
_INPUTS = {"input_ids", "attention_mask", "token_type_ids"}
_ONNX_INTS = {"tensor(int64)": np.int64, "tensor(int32)": np.int32}


class CrossEncoderReranker:
    provider = "local"
    _loaded: dict[tuple[str, int, int], CrossEncoderReranker] = {}
    _loaded_lock = threading.Lock()

    def __init__(self, folder: Path, model_file: Path, tokenizer: Any, session: Any, max_length: int) -> None:
        self.folder, self.model_file, self.max_length = folder, model_file, max_length
        self.model = str(folder)
        digest = hashlib.sha256()
        with model_file.open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
        self.fingerprint = f"cross-encoder:{digest.hexdigest()[:16]}:max{max_length}"
        self._tokenizer = tokenizer
        self._session = session
        self._inputs = {i.name: _ONNX_INTS.get(i.type, np.int64) for i in session.get_inputs()}
        self.calls = 0

    @classmethod
    def from_folder(cls, path: str | Path) -> CrossEncoderReranker:
        """The cross-encoder in `path`, loaded once per process (and again if its model file changes)."""
        folder = Path(path).expanduser().resolve()
        if not folder.is_dir():
            raise RerankError(f"rerank.model: {folder} is not a folder (it should hold model.onnx and tokenizer.json)")
        model_file = next((folder / name for name in MODEL_FILES if (folder / name).is_file()), None)
        if model_file is None:
            raise RerankError(f"rerank.model: no model.onnx in {folder} (nor onnx/model.onnx)")
        if not (folder / TOKENIZER_FILE).is_file():
            raise RerankError(f"rerank.model: no {TOKENIZER_FILE} in {folder} (the model's own tokenizer)")
        stat = model_file.stat()
        key = (str(model_file), stat.st_mtime_ns, stat.st_size)
        with cls._loaded_lock:
            if key not in cls._loaded:
                for stale in [k for k in cls._loaded if k[0] == key[0]]:  # the file changed: free the old model
                    del cls._loaded[stale]
                cls._loaded[key] = cls._load(folder, model_file)
            return cls._loaded[key]

    @classmethod
    def _load(cls, folder: Path, model_file: Path) -> CrossEncoderReranker:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        max_length = _max_length(folder)
        try:
            tokenizer = Tokenizer.from_file(str(folder / TOKENIZER_FILE))
        except Exception as exc:  # the tokenizers library raises bare Exceptions on a bad file
            raise RerankError(f"rerank.model: {folder / TOKENIZER_FILE} cannot be read: {exc}") from None
        pad = tokenizer.padding or {}
        # The file's own settings are for training (often a fixed 128-token pad): pad each batch to its
        # longest pair instead, and cut pairs at the model's length.
        tokenizer.enable_padding(
            pad_id=pad.get("pad_id", 0), pad_token=pad.get("pad_token", "[PAD]"), pad_type_id=pad.get("pad_type_id", 0)
        )
        tokenizer.enable_truncation(max_length, strategy="longest_first")
        options = ort.SessionOptions()
        options.intra_op_num_threads = os.cpu_count() or 1
        options.log_severity_level = 3
        try:
            session = ort.InferenceSession(str(model_file), options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # onnxruntime's own exception types are not importable in a stable way
            raise RerankError(f"rerank.model: {model_file} is not a model onnxruntime can load: {exc}") from None
        names = {i.name for i in session.get_inputs()}
        if "input_ids" not in names or names - _INPUTS:
            raise RerankError(
                f"rerank.model: {model_file} takes inputs {', '.join(sorted(names))}; a cross-encoder takes "
                "input_ids and optionally attention_mask and token_type_ids"
            )
        return cls(folder, model_file, tokenizer, session, max_length)

    def score(self, query: str, documents: list[str]) -> list[float]:
        scores = np.zeros(len(documents), dtype=np.float32)
        order = sorted(range(len(documents)), key=lambda i: len(documents[i]))  # similar lengths share a batch
        for start in range(0, len(order), BATCH_PAIRS):
            batch = order[start : start + BATCH_PAIRS]
            scores[batch] = self._score_batch(query, [documents[i] for i in batch])
        return scores.tolist()

    def _score_batch(self, query: str, documents: list[str]) -> np.ndarray:
        encodings = self._tokenizer.encode_batch([(query, d) for d in documents])
        arrays = {
            "input_ids": [e.ids for e in encodings],
            "attention_mask": [e.attention_mask for e in encodings],
            "token_type_ids": [e.type_ids for e in encodings],
        }
        feed = {name: np.asarray(arrays[name], dtype=dtype) for name, dtype in self._inputs.items()}
        try:
            (logits, *_) = self._session.run(None, feed)
        except Exception as exc:  # a model that loads but fails on real input (wrong shapes, a bad graph)
            raise RerankError(f"rerank.model: {self.model_file} failed on a batch: {exc}") from None
        self.calls += 1
        logits = np.asarray(logits, dtype=np.float32)
        if logits.ndim == 1 and len(logits) == len(documents):
            return logits
        if logits.ndim == 2 and logits.shape[0] == len(documents) and logits.shape[1] in (1, 2):
            return logits[:, -1]  # the one logit, or the positive class of two
        raise RerankError(
            f"rerank.model: {self.model_file} answered shape {list(logits.shape)} for {len(documents)} pairs; "
            "a cross-encoder answers one logit (or two classes) per pair"
        )


def _max_length(folder: Path) -> int:
    """The longest pair the model reads: the smallest length its configuration files state, else 512."""
    found = [
        _json_number(folder / "tokenizer_config.json", "model_max_length"),
        _json_number(folder / "config.json", "max_position_embeddings"),
    ]
    lengths = [n for n in found if n is not None and 0 < n < _SANE_LENGTH]
    return int(min(lengths)) if lengths else DEFAULT_MAX_LENGTH


def _json_number(path: Path, key: str) -> float | None:
    if not path.is_file():
        return None
    try:
        value = json.loads(path.read_text(encoding="utf-8")).get(key)
    except (ValueError, OSError, AttributeError) as exc:
        raise RerankError(f"rerank.model: {path} is not a readable JSON object ({exc})") from None
    return value if isinstance(value, int | float) and not isinstance(value, bool) else None
