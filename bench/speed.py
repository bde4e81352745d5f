#!/usr/bin/env python
"""memsift speed benchmarks, run by hand (never as a timed test).

Sections (pick with --sections, default all three):

  index  Index throughput against raw embedder throughput on the same chunk texts, in the same run:
         (a) `LocalEmbedder.shared().embed_documents` on exactly the texts the indexer embeds, batched as the
         indexer batches them; (b) a first `MemoryIndex(config).sync()` into an empty MEMSIFT_HOME.
  noop   A sync that finds nothing changed in 10,000 small files (keyword-only index), core and, unless
         --no-prefect, through the Prefect flow against a real `prefect server start` on 127.0.0.1.
  query  Hybrid / keyword / vector latency of `MemoryIndex.search` over ~10,000 chunks, and the share of a
         hybrid search spent embedding the query.

Everything lives in a temporary folder (MEMSIFT_HOME, PREFECT_HOME, the generated workspaces), removed at the
end unless --keep. Prints a markdown table and writes JSON to bench/results/speed-<UTC timestamp>.json.

    .venv/bin/python bench/speed.py                 # full run (about 3.5 minutes on 2 idle cores)
    .venv/bin/python bench/speed.py --quick         # small sizes, under a minute
    .venv/bin/python bench/speed.py --sections noop --no-prefect --files 2000
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from corpus import daily_note, make_queries, note_date, tiny_note, write_files
from harness import (
    ROOT,
    VECTORS,
    TimingEmbedder,
    build_query_index,
    cpu_busy,
    embedder,
    environment,
    free_port,
    log,
    save_result,
    summary_ms,
    use_home,
)

SECTIONS = ("index", "noop", "query")

FULL = dict(
    chunks=400,
    rounds=2,
    files=10_000,
    noop_runs=5,
    flow_runs=3,
    query_chunks=10_000,
    distinct=1_000,
    queries=200,
    warmup=10,
)

QUICK = dict(
    chunks=96, rounds=1, files=1_000, noop_runs=3, flow_runs=2, query_chunks=1_000, distinct=150, queries=40, warmup=5
)


def indexer_embedding_plan(config: Any) -> tuple[list[list[str]], list[str], int]:
    """The slices of texts the indexer would send to the embedder on a first sync of `config`'s workspace:
    files in `core.sync_plan.batches`, per batch the distinct chunk texts not embedded by an earlier batch,
    split by embedding.batchMaxInputs. Returns (slices, hashes in order, chunk count)."""
    from core.chunking import chunk_text
    from core.sources.memory import scan
    from core.sync_plan import batches

    slices: list[list[str]] = []
    order: list[str] = []
    seen: set[str] = set()
    n_chunks = 0
    step = config.embedding.batchMaxInputs
    for batch in batches(scan(config).files):
        texts: dict[str, str] = {}
        for entry in batch:
            text = (config.workspace / entry.path).read_text(encoding="utf-8")
            chunks = chunk_text(text, config.chunking.tokens, config.chunking.overlap)
            n_chunks += len(chunks)
            for c in chunks:
                if c.hash not in seen:
                    texts.setdefault(c.hash, c.text)
        seen.update(texts)
        hashes = list(texts)
        order.extend(hashes)
        for i in range(0, len(hashes), step):
            slices.append([texts[h] for h in hashes[i : i + step]])
    return slices, order, n_chunks


def token_stats(texts: list[str]) -> dict[str, float]:
    """Word pieces per text and model windows (256 pieces with CLS/SEP) per text, as the local embedder sees it."""
    from tokenizers import Tokenizer

    from core.embedders.local import MAX_TOKENS, tokenizer_path

    tok = Tokenizer.from_file(str(tokenizer_path()))
    tok.no_truncation()
    tok.no_padding()
    lens = [len(e.ids) for e in tok.encode_batch(texts, add_special_tokens=False)]
    body = MAX_TOKENS - 2
    windows = [max(1, -(-n // body)) for n in lens]
    return {
        "pieces_mean": round(statistics.fmean(lens), 1),
        "pieces_max": max(lens),
        "windows_mean": round(statistics.fmean(windows), 3),
        "windows_total": sum(windows),
        "chars_mean": round(statistics.fmean(len(t) for t in texts), 1),
    }


def section_index(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    from core import MemoryIndex, load_config
    from core.chunking import chunk_text

    emb, load_info = embedder()
    ws = tmp / "s1-workspace"
    files: dict[str, str] = {}
    total = 0
    i = 0
    while total < args.chunks:
        text = daily_note(args.seed, i)
        files[f"memory/{note_date(i).isoformat()}.md"] = text
        total += len(chunk_text(text))
        i += 1
    write_files(ws, files)
    use_home(tmp / "s1-home-plan")
    config = load_config(workspace=ws)
    slices, hashes, n_chunks = indexer_embedding_plan(config)
    texts = [t for s in slices for t in s]
    log(f"index: {len(files)} notes, {n_chunks} chunks, {len(texts)} distinct texts in {len(slices)} embedder calls")
    stats = token_stats(texts)

    raw_s: list[float] = []
    sync_s: list[float] = []
    sync_embed_s: list[float] = []  # time inside embed_documents during each sync
    raw_cpu: list[float] = []  # CPU seconds of this process, all threads: less sensitive to other load
    sync_cpu: list[float] = []
    reports: list[dict[str, Any]] = []

    def run_raw() -> None:
        t, c = time.perf_counter(), time.process_time()
        out = [emb.embed_documents(s) for s in slices]
        raw_s.append(time.perf_counter() - t)
        raw_cpu.append(time.process_time() - c)
        VECTORS.update(zip(hashes, np.concatenate(out)))
        log(f"index: raw embedder {len(texts)} texts in {raw_s[-1]:.1f} s")

    def run_sync(r: int) -> None:
        use_home(tmp / f"s1-home-{r}")  # empty: a first sync, nothing cached
        cfg = load_config(workspace=ws)
        inside = [0.0]
        original = emb.embed_documents

        def timed(texts: list[str], **kwargs: Any) -> np.ndarray:  # the same shared instance, its calls timed
            t = time.perf_counter()
            try:
                return original(texts, **kwargs)  # sink=: MaxSim's token bits, taken in the same pass
            finally:
                inside[0] += time.perf_counter() - t

        emb.embed_documents = timed
        try:
            with MemoryIndex(cfg) as index:
                t, c = time.perf_counter(), time.process_time()
                report = index.sync()
                sync_s.append(time.perf_counter() - t)
                sync_cpu.append(time.process_time() - c)
        finally:
            del emb.embed_documents  # back to the class's method
        sync_embed_s.append(inside[0])
        if report.chunksWritten != n_chunks or report.chunksEmbedded != len(texts) or report.cacheHits:
            raise SystemExit(f"index: the sync did not do what the raw pass did: {report.to_dict()}")
        reports.append(report.to_dict())
        log(f"index: first sync {report.chunksWritten} chunks in {sync_s[-1]:.1f} s")

    for r in range(args.rounds):  # ABBA order over rounds, so drift in machine speed hits both alike
        if r % 2 == 0:
            run_raw()
            run_sync(r)
        else:
            run_sync(r)
            run_raw()

    raw_rate = len(texts) / statistics.median(raw_s)
    sync_rate = n_chunks / statistics.median(sync_s)
    return {
        "notes": len(files),
        "chunks": n_chunks,
        "distinct_texts": len(texts),
        "embedder_calls_indexer_slices": len(slices),
        "chunk_tokens": stats,
        "model": load_info,
        "rounds": args.rounds,
        "raw_seconds": [round(v, 3) for v in raw_s],
        "sync_seconds": [round(v, 3) for v in sync_s],
        "raw_cpu_seconds": [round(v, 3) for v in raw_cpu],
        "sync_cpu_seconds": [round(v, 3) for v in sync_cpu],
        "ratio_cpu_raw_over_sync": round(statistics.median(raw_cpu) / statistics.median(sync_cpu), 3),
        "raw_chunks_per_s": round(raw_rate, 2),
        "raw_windows_per_s": round(stats["windows_total"] / statistics.median(raw_s), 2),
        "sync_chunks_per_s": round(sync_rate, 2),
        "ratio_sync_over_raw": round(sync_rate / raw_rate, 3),
        "sync_embed_seconds": [round(v, 3) for v in sync_embed_s],
        "sync_outside_embedder_s": [round(a - b, 3) for a, b in zip(sync_s, sync_embed_s)],
        "sync_outside_embedder_share": round(statistics.median((a - b) / a for a, b in zip(sync_s, sync_embed_s)), 4),
        "sync_reports": reports,
    }


class ReadCounter:
    """Counts calls of core.sync_plan.read_memory_file (the only place a sync reads a memory file)."""

    def __init__(self) -> None:
        import core.sync_plan as sync_plan

        self.sync_plan = sync_plan
        self.original = sync_plan.read_memory_file
        self.calls = 0

    def __enter__(self) -> ReadCounter:
        def counted(path: Path):
            self.calls += 1
            return self.original(path)

        self.sync_plan.read_memory_file = counted
        return self

    def __exit__(self, *exc: object) -> None:
        self.sync_plan.read_memory_file = self.original


def change_one_file(ws: Path, files: int, k: int) -> None:
    """Append a line to one of the small notes (a different one each time): one changed file, one chunk."""
    rel, text = tiny_note((k * 7_919) % files)
    (ws / rel).write_text(text + f"- edited in benchmark round {k}\n", encoding="utf-8")


def section_noop(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    from core import MemoryIndex, load_config

    ws = tmp / "s2-workspace"
    ws.mkdir(parents=True)
    (ws / "memsift.toml").write_text('[embedding]\nprovider = "none"\n', encoding="utf-8")
    t = time.perf_counter()
    write_files(ws, dict(tiny_note(i) for i in range(args.files)))
    write_s = time.perf_counter() - t
    use_home(tmp / "s2-home")
    config = load_config(workspace=ws)
    assert config.embedding.provider == "none", config.embedding
    with MemoryIndex(config, embedder=None) as index:
        t = time.perf_counter()
        first = index.sync()
        setup_s = time.perf_counter() - t
    if first.added != args.files:
        raise SystemExit(f"noop: the first sync indexed {first.added} files, expected {args.files}")
    log(f"noop: {args.files} files written in {write_s:.1f} s, first keyword-only sync {setup_s:.1f} s")

    def core_sync() -> tuple[float, Any, int]:
        with ReadCounter() as counter:
            index = MemoryIndex(config, embedder=None)  # a fresh instance: opening the index file is included
            t = time.perf_counter()
            report = index.sync()
            elapsed = time.perf_counter() - t
            index.close()
        return elapsed, report, counter.calls

    core_s: list[float] = []
    inner_s: list[float] = []
    reads = 0
    for _ in range(args.noop_runs):
        elapsed, report, calls = core_sync()
        core_s.append(elapsed)
        inner_s.append(report.seconds)
        reads += calls
        if report.unchanged != args.files or report.chunksEmbedded or report.chunksWritten or calls:
            raise SystemExit(f"noop: the no-op sync did work: reads={calls} {report.to_dict()}")
    log(f"noop: core no-op median {statistics.median(core_s) * 1000:.0f} ms")

    changed_s: list[float] = []
    for k in range(3):  # for comparison with the flow: one changed file among all the unchanged ones
        change_one_file(ws, args.files, k)
        elapsed, report, calls = core_sync()
        changed_s.append(elapsed)
        if report.changed != 1 or calls != 1:
            raise SystemExit(f"noop: expected one changed file: reads={calls} {report.to_dict()}")
    out: dict[str, Any] = {
        "files": args.files,
        "write_files_s": round(write_s, 2),
        "first_sync_keyword_only_s": round(setup_s, 2),
        "first_sync_chunks": first.chunksWritten,
        "core_runs_s": [round(v, 4) for v in core_s],
        "core_median_ms": round(statistics.median(core_s) * 1000, 1),
        "core_report_seconds_median_ms": round(statistics.median(inner_s) * 1000, 1),
        "file_reads_during_noop": reads,
        "unchanged": args.files,  # checked on every run above
        "chunksEmbedded": 0,
        "core_one_changed_runs_s": [round(v, 4) for v in changed_s],
        "core_one_changed_median_ms": round(statistics.median(changed_s) * 1000, 1),
    }
    if not args.no_prefect:
        out["prefect"] = prefect_noop(args, tmp, ws, out)
    return out


def prefect_noop(args: argparse.Namespace, tmp: Path, ws: Path, core: dict[str, Any]) -> dict[str, Any]:
    port = free_port()
    env = dict(os.environ)
    env.update(PREFECT_HOME=str(tmp / "prefect"), PREFECT_SERVER_ANALYTICS_ENABLED="false", PREFECT_UI_ENABLED="false")
    env.pop("PREFECT_API_URL", None)
    server_log = tmp / "prefect-server.log"
    prefect_bin = Path(sys.executable).with_name("prefect")
    cmd = [
        str(prefect_bin) if prefect_bin.exists() else "prefect",
        "server",
        "start",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]
    health = f"http://127.0.0.1:{port}/api/health"
    t = time.perf_counter()
    with open(server_log, "wb") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    log(f"noop: prefect server pid {proc.pid} on port {port}")
    try:
        while True:
            if proc.poll() is not None:
                tail = server_log.read_text(errors="replace")[-3000:]
                raise SystemExit(f"noop: the Prefect server exited ({proc.returncode}):\n{tail}")
            try:
                with urllib.request.urlopen(health, timeout=2) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                pass
            if time.perf_counter() - t > args.server_timeout:
                raise SystemExit(f"noop: the Prefect server did not answer {health} in {args.server_timeout} s")
            time.sleep(0.5)
        ready_s = time.perf_counter() - t
        log(f"noop: prefect server healthy after {ready_s:.1f} s")

        # Prefect reads its settings when imported: set them first (this process has not imported it yet).
        assert "prefect" not in sys.modules, "prefect was imported before its settings were set"
        os.environ.update(
            PREFECT_HOME=env["PREFECT_HOME"],
            PREFECT_SERVER_ANALYTICS_ENABLED="false",
            PREFECT_API_URL=f"http://127.0.0.1:{port}/api",
        )
        t = time.perf_counter()
        from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings

        from flows.sync import run_sync

        import_s = time.perf_counter() - t

        def flow_sync(label: str, expect_changed: int) -> tuple[float, float]:
            with ReadCounter() as counter:
                t = time.perf_counter()
                report = run_sync(agent="main", workspace=str(ws))
                elapsed = time.perf_counter() - t
            if (
                report.unchanged + report.changed != args.files
                or report.changed != expect_changed
                or report.chunksEmbedded
                or counter.calls != expect_changed
            ):
                raise SystemExit(
                    f"noop: the flow's sync ({label}) did unexpected work: reads={counter.calls} {report.to_dict()}"
                )
            log(f"noop: flow run ({label}) {elapsed * 1000:.0f} ms")
            return elapsed, report.seconds

        first, _ = flow_sync("first", 0)  # reported apart: it registers the flow and warms the client
        noop = [flow_sync("no-op", 0) for _ in range(args.flow_runs)]
        # Diagnostic: Prefect 3.9's flow-run heartbeat thread (default every 180 s) sleeps in 1 s steps and is
        # joined when the run ends, so a short run waits for the step in progress. The same no-op without it:
        with temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}):
            quiet = [flow_sync("no-op, heartbeats off", 0) for _ in range(args.flow_runs)]
        changed = []
        for k in range(args.flow_runs):
            change_one_file(ws, args.files, 100 + k)
            changed.append(flow_sync("one file changed", 1))
        _drain_prefect()
        med = lambda runs: statistics.median(r[0] for r in runs) * 1000  # noqa: E731
        return {
            "server_ready_s": round(ready_s, 1),
            "import_flows_s": round(import_s, 2),
            "first_run_ms": round(first * 1000, 1),
            "runs_s": [round(r[0], 4) for r in noop],
            "median_ms": round(med(noop), 1),
            "sync_inside_flow_median_ms": round(statistics.median(r[1] for r in noop) * 1000, 1),
            "overhead_ms": round(med(noop) - core["core_median_ms"], 1),
            "heartbeats_off_runs_s": [round(r[0], 4) for r in quiet],
            "heartbeats_off_median_ms": round(med(quiet), 1),
            "heartbeats_off_overhead_ms": round(med(quiet) - core["core_median_ms"], 1),
            "one_changed_runs_s": [round(r[0], 4) for r in changed],
            "one_changed_median_ms": round(med(changed), 1),
            "one_changed_sync_inside_flow_median_ms": round(statistics.median(r[1] for r in changed) * 1000, 1),
        }
    finally:
        stop_group(proc)


def _drain_prefect() -> None:
    """Flush Prefect's log and event workers while the server is still up (avoids errors at exit)."""
    try:
        from prefect._internal.concurrency.services import QueueService

        QueueService.drain_all(timeout=10)
    except Exception as exc:  # best effort
        log(f"noop: could not drain Prefect workers ({type(exc).__name__}: {exc})")


def stop_group(proc: subprocess.Popen) -> None:
    """Stop the server we started: its own process group (start_new_session), by its pid."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    except ProcessLookupError:
        pass
    log(f"noop: prefect server pid {proc.pid} stopped")


def section_query(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    from core import MemoryIndex

    emb, load_info = embedder()
    built = build_query_index(tmp, seed=args.seed, chunks=args.query_chunks, distinct=args.distinct, noise=args.noise)
    config = built.config

    timing = TimingEmbedder(emb)
    queries = make_queries(args.seed + 1, args.queries)
    warm = make_queries(args.seed + 2, args.warmup)
    modes = ("hybrid", "keyword", "vector")
    lat: dict[str, list[float]] = {m: [] for m in modes}
    took: dict[str, list[float]] = {m: [] for m in modes}
    embed_in: dict[str, list[float]] = {"hybrid": [], "vector": []}
    empty = {m: 0 for m in modes}
    with MemoryIndex(config, embedder=timing) as index:
        for q in warm:
            for m in modes:
                index.search(q, mode=m)
        for k, q in enumerate(queries):
            for m in modes[k % 3 :] + modes[: k % 3]:  # rotate the order so no mode always goes first
                timing.last_query_s = 0.0
                t = time.perf_counter()
                resp = index.search(q, mode=m)
                lat[m].append(time.perf_counter() - t)
                took[m].append(resp.tookMs / 1000)
                if resp.degraded or resp.mode != m:
                    raise SystemExit(f"query: {m} search degraded: {resp.degraded}")
                if m in embed_in:
                    embed_in[m].append(timing.last_query_s)
                empty[m] += not resp.results
    hybrid_share = [e / t for e, t in zip(embed_in["hybrid"], lat["hybrid"])]
    rest_hybrid = [t - e for e, t in zip(embed_in["hybrid"], lat["hybrid"])]
    rest_vector = [t - e for e, t in zip(embed_in["vector"], lat["vector"])]
    return {
        "files": built.files,
        "chunks": built.chunks,
        "base_texts_embedded_by_model": built.distinct_texts,
        "base_texts_reused_from_index_section": built.reused_texts,
        "base_embed_s": round(built.embed_s, 1),
        "base_embed_texts_per_s": round(built.embedded_texts / built.embed_s, 2) if built.embedded_texts else None,
        "perturbed_copies": built.variants,
        "perturbed_chunk_vectors": built.perturbed_vectors,
        "vector_noise": args.noise,
        "index_build_s": round(built.build_s, 1),
        "build_report": built.report.to_dict(),
        "queries": len(queries),
        "warmup_queries": len(warm),
        "latency_ms": {m: summary_ms(lat[m]) for m in modes},
        "took_ms": {m: summary_ms(took[m]) for m in modes},
        "embed_query_ms": {m: summary_ms(v) for m, v in embed_in.items()},
        "hybrid_minus_embed_ms": summary_ms(rest_hybrid),
        "vector_minus_embed_ms": summary_ms(rest_vector),
        "hybrid_embed_share_of_total": round(sum(embed_in["hybrid"]) / sum(lat["hybrid"]), 3),
        "hybrid_embed_share_median": round(statistics.median(hybrid_share), 3),
        "queries_with_no_result": empty,
        "model": load_info,
    }


def table(results: dict[str, Any]) -> str:
    rows: list[tuple[str, str, str]] = []
    s = results["sections"]
    if "index" in s:
        r = s["index"]
        t = r["chunk_tokens"]
        rows += [
            ("index", "model load (import + ONNX session), s", f"{r['model']['load_s']:.2f}"),
            (
                "index",
                "corpus",
                f"{r['notes']} notes, {r['chunks']} chunks, {t['pieces_mean']:.0f} word pieces and "
                f"{t['windows_mean']:.2f} model windows per chunk",
            ),
            (
                "index",
                "(a) raw embed_documents, chunks/s",
                f"{r['raw_chunks_per_s']:.2f} ({r['raw_windows_per_s']:.1f} windows/s)",
            ),
            ("index", "(b) first MemoryIndex.sync(), chunks/s", f"{r['sync_chunks_per_s']:.2f}"),
            ("index", "ratio (b)/(a)", f"{r['ratio_sync_over_raw']:.3f}"),
            (
                "index",
                "share of the sync spent outside the embedder",
                f"{r['sync_outside_embedder_share'] * 100:.1f}% ({statistics.median(r['sync_outside_embedder_s']):.2f} "
                f"s of {statistics.median(r['sync_seconds']):.1f} s)",
            ),
        ]
    if "noop" in s:
        r = s["noop"]
        rows += [
            ("noop", f"first keyword-only sync of {r['files']} files, s", f"{r['first_sync_keyword_only_s']:.2f}"),
            (
                "noop",
                f"no-op sync, core, median of {len(r['core_runs_s'])}, ms",
                f"{r['core_median_ms']:.0f} (files read: {r['file_reads_during_noop']}, "
                f"unchanged {r['unchanged']}, chunksEmbedded {r['chunksEmbedded']})",
            ),
        ]
        rows.append(("noop", "one file changed, core, median of 3, ms", f"{r['core_one_changed_median_ms']:.0f}"))
        if "prefect" in r:
            p = r["prefect"]
            n = len(p["runs_s"])
            rows += [
                ("noop", "Prefect server ready, s", f"{p['server_ready_s']:.1f}"),
                ("noop", "no-op via flow, first run, ms", f"{p['first_run_ms']:.0f}"),
                (
                    "noop",
                    f"no-op via flow, median of {n}, ms",
                    f"{p['median_ms']:.0f} (sync inside the flow: {p['sync_inside_flow_median_ms']:.0f})",
                ),
                ("noop", "Prefect overhead per run (flow - core), ms", f"{p['overhead_ms']:.0f}"),
                (
                    "noop",
                    f"no-op via flow, heartbeats off, median of {n}, ms",
                    f"{p['heartbeats_off_median_ms']:.0f} (overhead {p['heartbeats_off_overhead_ms']:.0f})",
                ),
                (
                    "noop",
                    f"one file changed, via flow, median of {n}, ms",
                    f"{p['one_changed_median_ms']:.0f} (sync inside the flow: "
                    f"{p['one_changed_sync_inside_flow_median_ms']:.0f})",
                ),
            ]
    if "query" in s:
        r = s["query"]
        rows.append(
            (
                "query",
                "index",
                f"{r['chunks']} chunks; {r['base_texts_embedded_by_model']} embedded by "
                f"the model, the rest perturbed copies",
            )
        )
        for m in ("hybrid", "keyword", "vector"):
            q = r["latency_ms"][m]
            rows.append(("query", f"{m} p50 / p95 / max, ms", f"{q['p50']:.1f} / {q['p95']:.1f} / {q['max']:.1f}"))
        e = r["embed_query_ms"]["hybrid"]
        rows += [
            ("query", "embed_query in hybrid p50 / p95, ms", f"{e['p50']:.1f} / {e['p95']:.1f}"),
            (
                "query",
                "hybrid time spent embedding the query",
                f"{r['hybrid_embed_share_of_total'] * 100:.0f}% of total "
                f"(median per query {r['hybrid_embed_share_median'] * 100:.0f}%)",
            ),
            (
                "query",
                "hybrid minus embedding p50 / p95, ms",
                f"{r['hybrid_minus_embed_ms']['p50']:.1f} / {r['hybrid_minus_embed_ms']['p95']:.1f}",
            ),
        ]
    out = ["| Section | Metric | Value |", "| --- | --- | --- |"]
    out += [f"| {a} | {b} | {c} |" for a, b, c in rows]
    return "\n".join(out)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--sections", default=",".join(SECTIONS), help=f"comma-separated subset of {','.join(SECTIONS)} (default: all)"
    )
    p.add_argument("--quick", action="store_true", help="small sizes for a run of a couple of minutes")
    p.add_argument("--seed", type=int, default=7, help="seed of the generated notes and queries")
    g = p.add_argument_group("index")
    g.add_argument("--chunks", type=int, help=f"chunks in the corpus (default {FULL['chunks']})")
    g.add_argument(
        "--rounds",
        type=int,
        help=f"raw/sync measurement rounds in ABBA order; medians reported (default {FULL['rounds']})",
    )
    g = p.add_argument_group("noop")
    g.add_argument("--files", type=int, help=f"small files (default {FULL['files']})")
    g.add_argument("--noop-runs", type=int, help=f"timed core no-op syncs (default {FULL['noop_runs']})")
    g.add_argument("--flow-runs", type=int, help=f"timed flow runs after a first one (default {FULL['flow_runs']})")
    g.add_argument("--no-prefect", action="store_true", help="skip the Prefect server and the flow runs")
    g.add_argument("--server-timeout", type=float, default=180, help="seconds to wait for the Prefect server")
    g = p.add_argument_group("query")
    g.add_argument("--query-chunks", type=int, help=f"chunks in the index (default {FULL['query_chunks']})")
    g.add_argument(
        "--distinct",
        type=int,
        help="chunk texts embedded by the real model; the rest are perturbed "
        f"copies (default {FULL['distinct']}; = --query-chunks for all real)",
    )
    g.add_argument("--queries", type=int, help=f"timed queries per mode (default {FULL['queries']})")
    g.add_argument("--warmup", type=int, help=f"warm-up queries per mode (default {FULL['warmup']})")
    g.add_argument("--noise", type=float, default=0.15, help="norm of the noise added to a copy's vector")
    p.add_argument("--keep", action="store_true", help="keep the temporary folder")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results", help="folder for the JSON result")
    args = p.parse_args(argv)
    defaults = QUICK if args.quick else FULL
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    args.sections = [s.strip() for s in args.sections.split(",") if s.strip()]
    bad = [s for s in args.sections if s not in SECTIONS]
    if bad:
        p.error(f"--sections: unknown {', '.join(bad)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    stripped = [n for n in os.environ if n.startswith("MEMSIFT_")]
    for name in stripped:  # configuration overrides from the caller's shell would skew the defaults measured
        del os.environ[name]
    os.environ.pop("PREFECT_API_URL", None)
    tmp = Path(tempfile.mkdtemp(prefix="memsift-bench-"))
    use_home(tmp / "home")
    os.environ["PREFECT_HOME"] = str(tmp / "prefect")
    os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
    started = datetime.now(UTC)
    results: dict[str, Any] = {
        "started": started.isoformat(timespec="seconds"),
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "environment": environment(),
        "stripped_env": stripped,
        "sections": {},
        "loadavg": {},
    }
    log(f"temporary folder {tmp}; sections {', '.join(args.sections)}")
    busy = cpu_busy()
    results["busy_before"] = {"start": busy}
    if busy > 0.1:
        log(
            f"warning: the CPUs were {busy:.0%} busy with other processes before the start; "
            "wall-clock figures will be skewed"
        )
    try:
        # The noop section runs last: it imports Prefect, whose background workers outlive the flow runs.
        order = sorted(args.sections, key=lambda s: s == "noop")
        for name in order:
            if name != order[0]:
                results["busy_before"][name] = cpu_busy()
            t = time.perf_counter()
            before = os.getloadavg()
            results["sections"][name] = {"index": section_index, "noop": section_noop, "query": section_query}[name](
                args, tmp
            )
            results["sections"][name]["section_s"] = round(time.perf_counter() - t, 1)
            results["loadavg"][name] = {
                "before": [round(x, 2) for x in before],
                "after": [round(x, 2) for x in os.getloadavg()],
            }
    finally:
        if args.keep:
            log(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    results["seconds"] = round((datetime.now(UTC) - started).total_seconds(), 1)
    md = table(results)
    results["table"] = md
    path = save_result("speed", results, args.out)
    print(md)
    print(
        f"\n{results['environment'].get('cpus')} CPUs, commit {results['environment'].get('commit')}, "
        f"{results['seconds']:.0f} s in all; CPUs busy with other processes before each section: "
        + ", ".join(f"{k} {v:.0%}" for k, v in results["busy_before"].items())
        + f"\nJSON: {path}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
