"""A terminal progress bar for `memsift index`, fed by the sync's progress events (core/progress.py):
chunks embedded of chunks to embed, the rate and the time left, updated after every embedding request."""

from __future__ import annotations

from collections.abc import Iterator
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
