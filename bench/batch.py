#!/usr/bin/env python
"""Batch indexing at scale (issue 16), run by hand against the fake OpenAI-compatible provider
(tests/fake_provider.py, a real HTTP server on 127.0.0.1 with a per-request delay) and the local model.

Sections (`--sections`, default all):

  kill        a `--chunks` (10,000) first index through `memsift index --no-prefect` in a process of its own,
              SIGKILLed when the provider receives the request at 80% of the dry run's request count; then
              the same command again: the rerun's embedded inputs as a share of a cold full run's (in another
              MEMSIFT_HOME), and the index after it checked (integrity, every chunk with a vector, the same
              content as the cold run's)
  share       two agents under one MEMSIFT_HOME whose workspaces share half their files: inputs embedded by
              the second agent's first index against a cold one's
  estimate    `--dry-run` against the real run: tokens and requests against what the fake provider received
              (cold full run of the kill section), and the local model's estimated seconds (measured on a
              sample by the dry run) against a real run on a small workspace (`--local-chunks`)
  throughput  `--throughput-chunks` embedded with `embedding.concurrency` 1, 4, 8 under a configured
              `requestsPerMinute`, then under a `tokensPerMinute`: the rate the provider saw (requests or
              tokens per minute between its first and last document request) as a share of the limit

    .venv/bin/python bench/batch.py                                 # everything (~10 min on 2 busy cores)
    .venv/bin/python bench/batch.py --sections kill --chunks 2000

Writes every figure to bench/results/batch-<UTC timestamp>.json (git-ignored) and prints them.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from core.chunking import chunk_text  # noqa: E402
from core.config_home import db_path  # noqa: E402
from core.limiter import request_tokens  # noqa: E402
from tests.fake_provider import FakeProvider  # noqa: E402

PROBE = "memsift probe"
WORDS = (
    "relay harbour crane ledger quorum rack deploy invoice garden kettle orbit cable ferry violin maple signal "
    "pantry glacier tunnel beacon audit sprint lantern copper meadow cipher falcon timber canyon pixel"
).split()
CHUNK_TOKENS = 48


def write_workspace(root: Path, files: dict[str, str], toml: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (root / "memsift.toml").write_text(toml)
    return root


def notes(prefix: str, chunks: int, seed: int) -> dict[str, str]:
    """Files of distinct lines until they hold `chunks` chunks at CHUNK_TOKENS (no overlap)."""
    rng = random.Random(seed)
    files: dict[str, str] = {}
    total = n = 0
    while total < chunks:
        lines = [
            f"- {prefix} {n}.{i}: " + " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 16))) + "."
            for i in range(24)
        ]
        text = f"# {prefix} {n}\n" + "\n".join(lines) + "\n"
        count = len(chunk_text(text, CHUNK_TOKENS, 0))
        if total + count > chunks:
            text = "\n".join(text.splitlines()[: 1 + (chunks - total) * 3]) + "\n"
            count = len(chunk_text(text, CHUNK_TOKENS, 0))
        files[f"memory/{prefix}/note-{n:05d}.md"] = text
        total += count
        n += 1
    return files


def hosted_toml(url: str, extra: str = "") -> str:
    return (
        f'[embedding]\nprovider = "openai"\nbaseUrl = "{url}"\nmodel = "fake-model"\nretries = 2\n{extra}'
        f"[chunking]\ntokens = {CHUNK_TOKENS}\noverlap = 0\n"
    )


def child_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSIFT_")}
    return env | {"MEMSIFT_HOME": str(home), "PYTHONPATH": str(ROOT)}


def cli(ws: Path, agent: str = "main", *extra: str) -> list[str]:
    return [sys.executable, "-m", "api.cli", "--agent", agent, "--workspace", str(ws), "index", *extra, "--json"]


def run_cli(ws: Path, home: Path, agent: str = "main", *extra: str) -> dict[str, Any]:
    done = subprocess.run(
        cli(ws, agent, *extra), env=child_env(home), cwd=ROOT, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"memsift index failed: {done.stderr.strip()}")
    return json.loads(done.stdout)


def documents(fake: FakeProvider) -> list[str]:
    return [t for t in fake.embedded if t != PROBE]


def doc_requests(fake: FakeProvider) -> list[Any]:
    return [r for r in fake.requests if r.body.get("input") != [PROBE]]


def content(db: Path) -> tuple[list[tuple], int, str]:
    from index_checks import chunks_without_vectors, integrity
    from index_checks import content as index_content

    chunks, _ = index_content(db)
    return chunks, chunks_without_vectors(db), integrity(db)[0]


def section_kill(args: argparse.Namespace, tmp: Path, out: dict[str, Any]) -> None:
    fake = FakeProvider(delay=args.delay)
    try:
        files = notes("kill", args.chunks, args.seed)
        toml = hosted_toml(fake.url)
        cold_home, home = tmp / "kill-cold", tmp / "kill"
        cold_ws = write_workspace(tmp / "kill-cold-ws", files, toml)
        plan = run_cli(cold_ws, cold_home, "main", "--dry-run")
        fake.requests.clear()
        fake.embedded.clear()
        started = time.perf_counter()
        cold = run_cli(cold_ws, cold_home, "main", "--no-prefect")
        cold_s = time.perf_counter() - started
        cold_requests = doc_requests(fake)
        out["estimate_hosted"] = {
            "chunks": cold["chunksWritten"],
            "estimated_tokens": plan["estimatedTokens"],
            "actual_tokens": sum(request_tokens(r.body["input"]) for r in cold_requests),
            "estimated_requests": plan["estimatedRequests"],
            "actual_requests": len(cold_requests),
            "estimated_chunks_to_embed": plan["chunksToEmbed"],
            "actual_chunks_embedded": cold["chunksEmbedded"],
        }
        full = len(documents(fake))

        ws = write_workspace(tmp / "kill-ws", files, toml)
        fake.requests.clear()
        fake.embedded.clear()
        fake.hold_at = 1 + round(0.8 * plan["estimatedRequests"])  # request 1: the child's start-up probe
        with subprocess.Popen(cli(ws, "main", "--no-prefect"), env=child_env(home), cwd=ROOT) as child:
            if not fake.held.wait(args.timeout):
                child.kill()
                raise SystemExit("the child never reached 80%")
            child.send_signal(signal.SIGKILL)
            child.wait()
        killed_at = len(fake.requests)
        fake.hold_at = 0
        first = len(fake.requests)  # requests in flight at the kill may still land in `embedded`: count requests
        started = time.perf_counter()
        rerun = run_cli(ws, home, "main", "--no-prefect")
        rerun_s = time.perf_counter() - started
        again = sum(len(r.body["input"]) for r in fake.requests[first:] if r.body["input"] != [PROBE])
        chunks, lacking, ok = content(db_path(home, "main", ws.resolve()))
        cold_chunks, _, _ = content(db_path(cold_home, "main", cold_ws.resolve()))
        out["kill"] = {
            "chunks": cold["chunksWritten"],
            "full_run_embedded": full,
            "full_run_s": round(cold_s, 1),
            "requests_of_full_run": len(cold_requests),
            "killed_at_request": killed_at,
            "rerun_embedded": again,
            "rerun_chunks_embedded": rerun["chunksEmbedded"],
            "rerun_cache_hits": rerun["cacheHits"],
            "rerun_share_of_full": round(again / full, 3),
            "rerun_s": round(rerun_s, 1),
            "index_integrity": ok,
            "chunks_without_vectors": lacking,
            "same_content_as_cold_run": chunks == cold_chunks,
        }
    finally:
        fake.close()


def section_share(args: argparse.Namespace, tmp: Path, out: dict[str, Any]) -> None:
    fake = FakeProvider(delay=args.delay)
    try:
        half = args.share_chunks // 2
        shared = notes("shared", half, args.seed + 1)
        a = write_workspace(tmp / "share-a", shared | notes("a", half, args.seed + 2), hosted_toml(fake.url))
        b = write_workspace(tmp / "share-b", shared | notes("b", half, args.seed + 3), hosted_toml(fake.url))
        run_cli(b, tmp / "share-cold", "b", "--no-prefect")
        cold = len(documents(fake))
        run_cli(a, tmp / "share", "a", "--no-prefect")
        fake.embedded.clear()
        second = run_cli(b, tmp / "share", "b", "--no-prefect")
        out["share"] = {
            "chunks_per_agent": second["chunksWritten"],
            "cold_first_index_embedded": cold,
            "second_agent_embedded": len(documents(fake)),
            "second_agent_cache_hits": second["cacheHits"],
            "share_of_cold": round(len(documents(fake)) / cold, 3),
        }
    finally:
        fake.close()


def section_local(args: argparse.Namespace, tmp: Path, out: dict[str, Any]) -> None:
    rows = []
    for round_ in range(args.local_rounds):
        home = tmp / f"local-{round_}"
        files = notes(f"local{round_}", args.local_chunks, args.seed + 10 + round_)
        ws = write_workspace(tmp / f"local-ws-{round_}", files, f"[chunking]\ntokens = {CHUNK_TOKENS}\noverlap = 0\n")
        plan = run_cli(ws, home, "main", "--dry-run")
        started = time.perf_counter()
        report = run_cli(ws, home, "main", "--no-prefect")
        wall = time.perf_counter() - started
        rows.append(
            {
                "chunks": report["chunksEmbedded"],
                "estimated_s": plan["estimatedSeconds"],
                "run_embed_s": round(report["embedSeconds"], 1),
                "run_seconds": report["seconds"],
                "process_wall_s": round(wall, 1),
                "estimate_over_embed_s": round(plan["estimatedSeconds"] / report["embedSeconds"], 2),
                "estimate_over_run_seconds": round(plan["estimatedSeconds"] / report["seconds"], 2),
            }
        )
    out["estimate_local"] = rows


def section_throughput(args: argparse.Namespace, tmp: Path, out: dict[str, Any]) -> None:
    rows = []
    files = notes("tp", args.throughput_chunks, args.seed + 20)
    for limit in ("requestsPerMinute", "tokensPerMinute"):
        for concurrency in (1, 4, 8):
            fake = FakeProvider(delay=args.throughput_delay)
            try:
                value = args.rpm if limit == "requestsPerMinute" else args.tpm
                extra = f"batchMaxInputs = {args.throughput_batch}\nconcurrency = {concurrency}\n{limit} = {value}\n"
                home = tmp / f"tp-{limit}-{concurrency}"
                ws = write_workspace(tmp / f"tp-ws-{limit}-{concurrency}", files, hosted_toml(fake.url, extra))
                plan = run_cli(ws, home, "main", "--dry-run")
                fake.requests.clear()
                report = run_cli(ws, home, "main", "--no-prefect")
                reqs = doc_requests(fake)
                span = reqs[-1].at - reqs[0].at
                if limit == "requestsPerMinute":
                    achieved = (len(reqs) - 1) / span * 60
                else:  # tokens of every request but the last, over the time until the last one went
                    achieved = sum(request_tokens(r.body["input"]) for r in reqs[:-1]) / span * 60
                rows.append(
                    {
                        "limit": limit,
                        "limit_value": value,
                        "concurrency": concurrency,
                        "requests": len(reqs),
                        "achieved_per_min": round(achieved),
                        "share_of_limit": round(achieved / value, 3),
                        "estimated_s": plan["estimatedSeconds"],
                        "run_embed_s": round(report["embedSeconds"], 1),
                    }
                )
                print(json.dumps(rows[-1]), flush=True)
            finally:
                fake.close()
    out["throughput"] = rows


SECTIONS = {"kill": section_kill, "share": section_share, "local": section_local, "throughput": section_throughput}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sections", default="kill,share,local,throughput")
    p.add_argument("--chunks", type=int, default=10_000, help="kill section workspace size")
    p.add_argument("--share-chunks", type=int, default=4_000, help="chunks per agent in the share section")
    p.add_argument("--local-chunks", type=int, default=300)
    p.add_argument("--local-rounds", type=int, default=3)
    p.add_argument("--throughput-chunks", type=int, default=2_000)
    p.add_argument("--throughput-batch", type=int, default=16, help="embedding.batchMaxInputs there")
    p.add_argument("--throughput-delay", type=float, default=0.25, help="seconds the fake takes per request")
    p.add_argument("--rpm", type=float, default=600.0)
    p.add_argument("--tpm", type=float, default=250_000.0)
    p.add_argument("--delay", type=float, default=0.02, help="seconds per request in kill and share")
    p.add_argument("--seed", type=int, default=16)
    p.add_argument("--timeout", type=float, default=1800)
    args = p.parse_args()
    out: dict[str, Any] = {"args": vars(args), "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    with tempfile.TemporaryDirectory(prefix="memsift-batch-") as tmp:
        for name in args.sections.split(","):
            started = time.perf_counter()
            SECTIONS[name](args, Path(tmp), out)
            out.setdefault("section_s", {})[name] = round(time.perf_counter() - started, 1)
            print(json.dumps({k: v for k, v in out.items() if k not in ("args",)}, indent=1), flush=True)
    results = ROOT / "bench" / "results"
    results.mkdir(exist_ok=True)
    path = results / f"batch-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json"
    path.write_text(json.dumps(out, indent=1))
    print(f"written to {path}")


if __name__ == "__main__":
    main()
