"""Wall time of `memsift index` as a user runs it: a no-op and a first index of examples/workspace, each
without and with a running `memsift up`, as real subprocesses.

Everything lives in a temporary folder: MEMSIFT_HOME, a copy of the workspace, and HOME itself, so that
files a run writes outside MEMSIFT_HOME and the workspace (Prefect's `~/.prefect`) are found and counted.
The local model's optimised graph is built once before timing (MEMSIFT_MODEL_CACHE), as on a machine where
memsift has run before. A "first index" is timed after removing every file under `<home>/memory` (index and
embedding cache): the model reads every chunk. Medians of `--runs` runs. CPU seconds (user + system, the
program and its children) are reported beside wall times: on a machine shared with other work they say
what the program itself costs.

    .venv/bin/python bench/index_wall.py [--runs 5] [--no-up] [--memsift PATH]

`--memsift` runs another program; with PYTHONPATH=<an older checkout> in the environment the same program
runs that code (before/after). `--env KEY=VALUE` sets a variable for every run (e.g. Prefect's
`PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS=120` for code that starts a temporary server on a busy
machine).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "workspace"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def files_under(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")} if folder.exists() else set()


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, float, subprocess.CompletedProcess[str]]:
    """(wall seconds, CPU seconds (user + system) of the process and its children, the finished process)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    seconds = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stderr}")
    return seconds, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, done


def measure(memsift: list[str], ws: Path, home: Path, env: dict[str, str], runs: int) -> dict[str, object]:
    index = [*memsift, "--workspace", str(ws), "index"]
    first, noop = [], []
    for _ in range(runs):
        shutil.rmtree(home / "memory", ignore_errors=True)
        first.append(timed(index, env)[:2])
    for _ in range(runs):
        seconds, cpu, done = timed(index, env)
        assert "0 added, 0 changed, 0 removed" in done.stdout, done.stdout
        noop.append((seconds, cpu))
    return {
        "first_median_wall_s": round(statistics.median(s for s, _ in first), 2),
        "first_median_cpu_s": round(statistics.median(c for _, c in first), 2),
        "first_wall_s": [round(s, 2) for s, _ in first],
        "noop_median_wall_s": round(statistics.median(s for s, _ in noop), 2),
        "noop_median_cpu_s": round(statistics.median(c for _, c in noop), 2),
        "noop_wall_s": [round(s, 2) for s, _ in noop],
        "load_average": os.getloadavg(),
        "stderr_of_last": done.stderr.strip().splitlines(),
    }


def start_up(memsift: list[str], ws: Path, home: Path, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """`memsift up` on its own server; returns once its server is advertised and its initial sync is done."""
    up_env = {**env, "PREFECT_UI_ENABLED": "false", "MEMSIFT_API_PORT": str(free_port()), "MEMSIFT_SYNC_WATCH": "0"}
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [*memsift, "--workspace", str(ws), "up", "--port", str(free_port())],
            env=up_env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + 300
    while not ((home / "prefect-api-url").exists() and "initial sync: sync of main started" in log.read_text()):
        if process.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"memsift up did not start:\n{log.read_text()}")
        time.sleep(0.5)
    status = [*memsift, "--workspace", str(ws), "status", "--json"]
    while not json.loads(subprocess.run(status, env=env, capture_output=True, text=True).stdout or "{}")["lastSync"]:
        if process.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"memsift up's initial sync did not end:\n{log.read_text()}")
        time.sleep(0.5)
    return process


def stop_up(up: subprocess.Popen[bytes], log: Path) -> None:
    """SIGINT; if `up` has not stopped after 120 s, SIGKILL it and its Prefect server's process group."""
    up.send_signal(signal.SIGINT)
    try:
        up.wait(timeout=120)
    except subprocess.TimeoutExpired:
        print(json.dumps({"up_did_not_stop_on_SIGINT_within_s": 120}), flush=True)
        up.kill()
        up.wait()
        found = re.search(r"Prefect server on \S+ \(pid (\d+)", log.read_text())
        if found:
            os.killpg(int(found.group(1)), signal.SIGKILL)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--no-up", action="store_true", help="skip the runs with a `memsift up` running")
    p.add_argument("--memsift", default=str(Path(sys.executable).parent / "memsift"), help="the program to time")
    p.add_argument("--keep", action="store_true")
    p.add_argument("--env", action="append", default=[], metavar="KEY=VALUE", help="set for every run")
    args = p.parse_args(argv)
    memsift = args.memsift.split()

    tmp = Path(tempfile.mkdtemp(prefix="memsift-index-wall-"))
    try:
        user_home, home, ws = tmp / "user", tmp / "memsift-home", tmp / "workspace"
        user_home.mkdir()
        shutil.copytree(EXAMPLE, ws)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "MEMSIFT_"))}
        env.update(HOME=str(user_home), MEMSIFT_HOME=str(home), MEMSIFT_MODEL_CACHE=str(tmp / "models"))
        env.update(item.split("=", 1) for item in args.env)
        subprocess.run([*memsift, "model", "build"], env=env, capture_output=True, check=True, timeout=900)

        print(json.dumps({"runs": args.runs, "memsift": args.memsift, "python_path": env.get("PYTHONPATH")}))
        print(json.dumps({"no_server": measure(memsift, ws, home, env, args.runs)}, indent=2), flush=True)
        print(json.dumps({"written_outside_home_and_workspace": sorted(files_under(user_home))[:20]}), flush=True)
        if not args.no_up:
            up = start_up(memsift, ws, home, env, tmp / "up.log")
            try:
                print(json.dumps({"with_up": measure(memsift, ws, home, env, args.runs)}, indent=2), flush=True)
            finally:
                stop_up(up, tmp / "up.log")
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
