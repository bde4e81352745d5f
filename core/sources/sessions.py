"""The `sessions` source: session transcripts, opt-in (`sources = ["memory", "sessions"]`).

An agent's past conversations are JSON Lines files in `sessions.dir`, one event a line (OpenClaw writes
`{"type": "message", "message": {"role": ..., "content": [{"type": "text", "text": ...}]}}`; a bare
`{"role": ..., "content": ...}` is read too). Only user and assistant messages are searchable. A transcript
is indexed as its *rendering*: line N of the rendering is JSONL line N as `User: <text>` or
`Assistant: <text>` (the message on one line), and an empty line for every other event or for a line that
is not valid JSON (skipped, with a warning). So chunks, search hits and `get` all speak of the transcript's
own JSONL line numbers, and `get` on a transcript returns the rendering of those lines.

In the index a transcript is `sessions/<file name>.jsonl`: no memory file ends in `.jsonl`, so the names can
never collide. Transcripts grow with every turn; re-reading one per message would cost more than it finds,
so a transcript already indexed is read again only once it grew by `sessions.deltaBytes` bytes or
`sessions.deltaMessages` lines (OpenClaw's rule; a transcript that shrank or was rewritten is re-read at once).
"""

from __future__ import annotations

import hashlib
import json
import os
import stat as statmod
from pathlib import Path
from typing import Any

from ..chunking import Chunk, chunk_text, split_lines
from ..config_types import Config
from .base import FileEntry

PREFIX = "sessions/"
SUFFIX = ".jsonl"
ROLES = {"user": "User", "assistant": "Assistant"}
TEXT_PARTS = ("text", "input_text", "output_text")


def enabled(config: Config) -> bool:
    return config.sessions is not None


def is_session_path(config: Config, rel: str) -> bool:
    """Whether `rel` names a transcript by the index's naming (it may not exist)."""
    name = rel[len(PREFIX) :]
    return enabled(config) and rel.startswith(PREFIX) and name.endswith(SUFFIX) and "/" not in name and name != SUFFIX


def transcript_path(config: Config, rel: str) -> Path:
    """Where the transcript an index path names lives: in `sessions.dir`, by its name."""
    assert config.sessions is not None
    return config.sessions.dir / rel[len(PREFIX) :]


class SessionsSource:
    """JSONL transcripts in `sessions.dir`, indexed and shown as their rendering, re-read once grown enough."""

    name = "sessions"

    def __init__(self, config: Config) -> None:
        self.config = config

    def discover(self) -> tuple[list[FileEntry], list[str], list[str]]:
        return scan_sessions(self.config)

    def due(self, entry: FileEntry, indexed_size: int) -> bool:
        return grew_enough(self.config, entry, indexed_size)

    def path(self, rel: str) -> Path:
        return transcript_path(self.config, rel)

    def chunk(self, rel: str, text: str, warnings: list[str]) -> list[Chunk]:
        return chunk_transcript(rel, text, self.config.chunking.tokens, self.config.chunking.overlap, warnings)

    def owns(self, rel: str) -> bool:
        return is_session_path(self.config, rel)

    def resolve(self, rel: str) -> Path:
        return self.path(rel)  # by name only (no '/' in it), opened without following a symlink

    def render(self, text: str) -> str:
        return transcript_text(text)[0]


def scan_sessions(config: Config) -> tuple[list[FileEntry], list[str], list[str]]:
    """The transcripts (`*.jsonl` regular files at the top of `sessions.dir`, no symlinks), warnings, and the
    folder when it exists but cannot be listed (its transcripts stay indexed as they were)."""
    if config.sessions is None:
        return [], [], []
    folder = config.sessions.dir
    try:
        entries = list(os.scandir(folder))
    except FileNotFoundError:
        return [], [f"sessions.dir {folder} does not exist: no transcripts indexed"], []
    except OSError as exc:
        problem = f"sessions.dir {folder}: cannot be listed: {exc.strerror or exc}; the transcripts indexed are kept"
        return [], [problem], [PREFIX.rstrip("/")]
    files: list[FileEntry] = []
    warnings: list[str] = []
    for entry in entries:
        if not entry.name.endswith(SUFFIX) or entry.name == SUFFIX:
            continue
        try:
            st = entry.stat(follow_symlinks=False)
            entry.name.encode("utf-8")
        except OSError as exc:
            warnings.append(f"skipped transcript {entry.name}: {exc.strerror or exc}")
            continue
        except UnicodeEncodeError:
            warnings.append(f"skipped transcript {entry.name!r}: the file name is not valid UTF-8")
            continue
        if statmod.S_ISREG(st.st_mode):
            files.append(FileEntry(PREFIX + entry.name, st.st_size, st.st_mtime_ns, "sessions"))
    files.sort(key=lambda f: f.path)
    return files, warnings, []


def grew_enough(config: Config, entry: FileEntry, indexed_size: int) -> bool:
    """Whether an indexed transcript should be read again: it grew past a delta, or it did not simply grow."""
    assert config.sessions is not None
    added = entry.size - indexed_size
    if added <= 0:  # same size with a new mtime, or shrunk: rewritten, the content hash decides
        return True
    if added >= config.sessions.deltaBytes:
        return True
    try:
        fd = os.open(transcript_path(config, entry.path), os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        with os.fdopen(fd, "rb") as fh:
            fh.seek(indexed_size)
            appended = fh.read(added)
    except OSError:
        return True  # let the read in the sync report the problem
    return appended.count(b"\n") >= config.sessions.deltaMessages


def _message_line(record: Any) -> str:
    """`User: text` / `Assistant: text` for a user or assistant message; '' for any other event."""
    if not isinstance(record, dict):
        return ""
    message = record.get("message") if isinstance(record.get("message"), dict) else record
    label = ROLES.get(str(message.get("role")))
    if label is None:
        return ""
    content = message.get("content")
    if isinstance(content, list):
        parts = [p.get("text") for p in content if isinstance(p, dict) and p.get("type") in TEXT_PARTS]
        content = " ".join(p for p in parts if isinstance(p, str))
    if not isinstance(content, str) or not content.strip():
        return ""
    return f"{label}: {' '.join(content.split())}"


def transcript_text(text: str) -> tuple[str, list[int]]:
    """The rendering of a JSONL transcript (line N for JSONL line N) and the numbers of its bad lines."""
    lines: list[str] = []
    bad: list[int] = []
    for number, line in enumerate(split_lines(text), start=1):
        if not line.strip():
            lines.append("")
            continue
        try:
            lines.append(_message_line(json.loads(line)))
        except ValueError:  # not JSON (a torn last line while the agent writes, a stray edit)
            bad.append(number)
            lines.append("")
    return "".join(line + "\n" for line in lines), bad  # every line ends in LF: a final empty line counts


def chunk_transcript(path: str, text: str, tokens: int, overlap: int, warnings: list[str]) -> list[Chunk]:
    """The rendering's chunks, each trimmed of the empty lines at its edges so that its line range starts and
    ends on a message; bad lines are reported in `warnings`."""
    rendering, bad = transcript_text(text)
    if bad:
        shown = ", ".join(map(str, bad[:5])) + (", ..." if len(bad) > 5 else "")
        warnings.append(f"{path}: skipped {len(bad)} line(s) that are not valid JSON (line {shown})")
    chunks = []
    for chunk in chunk_text(rendering, tokens, overlap):
        # Empty lines are never pieces of a split long line: each is one line number.
        lines = chunk.text.split("\n")
        lead = next(i for i, line in enumerate(lines) if line)  # a chunk always holds some text
        tail = next(i for i, line in enumerate(reversed(lines)) if line)
        body = "\n".join(lines[lead : len(lines) - tail])
        chunks.append(
            Chunk(chunk.start_line + lead, chunk.end_line - tail, body, hashlib.sha256(body.encode()).hexdigest())
        )
    return chunks
