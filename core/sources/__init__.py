"""Sources: the kinds of file an index holds, and which of them the configuration turns on.

`memory` (`memory.py`: MEMORY.md, memory/**/*.md, extraPaths; always on) and `sessions` (`sessions.py`: an
agent's JSONL transcripts, opt-in). Each implements `base.Source`; the sync, `get` and the fan-out of a
rebuild go through it. A new source is one file plus one line in `SOURCES`; `sources` takes its choices
from that table.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..registry import load
from .base import FileEntry, Source, read_memory_file

if TYPE_CHECKING:
    from ..config_types import Config

__all__ = ["SOURCES", "FileEntry", "Source", "active", "as_typed", "owner", "read_memory_file"]

#: `sources` entry -> "module:class" built from the Config; also the order in which a sync scans them.
SOURCES = {
    "memory": "core.sources.memory:MemorySource",
    "sessions": "core.sources.sessions:SessionsSource",
}


def active(config: Config) -> dict[str, Source]:
    """The sources `config.sources` turns on, by name, in the order of `SOURCES`."""
    return {name: load(target)(config) for name, target in SOURCES.items() if name in config.sources}


def as_typed(rel: str) -> str:
    """A workspace-relative path or prefix as the index names it when a shell completed it: `./MEMORY.md` is
    `MEMORY.md`, `./memory/` is `memory/` (no indexed path starts with `./`)."""
    while rel.startswith("./"):
        rel = rel[2:]
    return rel


def owner(config: Config, rel: str) -> Source | None:
    """The active source whose naming rules `rel` follows, or None."""
    return next((source for source in active(config).values() if source.owns(rel)), None)
