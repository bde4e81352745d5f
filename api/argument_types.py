"""The argparse types of the `memsift` command line (api/arguments.py): each refuses a bad value as a usage
error (exit 2, with the usage line) before any work, as REST answers it a 400, or a 413 for a value too large
(`TooLarge`, `usage_status`). The checks are core's and REST's own, so the CLI and REST refuse the same values.
"""

from __future__ import annotations

import argparse

from api.schemas import query_too_large
from core import MemsiftError
from core.config_home import agent_id_problem
from core.config_values import read_number
from core.search_request import check_path_prefix, check_request
from core.timefilter import window


class TooLarge(argparse.ArgumentTypeError):
    """A value refused for its size: REST answers it 413, not 400."""

    status = 413


def usage_status(error: BaseException | None) -> int:
    """The HTTP status of a usage error: 400, or the `status` of the argparse type's error that caused it
    (argparse raises its own error while handling the type's, which stays as its `__context__`)."""
    while error is not None:
        if isinstance(status := getattr(error, "status", None), int):
            return status
        error = error.__context__
    return 400


def bounded(kind: type, lo: float, hi: float | None = None):
    """An argparse type: a number of `kind` in [lo, hi] (the ranges of search.maxResults / search.minScore),
    or at least lo without hi: a value out of range is a usage error (exit 2), like a value of the wrong type."""

    def parse(text: str):
        try:
            value = read_number(kind, text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {'an integer' if kind is int else 'a number'}") from None
        if hi is None and value < lo:
            raise argparse.ArgumentTypeError(f"must be {lo} or more, got {text}")
        if hi is not None and not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"{text} is out of range [{lo}, {hi}]")
        return value

    return parse


def query(text: str) -> str:
    """An argparse type for search's QUERY: a blank one is a usage error (exit 2), as no query is; so is one over
    REST's 4 KiB, so that `--json` answers what REST answers."""
    try:
        check_request(text, None, None)
    except MemsiftError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("query: ")) from None
    if why := query_too_large(text):
        raise TooLarge(why.removeprefix("query: "))
    return text


def nonblank(text: str) -> str:
    """An argparse type for get's PATH, --config, --workspace and --host: a blank one is a usage error (exit 2), as
    a blank query is. `--workspace "$AGENT_DIR"` with the variable unset indexed the current folder in silence."""
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be blank")
    return text


def agent(text: str) -> str:
    """An argparse type for --agent: an id no configuration can have (`--agent " "`, `--agent "$AGENT"` with
    the variable unset) is a usage error (exit 2), as a blank --config is; an unknown one is the config's."""
    if why := agent_id_problem(text):
        raise argparse.ArgumentTypeError(why)
    return text


def prefix(text: str) -> str:
    """An argparse type for --path-prefix: one no hit can have (`/memory`, `../x`) is a usage error (exit 2)."""
    try:
        check_path_prefix(text)
    except MemsiftError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("pathPrefix: ")) from None
    return text


def when(text: str) -> str:
    """An argparse type for --after / --before: a bound that names no time is a usage error (exit 2), as a bad
    --max-results is; the window itself is built, with the same words, by the search."""
    try:
        window(after=text)
    except MemsiftError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("after: ")) from None
    return text


def setting(text: str) -> tuple[str, str]:
    """KEY=VALUE for --set/--compare: a dotted config key and its value as the environment would give it."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value.strip()
