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
import hashlib
import json
import os
import platform
import random
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

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


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------------------------
# Text generation: daily notes of ~40 lines of varied English, deterministic per (seed, note number)
# ------------------------------------------------------------------------------------------------------------

# Categories whose words section 3 swaps for same-length words of the same category, to make perturbed copies
# whose chunks keep the same line ranges (chunk boundaries depend only on line lengths).
SWAP = {
    "person": "Dana Omar Sven Ravi Hiro Zara Ines Theo Marco Priya Kenji Lucia Aisha Tomas Elena Nadia Felix "
    "Jonas Mateo Yusuf Chloe Ingrid Amelia Rafael Soraya Dmitri Leilani Beatriz Gunnar".split(),
    "city": "Oslo Rome Kyiv Lima Paris Osaka Porto Turin Quito Berlin Lisbon Madrid Vienna Zurich Dublin Warsaw "
    "Nairobi Seville Toronto Glasgow".split(),
    "system": "billing checkout payments ledger gateway reports mailer search invoices catalog scheduler "
    "profiles".split(),
    "tool": "Postgres Kafka Redis Nginx Terraform Docker Grafana Sentry Airflow Prefect Ansible Jenkins".split(),
    "food": "ramen sushi tacos pasta curry pho falafel risotto paella dumplings gnocchi".split(),
    "drink": "coffee matcha oolong cocoa chai espresso lemonade".split(),
    "weekday": "Monday Friday Sunday Tuesday Thursday Saturday Wednesday".split(),
    "month": "March April June July August October November".split(),
}
_SWAP_WORD = {w: cat for cat, words in SWAP.items() for w in words}

ERRORS = [
    "ERR_SSL_PROTOCOL",
    "ECONNRESET",
    "OOMKilled",
    "504 Gateway Timeout",
    "deadlock detected",
    "disk quota exceeded",
    "certificate has expired",
    "too many open files",
    "CrashLoopBackOff",
]
PLACES = ["river path", "old harbour", "city park", "canal towpath", "hill trail", "beach promenade"]
TOPICS = [
    "habit formation",
    "distributed consensus",
    "sourdough hydration",
    "the history of maps",
    "negotiation",
    "sleep and memory",
    "urban gardening",
    "compound interest",
    "Roman aqueducts",
]
BOOKS = [
    "Thinking in Systems",
    "The Design of Everyday Things",
    "Salt Fat Acid Heat",
    "Deep Work",
    "The Overstory",
    "Designing Data-Intensive Applications",
    "A Pattern Language",
]
ITEMS = [
    "a fountain pen",
    "noise-cancelling headphones",
    "a cast-iron pan",
    "a board game",
    "hiking boots",
    "a ceramic teapot",
    "a puzzle of 1000 pieces",
    "a subscription to a bakery",
]
ALLERGENS = ["peanuts", "shellfish", "gluten", "sesame", "kiwi", "lactose"]
FEATURES = ["TLS 1.0", "legacy webhooks", "the v1 API", "basic auth", "SOAP endpoints", "IPv4-only routing"]
ACTIVITIES = [
    "swimming lessons",
    "violin practice",
    "football training",
    "a climbing session",
    "a chess club",
    "a pottery class",
]
CAUSES = [
    "race condition in the retry loop",
    "missing index on created_at",
    "stale DNS cache",
    "timezone bug in the cron parser",
    "connection pool that never shrank",
    "off-by-one in pagination",
]
WEATHER = ["rainy and cold", "foggy all day", "unusually warm", "windy with hail", "sunny but freezing"]
GAMES = ["Carcassonne", "Azul", "Codenames", "Wingspan", "Ticket to Ride", "Dixit"]
FACTS = [
    "octopuses have three hearts",
    "the Eiffel Tower grows in summer",
    "honey never spoils",
    "bananas are berries but strawberries are not",
    "a day on Venus is longer than its year",
    "the first computer bug was a real moth",
]
HEADINGS = [
    "Work",
    "Family",
    "Health",
    "Reading",
    "Errands",
    "Ideas",
    "Follow-ups",
    "Meetings",
    "Money",
    "Travel",
    "Home",
    "Learning",
]

TEMPLATES = [
    "{person} said the {system} deploy failed with `{error}` right after the {tool} upgrade.",
    "Decided to move the {system} review to {weekday} at {time} so {person} can join from {city}.",
    "{person} prefers {drink} in the morning and is not really talkative before {time}.",
    "Bought {item} for {person}'s birthday; it cost {price} euros at the shop near the {place}.",
    "Reminder: renew the passport before {month} {day}; the consulate in {city} needs two weeks.",
    "The {system} p95 latency went from {n} ms to {m} ms after we turned on {tool} connection pooling.",
    'Read {pages} pages of "{book}"; the chapter about {topic} was the best part so far.',
    "{person} recommended a small {food} place in {city}, said the lunch menu is worth the queue.",
    "Ran {km} km along the {place} in {minutes} minutes; the left knee felt fine this time.",
    "Open question: should the {system} service keep raw events for {days} days or only {days2}?",
    "TODO: ask {person} about the {system} budget, the last estimate was {price} euros per month.",
    "{person} is allergic to {allergen}, so order the {food} without it next time we eat together.",
    "Paired with {person} on the {system} bug; the root cause was a {cause}.",
    "Call with the {tool} vendor: they will drop support for {feature} in {month}.",
    "The kids have {activity} on {weekday}; {person} picks them up at {time}.",
    "Learned today that {fact}, which {person} did not believe at first.",
    "Plan for the weekend: {activity} with {person}, then {food} for dinner in {city}.",
    "The {tool} migration is {percent}% done; the remaining jobs are blocked on {person}'s review.",
    "Weather in {city} was {weather}, so we stayed in and played {game} until late.",
    "Spent {minutes} minutes on the {system} runbook; it still assumes {tool} runs on a single host.",
    "{person} will be on leave from {month} {day}, so {person2} owns the {system} on-call rotation.",
    "Note to self: {drink} after {time} ruins my sleep, switch to herbal tea in the afternoon.",
    "Grocery list: {food} ingredients, oat milk, lemons, {drink}, and batteries for the smoke alarm.",
    "Budget check: spent {price} euros on {item}; still {percent}% left for the {month} trip to {city}.",
    "Retro notes: the {system} incident lasted {minutes} minutes and paged {person} three times.",
    "Idea: write a small script that summarises {tool} alerts per week and posts them to the team chat.",
    "{person} and {person2} disagree about moving {system} off {tool}; decision postponed to {weekday}.",
    "Dentist appointment on {weekday} {month} {day} at {time}; remember to bring the insurance card.",
]


def _fill(rng: random.Random, template: str) -> str:
    person, person2 = rng.sample(SWAP["person"], 2)
    slots = dict(
        person=person,
        person2=person2,
        city=rng.choice(SWAP["city"]),
        system=rng.choice(SWAP["system"]),
        tool=rng.choice(SWAP["tool"]),
        food=rng.choice(SWAP["food"]),
        drink=rng.choice(SWAP["drink"]),
        weekday=rng.choice(SWAP["weekday"]),
        month=rng.choice(SWAP["month"]),
        error=rng.choice(ERRORS),
        place=rng.choice(PLACES),
        topic=rng.choice(TOPICS),
        book=rng.choice(BOOKS),
        item=rng.choice(ITEMS),
        allergen=rng.choice(ALLERGENS),
        feature=rng.choice(FEATURES),
        activity=rng.choice(ACTIVITIES),
        cause=rng.choice(CAUSES),
        weather=rng.choice(WEATHER),
        game=rng.choice(GAMES),
        fact=rng.choice(FACTS),
        time=f"{rng.randint(7, 21)}:{rng.choice(['00', '15', '30', '45'])}",
        price=rng.randint(12, 2400),
        n=rng.randint(120, 900),
        m=rng.randint(40, 300),
        pages=rng.randint(8, 80),
        km=rng.randint(3, 21),
        minutes=rng.randint(15, 140),
        days=rng.choice([7, 14, 30, 90]),
        days2=rng.choice([180, 365]),
        day=rng.randint(1, 28),
        percent=rng.randint(5, 95),
    )
    return template.format(**slots)


def note_date(i: int) -> date:
    return date(2025, 1, 1) + timedelta(days=i)


def daily_note(seed: int, i: int) -> str:
    """Note number i: a date heading and 4-6 sections, about 40 lines in all."""
    rng = random.Random(seed * 1_000_003 + i)
    d = note_date(i)
    lines = [f"# {d.isoformat()} ({d.strftime('%A')})", ""]
    for heading in rng.sample(HEADINGS, rng.randint(4, 6)):
        lines.append(f"## {heading}")
        for _ in range(rng.randint(5, 7)):
            lines.append("- " + _fill(rng, rng.choice(TEMPLATES)))
        lines.append("")
    return "\n".join(lines) + "\n"


_SWAP_RE = re.compile(r"\b(" + "|".join(sorted(_SWAP_WORD, key=len, reverse=True)) + r")\b")


def swap_map(seed: int, variant: int) -> dict[str, str]:
    """For one variant: each swappable word -> a word of the same category and the same length."""
    rng = random.Random(seed * 7_919 + variant)
    out: dict[str, str] = {}
    for words in SWAP.values():
        by_len: dict[int, list[str]] = {}
        for w in words:
            by_len.setdefault(len(w), []).append(w)
        for group in by_len.values():
            shuffled = group[:]
            rng.shuffle(shuffled)
            out.update(zip(group, shuffled))
    return out


def perturb(text: str, mapping: dict[str, str]) -> str:
    return _SWAP_RE.sub(lambda m: mapping[m[1]], text)


def tiny_note(i: int) -> tuple[str, str]:
    rng = random.Random(i)
    d = date(2024, 1, 1) + timedelta(days=i % 1000)
    rel = f"memory/{d.year}/{d.month:02d}/note-{i}.md"
    return rel, f"# Note {i}\n\n- {_fill(rng, rng.choice(TEMPLATES))}\n"


QUERY_TEMPLATES = [
    "what did {person} say about the {system} deploy",
    "{error}",
    "why did {system} fail with {error}",
    "when is {person}'s birthday and what did I buy",
    "{food} recommendation in {city}",
    "how far did I run along the {place}",
    "what is {person} allergic to",
    "which vendor drops support for {feature}",
    "{system} p95 latency after {tool} change",
    "book chapter about {topic}",
    "{system} budget estimate",
    "who picks up the kids after {activity}",
    "root cause of the {system} bug",
    "{tool} migration progress",
    "what does {person} drink in the morning",
    "passport renewal deadline {city}",
    "plans for the weekend with {person}",
    "who is on call for {system} while {person} is on leave",
    "dentist appointment",
    "how long did the {system} incident last",
    "something interesting I learned about animals",
    "what made the website slow last month",
    "gift ideas for a friend who likes cooking",
    "should we keep raw events or delete them sooner",
    "what did we decide about moving off {tool}",
    "retention policy",
    "sleep problems caffeine",
    "what is it",
    "{person} {person2} disagreement",
    "I need to remember the grocery list and what was on it before the trip to {city} in {month}",
]


def make_queries(seed: int, n: int) -> list[str]:
    rng = random.Random(seed)
    return [
        _fill(
            rng, QUERY_TEMPLATES[i % len(QUERY_TEMPLATES)] if i < len(QUERY_TEMPLATES) else rng.choice(QUERY_TEMPLATES)
        )
        for i in range(n)
    ]


# ------------------------------------------------------------------------------------------------------------
# Helpers
# ------------------------------------------------------------------------------------------------------------


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


def write_files(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


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


def indexer_embedding_plan(config: Any) -> tuple[list[list[str]], list[str], int]:
    """The slices of texts the indexer would send to the embedder on a first sync of `config`'s workspace:
    files in `core.indexer.batches`, per batch the distinct chunk texts not embedded by an earlier batch,
    split by embedding.batchMaxInputs. Returns (slices, hashes in order, chunk count)."""
    from core.chunking import chunk_text
    from core.indexer import batches
    from core.sources.memory import scan

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

    from core.embedders.local import MAX_TOKENS, _tokenizer_path

    tok = Tokenizer.from_file(str(_tokenizer_path()))
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


# ------------------------------------------------------------------------------------------------------------
# Section 1: index throughput vs raw embedder throughput
# ------------------------------------------------------------------------------------------------------------


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


# ------------------------------------------------------------------------------------------------------------
# Section 2: no-op sync of many small files, core and Prefect
# ------------------------------------------------------------------------------------------------------------


class ReadCounter:
    """Counts calls of core.indexer.read_memory_file (the only place a sync reads a memory file)."""

    def __init__(self) -> None:
        import core.indexer as indexer

        self.indexer = indexer
        self.original = indexer.read_memory_file
        self.calls = 0

    def __enter__(self) -> ReadCounter:
        def counted(path: Path):
            self.calls += 1
            return self.original(path)

        self.indexer.read_memory_file = counted
        return self

    def __exit__(self, *exc: object) -> None:
        self.indexer.read_memory_file = self.original


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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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


# ------------------------------------------------------------------------------------------------------------
# Section 3: query latency at ~10,000 chunks
# ------------------------------------------------------------------------------------------------------------


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


def build_query_index(tmp: Path, *, seed: int, chunks: int, distinct: int, noise: float) -> QueryIndex:
    """Section 3's index, also used by bench/load.py: notes until `distinct` chunks, embedded by the real
    model, then perturbed copies (same-length word swaps, vectors = the original's plus noise of norm
    `noise`) until `chunks`, all vectors put in the cache before one normal sync. MEMSIFT_HOME becomes
    `tmp/s3-home`, the workspace is `tmp/s3-workspace`."""
    from core import MemoryIndex, load_config
    from core.chunking import chunk_text
    from core.indexer import cache_key
    from core.store import Store

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
    missing = [h for h in texts if h not in VECTORS]
    t = time.perf_counter()
    for k in range(0, len(missing), 96):
        part = missing[k : k + 96]
        VECTORS.update(zip(part, emb.embed_documents([texts[h] for h in part])))
        log(f"query: embedded {min(k + 96, len(missing))}/{len(missing)} base texts")
    embed_s = time.perf_counter() - t

    # Perturbed copies: same-length word swaps keep every chunk's line range; each copy's chunk reuses the
    # real vector of its base chunk plus small noise (cosine ~0.99), and is put in the embedding cache.
    cache: dict[str, np.ndarray] = {h: VECTORS[h] for h in texts}
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
            files[f"memory/archive/copy-{variant:02d}/{note_date(n).isoformat()}.md"] = vtext
            total += len(vchunks)
    write_files(ws, files)

    use_home(tmp / "s3-home")
    # No MaxSim rerank: the perturbed copies' vectors are planted in the cache, and the sync would run the
    # model over every copy for its token bits. Search figures here are the retrieval stages alone.
    config = load_config(workspace=ws, overrides={"rerank.enabled": False})
    with Store(config.db_path) as store, store.transaction():
        store.cache_put(cache_key(emb), cache)
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


# ------------------------------------------------------------------------------------------------------------
# Report
# ------------------------------------------------------------------------------------------------------------


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
