"""The parser class of the `memsift` command line (api/arguments.py): argparse, with usage errors that name
their cause (a query read as an option, a query of several words not in quotes), show the usage of the command
they are about, and under `--json` print the problem document REST would answer (SPEC section 3); and
`--version`, looked up only when asked.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

import msgspec

from api.argument_types import usage_status
from api.schemas import MAX_LINES, Problem
from core import MemsiftError
from core.timefilter import window


class Parser(argparse.ArgumentParser):
    #: The arguments being parsed: `--version` looks for a `--json` that may come after it.
    argv: Sequence[str] = ()
    #: The top level's commands, by name: an error about a command's arguments shows that command's usage.
    commands: dict[str, argparse.ArgumentParser]

    #: The whole command line (the top level's arguments; a command's parser sees only what follows its name).
    command_line: Sequence[str] = ()

    def error(self, message: str) -> None:  # usage errors: exit 2 with the usage line
        if message.endswith("required: query") and (dashed := self._unknown_option()):
            message += f" ({dashed!r} was read as an option: a query that starts with '-' comes after '--', as in "
            message += f"memsift search -- {dashed!r})"
        self.print_usage(sys.stderr)
        print(f"memsift: error: {message}", file=sys.stderr)
        if _asks_json(Parser.command_line):  # SPEC section 3: stdout holds one JSON document, REST's 400 (or 413)
            problem = Problem.of(usage_status(sys.exc_info()[1]), message)
            print(json.dumps(msgspec.to_builtins(problem), ensure_ascii=False, indent=2))
        raise SystemExit(2)

    def parse_known_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:  # type: ignore[override]
        """Each parser keeps its own arguments (a subcommand's are what follows its name) for `_unknown_option`."""
        self.argv = sys.argv[1:] if args is None else list(args)
        return super().parse_known_args(self.argv, namespace)

    def _unknown_option(self) -> str | None:
        """The first argument that looks like an option this parser lacks: `memsift search -coffee` (or a flag
        looked up in the notes, `--force-with-lease`) is argparse's `required: query`, which names no cause."""
        for arg in self.argv:
            if arg == "--":
                return None
            name = arg.split("=", 1)[0]
            if (
                arg.startswith("-")
                and len(arg) > 1
                and not any(o.startswith(name) for o in self._option_string_actions)
            ):
                return arg
        return None

    def parse_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:  # type: ignore[override]
        """The global flags' defaults, set here since they are suppressed where they were not given (they
        may come before the command or after it)."""
        self.argv = Parser.command_line = sys.argv[1:] if args is None else list(args)
        parsed, extras = self.parse_known_args(self.argv, namespace)
        # A command's arguments are refused with that command's usage; the top level's named no option of it.
        command = self.commands[parsed.command]
        if extras:  # and `search deploy failure` is told how to ask that
            message = f"unrecognized arguments: {' '.join(extras)}"
            if parsed.command == "search" and not any(e.startswith("-") for e in extras):
                words = " ".join([parsed.query, *extras])
                message += f" (a query of several words is one argument, in quotes: memsift search {words!r})"
            command.error(message)
        for name, value in (
            ("json", False),
            ("debug", False),
            ("config", None),
            ("agent", "main"),
            ("workspace", None),
        ):
            setattr(parsed, name, getattr(parsed, name, value))
        if parsed.command == "get" and parsed.json and (parsed.lines or 0) > MAX_LINES:  # REST's 400, as a usage error
            command.error(f"argument --lines: at most {MAX_LINES} with --json, got {parsed.lines}; read on with --from")
        if getattr(parsed, "after", None) and getattr(parsed, "before", None):
            try:  # each bound is checked as it is parsed; a window they leave empty is as much a usage error
                window(parsed.after, parsed.before)
            except MemsiftError as exc:
                command.error(str(exc))
        return parsed


def _asks_json(argv: Sequence[str]) -> bool:
    """Whether a command line has `--json` (or an abbreviation argparse takes for it) before any `--`."""
    options = argv[: list(argv).index("--")] if "--" in argv else argv
    return any(len(arg) > 2 and "--json".startswith(arg) for arg in options)


class Version(argparse.Action):
    """`--version`, looked up only when asked: reading the package metadata costs ~70 ms, and every command
    builds this parser. With `--json` (before or after it) a JSON document, as every `--json` prints."""

    def __call__(self, parser: argparse.ArgumentParser, *args: Any) -> None:
        from importlib.metadata import version

        number = version("memsift")
        as_json = _asks_json(getattr(parser, "argv", ()))  # `--js` too, as every command takes it
        print(json.dumps({"version": number}, indent=2) if as_json else f"memsift {number}")
        parser.exit()
