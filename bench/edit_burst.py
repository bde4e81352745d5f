#!/usr/bin/env python
"""Search latency through `memsift serve` while many notes change at once, run by hand.

It writes a workspace of `--notes` notes (each with a distinct token, so a search for it finds that note
only if its current text is indexed), indexes it, starts `memsift serve` on a free 127.0.0.1 port, and runs a
closed loop of `POST /v1/search` (one httpx client) through three phases: `before` (`--seconds`), `during`
(from the moment `--burst` notes are rewritten at once, or over `--spread` seconds, each with a new token, until
the index holds every rewritten note as it is on disk: its `files` rows, read beside the server) and `after`
(`--seconds`). The loop searches for the rewritten notes' new tokens in turn. It prints per-phase p50/p95/max
latency in ms, the requests answered, how many answers said `degraded` (and the first such), when the first
rewritten note was found and when every one was searchable; a final pass searches for each.

    .venv/bin/python bench/edit_burst.py                  # 200 notes, 100 rewritten
    .venv/bin/python bench/edit_burst.py --notes 200 --burst 100 --seconds 5 --spread 10   # an editor's pace
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
MEMSIFT = str(ROOT / ".venv" / "bin" / "memsift")
WORDS = "heron otter marten badger plover curlew stoat vole".split()


def note(n: int, version: int) -> str:
    animal = WORDS[n % len(WORDS)]
    return (
        f"# Note {n}\n\n- The {animal} survey at site {n} counted {n % 17 + 3} birds (v{version}).\n"
        f"- Token: zq{version}x{n:04d} marks this note.\n- Weather was mild; the team walked the east path.\n"
    ) + "".join(  # a note of a few chunks, as an agent's daily log is
        f"- {WORDS[(n + k) % len(WORDS)]} seen near marker {k} of site {n}, version {version}, {k * n % 97} m out.\n"
        for k in range(40)
    )


def pct(values: list[float], q: float) -> float:
    return sorted(values)[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--notes", type=int, default=200)
    p.add_argument("--burst", type=int, default=100)
    p.add_argument("--seconds", type=float, default=5.0, help="length of the before and after phases")
    p.add_argument("--spread", type=float, default=0.0, help="write the burst over this many seconds (a thread)")
    args = p.parse_args()
    top = Path(tempfile.mkdtemp(prefix="memsift-burst-"))
    ws, home = top / "ws", top / "home"
    (ws / "memory").mkdir(parents=True)
    for n in range(args.notes):
        (ws / "memory" / f"n{n:04d}.md").write_text(note(n, 1))
    env = {**os.environ, "MEMSIFT_HOME": str(home)}
    subprocess.run([MEMSIFT, "--workspace", str(ws), "index"], env=env, check=True, capture_output=True)
    status = subprocess.run([MEMSIFT, "--workspace", str(ws), "status", "--json"], env=env, capture_output=True)
    db = sqlite3.connect(f"file:{json.loads(status.stdout)['dbPath']}?mode=ro", uri=True)

    def indexed() -> int:
        """How many rewritten notes the index holds as they are on disk (its files row has their stat)."""
        rows = dict(((p, (s, m)) for p, s, m in db.execute("SELECT path, size, mtime_ns FROM files")))
        stats = [(ws / "memory" / f"n{n:04d}.md").stat() for n in range(args.burst)]
        return sum(rows.get(f"memory/n{n:04d}.md") == (st.st_size, st.st_mtime_ns) for n, st in enumerate(stats))

    sys.path.insert(0, str(ROOT))
    from api.prefect_server import free_port

    port = free_port()
    log = (top / "serve.log").open("w")
    proc = subprocess.Popen([MEMSIFT, "--workspace", str(ws), "serve", "--port", str(port)], env=env, stderr=log)
    base = f"http://127.0.0.1:{port}"
    phases: dict[str, list[float]] = {"before": [], "during": [], "after": []}
    degraded = dict.fromkeys(phases, 0)
    try:
        with httpx.Client(base_url=base, timeout=120) as client:
            deadline = time.monotonic() + 120
            while True:
                try:
                    if client.get("/readyz").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline:
                    raise SystemExit("the server did not start; see " + str(top / "serve.log"))
                time.sleep(0.2)

            def search(phase: str, query: str) -> list[str]:
                t = time.perf_counter()
                r = client.post("/v1/search", json={"query": query, "maxResults": 3, "minScore": 0})
                phases[phase].append((time.perf_counter() - t) * 1000)
                body = r.json()
                degraded[phase] += bool(body.get("degraded"))
                if body.get("degraded") and not said:
                    said.append(body["degraded"])
                return [h["path"] for h in body["results"]]

            said: list[str] = []

            end = time.monotonic() + args.seconds
            i = 0
            while time.monotonic() < end:
                search("before", f"zq1x{i % args.notes:04d}")
                i += 1
            burst_at = time.monotonic()

            def rewrite() -> None:
                for n in range(args.burst):
                    (ws / "memory" / f"n{n:04d}.md").write_text(note(n, 2))
                    time.sleep(args.spread / args.burst)  # the pace of an editor, not synchronisation

            writer = threading.Thread(target=rewrite)
            writer.start()
            first_found = None
            n = 0
            while writer.is_alive() or indexed() < args.burst:  # a search for a rewritten note's new token
                if f"memory/n{n:04d}.md" in search("during", f"zq2x{n:04d}") and first_found is None:
                    first_found = time.monotonic() - burst_at
                n = (n + 1) % args.burst
                if time.monotonic() - burst_at > 300:
                    raise SystemExit("not every rewritten note searchable 300 s after the burst")
            all_found = time.monotonic() - burst_at
            writer.join()
            first_found = all_found if first_found is None else first_found
            end = time.monotonic() + args.seconds
            i = 0
            while time.monotonic() < end:
                search("after", f"zq2x{i % args.burst:04d}")
                i += 1
            missing = [n for n in range(args.burst) if f"memory/n{n:04d}.md" not in search("after", f"zq2x{n:04d}")]
    finally:
        proc.terminate()
        proc.wait(30)
    print(f"{args.notes} notes, {args.burst} rewritten over {args.spread:g} s; workspace {top}")
    for phase, ms in phases.items():
        print(
            f"{phase:7s} n={len(ms):4d}  p50 {statistics.median(ms):7.1f} ms  p95 {pct(ms, 0.95):7.1f} ms  "
            f"max {max(ms):7.1f} ms  degraded {degraded[phase]}"
        )
    if said:
        print(f"first degraded answer: {said[0]}")
    print(
        f"first rewritten note found {first_found:.2f} s after the burst, every one {all_found:.2f} s; "
        f"missing after: {len(missing)}"
    )


if __name__ == "__main__":
    main()
