"""Labels of hand-written question sets (bench/abstention/make_answerable.py, bench/calibration/make_tiny.py):
the one line of a workspace's notes that holds a snippet. Standard library only: the writers run on any
Python."""

from __future__ import annotations

from pathlib import Path


def line_of(workspace: Path, snippet: str, query: str) -> tuple[str, int]:
    """(path relative to `workspace`, 1-based line) of the only line of its Markdown files holding `snippet`;
    SystemExit naming `query` when none or several do, so a label never points at the wrong line."""
    found = [
        (f.relative_to(workspace).as_posix(), i)
        for f in sorted(workspace.rglob("*.md"))
        for i, line in enumerate(f.read_text(encoding="utf-8").splitlines(), start=1)
        if snippet in line
    ]
    if len(found) != 1:
        raise SystemExit(f"{query!r}: {snippet!r} occurs {len(found)} times in {workspace}")
    return found[0]
