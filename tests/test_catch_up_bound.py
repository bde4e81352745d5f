"""A server's search catches up a note just written, but not a burst of changes: that waits for the watcher's
sync, and the answer says what it does not search yet (api.catch_up.CATCH_UP_BYTES). Real indexes, the real
local model, a real watcher whose batches only queue, so nothing but the search and the test sync."""

from __future__ import annotations

import queue
import time
from collections.abc import Iterator

import pytest

from api.agents import Agents
from api.catch_up import CATCH_UP_BYTES, CatchUps
from core import MemoryIndex
from core.locking import writer_lock
from core.watching import MemoryWatching

WAIT = 15.0  # seconds: a bound, never a pause
BURST = 20


def _note(n: int) -> str:
    """A note of about 3 KiB holding the token `tok{n}x`: a burst of BURST of them is more than a search syncs."""
    lines = "".join(f"- line {k} of the survey log, walked the east path past marker {k}.\n" for k in range(40))
    return f"# Note {n}\n- The token tok{n}x marks this note.\n{lines}"


@pytest.fixture
def agents(workspace, make_config) -> Iterator[Agents]:
    ws = workspace({"memory/2026-01-01.md": "- The heron count was 12.\n"})
    config = make_config(ws)
    with MemoryIndex(config) as index:
        index.sync()
    ticks: queue.Queue[float] = queue.Queue()
    watching = MemoryWatching(lambda agents: None, lambda: ticks.put(time.monotonic()), lambda line: None)
    agents = Agents(config)
    agents.catch_ups.watching = watching
    watching.start({"main": config})
    ticks.get(timeout=WAIT)  # the watcher's first tick: its watches are in place
    try:
        yield agents
    finally:
        watching.stop()
        agents.close()


def _paths(agents: Agents, query: str) -> tuple[list[str], str | None]:
    response = agents.search(None, query, {"min_score": 0, "mode": "keyword"})[1]
    return [hit.path for hit in response.results], response.degraded


def test_a_note_just_written_is_found_whatever_its_size(agents) -> None:
    ws = agents.configs["main"].workspace
    big = _note(1) * 20  # one file past the budget: the note an agent just wrote is always synced first
    assert len(big) > CATCH_UP_BYTES
    (ws / "memory" / "big.md").write_text(big)
    paths, degraded = _paths(agents, "tok1x")
    assert set(paths) == {"memory/big.md"} and degraded is None


def test_a_burst_is_left_to_the_watchers_sync_and_the_answer_says_so(agents) -> None:
    config = agents.configs["main"]
    assert sum(len(_note(n)) for n in range(BURST)) > CATCH_UP_BYTES
    for n in range(BURST):
        (config.workspace / "memory" / f"n{n:02d}.md").write_text(_note(n))
    (config.workspace / "memory" / "2026-01-01.md").unlink()  # a deleted note is no hit even then

    paths, degraded = _paths(agents, "tok3x")
    assert paths == []  # nothing of the burst embedded while the search waited
    assert degraded is not None and f"{BURST} changed memory files" in degraded and "not searched yet" in degraded
    assert "memory/n00.md" in degraded
    assert _paths(agents, "heron")[0] == []
    response = agents.search(None, "tok3x", {"min_score": 0, "mode": "keyword"})[1]
    assert response.partial and "unsynced" in response.degradedBy

    with MemoryIndex(config) as index:  # the watcher's sync (Watch runs this through api.runs)
        index.sync()
    for n in range(BURST):
        assert _paths(agents, f"tok{n}x") == ([f"memory/n{n:02d}.md"], None)


def test_a_search_says_what_another_sync_running_has_not_indexed_yet(agents) -> None:
    config = agents.configs["main"]
    (config.workspace / "memory" / "2026-01-02.md").write_text("- The otter count was 7.\n")
    with writer_lock(config.db_path):  # the watcher's sync, holding the one writer's lock
        paths, degraded = _paths(agents, "otter")
    assert paths == []
    assert degraded is not None and "1 changed memory file (0 KiB) not searched yet (memory/2026-01-02.md)" in degraded
    assert "another sync of this agent is running" in degraded
    assert _paths(agents, "otter") == (["memory/2026-01-02.md"], None)


def test_without_a_watcher_a_search_syncs_everything_first(workspace, make_config) -> None:
    """`memsift search`, or a server not watching: nobody else would sync the burst."""
    ws = workspace({f"memory/n{n:02d}.md": _note(n) for n in range(BURST)})
    with MemoryIndex(make_config(ws)) as index:
        index.sync()
        for n in range(BURST):
            (ws / "memory" / f"n{n:02d}.md").write_text(_note(n + 100))
        caught = CatchUps().before_search(index)
        assert (caught.said, caught.unsearched) == (None, None)
        response = index.search("tok105x", mode="keyword", min_score=0)
    assert [hit.path for hit in response.results] == ["memory/n05.md"] and response.degraded is None
