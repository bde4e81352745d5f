"""The default local reranker: late interaction (MaxSim) over the local MiniLM's token states.

No cross-encoder ships in any package installable offline, so the reranker reuses the embedder's own model:
a document's score is the mean, over the query's content tokens, of the best cosine against any of the
document's content tokens (ColBERT's MaxSim). The mean-pooled chunk vector blurs a 400-token chunk into one
point; MaxSim lets each query word find its own match.

Measured on locomo-dev (docs/search-and-ranking.md, "Retrieval quality"), blended evenly with the fused score:
nDCG@10 +1.6 points.
Two measured choices keep it cheap enough to run on every search:
- Document tokens are stored as sign bits (48 bytes a token), content tokens only (stop words and
  punctuation dropped, half the tokens): the same quality as float32 token vectors on locomo-dev.
- They are captured while the sync embeds a chunk (the model already computes every token's state), kept in
  the index next to the embedding cache, and computed at search time only for chunks indexed without them.
"""

from __future__ import annotations

import functools
import re
import threading

import numpy as np

from ..embedders.local import LocalEmbedder
from ..query import STOP_WORDS

_WORD = re.compile(r"\w")


class MaxSimReranker:
    provider = "local"
    model = "maxsim"

    _shared: dict[int, MaxSimReranker] = {}
    _shared_lock = threading.Lock()

    def __init__(self, embedder: LocalEmbedder) -> None:
        self.embedder = embedder
        self.fingerprint = f"maxsim-bits:{embedder.fingerprint}"
        self._dims = embedder.dims

    @functools.cached_property
    def _content(self) -> np.ndarray:
        """Which vocabulary ids are content words; built on first use (~0.1 s): a sync with nothing to embed
        needs only the fingerprint."""
        vocab = self.embedder._tokenizer.get_vocab()
        content = np.zeros(max(vocab.values()) + 1, dtype=bool)
        for piece, i in vocab.items():
            word = piece.removeprefix("##")
            content[i] = bool(_WORD.match(word)) and not piece.startswith("[") and word not in STOP_WORDS
        return content

    @classmethod
    def of(cls, embedder: LocalEmbedder) -> MaxSimReranker:
        """One per model instance: building the vocabulary mask takes a few milliseconds."""
        with cls._shared_lock:
            if id(embedder) not in cls._shared:
                cls._shared[id(embedder)] = cls(embedder)
            return cls._shared[id(embedder)]

    @classmethod
    def shared(cls) -> MaxSimReranker:
        return cls.of(LocalEmbedder.shared())

    def _content_states(self, ids: list[int], states: np.ndarray) -> np.ndarray:
        """States of the content tokens of one window (CLS and SEP are never content)."""
        return states[self._content[np.asarray(ids)]]

    def document_tokens(self, texts: list[str]) -> tuple[np.ndarray, list[bytes]]:
        """Chunk vectors and each chunk's packed token bits, from one pass of the model."""
        parts: list[list[np.ndarray]] = [[] for _ in texts]

        def sink(owner: int, ids: list[int], states: np.ndarray) -> None:
            parts[owner].append(self._content_states(ids, states))

        vectors = self.embedder.embed_documents(texts, sink=sink)
        return vectors, [pack(np.concatenate(p) if p else np.zeros((0, self._dims), np.float32)) for p in parts]

    def query_tokens(self, query: str) -> np.ndarray:
        """The query's content-token states, unit length (all tokens when it has no content token)."""
        found: list[np.ndarray] = []

        def sink(owner: int, ids: list[int], states: np.ndarray) -> None:
            content = self._content_states(ids, states)
            found.append(content if len(content) else states[1:-1] if len(states) > 2 else states)

        self.embedder.embed_query(query, sink=sink)
        q = np.concatenate(found)
        return q / np.maximum(np.linalg.norm(q, axis=1, keepdims=True), 1e-12)

    def score_packed(self, query_tokens: np.ndarray, packed: list[bytes]) -> list[float]:
        scores = []
        for blob in packed:
            signs = unpack(blob, self._dims)
            scores.append(float((query_tokens @ signs.T).max(axis=1).mean()) if len(signs) else 0.0)
        return scores

    def score(self, query: str, documents: list[str], packed: list[bytes | None] | None = None) -> list[float]:
        """MaxSim of each document; `packed` holds stored token bits where the index has them."""
        packed = list(packed) if packed is not None else [None] * len(documents)
        todo = [i for i, blob in enumerate(packed) if blob is None]
        if todo:
            _, computed = self.document_tokens([documents[i] for i in todo])
            for i, blob in zip(todo, computed):
                packed[i] = blob
        return self.score_packed(self.query_tokens(query), [b for b in packed if b is not None])


def pack(states: np.ndarray) -> bytes:
    """Token states as sign bits, one row of dims/8 bytes per token."""
    return np.packbits(states > 0, axis=1).tobytes()


def unpack(blob: bytes, dims: int) -> np.ndarray:
    """Sign bits as +-1/sqrt(dims) rows, so a dot product with a unit query token approximates a cosine."""
    bits = np.unpackbits(np.frombuffer(blob, dtype=np.uint8).reshape(-1, dims // 8), axis=1)
    return (bits.astype(np.float32) * 2 - 1) / np.sqrt(dims, dtype=np.float32)
