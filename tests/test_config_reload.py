"""Following the configuration while a server runs (api.config_reload): in-process, real files and watches;
then `memsift serve` as a real process, its settings changed under it. `memsift up` is in test_up.py."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import wait_for

from api.agents import Agents
from api.cli_servers import agent_configs
from api.config_reload import ConfigFollower, changed_keys
from tests.test_api_server import MEMSIFT, free_port
from tests.test_api_server import wait_for as wait_for_status

NOTES = {
    "MEMORY.md": "# Memory\n- Dana starts every morning with a flat white.\n",
    "memory/2026-11-24.md": "# 2026-11-24\n- The deploy failed with ERR_SSL_PROTOCOL on the staging proxy.\n",
}


class Recorder:
    """A follower's apply and say, recorded; `applied` is set at every apply."""

    def __init__(self) -> None:
        self.applies: list[tuple[Any, Any]] = []
        self.lines: list[str] = []
        self.states: list[dict[str, Any]] = []
        self.applied = threading.Event()

    def apply(self, old: Any, new: Any) -> None:
        self.applies.append((old, new))
        self.applied.set()


def follower(ws: Path, rec: Recorder) -> ConfigFollower:
    load = lambda: agent_configs(None, str(ws))  # noqa: E731
    return ConfigFollower(load, load(), rec.apply, rec.lines.append, rec.states.append)


def test_an_invalid_file_is_reported_once_and_the_settings_in_force_stay(workspace) -> None:
    ws = workspace(NOTES | {"memsift.toml": "[search]\nvectorWeight = 0.5\n"})
    rec = Recorder()
    f = follower(ws, rec)
    before = f.configs
    assert f.file == ws / "memsift.toml" and f.state["error"] is None

    (ws / "memsift.toml").write_text("[chunking]\ntokens = 5\n")
    assert f.reload("file changed") is False and f.reload("file changed") is False  # a second save, same error
    assert f.configs is before and rec.applies == []
    error = f"{ws / 'memsift.toml'}: chunking.tokens: 5 is out of range [16, 8192]"  # the file named
    assert f.state["error"] == error and f.state["errorAt"]
    assert len(rec.lines) == 1 and "invalid, the settings applied at" in rec.lines[0]
    assert "chunking.tokens: 5 is out of range" in rec.lines[0]

    (ws / "memsift.toml").write_text("[search\n")  # another error: reported too
    assert f.reload("file changed") is False
    assert "not valid TOML" in f.state["error"] and len(rec.lines) == 2

    (ws / "memsift.toml").write_text("[search]\nvectorWeight = 0.9\n[agents.second]\nworkspace = 'ws2'\n")
    (ws / "ws2").mkdir()
    assert f.reload("file changed") is True
    (old, new) = rec.applies[0]
    assert old is before and new is f.configs and sorted(new) == ["main", "second"]
    assert new["main"].search.vectorWeight == 0.9 and f.state["error"] is None
    assert rec.lines[-1] == "configuration (file changed): applying agent second added, main: search.vectorWeight"
    assert [s["error"] is None for s in rec.states] == [True, False, False, True]

    assert f.reload("SIGHUP", say_unchanged=True) is False and len(rec.applies) == 1
    assert rec.lines[-1] == "configuration (SIGHUP): unchanged"


def test_a_file_without_the_servers_default_agent_is_refused(workspace) -> None:
    """`memsift --agent work serve`, then `[agents.work]` renamed in the file: applied, every request naming no
    agent was a 404 while /readyz said ready, where the same file at start is refused. It is invalid now: the
    settings in force stay, and the error says why."""
    ws = workspace(NOTES | {"memsift.toml": "[agents.work]\nworkspace = '.'\n"})
    rec = Recorder()
    load = lambda: agent_configs(None, str(ws))  # noqa: E731
    f = ConfigFollower(load, load(), rec.apply, rec.lines.append, rec.states.append, default="work")
    before = f.configs
    (ws / "memsift.toml").write_text("[agents.play]\nworkspace = '.'\n")
    assert f.reload("file changed") is False and f.configs is before and rec.applies == []
    assert f.state["error"].startswith("agents.work.workspace: --agent work is the agent of requests naming none")
    (ws / "memsift.toml").write_text("[agents.work]\nworkspace = '.'\n[agents.play]\nworkspace = '.'\n")
    assert f.reload("file changed") is True and sorted(f.configs) == ["main", "play", "work"]


def test_changed_keys_name_settings_never_values(make_config, workspace) -> None:
    ws = workspace(NOTES)
    a = make_config(ws)
    b = make_config(ws, **{"chunking.tokens": 200, "embedding.headers": {"Authorization": "Bearer s3cret"}})
    assert changed_keys(a, b) == ["embedding.headers", "chunking.tokens"]
    assert changed_keys(a, make_config(ws)) == []


def test_the_watch_follows_a_save_by_rename_and_sighup(workspace) -> None:
    """Editors save by renaming a new file over the old one; a file created where none was is followed too."""
    ws = workspace(NOTES)
    rec = Recorder()
    f = follower(ws, rec)
    stop = threading.Event()
    previous = signal.getsignal(signal.SIGHUP)
    thread = f.start(stop)
    try:
        fresh = ws / ".memsift.toml.swp"
        fresh.write_text("[search]\nmaxResults = 3\n")
        os.replace(fresh, ws / "memsift.toml")  # there was no memsift.toml: the workspace's would-be file
        assert rec.applied.wait(30), rec.lines
        assert f.configs["main"].search.maxResults == 3

        os.kill(os.getpid(), signal.SIGHUP)
        wait_for(lambda: "configuration (SIGHUP): unchanged" in rec.lines, 30, "the SIGHUP re-read")
    finally:
        stop.set()
        thread.join(10)
        signal.signal(signal.SIGHUP, previous)
    assert not thread.is_alive()


def test_agents_replace_swaps_settings_between_leases(make_config, workspace) -> None:
    """A lease taken before a replace keeps its settings to the end and is not pooled; an agent whose settings
    did not change keeps its pooled index."""
    ws = workspace(NOTES)
    old = make_config(ws)
    agents = Agents(old)
    with agents.lease("main") as before:
        pass
    with agents.lease("main") as again:
        assert again is before  # pooled
    agents.replace({"main": make_config(ws)})  # equal settings: the same Config object and pool stay
    assert agents.config("main") is old
    with agents.lease("main") as kept:
        assert kept is before
        new = make_config(ws, **{"search.vectorWeight": 0.9})
        agents.replace({"main": new})
        assert kept.config is old  # a search in flight finishes on the old settings
    with agents.lease("main") as after:
        assert after is not before and after.config is new
    agents.close()


# ---------------------------------------------------------------- `memsift serve`, a real process


@pytest.fixture
def served(workspace, memsift_home: Path) -> Iterator[tuple[Path, str, subprocess.Popen[bytes]]]:
    port = free_port()
    # the fused scores' arithmetic: neither reranked nor calibrated
    # a longer note, so that a chunking of 48 tokens gives more chunks than the default: the rebuild shows
    long_note = "# 2026-11-25\n" + "".join(
        f"- Standup {i}: the team reviewed sprint item {i} of the roadmap.\n" for i in range(30)
    )
    toml = "[rerank]\nenabled = false\n[search]\ncalibrate = false\n"
    ws = workspace(NOTES | {"memory/2026-11-25.md": long_note, "memsift.toml": toml})
    env = dict(os.environ, MEMSIFT_HOME=str(memsift_home))
    index = subprocess.run(
        [MEMSIFT, "--workspace", ws, "index", "--no-prefect"], env=env, capture_output=True, text=True, timeout=300
    )
    assert index.returncode == 0, index.stderr
    proc = subprocess.Popen(
        [MEMSIFT, "--workspace", ws, "serve", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
    )
    try:
        yield ws, f"http://127.0.0.1:{port}", proc
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def top_score(base: str) -> float:
    r = httpx.post(f"{base}/v1/search", json={"query": "ERR_SSL_PROTOCOL staging proxy deploy failed"}, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()["results"][0]["score"]


def test_serve_takes_new_search_settings_and_rebuilds_a_new_chunking(served) -> None:
    ws, base, proc = served
    wait_for_status(proc, f"{base}/readyz")
    assert top_score(base) == 1.0  # best in both legs: vectorWeight + textWeight (0.35 + 0.65)

    toml = "[rerank]\nenabled = false\n[search]\ncalibrate = false\nvectorWeight = 0.2\ntextWeight = 0.3\n"
    (ws / "memsift.toml").write_text(toml)
    wait_for(lambda: top_score(base) == 0.5, 30, "the new weights in a search")

    (ws / "memsift.toml").write_text(toml + "[chunking]\ntokens = 5\n")
    error = wait_for(lambda: httpx.get(f"{base}/readyz", timeout=30).json()["config"]["error"], 30, "the error")
    assert error == f"{ws / 'memsift.toml'}: chunking.tokens: 5 is out of range [16, 8192]"
    ready = httpx.get(f"{base}/readyz", timeout=30)
    assert ready.status_code == 200  # the old settings serve
    assert "config" not in httpx.get(f"{base}/v1/status", timeout=30).json()  # SPEC: `status --json`'s document
    assert top_score(base) == 0.5

    before = httpx.get(f"{base}/v1/status", timeout=30).json()
    (ws / "memsift.toml").write_text(toml + "[chunking]\ntokens = 48\noverlap = 0\n")
    # With sync.watch on (the default), the new chunking is rebuilt at once, as under `memsift up`: no note
    # changed and nobody asked. Waited for: the watcher may see the file half-written first.
    # The long note's chunks are counted: the timestamps in `status` have a resolution of a second.
    status = wait_for(
        lambda: (s := httpx.get(f"{base}/v1/status", timeout=30).json())["chunks"] != before["chunks"] and s,
        120,
        "the rebuild with the new chunking",
    )
    assert status["chunks"]["memory"] > before["chunks"]["memory"] and not status["dirty"]
    assert httpx.get(f"{base}/readyz", timeout=30).json()["config"]["error"] is None
    assert top_score(base) == 0.5  # searches answer from the rebuilt index

    proc.send_signal(signal.SIGHUP)  # a re-read, not the end of the process
    assert httpx.get(f"{base}/healthz", timeout=30).status_code == 200
    proc.terminate()
    assert proc.wait(timeout=60) == 0
    log = proc.stderr.read().decode()
    assert "memsift serve: configuration (file changed): applying main: search.vectorWeight, search.textWeight" in log
    assert log.count("chunking.tokens: 5 is out of range") == 1, log
    assert "memsift serve: rebuild of main done: 3 added, 0 changed, 0 removed" in log, log  # into a new file


def test_a_hosted_providers_rebuild_is_announced_not_started(workspace, memsift_home: Path) -> None:
    """Issue 16's rule: on a hosted provider an identity change costs money, so it is said (with how much it
    would embed) and left to the user; a change that keeps the identity says nothing."""
    from core import MemoryIndex, load_config
    from flows.reload import rebuild_if_stale
    from flows.watch import SyncRuns
    from tests.fake_provider import FakeProvider

    ws = workspace(NOTES)
    fake = FakeProvider()
    try:

        def hosted(**overrides: Any):
            settings = {"embedding.provider": "openai", "embedding.baseUrl": fake.url, "embedding.model": "fake"}
            return load_config(workspace=ws, env={"MEMSIFT_HOME": str(memsift_home)}, overrides=settings | overrides)

        with MemoryIndex(hosted()) as index:
            index.sync()
            chunks = sum(index.store.stats()["chunks"].values())
        never = SyncRuns(deployment=lambda agent: pytest.fail(f"a rebuild of {agent} was started"))
        lines: list[str] = []
        assert rebuild_if_stale(hosted(**{"search.vectorWeight": 0.9}), never, lines.append, "ui") is False
        assert lines == []
        assert (
            rebuild_if_stale(hosted(**{"chunking.tokens": 48, "chunking.overlap": 0}), never, lines.append, "ui")
            is True
        )
    finally:
        fake.close()
    (line,) = lines
    assert line.startswith("agent main: the index identity changed (chunking); a rebuild on the hosted provider")
    assert f"embeds up to {chunks} chunks again" in line and "is NOT started" in line
    assert "prefect deployment run 'memsift-rebuild/main'" in line


def test_the_commands_a_held_rebuild_names_work_in_another_terminal(
    workspace, memsift_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """`up` says how to start the rebuild it holds; the user types that in another terminal, in another folder.
    `memsift --agent main index --force` there indexed that folder, and `prefect deployment run ...` without
    `PREFECT_API_URL` started a temporary server and answered "Deployment 'memsift-rebuild/main' not found!"."""
    import json
    import re
    import shlex

    from api.cli import main
    from core import MemoryIndex, load_config
    from flows.reload import rebuild_if_stale
    from flows.watch import SyncRuns
    from tests.fake_provider import FakeProvider

    fake = FakeProvider()
    try:
        hosted = f'[embedding]\nprovider = "openai"\nbaseUrl = "{fake.url}"\nmodel = "fake"\n'
        ws = workspace({**NOTES, "memsift.toml": hosted})
        with MemoryIndex(load_config(workspace=ws)) as index:
            index.sync()
        (ws / "memsift.toml").write_text(hosted + "[chunking]\ntokens = 48\noverlap = 0\n")
        never = SyncRuns(deployment=lambda agent: pytest.fail(f"a rebuild of {agent} was started"))
        lines: list[str] = []
        monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:4242/api")  # `up` sets it to its server's
        assert rebuild_if_stale(load_config(workspace=ws), never, lines.append, "ui") is True
        monkeypatch.delenv("PREFECT_API_URL")
        (line,) = lines
        assert "`PREFECT_API_URL=http://127.0.0.1:4242/api prefect deployment run 'memsift-rebuild/main'`" in line
        (command,) = re.findall(r"`(memsift [^`]*)`", line)
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        monkeypatch.chdir(elsewhere)
        capsys.readouterr()
        assert main([*shlex.split(command)[1:], "--dry-run", "--json"]) == 0
        plan = json.loads(capsys.readouterr().out)
        assert plan["provider"] == "openai" and plan["rebuild"] and plan["filesToRead"] == len(NOTES), plan
    finally:
        fake.close()


def test_a_config_folder_replaced_is_followed_again(workspace, tmp_path: Path) -> None:
    """inotify watches the folder, not its name: once the workspace holding memsift.toml was replaced by a copy
    renamed over it (a restore, a fresh clone swapped in), its file's edits were followed no more."""
    ws = workspace({**NOTES, "memsift.toml": "[search]\nmaxResults = 3\n"})
    rec = Recorder()
    f = follower(ws, rec)
    stop = threading.Event()
    thread = f.start(stop)
    try:
        fresh = tmp_path / "fresh"
        shutil.copytree(ws, fresh)
        (fresh / "memsift.toml").write_text("[search]\nmaxResults = 4\n")
        ws.rename(tmp_path / "old")
        fresh.rename(ws)
        wait_for(lambda: f.configs["main"].search.maxResults == 4, 30, "the new folder's file")
        (ws / "memsift.toml").write_text("[search]\nmaxResults = 5\n")
        wait_for(lambda: f.configs["main"].search.maxResults == 5, 30, "an edit in the new folder")
    finally:
        stop.set()
        thread.join(10)
    assert not thread.is_alive()
