"""Edit to searchable: how long after a save of `memsift.toml` a running `memsift up` serves the change.

One real `memsift up` (its own Prefect server, the local model) over `--files` generated daily notes of
bench/corpus.py plus one planted note. Each round times, from the write of the file to the first REST answer
that shows the change (polled every 20 ms):

- `weights`: `search.vectorWeight`/`textWeight` swapped; the planted note's top score (best in both legs:
  the sum of the weights) changes in the next search;
- `invalid`: a TOML syntax error; `/v1/status` names it (and the settings in force keep serving);
- `chunking`: a new `chunking.tokens` (a different value every round, so every chunk is embedded again) and
  the weights swapped with it (the sign that the API has the new settings); then `/v1/status` no longer
  dirty, i.e. the rebuild run has swapped the new index in;
- `agent added`: a new agent with `--agent-files` notes; its `/v1/status` shows its first sync's chunks
  (asking status never indexes, a first search would);
- `agent removed`: its `/v1/search` answers 404.

    .venv/bin/python bench/config_reload.py                      # 60 notes, 3 rounds (~4 min on 2 cores)
    .venv/bin/python bench/config_reload.py --files 300 --rounds 5

Prints a table (median and max seconds per kind) and writes bench/results/config-reload-<UTC time>.json.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from corpus import daily_note, write_files  # noqa: E402
from harness import cpu_busy, environment, save_result  # noqa: E402

MEMSIFT = Path(sys.executable).parent / "memsift"
PLANTED = "# 2026-11-24\n- The deploy failed with ERR_SSL_PROTOCOL on the staging proxy.\n"
QUERY = "ERR_SSL_PROTOCOL staging proxy deploy failed"
POLL = 0.02


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def until(condition: Callable[[], Any], timeout: float, what: str) -> float:
    """Seconds until `condition()` is truthy; fails after `timeout`."""
    start = time.monotonic()
    while not condition():
        if time.monotonic() - start > timeout:
            raise SystemExit(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(POLL)
    return time.monotonic() - start


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--files", type=int, default=60, help="daily notes in the main workspace")
    p.add_argument("--agent-files", type=int, default=10, help="daily notes of each agent added")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = p.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="memsift-config-reload-"))
    ws = tmp / "ws"
    write_files(ws, {f"memory/n{i:04d}.md": daily_note(args.seed, i) for i in range(args.files)})
    write_files(ws, {"memory/2026-11-24.md": PLANTED})
    api_port = free_port()
    api = f"http://127.0.0.1:{api_port}"
    base = f"[api]\nport = {api_port}\n[rerank]\nenabled = false\n[chunking]\noverlap = 0\n"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMSIFT_", "PREFECT_"))}
    env.update(MEMSIFT_HOME=str(tmp / "home"), PREFECT_UI_ENABLED="false", PREFECT_SERVER_ANALYTICS_ENABLED="false")
    if os.environ.get("MEMSIFT_MODEL_CACHE"):
        env["MEMSIFT_MODEL_CACHE"] = os.environ["MEMSIFT_MODEL_CACHE"]

    def write(tokens: int, weights: tuple[float, float], agent: str | None = None, broken: bool = False) -> None:
        text = base.replace("[chunking]\n", f"[chunking]\ntokens = {tokens}\n")
        text += f"[search]\nvectorWeight = {weights[0]}\ntextWeight = {weights[1]}\n"
        if agent:
            text += f"[agents.{agent}]\nworkspace = '{tmp / agent}'\n"
        (ws / "memsift.toml").write_text(text + ("[broken\n" if broken else ""))

    def status(agent: str = "main") -> dict[str, Any] | None:
        r = httpx.get(f"{api}/v1/status", params={"agent": agent}, timeout=60)
        return r.json() if r.status_code == 200 else None

    def top_score() -> float:
        return httpx.post(f"{api}/v1/search", json={"query": QUERY}, timeout=60).json()["results"][0]["score"]

    tokens, weights = 400, (0.35, 0.65)
    write(tokens, weights)
    busy = cpu_busy()
    log = open(tmp / "up.log", "wb")  # noqa: SIM115 (closed at the end)
    up = subprocess.Popen([MEMSIFT, "--workspace", str(ws), "up"], stdout=log, stderr=subprocess.STDOUT, env=env)
    times: dict[str, list[float]] = {k: [] for k in ("weights", "invalid", "chunking", "agent added", "agent removed")}
    try:
        until(lambda: "Ctrl-C stops everything" in (tmp / "up.log").read_text(), 300, "up to start")
        until(lambda: (s := status()) and sum(s["chunks"].values()) and not s["dirty"], 600, "the first index")
        chunks = sum(status()["chunks"].values())
        for r in range(args.rounds):
            weights = (0.2, 0.3) if weights == (0.35, 0.65) else (0.35, 0.65)
            write(tokens, weights)
            total = sum(weights)
            times["weights"].append(until(lambda w=total: abs(top_score() - w) < 1e-6, 60, "weights"))

            write(tokens, weights, broken=True)
            times["invalid"].append(until(lambda: status()["config"]["error"], 60, "the error"))
            write(tokens, weights)
            until(lambda: status()["config"]["error"] is None, 60, "valid again")

            # The weights flip too: until the API shows them, `dirty` would still compare the old settings.
            tokens, weights = 120 + 16 * r, (0.2, 0.3) if weights == (0.35, 0.65) else (0.35, 0.65)
            write(tokens, weights)
            total = sum(weights)
            times["chunking"].append(
                until(lambda w=total: abs(top_score() - w) < 1e-6 and not status()["dirty"], 900, "the rebuild")
            )

            agent = f"agent{r}"
            write_files(
                tmp / agent, {f"memory/n{i:04d}.md": daily_note(args.seed + r + 1, i) for i in range(args.agent_files)}
            )
            write(tokens, weights, agent)
            times["agent added"].append(
                until(lambda a=agent: (s := status(a)) and s["lastSync"] and not s["dirty"], 600, "the first sync")
            )
            write(tokens, weights)
            times["agent removed"].append(until(lambda a=agent: status(a) is None, 60, "the agent to go"))
            print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:.2f} s" for k, v in times.items()), flush=True)
    finally:
        up.send_signal(signal.SIGINT)
        up.wait(timeout=180)
        log.close()
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)

    print(f"\n{args.files} notes ({chunks} chunks at 400 tokens), {args.rounds} rounds, CPUs busy before {busy:.0%}\n")
    print("| change | median s | max s |\n|---|---|---|")
    for kind, values in times.items():
        print(f"| {kind} | {statistics.median(values):.2f} | {max(values):.2f} |")
    doc = {"args": vars(args), "chunks": chunks, "busy_before": busy, "seconds": times, "environment": environment()}
    print(f"\nwrote {save_result('config-reload', doc)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
