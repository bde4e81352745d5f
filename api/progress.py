"""Progress of a sync as people see it, fed by the sync's progress events (core/progress.py): the terminal bar of
`memsift index` (chunks embedded of chunks to embed, the rate and the time left, updated after every embedding
request), the count of questions of `train-ranker` and `eval`, and the lines a server (`memsift serve`,
`memsift mcp`) writes on stderr while a search runs an agent's first index, which has no terminal and may take
minutes."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from core import MemoryIndex
from core.progress import Progress, ProgressEvent
from core.sync_plan import SyncReport
from core.words import counted


@contextmanager
def progress_bar(enabled: bool) -> Iterator[Progress | None]:
    if not enabled:
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, TextColumn, TimeElapsedColumn
    from rich.progress import Progress as Bar

    # On stderr, the stream the caller checked is a terminal: stdout stays clean for pipes.
    columns = (TextColumn("indexing"), BarColumn(), TextColumn("{task.fields[figures]}"), TimeElapsedColumn())
    with Bar(*columns, console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task("sync", total=None, figures="scanning")

        def update(event: ProgressEvent) -> None:
            bar.update(task, completed=event.fraction, total=1.0, figures=event.describe())

        yield update


@contextmanager
def count_bar(what: str, enabled: bool) -> Iterator[Callable[[int, int], None] | None]:
    """`what 120/760`, a bar and the time so far, on stderr: `train-ranker` searching every question of its
    files, which on locomo-dev's 760 took minutes with nothing on the terminal."""
    if not enabled:
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn
    from rich.progress import Progress as Bar

    columns = (TextColumn(what), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TimeRemainingColumn())
    with Bar(*columns, console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(what, total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield update


def first_index_note(agent: str, done: int) -> str:
    """Why a search is about to take long (`memsift search`'s note, a server's line): the agent was never
    indexed, or its first index was interrupted after `done` files."""
    if done:
        return f"the first index of agent {agent} was interrupted after {counted(done, 'file')}: completing it"
    return f"agent {agent} is not indexed yet: indexing it"


#: Who else hears of a first index's progress: the client of the request that runs it, when it asked for progress
#: (MCP's `_meta.progressToken`, api.mcp). A context variable: the request's worker thread copies it.
REQUEST_PROGRESS: ContextVar[Progress | None] = ContextVar("memsift_request_progress", default=None)

#: A server's progress line during a first index comes this long after the previous line: a 2-note first index
#: says only that it started and ended, one of 229 notes (470 s on a loaded machine) about every 10 s.
LINE_SECONDS = 10.0


class FirstIndexLines:
    """A server's stderr lines while a search runs an agent's first index: one when it starts, one every
    `LINE_SECONDS` with the figures of the terminal bar (`120/480 chunks embedded, 35.2 chunks/s, ETA 10 s`),
    one when it ends (files, chunks, seconds) or fails. A client's log (an MCP client keeps the server's
    stderr) or the terminal then tells minutes of work from a hang: both servers said nothing for 470 s."""

    def __init__(
        self,
        say: Callable[[str], None],
        agent: str,
        clock: Callable[[], float] = time.monotonic,
        when: str = "before answering a search",
    ) -> None:
        """`when` ends the first line: a search's first index runs "before answering a search", the server's own
        at start-up (api.first_index) says so."""
        self._say = say
        self._clock = clock
        self._agent = agent
        self._when = when
        self._last = 0.0
        self._planned = False

    def attach(self, index: MemoryIndex) -> None:
        index.before_first_index = self.started
        index.first_index_progress = self.progress
        index.after_first_index = self.ended

    def started(self, done: int) -> None:
        self._last = self._clock()
        self._planned = False
        self._say(f"{first_index_note(self._agent, done)} {self._when}")

    def progress(self, event: ProgressEvent) -> None:
        if (client := REQUEST_PROGRESS.get()) is not None:
            client(event)
        now = self._clock()
        if not self._planned:  # the first event, once the workspace is scanned: how much there is to do
            self._planned = True
            chunks = f", {counted(event.chunksTotal, 'chunk')} to embed" if event.chunksTotal else ""
            self._say(f"first index of {self._agent}: {counted(event.filesTotal, 'file')} to index{chunks}")
        elif now - self._last >= LINE_SECONDS:
            self._last = now
            files = f"{event.filesDone}/{event.filesTotal} files written"
            figures = f", {event.describe()}" if event.chunksTotal else ""
            self._say(f"first index of {self._agent}: {files}{figures}, {event.seconds:.0f} s")

    def ended(self, report: SyncReport | BaseException) -> None:
        if isinstance(report, BaseException):
            self._say(f"first index of {self._agent} stopped: {type(report).__name__}: {report}")
            return
        r = report
        figures = f"{counted(r.added, 'file')}, {counted(r.chunksWritten, 'chunk')} ({r.chunksEmbedded} embedded)"
        self._say(f"first index of {self._agent} done: {figures}, {r.seconds:.1f} s")
