"""OpenClaw parity (issue 14, point 10), through real `memsift` processes: `extraPaths` outside the workspace
are indexed under `extra/<h>/...`, `get` reads exactly those indexed files and refuses everything else (the
CLI and a real `memsift serve`), and with `search.citations = "on"` each human hit ends with its source."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from test_api_server import free_port, wait_for

from core import load_config
from core.errors import GetError
from core.memory import MemoryIndex

MEMSIFT = Path(sys.executable).parent / "memsift"
HIT_PATH = re.compile(r"^extra/[0-9a-f]{8}/")


def memsift(home: Path, *argv: str | Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMSIFT_", "PREFECT_API_URL"))}
    env.update(MEMSIFT_HOME=str(home), MEMSIFT_MODEL_CACHE=os.environ["MEMSIFT_MODEL_CACHE"])
    return subprocess.run([MEMSIFT, *map(str, argv)], capture_output=True, text=True, env=env, timeout=300)


def _setup(tmp_path: Path) -> tuple[Path, Path]:
    shared = tmp_path / "shared"  # notes kept elsewhere, beside the workspace
    (shared / "runbooks" / "tls").mkdir(parents=True)
    (shared / "runbooks" / "tls" / "rotate.md").write_text(
        "# Rotating TLS\n- The staging certificate is rotated every 60 days with certbot.\n"
    )
    (shared / "runbooks" / "skip.txt").write_text("not Markdown\n")
    (shared / "secret.md").write_text("- the vault recovery phrase is hunter2\n")  # not an entry: never read
    (shared / "runbooks" / "leak.md").symlink_to(shared / "secret.md")
    (shared / "wifi.md").write_text("# Office\n- The guest wifi password is taped under the printer.\n")
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "MEMORY.md").write_text("- Dana drinks a flat white.\n")
    # one absolute folder entry, one relative file entry that leaves the workspace
    (ws / "memsift.toml").write_text(f'extraPaths = ["{shared / "runbooks"}", "../shared/wifi.md"]\n')
    return ws, shared


def test_external_extra_paths_are_indexed_searched_and_read(tmp_path: Path, memsift_home: Path) -> None:
    ws, shared = _setup(tmp_path)
    index = memsift(memsift_home, "--workspace", ws, "--json", "index", "--no-prefect")
    report = json.loads(index.stdout)
    assert report["added"] == 3, report
    assert any("leak.md" in w and "symlink" in w for w in report["warnings"])
    assert not any("outside the workspace" in w for w in report["warnings"])

    answer = json.loads(memsift(memsift_home, "--workspace", ws, "--json", "search", "TLS certificate rotation").stdout)
    top = answer["results"][0]
    assert HIT_PATH.match(top["path"]) and top["path"].endswith("/tls/rotate.md"), top
    assert top["citation"] == f"{top['path']}#L1-L2"
    assert "Source:" not in top["snippet"]  # the JSON carries the citation as its own field

    wifi = json.loads(memsift(memsift_home, "--workspace", ws, "--json", "search", "guest wifi password").stdout)
    wifi_path = wifi["results"][0]["path"]
    assert HIT_PATH.match(wifi_path) and wifi_path.endswith("/wifi.md")

    again = memsift(memsift_home, "--workspace", ws, "--json", "index", "--force", "--no-prefect")
    assert json.loads(again.stdout)["rebuilt"]
    same = json.loads(memsift(memsift_home, "--workspace", ws, "--json", "search", "TLS certificate rotation").stdout)
    assert same["results"][0]["path"] == top["path"]  # stable across rebuilds

    got = memsift(memsift_home, "--workspace", ws, "get", top["path"], "--from", "2")
    assert got.returncode == 0 and got.stdout == "- The staging certificate is rotated every 60 days with certbot.\n"
    assert memsift(memsift_home, "--workspace", ws, "get", wifi_path).stdout.startswith("# Office\n")

    prefix = top["path"].split("/tls/")[0]
    (shared / "runbooks" / "later.md").write_text("- added after the last index\n")
    for path, needle in [
        (str(shared / "wifi.md"), "absolute paths are refused"),
        (f"{prefix}/../secret.md", "'..'"),
        (f"{prefix}/leak.md", "not a memory file"),  # a symlink inside the entry
        (f"{prefix}/skip.txt", "not a memory file"),
        (f"{prefix}/later.md", "not in the index"),
        ("extra/00000000/secret.md", "not a memory file"),
        (f"{wifi_path.rsplit('/', 1)[0]}/secret.md", "not a memory file"),  # beside a single-file entry
    ]:
        refused = memsift(memsift_home, "--workspace", ws, "get", path)
        assert refused.returncode == 1 and needle in refused.stderr, (path, refused.stderr)
        assert "hunter2" not in refused.stdout + refused.stderr


def test_human_hits_end_with_their_source(tmp_path: Path, memsift_home: Path) -> None:
    ws, _ = _setup(tmp_path)
    memsift(memsift_home, "--workspace", ws, "index", "--no-prefect")
    out = memsift(memsift_home, "--workspace", ws, "search", "certificate", "--mode", "keyword").stdout
    blocks = out.rstrip("\n").split("\n\n")
    assert blocks
    for block in blocks:
        head, *_, last = block.split("\n")
        path, lines = head.split(" ")[1].rsplit(":", 1)
        start, end = lines.split("-")
        assert last == f"Source: {path}#L{start}-L{end}", block

    (ws / "memsift.toml").write_text('[search]\ncitations = "off"\n')
    memsift(memsift_home, "--workspace", ws, "index", "--no-prefect")
    assert "Source:" not in memsift(memsift_home, "--workspace", ws, "search", "flat white").stdout


def test_rest_get_reads_indexed_external_files_and_refuses_the_rest(tmp_path: Path, memsift_home: Path) -> None:
    ws, shared = _setup(tmp_path)
    memsift(memsift_home, "--workspace", ws, "index", "--no-prefect")
    port = free_port()
    # Not watched: the server would sync later.md (written after the search, which syncs what changed before
    # it answers), and this test is about a file the index does not hold yet.
    env = dict(os.environ, MEMSIFT_HOME=str(memsift_home), MEMSIFT_SYNC_WATCH="false")
    proc = subprocess.Popen(
        [MEMSIFT, "--workspace", ws, "serve", "--port", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(proc, f"{base}/readyz")
        hits = httpx.post(f"{base}/v1/search", json={"query": "TLS certificate rotation"}, timeout=60).json()
        path = hits["results"][0]["path"]
        assert HIT_PATH.match(path)
        (shared / "runbooks" / "later.md").write_text("- added after the last sync\n")
        got = httpx.post(f"{base}/v1/get", json={"path": path, "from": 1, "lines": 1}, timeout=60)
        assert got.status_code == 200 and got.json()["text"] == "# Rotating TLS"
        prefix = path.split("/tls/")[0]
        for refused, status in [
            (str(shared / "secret.md"), 403),
            (f"{prefix}/../secret.md", 403),
            (f"{prefix}/leak.md", 403),
            (f"{prefix}/later.md", 404),
        ]:
            r = httpx.post(f"{base}/v1/get", json={"path": refused}, timeout=60)
            assert r.status_code == status, (refused, r.text)
            assert "hunter2" not in r.text
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
        proc.stderr.close()


def test_an_indexed_external_file_deleted_since_reads_as_empty_text(tmp_path: Path, memsift_home: Path) -> None:
    """SPEC: a memory file that does not exist returns empty text. An entry deleted after the index (a single
    file, or a folder) was refused as "not a memory file ... extraPaths" (403), the entry configured all along,
    where a deleted file of a folder still there read as empty text. Once a sync has dropped them, both are "not in the
    index" (404), as a file the index never held."""
    ws, shared = _setup(tmp_path)
    with MemoryIndex(load_config(workspace=ws)) as index:
        index.sync()
        indexed = sorted(p for p in index.store.file_rows() if HIT_PATH.match(p))
        wifi, rotate = sorted(indexed, key=lambda p: not p.endswith("/wifi.md"))
        (shared / "wifi.md").unlink()
        shutil.rmtree(shared / "runbooks")  # a folder entry gone whole
        for path in (wifi, rotate):
            assert index.get(path) == {"path": path, "from": 1, "lines": 0, "text": "", "totalLines": 0}
        index.sync()
        for path in (wifi, rotate):
            with pytest.raises(GetError, match="not in the index") as refused:
                index.get(path)
            assert refused.value.status == 404
