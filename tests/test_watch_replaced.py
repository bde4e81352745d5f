"""A workspace folder replaced while `memsift serve` runs (a fresh copy renamed over it, as a restore or a
clone swapped in does; or deleted and made again) is watched again: its next edit is synced by the watcher
and found by a search.

inotify watches a folder, not its name. Before, the new folder was watched by no one, in silence, and since a
search of an index over `LOOK_ALWAYS_FILES` trusts the watcher to say what changed, it answered from the old
notes for good.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import httpx
from conftest import stop_process
from conftest import wait_for as poll
from test_api_server import MEMSIFT, wait_for

from api.catch_up import LOOK_ALWAYS_FILES
from api.prefect_server import free_port


def test_a_workspace_folder_replaced_is_watched_again(workspace, memsift_home: Path, tmp_path: Path) -> None:
    notes = {f"memory/n{i}.md": f"# n{i}\nnote number {i}\n" for i in range(LOOK_ALWAYS_FILES + 10)}
    ws = workspace({"MEMORY.md": "# Memory\nThe walrus count was 3.\n", **notes})
    port = free_port()
    env = dict(os.environ, MEMSIFT_HOME=str(memsift_home), MEMSIFT_SYNC_WATCHDEBOUNCEMS="100")
    env["MEMSIFT_EMBEDDING_PROVIDER"] = "none"
    proc = subprocess.Popen(
        [MEMSIFT, "--workspace", ws, "serve", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
    )
    base = f"http://127.0.0.1:{port}"

    def paths(query: str) -> list[str]:
        r = httpx.post(f"{base}/v1/search", json={"query": query, "minScore": 0}, timeout=60)
        assert r.status_code == 200, r.text
        return [hit["path"] for hit in r.json()["results"]]

    try:
        wait_for(proc, f"{base}/readyz")
        assert paths("walrus") == ["MEMORY.md"]  # the first index
        fresh = tmp_path / "fresh"  # a new copy swapped in, as a restore or a fresh clone does it
        shutil.copytree(ws, fresh)
        ws.rename(tmp_path / "old")
        fresh.rename(ws)
        poll(lambda: paths("walrus") == ["MEMORY.md"], 30, "a search after the restore")
        (ws / "MEMORY.md").write_text("# Memory\nThe walrus count was 3.\nThe narwhal count was 5.\n")
        status = lambda: httpx.get(f"{base}/v1/status", timeout=30).json()  # noqa: E731
        poll(lambda: not status()["dirty"], 30, "the watcher's sync of the edit (no search asked)")
        assert paths("narwhal") == ["MEMORY.md"]
    finally:
        stop_process(proc)
