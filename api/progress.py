"""Terminal progress bars: `memsift index`'s, fed by the sync's progress events (core/progress.py):
chunks embedded of chunks to embed, the rate and the time left, updated after every embedding request."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from core.progress import Progress, ProgressEvent


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
