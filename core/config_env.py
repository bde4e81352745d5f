"""The environment's configuration: `MEMSIFT_<SECTION>_<KEY>` variables as dotted keys, each with the variable
that set it, so a bad value's error names what the user actually set.

Apart from the loader (core/config.py): the spellings a key accepts are their own rules, read from the key table.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping

from .config_home import agent_id_problem
from .config_schema import SCHEMA
from .errors import ConfigError


def _env_key(name: str) -> str:
    return name.replace("_", "").replace(".", "").lower()


_ENV_KEYS = {_env_key(k): k for k in SCHEMA}
_SECTIONS = {k.split(".")[0].lower() for k in SCHEMA if "." in k}


def _tables() -> dict[str, list[str]]:
    """Each table (`search`, `search.mmr`), spelled as a variable may spell it, with its keys."""
    tables: dict[str, list[str]] = {}
    for key in SCHEMA:
        for end in (i for i, c in enumerate(key) if c == "."):
            tables.setdefault(_env_key(key[:end]), []).append(key)
    return tables


_TABLES = _tables()
_NOT_CONFIG_ENV = {"MEMSIFT_HOME", "MEMSIFT_CONFIG", "MEMSIFT_RERANK_API_KEY"}  # the last: a secret, not a key


def loose_key(name: str) -> str | None:
    """The key `name` spells as a variable may (any case, `_` or `.` anywhere): `search.max_results` is
    search.maxResults; None when it spells none."""
    return _ENV_KEYS.get(_env_key(name))


def env_overrides(env: Mapping[str, str]) -> dict[str, tuple[str, str]]:
    """`MEMSIFT_SEARCH_MAX_RESULTS` or `MEMSIFT_SEARCH_MAXRESULTS` -> `search.maxResults`: (value, variable),
    the variable kept so that a bad value's error names what the user actually set. A variable set to the empty
    string is unset, as an empty MEMSIFT_CONFIG, MEMSIFT_HOME or OPENAI_API_KEY is (`MEMSIFT_API_KEY=${KEY:-}`
    in a compose file dropped the file's `api.key`: a server without a key)."""
    found: dict[str, tuple[str, str]] = {}
    for name, value in env.items():
        if not name.startswith("MEMSIFT_") or name in _NOT_CONFIG_ENV or value == "":
            continue
        rest = name[len("MEMSIFT_") :]
        key = _ENV_KEYS.get(_env_key(rest))
        if key is not None:
            _found(found, key, value, name)
        elif rest.lower().partition("_")[0] == "agents":  # agents.<id>.workspace: MEMSIFT_AGENTS_<ID>_WORKSPACE
            agent = re.fullmatch(r"agents_(\w+)_workspace", rest, re.IGNORECASE)
            if agent is None or agent_id_problem(agent[1]):
                raise ConfigError(f"{name}: no such configuration key (MEMSIFT_AGENTS_<ID>_WORKSPACE)")
            _found(found, f"agents.{agent[1].lower()}.workspace", value, name)
        elif inner := _TABLES.get(_env_key(rest)):  # MEMSIFT_SEARCH_MMR=true: the table, not its `enabled`
            listed = " or ".join(_variable(k) for k in inner[:4]) + (", ..." if len(inner) > 4 else "")
            raise ConfigError(f"{name}: no such configuration key; it names a table: set {listed}")
        elif rest.split("_")[0].lower() in _SECTIONS:
            raise ConfigError(f"{name}: no such configuration key{_did_you_mean(rest)}")
        elif meant := _did_you_mean(rest):  # MEMSIFT_EXTRAPATH=docs was ignored: the docs were never indexed
            raise ConfigError(f"{name}: no such configuration key{meant}")
    return found


def _did_you_mean(rest: str) -> str:
    """`; did you mean MEMSIFT_EXTRA_PATHS?` for a variable spelled near a key's, else "". Other MEMSIFT_
    variables (MEMSIFT_HOME, MEMSIFT_MODEL_CACHE, MEMSIFT_ONNX_THREADS...) are near none."""
    close = difflib.get_close_matches(_env_key(rest), _ENV_KEYS, n=1, cutoff=0.85)
    return f"; did you mean {_variable(_ENV_KEYS[close[0]])}?" if close else ""


def _variable(key: str) -> str:
    """The variable the docs write for `key`: search.maxResults is MEMSIFT_SEARCH_MAX_RESULTS."""
    return "MEMSIFT_" + re.sub(r"(?<=[a-z])(?=[A-Z])", "_", key).replace(".", "_").upper()


def _found(found: dict[str, tuple[str, str]], key: str, value: str, name: str) -> None:
    """One key's value from the environment. Two spellings of it (`MEMSIFT_SEARCH_MAXRESULTS` and
    `MEMSIFT_SEARCH_MAX_RESULTS`) that disagree are an error: the environment's order picked one in silence."""
    if key in found and found[key][0] != value:
        first, second = sorted((found[key][1], name))
        raise ConfigError(f"{first} and {second} set {key} to different values; keep one")
    found[key] = (value, name)
