"""What the benchmarks share besides the corpus: timing and percentiles, the warmed local model, the ~10,000-chunk
query index, the machine's load, and where results go.

Importing it puts the repository on `sys.path`, so a script in bench/ can import `core`, `flows` and `api`.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from corpus import daily_note, note_date, perturb, swap_map, write_files

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=float), q))


def summary_ms(values_s: list[float]) -> dict[str, float]:
    ms = [v * 1000 for v in values_s]
    return {
        "p50": round(pct(ms, 50), 2),
        "p95": round(pct(ms, 95), 2),
        "max": round(max(ms), 2),
        "mean": round(statistics.fmean(ms), 2),
        "n": len(ms),
    }


def use_home(path: Path) -> Path:
    """Point MEMSIFT_HOME at `path` (load_config reads it on each call)."""
    os.environ["MEMSIFT_HOME"] = str(path)
    return path


_EMBEDDER: dict[str, Any] = {}


def embedder() -> tuple[Any, dict[str, float]]:
    """The shared local model, loaded and warmed once per process; load and warm-up times reported."""
    if not _EMBEDDER:
        from core.embedders.local import LocalEmbedder

        t = time.perf_counter()
        emb = LocalEmbedder.shared()
        load_s = time.perf_counter() - t
        t = time.perf_counter()
        # A few texts, short and chunk-sized (two windows), so first-use costs of the larger shapes are not timed.
        # From a seed no section uses, so no timed text is embedded here.
        from core.chunking import chunk_text

        long = [c.text for i in range(4) for c in chunk_text(daily_note(-1, i))][:8]
        emb.embed_documents(["warm-up text one", "a second, slightly longer warm-up sentence for the model"])
        emb.embed_documents(long)
        emb.embed_query("warm-up query")
        warm_s = time.perf_counter() - t
        _EMBEDDER["emb"] = emb
        _EMBEDDER["info"] = {"load_s": round(load_s, 3), "first_calls_s": round(warm_s, 3)}
        log(f"model loaded in {load_s:.2f} s (warm-up calls {warm_s:.2f} s)")
    return _EMBEDDER["emb"], _EMBEDDER["info"]


# hash -> vector, real model output, filled by section 1 and reused by section 3 for the same texts
VECTORS: dict[str, np.ndarray] = {}
# hash -> MaxSim token bits from the same model pass (build_query_index with rerank)
TOKENS: dict[str, bytes] = {}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class TimingEmbedder:
    """Delegates to the real embedder and records how long each embed_query took inside a search."""

    inner: Any
    last_query_s: float = 0.0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> np.ndarray:
        t = time.perf_counter()
        out = self.inner.embed_query(text)
        self.last_query_s = time.perf_counter() - t
        return out


@dataclass
class QueryIndex:
    """An index of about `chunks` chunks built by `build_query_index`, and how it was made."""

    config: Any
    files: int
    chunks: int
    distinct_texts: int
    reused_texts: int
    embedded_texts: int
    embed_s: float
    variants: int
    perturbed_vectors: int
    build_s: float
    report: Any


def build_query_index(
    tmp: Path, *, seed: int, chunks: int, distinct: int, noise: float, rerank: bool = False
) -> QueryIndex:
    """Section 3's index, also used by bench/load.py: notes until `distinct` chunks, embedded by the real
    model, then perturbed copies (same-length word swaps, vectors = the original's plus noise of norm
    `noise`) until `chunks`, all vectors put in the cache before one normal sync. MEMSIFT_HOME becomes
    `tmp/s3-home`, the workspace is `tmp/s3-workspace`.

    `rerank=True` builds it for the default configuration (MaxSim rerank on): the base chunks' token bits come
    from the same model pass as their vectors, and each copy gets its base chunk's bits (the copy's own would
    differ in a few swapped words; scoring costs the same), planted before the sync so it embeds nothing."""
    from core import MemoryIndex, load_config
    from core.chunking import chunk_text
    from core.identity import cache_key
    from core.rerankers.maxsim import MaxSimReranker
    from core.shared_cache import SharedCache

    emb, _ = embedder()
    ws = tmp / "s3-workspace"
    rng = np.random.default_rng(seed)
    base_target = min(distinct, chunks)

    # Base notes (the same generator and seed as section 1, so its vectors are reused for the same texts).
    base: list[tuple[int, str, list]] = []
    files: dict[str, str] = {}
    n_base = 0
    i = 0
    while n_base < base_target:
        text = daily_note(seed, i)
        note_chunks = chunk_text(text)
        base.append((i, text, note_chunks))
        files[f"memory/{note_date(i).isoformat()}.md"] = text
        n_base += len(note_chunks)
        i += 1
    texts = {c.hash: c.text for _, _, note_chunks in base for c in note_chunks}
    missing = [h for h in texts if h not in VECTORS or (rerank and h not in TOKENS)]
    capture = MaxSimReranker.of(emb) if rerank else None
    t = time.perf_counter()
    for k in range(0, len(missing), 96):
        part = missing[k : k + 96]
        if capture is not None:
            vectors, bits = capture.document_tokens([texts[h] for h in part])
            TOKENS.update(zip(part, bits))
        else:
            vectors = emb.embed_documents([texts[h] for h in part])
        VECTORS.update(zip(part, vectors))
        log(f"query: embedded {min(k + 96, len(missing))}/{len(missing)} base texts")
    embed_s = time.perf_counter() - t

    # Perturbed copies: same-length word swaps keep every chunk's line range; each copy's chunk reuses the
    # real vector of its base chunk plus small noise (cosine ~0.99), and is put in the embedding cache.
    cache: dict[str, np.ndarray] = {h: VECTORS[h] for h in texts}
    bits: dict[str, bytes] = {h: TOKENS[h] for h in texts} if rerank else {}
    total = n_base
    variant = 0
    perturbed = 0
    while total < chunks:
        variant += 1
        mapping = swap_map(seed, variant)
        for n, text, note_chunks in base:
            if total >= chunks:
                break
            vtext = perturb(text, mapping)
            vchunks = chunk_text(vtext)
            if [(c.start_line, c.end_line) for c in vchunks] != [(c.start_line, c.end_line) for c in note_chunks]:
                raise SystemExit("query: a perturbed copy changed the chunk boundaries")
            for c, vc in zip(note_chunks, vchunks):
                if vc.hash not in cache:
                    jitter = rng.standard_normal(emb.dims).astype(np.float32) * (noise / np.sqrt(emb.dims))
                    v = VECTORS[c.hash] + jitter
                    cache[vc.hash] = (v / np.linalg.norm(v)).astype(np.float32)
                    perturbed += 1
                    if rerank:
                        bits[vc.hash] = TOKENS[c.hash]
            files[f"memory/archive/copy-{variant:02d}/{note_date(n).isoformat()}.md"] = vtext
            total += len(vchunks)
    write_files(ws, files)

    use_home(tmp / "s3-home")
    # Without `rerank`, no MaxSim rerank: the sync would run the model over every copy for its token bits.
    # Search figures are then the retrieval stages alone.
    config = load_config(workspace=ws, overrides={} if rerank else {"rerank.enabled": False})
    # Into the shared cache of MEMSIFT_HOME: a first sync is a rebuild into a new file, which reads from there.
    with SharedCache.open(config.home) as shared:
        shared.put(cache_key(emb), cache)
        if capture is not None:
            shared.tokens_put(capture.fingerprint, bits)
    with MemoryIndex(config) as index:
        t = time.perf_counter()
        report = index.sync()
        build_s = time.perf_counter() - t
        stats = index.store.stats()
    if report.chunksEmbedded:
        raise SystemExit(f"query: the sync embedded {report.chunksEmbedded} texts; the cache was meant to hold all")
    n_chunks = sum(stats["chunks"].values())
    log(f"query: index of {len(files)} files, {n_chunks} chunks built in {build_s:.1f} s (all vectors cached)")
    return QueryIndex(
        config=config,
        files=len(files),
        chunks=n_chunks,
        distinct_texts=len(texts),
        reused_texts=len(texts) - len(missing),
        embedded_texts=len(missing),
        embed_s=embed_s,
        variants=variant,
        perturbed_vectors=perturbed,
        build_s=build_s,
        report=report,
    )


def cpu_busy(seconds: float = 1.0) -> float:
    """Share of all CPUs busy over `seconds` while this process sleeps: the load of other processes."""

    def sample() -> tuple[int, int]:
        with open("/proc/stat") as fh:
            fields = [int(x) for x in fh.readline().split()[1:]]
        return sum(fields), fields[3] + fields[4]  # total, idle + iowait

    try:
        total0, idle0 = sample()
        time.sleep(seconds)
        total1, idle1 = sample()
    except OSError:
        return float("nan")
    return round(1 - (idle1 - idle0) / max(1, total1 - total0), 3)


def save_result(kind: str, doc: dict[str, Any], folder: Path | None = None) -> Path:
    """Write a bench's result as `<folder>/<kind>-<UTC time>.json` (default bench/results/, git-ignored)."""
    folder = folder or ROOT / "bench" / "results"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{kind}-{datetime.now(UTC):%Y%m%dT%H%M%SZ}.json"
    path.write_text(json.dumps(doc, indent=2, default=float) + "\n", encoding="utf-8")
    return path


def environment() -> dict[str, Any]:
    info: dict[str, Any] = {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }
    try:
        import apsw
        import onnxruntime

        info["sqlite"] = apsw.sqlite_lib_version()
        info["onnxruntime"] = onnxruntime.__version__
    except ImportError:
        pass
    try:
        git = ["git", "-C", str(ROOT)]
        commit = subprocess.run(
            [*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
        ).stdout.strip()
        dirty = subprocess.run(
            [*git, "status", "--porcelain", "--", "core", "flows", "api"], capture_output=True, text=True, check=False
        ).stdout.split("\n")
        diff = subprocess.run(
            [*git, "diff", "HEAD", "--", "core", "flows", "api"], capture_output=True, check=False
        ).stdout
        info["commit"] = commit + ("+dirty" if any(dirty) else "")
        # The code measured is the work tree: name what differs from the commit, and a digest of the diff.
        info["modified"] = [line[3:] for line in dirty if line]
        info["diff_sha256"] = hashlib.sha256(diff).hexdigest()[:16] if diff else None
    except OSError:
        pass
    return info
