#!/usr/bin/env python
"""Write-to-searchable of a new note at a path a server's search does not stat, through `memsift serve`, by hand.

Over `--notes` indexed notes (more than `api.catch_up.LOOK_ALWAYS_FILES`, so a search trusts the watcher), each
round writes a new note (`memory/projects/<name>.md`: no root note, no daily note of yesterday, today or
tomorrow, not one of the notes modified last) holding a token of its own, then searches for the token `--after`
ms after the write, then in a closed loop until the note is a hit. It prints whether the search at `--after` ms
found it, and the write-to-searchable time (median, p95, max). Embeddings come from tests/fake_provider.py
(`--local` for the local model), so the figure is the server's, not the model's.

    .venv/bin/python bench/new_note.py                       # 300 notes, 20 rounds, first search at 0 ms
    .venv/bin/python bench/new_note.py --after 75 --local
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]
MEMSIFT = str(ROOT / ".venv" / "bin" / "memsift")

from api.prefect_server import free_port  # noqa: E402
from tests.fake_provider import FakeProvider  # noqa: E402


def pct(values: list[float], q: float) -> float:
    return sorted(values)[min(len(values) - 1, int(q * len(values)))]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--notes", type=int, default=300)
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--after", type=float, default=0.0, help="ms between the write and the first search")
    p.add_argument("--local", action="store_true", help="the local model rather than the fake provider")
    p.add_argument("--port", type=int, default=0, help="the server's port (default: a free one)")
    args = p.parse_args()
    top = Path(tempfile.mkdtemp(prefix="memsift-new-note-"))
    ws, home = top / "ws", top / "home"
    (ws / "memory" / "projects").mkdir(parents=True)
    for n in range(args.notes):  # dated a year back: no daily note of these days
        (ws / "memory" / f"2025-{n % 12 + 1:02d}-{n % 28 + 1:02d}-{n}.md").write_text(
            f"# Note {n}\n- The heron survey at site {n} counted {n % 17 + 3} birds.\n"
        )
    fake = None if args.local else FakeProvider()
    if fake is not None:
        (ws / "memsift.toml").write_text(
            f'[embedding]\nprovider = "openai"\nbaseUrl = "{fake.url}"\nmodel = "fake-model"\n'
        )
    env = {**os.environ, "MEMSIFT_HOME": str(home), "PREFECT_API_URL": "", "OPENAI_API_KEY": "sk-bench"}
    subprocess.run([MEMSIFT, "--workspace", str(ws), "index", "--no-prefect"], env=env, check=True, capture_output=True)
    port = args.port or free_port()
    log = (top / "serve.log").open("w")
    proc = subprocess.Popen([MEMSIFT, "--workspace", str(ws), "serve", "--port", str(port)], env=env, stderr=log)
    found_at_once, took, searches = 0, [], []
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=120) as client:
            deadline = time.monotonic() + 300
            while True:
                try:
                    if client.get("/readyz").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline:
                    raise SystemExit(f"the server did not start; see {top / 'serve.log'}")
                time.sleep(0.2)

            said: list[str] = []

            def hit(token: str, rel: str) -> bool:
                r = client.post("/v1/search", json={"query": token, "maxResults": 3, "minScore": 0})
                if r.json().get("degraded"):
                    said.append(r.json()["degraded"])
                return rel in [h["path"] for h in r.json()["results"]]

            for n in range(5):  # warm: the model, the pooled index, the watcher's first look
                hit(f"heron site {n}", "")
            for r in range(args.rounds):
                token, rel = f"zq{r}x{os.getpid()}", f"memory/projects/new-{r}.md"
                (ws / rel).write_text(f"# New {r}\n- Token {token} marks the note written now.\n")
                written = time.monotonic()
                while time.monotonic() - written < args.after / 1000:
                    pass  # the client's own pace: a search this long after the write
                tries = 1
                if hit(token, rel):
                    found_at_once += 1
                else:
                    tries += 1
                    while not hit(token, rel):
                        tries += 1
                        if time.monotonic() - written > 60:
                            raise SystemExit(f"{rel} not searchable 60 s after its write")
                took.append((time.monotonic() - written) * 1000)
                searches.append(tries)
                time.sleep(2.5)  # the watcher's sync of the note (1.5 s debounce) is over before the next round
                hit("heron", "")  # a search after the watcher saw the note: the next write is its to see, not a look's
    finally:
        proc.terminate()
        proc.wait(30)
        if fake is not None:
            fake.close()
    print(
        f"{args.notes} notes, {args.rounds} rounds, first search {args.after:g} ms after the write "
        f"({'local model' if args.local else 'fake provider'}); workspace {top}"
    )
    print(f"found by the first search: {found_at_once} of {args.rounds}; searches until found: max {max(searches)}")
    if said:
        print(f"degraded answers: {len(said)}, the first: {said[0]}")
    print(
        f"write-to-searchable: median {statistics.median(took):.0f} ms, p95 {pct(took, 0.95):.0f} ms, "
        f"max {max(took):.0f} ms; load {os.getloadavg()[0]:.1f}"
    )


if __name__ == "__main__":
    main()
