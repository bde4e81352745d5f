"""Where memsift keeps its files: the home folder, each agent's index file in it, and the agent id rule that
keeps that file's name unambiguous.

Apart from the loader (core/config.py) because the CLI checks the home and the REST API an agent id without
loading a configuration.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping
from pathlib import Path


def db_path(home: Path, agent: str, workspace: Path) -> Path:
    """`<home>/memory/<agent>.<folder name>-<hash>.sqlite`: one index per agent and workspace (SPEC section 1).
    The folder's name keeps the file recognisable; a hash of its resolved path keeps two folders of the same
    name apart. Agent ids hold no '.', so the name reads back unambiguously."""
    digest = hashlib.sha256(str(workspace).encode("utf-8", "surrogateescape")).hexdigest()[:12]
    name = "".join(c if c.isascii() and (c.isalnum() or c in "-_") else "_" for c in workspace.name)[:40]
    return home / "memory" / f"{agent}.{name or 'root'}-{digest}.sqlite"


def legacy_db_path(home: Path, agent: str) -> Path:
    """Where indexes were before they were bound to their workspace (core.binding adopts them)."""
    return home / "memory" / f"{agent}.sqlite"


def memsift_home(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    return Path(env.get("MEMSIFT_HOME") or Path.home() / ".memsift").expanduser()


def home_problem(home: Path) -> str | None:
    """Why `home` cannot hold memsift's files, found without creating anything (a command refused for a bad
    configuration leaves no trace); else the first write there failed as "NotADirectoryError: [Errno 20]..."."""
    if home.exists():
        return None if home.is_dir() else "is a file, not a folder"
    ancestor = next(p for p in home.parents if p.exists())
    return None if ancestor.is_dir() else f"cannot be created: {ancestor} is a file"


def home_error(exc: Exception, home: Path) -> str | None:
    """An OS error on a file of MEMSIFT_HOME, said as the home's problem: a read-only home failed every command
    with "OSError: [Errno 30] Read-only file system: '<home>/memory/main.ws-<hash>.sqlite.swap'", one that cannot
    be made with "FileNotFoundError: [Errno 2] ...", naming neither the variable nor what to change."""
    if not isinstance(exc, OSError) or not exc.filename or not exc.strerror:
        return None
    path = Path(os.fsdecode(exc.filename)).absolute()
    home = home.absolute()
    if path == home:
        return f"MEMSIFT_HOME: {home} cannot be created: {exc.strerror}"
    if home in path.parents:
        return f"MEMSIFT_HOME: {home}: {path}: {exc.strerror} (memsift writes its indexes and locks there)"
    return None


#: An agent id, as a JSON Schema `pattern` too (the OpenAPI document gives it, so a client learns the rule).
AGENT_ID_PATTERN = "^[A-Za-z0-9_-]{1,64}$"


def agent_id_problem(agent: str) -> str | None:
    """Why `agent` can never name an agent (`" "`, `"a b"`, 65 characters), or None when it can: one rule for
    the configuration's `agents.<id>`, `--agent` and the `agent` of a REST request."""
    if re.fullmatch(AGENT_ID_PATTERN, agent):
        return None
    return f"{agent!r} is not a valid agent id (letters, digits, '-', '_'; at most 64)"
