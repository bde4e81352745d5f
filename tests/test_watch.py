"""The watcher of `memsift up` (flows/watch.py): which file events count, debouncing on a real folder, and how
sync runs are coalesced against a real Prefect server.

The folder tests run `watch` in a thread on a temp workspace and wait for its callbacks on queues with a
timeout; nothing sleeps to synchronise. `ticks` (the watcher's idle callback) tells when it has gone quiet.
"""

from __future__ import annotations

import queue
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import date
from functools import partial

import pytest
from prefect.client.orchestration import get_client
from prefect.states import Completed, Running
from watchfiles import Change

from api.agents import Agents
from core import MemoryIndex
from core.config_types import Config
from core.watching import MemoryWatching, changed_agents, watch
from flows.deployments import agent_deployments, flow_parameters
from flows.watch import SyncRuns

WAIT = 15.0  # seconds: a bound, never a pause


@pytest.fixture
def two_agents(workspace, make_config) -> tuple[Config, Config]:
    main = workspace({"MEMORY.md": "# m\n", "memory/2026-01-01.md": "a\n", "notes/n.md": "n\n"}, name="main-ws")
    (main / "memory" / "2025").mkdir()
    side = workspace({"memory/s.md": "s\n"}, name="side-ws")
    main_config = make_config(main, extraPaths=["notes"])
    side_config = replace(main_config, workspace=side.resolve(), agent="side", extra_paths=())
    return main_config, side_config


def test_changed_agents_follows_the_discovery_rules(two_agents) -> None:
    main, side = two_agents
    m, s = str(main.workspace), str(side.workspace)

    def agents(change: Change, path: str) -> set[str]:
        return changed_agents([main, side], change, path)

    assert agents(Change.modified, f"{m}/MEMORY.md") == {"main"}
    assert agents(Change.added, f"{m}/memory/2026-01-02.md") == {"main"}
    assert agents(Change.deleted, f"{m}/memory/deep/er/old.md") == {"main"}
    assert agents(Change.added, f"{m}/notes/new.md") == {"main"}  # an extraPaths folder
    assert agents(Change.modified, f"{s}/memory/s.md") == {"side"}
    assert agents(Change.added, f"{m}/memory/2025") == {"main"}  # a folder moved in: its files are not reported
    assert agents(Change.deleted, f"{m}/memory/2024") == {"main"}  # a folder moved away (or a file without suffix)
    assert agents(Change.deleted, f"{m}/memory/acme.com") == {"main"}  # a dotted folder moved away, too
    # ignored: not Markdown, excluded folders, outside memory/ and extraPaths, editor droppings, other folders
    assert agents(Change.added, f"{m}/memory/picture.png") == set()
    assert agents(Change.deleted, f"{m}/memory/.2026-01-01.md.swp") == set()
    assert agents(Change.added, f"{m}/memory/node_modules/x.md") == set()
    assert agents(Change.modified, f"{m}/memory/.git/notes.md") == set()
    assert agents(Change.added, f"{m}/README.md") == set()
    assert agents(Change.added, f"{m}/docs/a.md") == set()
    assert agents(Change.added, f"{m}/memory.txt") == set()
    assert agents(Change.added, f"{m}-other/memory/a.md") == set()  # a sibling folder sharing the name's start


class Watcher:
    """`watch` running in a thread; its batches and its idle ticks on queues."""

    def __init__(self, configs: dict[str, Config], debounce_ms: int) -> None:
        self.batches: queue.Queue[tuple[float, set[str]]] = queue.Queue()
        self.ticks: queue.Queue[float] = queue.Queue()
        self.stop = threading.Event()
        ready = threading.Event()
        self.thread = threading.Thread(
            target=watch,
            args=(configs, lambda agents: self.batches.put((time.monotonic(), agents)), self.stop, debounce_ms),
            kwargs={"on_tick": lambda: self.ticks.put(time.monotonic()), "ready": ready, "tick_ms": 100},
        )
        self.thread.start()
        assert ready.wait(WAIT), "the watcher did not start"

    def next_batch(self) -> tuple[float, set[str]]:
        return self.batches.get(timeout=WAIT)

    def quiet(self) -> None:
        """Return once the watcher has handled everything before this call: two idle ticks after it."""
        while not self.ticks.empty():
            self.ticks.get_nowait()
        for _ in range(2):
            self.ticks.get(timeout=WAIT)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(WAIT)
        assert not self.thread.is_alive()


@pytest.fixture
def watcher(two_agents) -> Iterator[Watcher]:
    main, side = two_agents
    w = Watcher({"main": main, "side": side}, debounce_ms=300)
    yield w
    w.close()


def test_a_burst_of_changes_is_one_debounced_sync(two_agents, watcher: Watcher) -> None:
    main, side = two_agents
    for i in range(5):
        (main.workspace / "memory" / f"2026-02-0{i + 1}.md").write_text(f"note {i}\n")
    (main.workspace / "MEMORY.md").write_text("# m\n- changed\n")
    (side.workspace / "memory" / "s.md").write_text("s changed\n")
    last_write = time.monotonic()
    at, agents = watcher.next_batch()
    assert agents == {"main", "side"}
    assert at - last_write >= 0.3  # nothing is handed over before the quiet period
    watcher.quiet()
    assert watcher.batches.empty()  # one batch for the whole burst


def test_ignored_changes_start_nothing(two_agents, watcher: Watcher) -> None:
    main, side = two_agents
    (main.workspace / "memory" / "picture.png").write_bytes(b"\x89PNG")
    (main.workspace / "memory" / "node_modules").mkdir()
    (main.workspace / "memory" / "node_modules" / "x.md").write_text("x\n")
    (main.workspace / "README.md").write_text("readme\n")
    (side.workspace / "other.md").write_text("not memory\n")
    watcher.quiet()
    assert watcher.batches.empty()

    (side.workspace / "memory" / "s.md").unlink()
    assert watcher.next_batch()[1] == {"side"}


def test_moving_a_folder_of_notes_is_a_change(two_agents, watcher: Watcher) -> None:
    main, _ = two_agents
    (main.workspace / "memory" / "2025").rename(main.workspace / "memory" / "archive-2025")
    assert watcher.next_batch()[1] == {"main"}


def test_moving_a_dotted_folder_out_of_the_workspace_is_a_change(two_agents, watcher: Watcher, tmp_path) -> None:
    """`memory/acme.com/` moved to the trash reports its own name alone, a deleted name with a suffix: it was
    taken for a file, and its notes stayed hits of a watching server until some other change."""
    main, _ = two_agents
    folder = main.workspace / "memory" / "acme.com"
    folder.mkdir()
    (folder / "n.md").write_text("acme\n")
    assert watcher.next_batch()[1] == {"main"}
    watcher.quiet()
    folder.rename(tmp_path / "trash-acme.com")
    assert watcher.next_batch()[1] == {"main"}


# ---------------------------------------------------------------- sync runs through the deployment


def _set_state(run_id, state) -> None:
    with get_client(sync_client=True) as client:
        client.set_flow_run_state(run_id, state, force=True)


@pytest.fixture
def applied(prefect_harness) -> Iterator[list]:
    """Ids of the deployments a test applies, deleted after it: the session's Prefect server is shared, and a
    deployment left there would be found by a later test."""
    ids: list = []
    yield ids
    with get_client(sync_client=True) as client:
        for deployment_id in ids:
            client.delete_deployment(deployment_id)


def test_sync_runs_are_coalesced_per_agent(workspace, make_config, applied) -> None:
    """No runner serves the deployment here: a run stays Scheduled until the test moves its state."""
    config = make_config(workspace({"MEMORY.md": "x\n"}))
    applied.extend(deployment.apply() for deployment in agent_deployments(config))
    runs = SyncRuns()

    first = runs.request(["main"])
    assert len(first) == 1
    assert first[0].parameters == flow_parameters(config)
    assert runs.request(["main"]) == []  # still scheduled: it will see the change
    assert runs.poll() == []

    _set_state(first[0].id, Running())
    assert runs.request(["main"]) == []  # running: may have scanned already, so one more run is owed...
    assert runs.poll() == []  # ...once it has finished
    _set_state(first[0].id, Completed())
    follow_up = runs.poll()
    assert len(follow_up) == 1 and follow_up[0].id != first[0].id
    assert runs.poll() == []  # owed once, started once


def test_serve_leaves_a_first_index_to_the_first_search(workspace, make_config, memsift_home) -> None:
    """`memsift serve`'s watcher (api/watching.py) syncs only agents indexed already: a first index started by
    a file change would hold the writer lock the first search waits on. Once indexed, a change is synced
    in-process, coalesced while its run waits."""
    from api.runs import IndexRuns
    from api.watching import WatchedSyncs

    config = make_config(workspace({"MEMORY.md": "# Memory\n- Dana drinks a flat white.\n"}))
    runs = IndexRuns()
    syncs = WatchedSyncs(runs, lambda agent: config, print)
    try:
        assert syncs.request(["main"]) == [] and not config.db_path.exists()
        with MemoryIndex(config) as index:
            index.search("flat white")  # the first search indexes
        (config.workspace / "memory").mkdir()
        (config.workspace / "memory" / "2026-05-01.md").write_text("- The zebra count was 41.\n")
        started = syncs.request(["main"])
        assert len(started) == 1 and started[0].deployment is None  # in this process: no Prefect server
        done = runs.wait(started[0].id, WAIT)
        assert done.state == "COMPLETED" and done.summary["added"] == 1, done
    finally:
        runs.close()


def test_a_watch_that_fails_says_why_and_ends(workspace, make_config) -> None:
    """A workspace gone (or the inotify limit reached) ends the watching with a line saying so, not a thread's
    traceback; the server goes on."""
    config = make_config(workspace({"MEMORY.md": "x\n"}))
    shutil.rmtree(config.workspace)
    said: list[str] = []
    watching = MemoryWatching(lambda agents: None, lambda: None, said.append)
    watching.start({"main": config})
    watching.stop()  # joins the thread, which has ended by itself
    assert "watching main (debounce 1500 ms)" in said  # said after the thread started: maybe after it failed
    stopped = [line for line in said if line.startswith("file watching stopped (FileNotFoundError")]
    assert len(stopped) == 1 and "on request" in stopped[0], said


def test_serve_syncs_an_agent_whose_settings_changed(workspace, memsift_home) -> None:
    """`memsift serve` follows its file (api.watching.Watch.follow): an agent whose settings changed is synced
    at once. A new chunking on the local model is rebuilt (tests/test_config_reload.py, a real server); on a
    hosted provider the sync holds the rebuild, embeds nothing, and says what the rebuild would embed."""
    from api.runs import IndexRuns
    from api.watching import Watch
    from core import load_config
    from tests.fake_provider import FakeProvider

    fake = FakeProvider()
    runs = IndexRuns()
    said: queue.Queue[str] = queue.Queue()
    watch = None
    try:
        hosted = f'[embedding]\nprovider = "openai"\nbaseUrl = "{fake.url}"\nmodel = "fake"\n'
        notes = "# Memory\n" + "".join(f"- Note {i}: Dana moved meeting {i} to room {i * 7}.\n" for i in range(20))
        ws = workspace({"MEMORY.md": notes, "memsift.toml": hosted})  # 48-token chunks: other texts to embed
        old = load_config(workspace=ws)
        with MemoryIndex(old) as index:
            index.sync()
            identity = index.store.identity()
        embedded = len(fake.embedded)
        (ws / "memsift.toml").write_text(hosted + "[chunking]\ntokens = 48\noverlap = 0\n")
        new = load_config(workspace=ws)
        watch = Watch({}, runs, lambda agent: new, said.put)  # no agent yet: no catch-up
        watch.follow({"main": old}, {"main": new})
        line = said.get(timeout=WAIT)
        while not line.startswith("sync of main"):
            line = said.get(timeout=WAIT)
        assert line.startswith("sync of main: the index identity changed (chunking)"), line
        assert "memsift index --force" in line and "it would embed" in line
        assert [t for t in fake.embedded[embedded:] if t != "memsift probe"] == []  # no chunk paid for
        with MemoryIndex(new) as index:
            assert index.store.identity() == identity  # the index as it was: it answers meanwhile
    finally:
        if watch is not None:
            watch.stop()
        runs.close()
        fake.close()


def test_serve_says_a_held_rebuild_once_not_after_every_sync(workspace, memsift_home) -> None:
    """A new chunking on a hosted provider holds the rebuild for `--force`; an agent writing on meanwhile
    starts a sync per note, and each said the same 400-character line (15 in 30 s of a real `serve`). Once per
    reason now: again after a sync that was not held, then held anew."""
    from api.runs import IndexRuns
    from api.watching import WatchedSyncs
    from core import load_config
    from tests.fake_provider import FakeProvider

    fake = FakeProvider()
    runs = IndexRuns()
    said: queue.Queue[str] = queue.Queue()
    try:
        hosted = f'[embedding]\nprovider = "openai"\nbaseUrl = "{fake.url}"\nmodel = "fake"\n'
        notes = "# Memory\n" + "".join(f"- Note {i}: Dana moved meeting {i} to room {i * 7}.\n" for i in range(20))
        ws = workspace({"MEMORY.md": notes, "memsift.toml": hosted})
        with MemoryIndex(load_config(workspace=ws)) as index:
            index.sync()
        rechunked = hosted + "[chunking]\ntokens = 48\noverlap = 0\n"
        syncs = WatchedSyncs(runs, lambda agent: load_config(workspace=ws), said.put)

        def sync_after_a_note(n: int, toml: str) -> list[str]:
            """The lines said once the watcher's sync of a new note ended (`last` marks the end of the run)."""
            (ws / "memsift.toml").write_text(toml)
            (ws / "memory").mkdir(exist_ok=True)
            (ws / "memory" / f"2026-01-{n:02d}.md").write_text(f"- The heron count was {n}.\n")
            (run,) = syncs.request(["main"])
            runs.wait(run.id, WAIT)
            (last,) = syncs.request(["main"])  # runs after the first one's report, on the one index thread
            runs.wait(last.id, WAIT)
            lines = []
            while not said.empty():
                lines.append(said.get_nowait())
            return [line for line in lines if "waits for `memsift index --force`" in line]

        assert len(sync_after_a_note(1, rechunked)) == 1
        assert sync_after_a_note(2, rechunked) == []
        assert sync_after_a_note(3, rechunked) == []
        assert sync_after_a_note(4, hosted) == []  # the chunking back: synced, nothing held
        assert len(sync_after_a_note(5, rechunked)) == 1  # held anew: said again
    finally:
        runs.close()
        fake.close()


def test_serve_says_how_a_sync_through_a_served_deployment_ended(workspace, memsift_home, applied) -> None:
    """`memsift serve` next to a Prefect server whose worker (or `up`) serves `memsift-sync/main`: the watcher's
    syncs go through that deployment. Their end was reported only for a run of this process (its `done`
    future): through the deployment, a rebuild held for `--force`, or a failed sync, was said nowhere. The
    watcher's tick asks the server, and says it as for a run here (a failed run's error too: `ConfigError:
    ...`, not Prefect's `Flow run encountered an exception: ConfigError: ...`)."""
    from uuid import UUID

    from prefect.flow_engine import run_flow

    from api.runs import IndexRuns
    from api.watching import WatchedSyncs
    from core import load_config
    from flows.sync import sync_flow
    from tests.fake_provider import FakeProvider

    fake = FakeProvider()
    runs = IndexRuns()
    said: list[str] = []
    try:
        hosted = f'[embedding]\nprovider = "openai"\nbaseUrl = "{fake.url}"\nmodel = "fake"\n'
        notes = "# Memory\n" + "".join(f"- Note {i}: Dana moved meeting {i} to room {i * 7}.\n" for i in range(20))
        ws = workspace({"MEMORY.md": notes, "memsift.toml": hosted})  # 48-token chunks: other texts to embed
        with MemoryIndex(load_config(workspace=ws)) as index:
            index.sync()
        (ws / "memsift.toml").write_text(hosted + "[chunking]\ntokens = 48\noverlap = 0\n")
        config = load_config(workspace=ws)
        applied.extend(deployment.apply() for deployment in agent_deployments(config))
        syncs = WatchedSyncs(runs, lambda agent: config, said.append)
        with get_client(sync_client=True) as client:
            for expected in ("sync of main: the index identity changed (chunking)", "sync of main failed: ConfigError"):
                client.get_scheduled_flow_runs_for_deployments(applied[:1])  # a worker's poll: it is served
                (run,) = syncs.request(["main"])
                assert run.deployment == "memsift-sync/main"
                flow_run = client.read_flow_run(UUID(run.id))
                # What the worker does with the run, in this process: the same engine call.
                run_flow(sync_flow, flow_run=flow_run, parameters=flow_run.parameters, return_type="state")
                assert not [line for line in said if line.startswith(expected)]
                syncs.poll()  # the watcher's tick
                assert [line for line in said if line.startswith(expected)], said
                (ws / "memsift.toml").write_text("[chunking]\ntokens = -1\n")  # the next run fails
    finally:
        runs.close()
        fake.close()


def test_serve_runs_a_crashed_sync_through_a_deployment_again(workspace, make_config, applied) -> None:
    """A worker killed with its machine mid-run: the Prefect server marks the run Crashed once its heartbeats
    stop (flows.zombies). The notes it was started for were not indexed and no change may come to start another
    run: the watcher runs it once more. Before, they waited for the next change or the schedule (30 min), every
    search's `degraded` saying a sync was indexing them. A second crash in a row is said and left."""
    from uuid import UUID

    from prefect.states import Crashed

    from api.runs import IndexRuns
    from api.watching import WatchedSyncs

    config = make_config(workspace({"MEMORY.md": "x\n"}), **{"embedding.provider": "none"})  # no model to load
    with MemoryIndex(config) as index:
        index.sync()
    applied.extend(deployment.apply() for deployment in agent_deployments(config))
    runs = IndexRuns()
    said: list[str] = []
    try:
        syncs = WatchedSyncs(runs, lambda agent: config, said.append)
        with get_client(sync_client=True) as client:
            started = []
            for _ in range(2):
                client.get_scheduled_flow_runs_for_deployments(applied[:1])  # a worker's poll: it is served
                (run,) = started or syncs.request(["main"])
                assert run.deployment == "memsift-sync/main"
                client.set_flow_run_state(UUID(run.id), Running(), force=True)  # the worker started it
                client.set_flow_run_state(UUID(run.id), Crashed(message="no heartbeat for 90 s"), force=True)
                started = syncs.poll()  # the watcher's tick
            assert [line for line in said if "crashed" in line] == [
                "sync of main crashed: no heartbeat for 90 s; it runs again",
                "sync of main crashed: no heartbeat for 90 s",
            ]
            assert started == []  # crashed twice in a row: not started again
    finally:
        runs.close()


# ---------------------------------------------------------------- a server's search and its watcher


@pytest.fixture
def watched_agents(
    workspace, make_config
) -> Iterator[tuple[Agents, MemoryWatching, queue.Queue[set[str]], Callable[[Config], None]]]:
    """(Agents over a synced one-note workspace, its MemoryWatching, the watcher's batches, start(config)): the
    batches only queue, so nothing but a search syncs."""
    ws = workspace({"memory/2026-01-01.md": "- The heron count was 12.\n"})
    config = make_config(ws)
    config = replace(config, sync=replace(config.sync, watchDebounceMs=100))
    with MemoryIndex(config) as index:
        index.sync()
    batches: queue.Queue[set[str]] = queue.Queue()
    ticks: queue.Queue[float] = queue.Queue()
    watching = MemoryWatching(batches.put, lambda: ticks.put(time.monotonic()), lambda line: None)
    agents = Agents(config)
    agents.catch_ups.watching = watching

    def start(watched: Config) -> None:
        watching.start({"main": watched})
        while not ticks.empty():
            ticks.get_nowait()
        ticks.get(timeout=WAIT)  # the new thread's first tick: its watches are in place

    try:
        yield agents, watching, batches, start
    finally:
        watching.stop()
        agents.close()


def _first_hit(agents: Agents, query: str) -> str | None:
    results = agents.search(None, query, {"min_score": 0})[1].results
    return results[0].path if results else None


def test_a_server_search_finds_a_note_written_the_moment_before(watched_agents) -> None:
    """A note written and searched for at once, before the watcher has heard of the write (50-100 ms later):
    the search trusted the watcher's count of changes, unchanged yet, and missed the note (0 of 5 through
    `memsift serve`). A small memory is cheap to look at on every search."""
    agents, watching, batches, start = watched_agents
    start(agents.configs["main"])
    assert _first_hit(agents, "heron count") == "memory/2026-01-01.md"  # a look: the watcher's count noted
    ws = agents.configs["main"].workspace
    for n, animal in enumerate(["otter", "badger", "marten"], start=2):
        (ws / "memory" / f"2026-01-0{n}.md").write_text(f"- The {animal} count was {n}.\n")
        assert _first_hit(agents, f"{animal} count") == f"memory/2026-01-0{n}.md"


def test_a_server_search_syncs_first_exactly_when_its_watcher_saw_a_change(
    watched_agents, workspace, monkeypatch
) -> None:
    """`serve` and `up` sync the notes changed since the last sync before a search, but a stat of every note on
    every search costs 84 ms at 10,000 notes: while the watcher covers a large memory (here: any, by
    `LOOK_ALWAYS_FILES`), only a change it saw (or a restart of its watches, which may have missed one) makes
    the search look. Its batches only queue here, so nothing but the search syncs."""
    monkeypatch.setattr("api.catch_up.LOOK_ALWAYS_FILES", 0)
    agents, watching, batches, start = watched_agents
    config = agents.configs["main"]
    ws = config.workspace
    decoy = workspace({"memory/d.md": "d\n"}, name="decoy")
    first_hit = partial(_first_hit, agents)

    assert watching.seen("main") is None  # not watching yet: a search must look for itself
    start(config)
    assert watching.seen("main") is not None
    assert first_hit("heron count") == "memory/2026-01-01.md"
    (ws / "memory" / "2026-01-02.md").write_text("- The otter count was 7.\n")
    assert batches.get(timeout=WAIT) == {"main"}  # seen within SEEN_MS, long before this batch
    assert first_hit("otter count") == "memory/2026-01-02.md"

    # The same agent watched over another folder: a change of this one goes unseen, and the search trusts
    # the watcher, except once after the restart (a change between two watches is seen by neither).
    monkeypatch.setattr("api.catch_up.RECENT_FILES", 0)  # below: a change none of a search's stats covers
    start(replace(config, workspace=decoy.resolve()))
    (ws / "memory" / "2026-01-03.md").write_text("- The marten count was 3.\n")
    assert first_hit("marten count") == "memory/2026-01-03.md"  # the restart's catch-up
    with (ws / "memory" / "2026-01-02.md").open("a") as note:  # in place: its folder's mtime stays
        note.write("- The badger count was 5.\n")

    def badger_found() -> bool:
        return any("badger" in hit.snippet for hit in agents.search(None, "badger count", {"min_score": 0})[1].results)

    assert not badger_found()  # no stat of each note: nothing was seen
    watching.stop()
    assert watching.seen("main") is None
    assert badger_found()  # no watcher: every search looks


def test_a_server_search_trusting_its_watcher_finds_the_note_just_written(
    watched_agents, workspace, monkeypatch
) -> None:
    """Over `LOOK_ALWAYS_FILES` a search trusts the watcher, which hears of a write 50-100 ms late: a note
    appended to and searched for at once was missed (29 searches in 30 on `memsift serve` over 551 notes). The
    search still stats the files an agent writes (`written_files`): the root notes, today's note (indexed yet or
    not) and the indexed files modified last. Here the watcher watches another folder, so it never hears of
    these writes: only those stats can make the search look."""
    monkeypatch.setattr("api.catch_up.LOOK_ALWAYS_FILES", 0)
    agents, watching, batches, start = watched_agents
    config = agents.configs["main"]
    ws = config.workspace
    start(replace(config, workspace=workspace({"memory/d.md": "d\n"}, name="decoy").resolve()))
    first_hit = partial(_first_hit, agents)
    assert first_hit("heron count") == "memory/2026-01-01.md"  # the restart's look

    today = f"memory/{date.today()}.md"
    (ws / today).write_text("- The otter count was 7.\n")  # a daily note the index does not hold yet
    assert first_hit("otter count") == today
    with (ws / today).open("a") as note:
        note.write("- The badger count was 5.\n")
    assert first_hit("badger count") == today
    (ws / "MEMORY.md").write_text("- The marten count was 3.\n")
    assert first_hit("marten count") == "MEMORY.md"
    (ws / "memory" / "2026-01-01.md").write_text("- The heron count was 12.\n- The stoat count was 2.\n")
    assert first_hit("stoat count") == "memory/2026-01-01.md"  # among the indexed files modified last
    assert batches.empty()  # nothing but the searches synced


def test_a_server_search_trusting_its_watcher_finds_a_new_note_in_any_memory_folder(
    watched_agents, workspace, monkeypatch
) -> None:
    """A new note none of `written_files` names (an older date, `memory/projects/x.md`), written and searched
    for at once, waited for the watcher (50-100 ms after the write): through `memsift serve` over 300 notes
    the first search missed it 15 times in 15 (bench/new_note.py). A new note changes its folder's mtime, which
    the search compares: each memory folder is one `stat`. Here the watcher watches another folder, so it never
    hears of these writes."""
    monkeypatch.setattr("api.catch_up.LOOK_ALWAYS_FILES", 0)
    agents, watching, batches, start = watched_agents
    ws = agents.configs["main"].workspace
    start(replace(agents.configs["main"], workspace=workspace({"memory/d.md": "d\n"}, name="decoy").resolve()))
    first_hit = partial(_first_hit, agents)
    assert first_hit("heron count") == "memory/2026-01-01.md"  # the restart's look

    (ws / "memory" / "2025-02-02.md").write_text("- The weasel count was 4.\n")
    assert first_hit("weasel count") == "memory/2025-02-02.md"
    (ws / "memory" / "projects").mkdir()  # a folder of its own: its parent's mtime changes
    (ws / "memory" / "projects" / "otter.md").write_text("- The otter count was 7.\n")
    assert first_hit("otter count") == "memory/projects/otter.md"
    (ws / "memory" / "projects" / "marten.md").write_text("- The marten count was 3.\n")  # in a folder now known
    assert first_hit("marten count") == "memory/projects/marten.md"
    (ws / "memory" / "projects" / "otter.md").unlink()
    assert first_hit("otter count") != "memory/projects/otter.md"  # a deleted note is no hit
    assert batches.empty()  # nothing but the searches synced


def test_serve_over_a_large_memory_finds_a_new_note_elsewhere_searched_at_once(workspace, memsift_home) -> None:
    """Through `memsift serve` over more than `LOOK_ALWAYS_FILES` notes (a search trusts its watcher), a note
    written at a path none of `written_files` names and searched for at once: the first search missed it (0 of
    15 rounds of bench/new_note.py over 300 notes; the watcher hears of a write 50-100 ms late). Its folder's
    mtime now makes the search look. Keyword-only (`embedding.provider = "none"`): no model to load."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    import httpx
    from conftest import stop_process
    from conftest import wait_for as poll

    from api.catch_up import LOOK_ALWAYS_FILES
    from api.prefect_server import free_port

    notes = {f"memory/2025-03-{n % 28 + 1:02d}-{n}.md": f"- The heron count at site {n} was {n}.\n" for n in range(210)}
    assert len(notes) > LOOK_ALWAYS_FILES
    ws = workspace(notes | {"memsift.toml": '[embedding]\nprovider = "none"\n'})
    memsift = str(Path(sys.executable).with_name("memsift"))
    env = os.environ | {"MEMSIFT_HOME": str(memsift_home), "PREFECT_API_URL": ""}
    subprocess.run([memsift, "--workspace", str(ws), "index", "--no-prefect"], env=env, check=True, timeout=300)
    port = free_port()
    server = subprocess.Popen(
        [memsift, "--workspace", str(ws), "serve", "--port", str(port)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as http:

            def paths(query: str) -> list[str]:
                answer = http.post("/v1/search", json={"query": query, "minScore": 0}).json()
                return [hit["path"] for hit in answer["results"]]

            def ready() -> bool:
                assert server.poll() is None, "memsift serve exited"
                try:
                    return http.get("/readyz").status_code == 200
                except httpx.TransportError:
                    return False

            poll(ready, 120, "memsift serve to be ready")
            assert paths("heron site 7")  # a look: the watcher's count noted
            (ws / "memory" / "projects").mkdir()
            (ws / "memory" / "projects" / "otter.md").write_text("- The otter count was 7.\n")
            assert paths("otter")[:1] == ["memory/projects/otter.md"]
            (ws / "memory" / "2025-02-02.md").write_text("- The weasel count was 4.\n")
            assert paths("weasel")[:1] == ["memory/2025-02-02.md"]
    finally:
        stop_process(server)
