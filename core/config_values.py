"""How a configuration value is read and checked: one parser per kind of value, each `(key, value) -> value`
raising a ConfigError that names the key (SPEC section 2: an unknown key or a bad value is a clear error naming
the key, before any work starts). core/config.py declares which key takes which parser."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from .errors import ConfigError

Parser = Callable[[str, Any], Any]


def text(key: str, v: Any) -> str:
    if not isinstance(v, str):
        raise ConfigError(f"{key}: expected a string, got {v!r}")
    return v


def host(key: str, v: Any) -> str:
    """An address to listen on: a blank one was Python's empty address, every interface, shown as "http://:8000"."""
    if not text(key, v).strip():
        raise ConfigError(f"{key}: must not be blank (0.0.0.0 for every IPv4 address)")
    return v


def http_url(key: str, v: Any) -> str:
    """An endpoint's address: `localhost:8080/v1` (no scheme) or `ftp://...` was taken, and every request then
    failed as a dropped connection, retried with backoff. The value is not shown: it may hold a password."""
    parts = urlsplit(text(key, v).strip())
    if parts.scheme.lower() not in ("http", "https") or not parts.netloc:
        raise ConfigError(f"{key}: expected an http:// or https:// URL, such as http://localhost:8080/v1 (not shown)")
    return v


def secret(key: str, v: Any) -> str:
    """A key's string, or an error that names its type only: a mistyped secret (`key = ["sk-..."]`) must not
    reach a terminal or a log through the error (SPEC section 2)."""
    if not isinstance(v, str):
        kind = _TOML_KINDS.get(type(v), type(v).__name__)
        raise ConfigError(f"{key}: expected a string, got {kind} (not shown: the key is a secret)")
    return v


#: A value's kind in TOML's words, for an error that may not show the value ("got a int" said Python's).
_TOML_KINDS = {list: "an array", dict: "a table", int: "an integer", float: "a float", bool: "a boolean"}


class Text(str):
    """A value given as text (an environment variable, an override such as eval's `--set`): number and boolean
    keys parse it. A TOML file's values are typed, so a string there where a number or a boolean is due
    (`minScore = "0.3"`) is a type error naming the key, as it is in a REST body (api/strict.py)."""


def _typed(key: str, v: Any, expected: str) -> None:
    if isinstance(v, str) and not isinstance(v, Text):
        raise ConfigError(f"{key}: expected {expected}, got the string {v!r}")


#: The words a boolean variable takes, the true ones first; `on` and `off` (search.citations) among them.
_WORDS = ("1", "true", "yes", "on", "0", "false", "no", "off")


def boolean(key: str, v: Any, expected: str = "true or false") -> bool:
    if isinstance(v, bool):
        return v
    _typed(key, v, expected)
    if isinstance(v, str) and v.strip().lower() in _WORDS:
        return v.strip().lower() in _WORDS[:4]
    raise ConfigError(f"{key}: expected {expected}, got {v!r}")


def boolean_or_auto(key: str, v: Any) -> bool | str:
    """A boolean or "auto", whose error names all three (it said "true or false" of `rerank.enabled`)."""
    return "auto" if isinstance(v, str) and v.strip().lower() == "auto" else boolean(key, v, 'true, false or "auto"')


def read_number(kind: type, text: str) -> Any:
    """`kind(text)` for the numbers people write: ValueError for those only Python reads (`int("2_0")` is 20,
    `int("٢")` is 2), from the environment as from the command line."""
    if "_" in text or not text.isascii():
        raise ValueError(text)
    return kind(text)


def number(kind: type, lo: float | None = None, hi: float | None = None) -> Parser:
    def parse(key: str, v: Any) -> Any:
        expected = "an integer" if kind is int else "a number"
        if isinstance(v, bool):
            raise ConfigError(f"{key}: expected {expected}, got {v!r}")
        _typed(key, v, expected)
        try:
            n = read_number(kind, v) if isinstance(v, str) else kind(v)
        except (TypeError, ValueError, OverflowError):  # int() of "nan" or inf
            raise ConfigError(f"{key}: expected {expected}, got {v!r}") from None
        if not math.isfinite(n):  # TOML has nan and inf: NaN passes every range check, and no key means infinity
            raise ConfigError(f"{key}: expected a finite number, got {v!r}")
        if kind is int and isinstance(v, float) and v != n:
            raise ConfigError(f"{key}: expected an integer, got {v!r}")
        if (lo is not None and n < lo) or (hi is not None and n > hi):
            raise ConfigError(f"{key}: {n} is out of range [{lo}, {hi if hi is not None else '∞'}]")
        return n

    parse.bounds = (kind, lo, hi)  # type: ignore[attr-defined]  # docs/configuration.md's range column is checked against it
    return parse


def optional(parse: Parser) -> Parser:
    def parse_optional(key: str, v: Any) -> Any:
        return None if v is None or v == "" else parse(key, v)

    parse_optional.inner = parse  # type: ignore[attr-defined]  # what a set value takes (its bounds, for the docs' check)
    return parse_optional


def choice(*options: str) -> Parser:
    def parse(key: str, v: Any) -> str:
        if v not in options:
            raise ConfigError(f"{key}: {v!r} is not one of {', '.join(options)}")
        return v

    return parse


def on_off(key: str, v: Any) -> str:
    """`on` or `off` (SPEC section 2), or a TOML boolean: `citations = false` is the file's natural spelling."""
    if isinstance(v, bool) or (isinstance(v, Text) and v.strip().lower() in _WORDS):
        return "on" if boolean(key, v) else "off"  # MEMSIFT_SEARCH_CITATIONS=0 as MEMSIFT_SYNC_WATCH=0
    return choice("on", "off")(key, v)


def text_list(key: str, v: Any) -> tuple[str, ...]:
    if isinstance(v, Text):  # from the environment: comma separated
        v = [s.strip() for s in v.split(",") if s.strip()]
    elif isinstance(v, str):  # a TOML string is no list: "a,b" was split at its comma, "docs" taken as a list
        name = key.rsplit(".", 1)[-1]
        raise ConfigError(f"{key}: expected a list of strings, got the string {v!r}; write {name} = [{toml_string(v)}]")
    if not isinstance(v, list) or not all(isinstance(s, str) for s in v):
        raise ConfigError(f"{key}: expected a list of strings, got {v!r}")
    if any(not s.strip() for s in v):  # extraPaths [""] indexed every .md of the workspace, README.md and all
        raise ConfigError(f"{key}: an entry is blank, got {v!r}")
    return tuple(v)


def toml_string(text: str) -> str:
    """`text` as a TOML basic string (JSON's escapes are TOML's)."""
    return json.dumps(text, ensure_ascii=False)


def text_map(key: str, v: Any) -> dict[str, str]:
    # Header values are often secrets: errors name the header, never its value.
    if isinstance(v, Text):  # a variable holds no TOML table: a JSON object (any other text could never do)
        try:
            v = json.loads(v)
        except ValueError:
            raise ConfigError(f'{key}: expected a JSON object of strings, {{"X-Org": "..."}} (not shown)') from None
    if not isinstance(v, dict):
        raise ConfigError(f"{key}: expected a table of strings")
    for name, value in v.items():
        if not isinstance(value, str):  # the header after the key's name: "(rerank.headers).X-Org" read badly
            raise ConfigError(f"{key}: header {name!r}: expected a string")
    return dict(v)
