"""A search request's arguments checked before any index opens: the query, maxResults, minScore, the time
bounds and the path prefix.

Apart from `core.search` because the REST and CLI argument parsers and `memsift eval` refuse a bad request
at the door with the same messages, without running a search.
"""

from __future__ import annotations

import time
import unicodedata

from . import timefilter
from .errors import SearchError
from .sources import as_typed


def check_request(
    query: str,
    max_results: int | None,
    min_score: float | None,
    after: str | None = None,
    before: str | None = None,
    path_prefix: str | None = None,
) -> None:
    # Blank: nothing a reader could see, so control and format characters alone ("\x00", a zero-width space)
    # count as blank too; they searched before, for hits with no relation to anything.
    if not isinstance(query, str) or all(ch.isspace() or unicodedata.category(ch) in ("Cc", "Cf") for ch in query):
        raise SearchError("query: must not be blank")
    _check_text("query", query)
    if max_results is not None and not 1 <= max_results <= 100:
        raise SearchError(f"maxResults: {max_results} is out of range [1, 100]")
    if min_score is not None and not 0.0 <= min_score <= 1.0:
        raise SearchError(f"minScore: {min_score} is out of range [0, 1]")
    timefilter.window(after, before, now=time.time())
    if path_prefix:
        check_path_prefix(path_prefix)


def _check_text(name: str, text: str) -> None:
    """Half a UTF-16 pair is no character: it comes from bytes that are not UTF-8 on a command line (Python
    keeps them as lone surrogates) or a `"\\ud800"` escape in a query file. The embedder refused such a query,
    so the search degraded to keywords with a TypeError for its reason; REST and MCP refuse it at the door."""
    if any("\ud800" <= ch <= "\udfff" for ch in text):
        raise SearchError(f"{name}: holds a lone surrogate (bytes that are not UTF-8), which is no character")


def check_path_prefix(path_prefix: str) -> None:
    """No indexed path starts with `/` or `~` or climbs with `..`, or holds bytes that are not UTF-8 (a sync
    skips such a name): such a prefix answered "No matches." in silence."""
    _check_text("pathPrefix", path_prefix)
    if path_prefix.startswith(("/", "~")) or ".." in path_prefix.split("/"):
        raise SearchError(
            f"pathPrefix: {path_prefix!r} is not workspace-relative; give it as hits name paths (memory/)"
        )
    if "\\" in path_prefix:  # `memory\2026-11` from Windows: a sync skips such a name, `get` refuses it
        raise SearchError(f"pathPrefix: {path_prefix!r} holds a backslash; use '/' as hits name paths")
    if "//" in path_prefix:  # `memory//`, a typo or two joined parts: no indexed path holds an empty name
        raise SearchError(f"pathPrefix: {path_prefix!r} has an empty folder name (//); give it as hits name paths")
    if "." in as_typed(path_prefix).split("/")[:-1]:  # `memory/./`: no indexed path names a folder `.`
        raise SearchError(f"pathPrefix: {path_prefix!r} has a folder named '.'; give it as hits name paths")
