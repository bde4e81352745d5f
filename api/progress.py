"""A terminal progress bar for `memsift index`, fed by the sync's progress callback."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from core.indexer import Progress


@contextmanager
def progress_bar(enabled: bool) -> Iterator[Progress | None]:
    if not enabled:
        yield None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress as Bar, TextColumn, TimeElapsedColumn

    with Bar(TextColumn("indexing"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), transient=True) as bar:
        task = bar.add_task("files", total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield update
