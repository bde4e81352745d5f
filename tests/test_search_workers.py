"""`memsift serve --workers N` (api/search_pool.py): searches in N worker processes of one real server, answers
equal to the one-process server's, a dead worker replaced, no worker left when the server stops."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from conftest import stop_process, wait_for

from api.cli import main
from api.prefect_server import free_port

MEMSIFT = Path(sys.executable).parent / "memsift"
START_SECONDS = 120  # N + 1 processes load the model on a busy machine
QUERIES = ["what does Dana drink in the morning", "deploy failed SSL", "which database did we pick", "Berlin trip"]


def spawned_workers(pid: int) -> list[int]:
    """Children of `pid` started by multiprocessing's spawn (not its resource tracker)."""
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            cmdline = Path(f"/proc/{child}/cmdline").read_bytes()
            if b"spawn_main" in cmdline:
                found.append(int(child))
    return sorted(found)


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def start(ws: Path, home: Path, *extra: str) -> tuple[str, subprocess.Popen[bytes]]:
    port = free_port()
    proc = subprocess.Popen(
        [MEMSIFT, "--workspace", ws, "serve", "--port", str(port), *extra],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=dict(os.environ, MEMSIFT_HOME=str(home)),
    )
    base = f"http://127.0.0.1:{port}"

    def ready() -> httpx.Response | None:
        assert proc.poll() is None, f"memsift serve {' '.join(extra)} exited with {proc.returncode}"
        try:
            r = httpx.get(f"{base}/readyz", timeout=5)
        except httpx.TransportError:
            return None
        return r if r.status_code == 200 else None

    wait_for(ready, START_SECONDS, f"memsift serve {' '.join(extra)} to be ready", every=0.2)
    return base, proc


def answer(base: str, query: str) -> list[tuple[str, int, int, float]]:
    r = httpx.post(f"{base}/v1/search", json={"query": query, "rerank": True}, timeout=60)
    assert r.status_code == 200, r.text
    return [(h["path"], h["startLine"], h["endLine"], h["score"]) for h in r.json()["results"]]


@pytest.fixture
def indexed(workspace, memsift_home: Path) -> Iterator[Path]:
    ws = workspace(
        {
            "MEMORY.md": "# Memory\n- Dana Whitfield starts every morning with a flat white, no sugar.\n"
            "- We picked PostgreSQL over MySQL for the billing service.\n",
            "memory/2026-05-14.md": "# 2026-05-14\n- The deploy failed with ERR_SSL_PROTOCOL_ERROR.\n",
            "memory/2026-05-20.md": "# 2026-05-20\n- Booked the Berlin trip: train on the 3rd, back on the 9th.\n",
        }
    )
    assert main(["--workspace", str(ws), "index"]) == 0
    yield ws


def test_workers_answer_like_one_process_and_a_dead_worker_is_replaced(indexed: Path, memsift_home: Path) -> None:
    base, proc = start(indexed, memsift_home)
    try:
        expected = {q: answer(base, q) for q in QUERIES}
    finally:
        stop_process(proc)
    assert all(expected.values())

    base, proc = start(indexed, memsift_home, "--workers", "2")
    try:
        assert httpx.get(f"{base}/readyz", timeout=30).json()["workers"] == "2 of 2 started"
        workers = spawned_workers(proc.pid)
        assert len(workers) == 2

        with ThreadPoolExecutor(8) as clients:  # concurrent: both workers answer
            got = list(clients.map(lambda q: (q, answer(base, q)), QUERIES * 4))
        assert all(hits == expected[q] for q, hits in got)

        os.kill(workers[0], signal.SIGKILL)

        def answered() -> bool:
            r = httpx.post(f"{base}/v1/search", json={"query": QUERIES[0], "rerank": True}, timeout=60)
            assert r.status_code in (200, 503), r.text
            return r.status_code == 200

        wait_for(answered, START_SECONDS, "a search after a worker died", every=0.2)
        assert answer(base, QUERIES[1]) == expected[QUERIES[1]]
        replaced = spawned_workers(proc.pid)
        assert workers[0] not in replaced and replaced
    finally:
        stop_process(proc)
    assert proc.returncode == 0
    wait_for(lambda: not any(alive(p) for p in replaced), 30, "the workers to end with the server")


def test_a_worker_searches_with_the_settings_of_a_reload(workspace, memsift_home: Path) -> None:
    ws = workspace(
        {
            # the fused scores' arithmetic: neither reranked nor calibrated
            "memsift.toml": "[rerank]\nenabled = false\n[search]\ncalibrate = false\n",
            "MEMORY.md": "# Memory\n- Dana starts every morning with a flat white.\n",
            "memory/2026-11-24.md": "# 2026-11-24\n- The deploy failed with ERR_SSL_PROTOCOL on the staging proxy.\n",
        }
    )
    assert main(["--workspace", str(ws), "index"]) == 0
    base, proc = start(ws, memsift_home, "--workers", "1")

    def top_score() -> float:
        r = httpx.post(f"{base}/v1/search", json={"query": "ERR_SSL_PROTOCOL staging proxy deploy failed"}, timeout=60)
        assert r.status_code == 200, r.text
        return r.json()["results"][0]["score"]

    try:
        assert top_score() == 1.0  # best in both legs: vectorWeight + textWeight (0.35 + 0.65)
        reloaded = "[rerank]\nenabled = false\n[search]\ncalibrate = false\nvectorWeight = 0.2\ntextWeight = 0.3\n"
        (ws / "memsift.toml").write_text(reloaded)
        wait_for(lambda: top_score() == 0.5, 60, "the reloaded weights in a worker's search", every=0.2)
        assert len(spawned_workers(proc.pid)) == 1
    finally:
        stop_process(proc)
