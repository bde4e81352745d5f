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

Each stored token also carries the chunk line it came from (2 bytes), so the learned ranker can ask which
line matches the query best (`line_scores`) without another model pass.
"""

from __future__ import annotations

import bisect
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
        # "lines": each token's chunk line is stored after its bits; the older format lacks it, so an index
        # built with it captures its tokens again (the fingerprint is part of the index identity).
        self.fingerprint = f"maxsim-bits-lines:{embedder.fingerprint}"
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
        """Chunk vectors and each chunk's packed token bits and lines, from one pass of the model."""
        parts: list[list[tuple[np.ndarray, np.ndarray]]] = [[] for _ in texts]
        lines = [self._token_lines(text) for text in texts]
        used: list[set[int]] = [set() for _ in texts]
        body = self._window_body

        def sink(owner: int, ids: list[int], states: np.ndarray) -> None:
            token_ids, token_lines = lines[owner]
            inner = ids[1:-1]  # the window's tokens without CLS and SEP
            # Windows arrive in batch order, not text order: find where this one starts in the text.
            start = next(
                (
                    s
                    for s in range(0, max(len(token_ids), 1), body)
                    if s not in used[owner] and token_ids[s : s + len(inner)] == inner
                ),
                0,
            )
            used[owner].add(start)
            keep = self._content[np.asarray(ids)]
            window_lines = np.zeros(len(ids), dtype=np.int64)
            window_lines[1:-1] = token_lines[start : start + len(inner)]
            parts[owner].append((states[keep], window_lines[keep]))

        vectors = self.embedder.embed_documents(texts, sink=sink)
        packed = []
        for p in parts:
            states = np.concatenate([s for s, _ in p]) if p else np.zeros((0, self._dims), np.float32)
            packed.append(pack(states, np.concatenate([ln for _, ln in p]) if p else np.zeros(0, np.int64)))
        return vectors, packed

    @functools.cached_property
    def _window_body(self) -> int:
        from ..embedders.local import MAX_TOKENS

        return MAX_TOKENS - 2

    def _token_lines(self, text: str) -> tuple[list[int], list[int]]:
        """The text's token ids (no CLS/SEP, as the model's windows cut them) and each token's 0-based line."""
        enc = self.embedder._tokenizer.encode(text, add_special_tokens=False)
        breaks = [i for i, ch in enumerate(text) if ch == "\n"]
        return list(enc.ids), [bisect.bisect_right(breaks, start) for start, _ in enc.offsets]

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

    def line_scores(self, query: str, packed: list[bytes | None], documents: list[str]) -> np.ndarray:
        """Per document: its MaxSim (as `score` gives it), then MaxSim of its best line, of its second best
        and of its best window of 3 lines (`LINE_SIGNALS`), from one product of the query's tokens with the
        stored ones (computed here for documents without stored bits)."""
        todo = [i for i, blob in enumerate(packed) if blob is None]
        blobs = list(packed)
        if todo:
            for i, blob in zip(todo, self.document_tokens([documents[i] for i in todo])[1]):
                blobs[i] = blob
        return line_maxsim_many(self.query_tokens(query), *packed_many([b for b in blobs if b is not None], self._dims))

    def score(self, query: str, documents: list[str], packed: list[bytes | None] | None = None) -> list[float]:
        """MaxSim of each document; `packed` holds stored token bits where the index has them."""
        packed = list(packed) if packed is not None else [None] * len(documents)
        todo = [i for i, blob in enumerate(packed) if blob is None]
        if todo:
            _, computed = self.document_tokens([documents[i] for i in todo])
            for i, blob in zip(todo, computed):
                packed[i] = blob
        return self.score_packed(self.query_tokens(query), [b for b in packed if b is not None])


#: What `line_scores` gives per document, in order.
LINE_SIGNALS = ("maxsim_line_best", "maxsim_line_second", "maxsim_window_best")
#: Lines a window spans.
WINDOW_LINES = 3


def line_maxsim(query_tokens: np.ndarray, signs: np.ndarray, lines: np.ndarray) -> tuple[float, float, float, float]:
    """MaxSim over the whole document, then restricted to each line's tokens: the best line, the second best
    and the best window of WINDOW_LINES consecutive lines (lines without content tokens score nothing)."""
    whole, best, second, window = line_maxsim_many(query_tokens, signs, [lines])[0]
    return float(whole), float(best), float(second), float(window)


def line_maxsim_many(query_tokens: np.ndarray, signs: np.ndarray, lines: list[np.ndarray]) -> np.ndarray:
    """`line_maxsim` of many documents at once, one row each: `signs` holds every document's token rows one
    document after the other (as floats, or as the stored sign bits, `packed_many`), `lines` each document's
    token lines. A single product of the query's tokens with all of them (`products`), and per-line maxima by
    one `reduceat` (the learned ranker asks this of every candidate of every search)."""
    out = np.zeros((len(lines), 1 + len(LINE_SIGNALS)))
    if not len(signs):
        return out
    # Every document's lines on one axis, WINDOW_LINES - 1 empty columns after each so no window crosses.
    # Array-wide, as `segment` below: numpy calls per document cost 0.5 ms a search of ~80 candidates.
    counts = np.array([len(ln) for ln in lines])
    flat = np.concatenate(lines).astype(np.int64, copy=False)
    spans = np.zeros(len(lines), dtype=np.int64)
    filled = counts > 0
    spans[filled] = np.maximum.reduceat(flat, (np.cumsum(counts) - counts)[filled]) + WINDOW_LINES
    offsets = np.r_[0, np.cumsum(spans)]
    keys = flat + np.repeat(offsets[:-1], counts)
    order = np.argsort(keys, kind="stable")
    keys = keys[order]
    sim = products(query_tokens, signs[order])  # token rows in (document, line) order
    present, starts = np.unique(keys, return_index=True)
    dense = np.full((len(query_tokens), int(offsets[-1])), -np.inf, dtype=np.float32)
    dense[:, present] = np.maximum.reduceat(sim, starts, axis=1)
    window = dense.copy()
    for shift in range(1, WINDOW_LINES):
        window[:, :-shift] = np.maximum(window[:, :-shift], dense[:, shift:])
    line_mean = dense[:, present].mean(axis=0)  # per present line, in key order (documents in order)
    window_mean = window[:, present].mean(axis=0)
    owner = np.searchsorted(offsets, present, side="right") - 1  # the document of each present line
    bounds = np.flatnonzero(np.r_[True, owner[1:] != owner[:-1]])
    docs = owner[bounds]
    best = np.maximum.reduceat(line_mean, bounds)
    segment = np.cumsum(np.bincount(bounds, minlength=len(present))) - 1  # each line's position in `docs`
    top = np.flatnonzero(line_mean == best[segment])
    first = top[np.r_[True, segment[top][1:] != segment[top][:-1]]]  # one best line per document
    rest = line_mean.copy()
    rest[first] = -np.inf
    second = np.maximum.reduceat(rest, bounds)
    out[docs, 0] = np.maximum.reduceat(dense[:, present], bounds, axis=1).mean(axis=0)
    out[docs, 1] = best
    out[docs, 2] = np.where(np.isfinite(second), second, 0.0)
    out[docs, 3] = np.maximum.reduceat(window_mean, bounds)
    return out


def pack(states: np.ndarray, lines: np.ndarray) -> bytes:
    """Token states as sign bits, one row of dims/8 bytes per token, then each token's line (uint16)."""
    return np.packbits(states > 0, axis=1).tobytes() + np.minimum(lines, 65535).astype("<u2").tobytes()


def unpack_lines(blob: bytes, dims: int) -> tuple[np.ndarray, np.ndarray]:
    """The sign rows of `unpack` and each token's line."""
    signs, (lines,) = unpack_many([blob], dims)
    return signs, lines


def packed_many(blobs: list[bytes], dims: int) -> tuple[np.ndarray, list[np.ndarray]]:
    """Many blobs' sign bits as one uint8 matrix (a row of dims/8 bytes per token) and each blob's token lines."""
    width = dims // 8
    counts = [len(b) // (width + 2) for b in blobs]
    bits = b"".join(b[: n * width] for b, n in zip(blobs, counts))
    lines = [np.frombuffer(b, dtype="<u2", offset=n * width, count=n).astype(np.int64) for b, n in zip(blobs, counts)]
    return np.frombuffer(bits, dtype=np.uint8).reshape(-1, width), lines


def unpack_many(blobs: list[bytes], dims: int) -> tuple[np.ndarray, list[np.ndarray]]:
    """Many blobs' sign rows as one float matrix (`unpack` of each, one after the other) and their lines."""
    bits, lines = packed_many(blobs, dims)
    return _signs(bits, dims), lines


#: Token rows unpacked and multiplied at a time: a block of floats (256 x 384 x 4 bytes) stays in the cache,
#: where unpacking a whole pool (~10,000 rows, 15 MB) at once allocated and streamed it through memory.
BLOCK_ROWS = 256


def products(query_tokens: np.ndarray, signs: np.ndarray) -> np.ndarray:
    """`query_tokens @ signs.T`, where `signs` may also be packed sign bits (uint8 rows, `packed_many`): those
    are unpacked BLOCK_ROWS rows at a time, each block multiplied while it is in the cache."""
    if signs.dtype != np.uint8:
        return query_tokens @ signs.T
    dims = signs.shape[1] * 8
    out = np.empty((len(query_tokens), len(signs)), dtype=np.result_type(query_tokens.dtype, np.float32))
    for start in range(0, len(signs), BLOCK_ROWS):
        block = _signs(signs[start : start + BLOCK_ROWS], dims)
        np.matmul(query_tokens, block.T, out=out[:, start : start + BLOCK_ROWS])
    return out


def _signs(bits: np.ndarray, dims: int) -> np.ndarray:
    """Bit rows as +-1/sqrt(dims) float rows: one lookup per byte gives its 8 scaled signs."""
    return np.take(_SIGNS / np.sqrt(dims, dtype=np.float32), bits, axis=0).reshape(-1, dims)


#: Each byte's 8 bits as +-1 (most significant first, as np.packbits writes them): unpacking is one lookup.
_SIGNS = np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1).astype(np.float32) * 2 - 1


def unpack(blob: bytes, dims: int) -> np.ndarray:
    """Sign bits as +-1/sqrt(dims) rows, so a dot product with a unit query token approximates a cosine."""
    return unpack_lines(blob, dims)[0]
