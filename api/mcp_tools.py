"""The MCP tools `memory_search` and `memory_get`: their schemas, the checks of their arguments, and the calls
on leased indexes (`MemoryTools`). Every failure comes back as a tool result with `unavailable: true` and a
`reason`, never a protocol error (api.mcp)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

import mcp_types as types

from api.agents import DEFAULT_AGENT, Agents
from api.catch_up import CatchUps
from api.schemas import MAX_LINES, query_too_large
from core import Config, MemsiftError

SEARCH_DESCRIPTION = (
    "Search the agent's long-term memory (MEMORY.md, memory/*.md notes and, when enabled, past session "
    "transcripts). Call this BEFORE answering anything about prior work, decisions, dates, people, "
    "preferences or to-dos, even when you think you remember. Returns the best matching snippets, each with "
    "path, startLine, endLine, score and a citation; a score estimates (0 to 1) how likely the hit is relevant, "
    "comparably across searches. Read more around a hit with memory_get. For a period, pass "
    "after/before (a date, or a duration back from now such as 7d). An empty list "
    "means nothing relevant is stored. If the result has unavailable=true, memory could not be searched: say "
    "so rather than guessing."
)
GET_DESCRIPTION = (
    "Read exact lines of one memory file (a path returned by memory_search, e.g. memory/2026-05-14.md or "
    "sessions/<id>.jsonl). Use it after memory_search to read only the lines you need around a hit. "
    f"`from` is the 1-based first line (default 1), `lines` how many (default: the rest, at most {MAX_LINES}; "
    "totalLines says how many the file has). A file that does not exist reads as empty text; paths outside "
    "the agent's memory are refused (unavailable=true)."
)

SEARCH_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "description": "what to look for, in the user's words"},
        "maxResults": {"type": "integer", "minimum": 1, "maximum": 100, "description": "default: search.maxResults"},
        "minScore": {"type": "number", "minimum": 0, "maximum": 1, "description": "default: search.minScore"},
        "after": {
            "type": "string",
            "description": "only notes dated at or after this: YYYY-MM-DD, an ISO date-time, today, yesterday, "
            "or a duration back from now such as 12h, 7d, 2w, 3m (months)",
        },
        "before": {"type": "string", "description": "only notes dated at or before this (same forms as after)"},
        "evergreen": {
            "type": "boolean",
            "description": "keep undated files (MEMORY.md, undated notes) when filtering by date (default true)",
        },
        "agent": {"type": "string", "description": "whose memory (set per server: the configured agents)"},
    },
    "required": ["query"],
    "additionalProperties": False,
}
GET_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": {"type": "string", "description": "workspace-relative path, as memory_search returns it"},
        "from": {"type": "integer", "minimum": 1, "description": "first line, 1-based (default 1)"},
        "lines": {
            "type": "integer",
            "minimum": 0,
            "maximum": MAX_LINES,
            "description": f"number of lines (default: the rest, at most {MAX_LINES})",
        },
        "agent": {"type": "string", "description": "whose memory (set per server: the configured agents)"},
    },
    "required": ["path"],
    "additionalProperties": False,
}


def tools_for(agents: list[str], default: str) -> list[types.Tool]:
    """The two tools, their `agent` argument listing the configured agents (an `enum`, so that a model picks
    one rather than inventing a name) and naming the default."""

    def schema(base: dict[str, Any]) -> dict[str, Any]:
        agent = {
            "type": "string",
            "enum": agents,
            "description": f"whose memory: one of the configured agents (default {default}, this server's own)",
        }
        return {**base, "properties": {**base["properties"], "agent": agent}}

    return [
        types.Tool(
            name="memory_search",
            description=SEARCH_DESCRIPTION,
            input_schema=schema(SEARCH_SCHEMA),
            annotations=types.ToolAnnotations(title="Search memory", read_only_hint=True, open_world_hint=False),
        ),
        types.Tool(
            name="memory_get",
            description=GET_DESCRIPTION,
            input_schema=schema(GET_SCHEMA),
            annotations=types.ToolAnnotations(title="Read memory lines", read_only_hint=True, open_world_hint=False),
        ),
    ]


class ToolArgumentError(MemsiftError, ValueError):
    """An argument is missing, unknown, of the wrong type or out of REST's bounds; the message names it."""

    status = 400  # as REST answers the same argument


_KINDS: dict[str, tuple[type, ...]] = {"string": (str,), "integer": (int,), "number": (int, float), "boolean": (bool,)}


def _argument(args: dict[str, Any], schema: dict[str, Any], name: str) -> Any:
    """The argument checked against its JSON type in `schema` (booleans are not numbers), or None if absent. An
    `integer` is, as JSON Schema has it, any number without a fraction: 2.0 is 2 (REST's api/strict.py too)."""
    value = args.get(name)
    if value is None:
        if name in schema["required"]:
            raise ToolArgumentError(f"{name}: required")
        return None
    kind = schema["properties"][name]["type"]
    if kind == "integer" and isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) != (kind == "boolean") or not isinstance(value, _KINDS[kind]):
        raise ToolArgumentError(f"{name}: expected {kind}, got {value!r}")
    return value


def _check_names(args: dict[str, Any], schema: dict[str, Any]) -> None:
    unknown = sorted(set(args) - set(schema["properties"]))
    if unknown:
        expected = ", ".join(schema["properties"])
        raise ToolArgumentError(f"unknown argument(s): {', '.join(unknown)}; expected {expected}")


class MemoryTools:
    """The two tools over the agents of one configuration; `call` never raises."""

    def __init__(self, config: Config, agent: str = DEFAULT_AGENT, configs: Mapping[str, Config] | None = None) -> None:
        """`config` is the main agent's (its `agents.<id>` are served too, or `configs`); `agent` answers a call
        naming none. An unknown `agent` is a ConfigError, before anything is served."""
        self.agents = Agents(config, agent, configs)
        self._running = 0  # calls in flight, for `settled`
        self._changed = threading.Condition()

    @property
    def catch_ups(self) -> CatchUps:
        return self.agents.catch_ups

    def settled(self, timeout: float) -> bool:
        """Whether the calls running, if any, have ended within `timeout` s (a search's first index or its
        catch-up sync may take minutes)."""
        with self._changed:
            return self._changed.wait_for(lambda: self._running == 0, timeout)

    def close(self) -> None:
        self.agents.close()

    def memory_search(self, args: dict[str, Any]) -> dict[str, Any]:
        _check_names(args, SEARCH_SCHEMA)
        query = _argument(args, SEARCH_SCHEMA, "query")
        if why := query_too_large(query):  # REST's 413: the same bound
            raise ToolArgumentError(why)
        min_score = _argument(args, SEARCH_SCHEMA, "minScore")
        evergreen = _argument(args, SEARCH_SCHEMA, "evergreen")
        options = {
            "max_results": _argument(args, SEARCH_SCHEMA, "maxResults"),
            "min_score": None if min_score is None else float(min_score),
            "after": _argument(args, SEARCH_SCHEMA, "after"),
            "before": _argument(args, SEARCH_SCHEMA, "before"),
            "evergreen": evergreen is not False,
        }
        # REST's path: a leased index, the notes changed since the last sync synced first (api.catch_up)
        _, response = self.agents.search(_argument(args, SEARCH_SCHEMA, "agent"), query, options)
        return response.to_dict()

    def memory_get(self, args: dict[str, Any]) -> dict[str, Any]:
        _check_names(args, GET_SCHEMA)
        path = _argument(args, GET_SCHEMA, "path")
        start = _argument(args, GET_SCHEMA, "from")
        count = _argument(args, GET_SCHEMA, "lines")
        if count is not None and count > MAX_LINES:  # the REST bound: one answer never carries a whole 8 MiB file
            raise ToolArgumentError(f"lines: at most {MAX_LINES}, got {count}; read on with `from`")
        with self.agents.lease(_argument(args, GET_SCHEMA, "agent")) as index:
            return index.get(path, 1 if start is None else start, MAX_LINES if count is None else count)

    def call(self, name: str, args: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        """(the tool's answer, whether it is an error); errors are `{unavailable: true, reason}`."""
        handlers: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
            "memory_search": self.memory_search,
            "memory_get": self.memory_get,
        }
        handler = handlers.get(name)
        with self._changed:
            self._running += 1
        try:
            if handler is None:
                raise ToolArgumentError(f"no tool named {name!r}; the tools are {', '.join(handlers)}")
            return handler(args), False
        except Exception as exc:  # the agent gets the reason as data; nothing escapes as a protocol error
            reason = str(exc) if isinstance(exc, MemsiftError) else f"{type(exc).__name__}: {exc}"
            answer: dict[str, Any] = {"unavailable": True, "reason": reason}
            if name == "memory_search":
                answer["results"] = []
            status = getattr(exc, "status", None)
            if status is not None:
                answer["status"] = status
            return answer, True
        finally:
            with self._changed:
                self._running -= 1
                self._changed.notify_all()
