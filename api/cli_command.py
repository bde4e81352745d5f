"""One run of a `memsift` command as its handler sees it (api/cli.py): the parsed arguments, the configuration
they name, and what goes to stdout and stderr.

SPEC section 3: with `--json`, stdout holds one JSON document and nothing else, a failure's included (the
problem document REST would answer); without it, a failure is one line on stderr. `Command.printed` keeps the
count at one: it belongs to the run, so a process that runs several commands (tests do) starts each afresh.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager, redirect_stdout
from typing import Any

import msgspec

from api.schemas import Problem
from core import Config, load_config


class Command:
    """The parsed arguments of one command and its stdout, which has had its one JSON document once `printed`:
    a failure after it (a server's, once its addresses are printed) prints no second one."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.printed = False

    def config(self, **overrides: Any) -> Config:
        """The configuration `--config`, `--workspace` and `--agent` name, with `overrides` (dotted keys) on top."""
        args = self.args
        return load_config(args.config, workspace=args.workspace, agent=args.agent, overrides=overrides)

    @property
    def json_on_stdout(self) -> bool:
        """Whether stdout is for one JSON document: `--json`, but for `mcp` over stdio, whose stdout is the
        protocol."""
        return getattr(self.args, "json", False) and getattr(self.args, "transport", None) != "stdio"

    def print_json(self, doc: Any) -> None:
        self.printed = True
        sys.stdout.write(json.dumps(doc, ensure_ascii=False, indent=2) + "\n")

    def fail(self, message: str, status: int | None = 500) -> int:
        """The one-line reason on stderr, and under `--json` the problem document REST would answer with
        `status` on stdout (SPEC section 3: one JSON document there; it was empty, and `json.loads` of it
        failed). A command that printed its document already (`status --deep` with a failed probe) prints no
        second one; an interrupt (`status` None) prints none: the command was stopped, not answered, and its
        exit status (130) says so. Returns the exit code, 1."""
        if self.args.debug and sys.exc_info()[1] is not None:  # a failure found without an exception has none
            import traceback

            traceback.print_exc()
        message = message.rstrip("; ")
        print(f"memsift: error: {message}", file=sys.stderr)
        if status is not None and self.json_on_stdout and not self.printed:
            self.print_json(msgspec.to_builtins(Problem.of(status, message)))
        return 1

    @contextmanager
    def addresses_as_json(self) -> Iterator[Callable[[dict[str, str]], None] | None]:
        """`serve`, `up` and `mcp --http` with `--json`: their lines go to stderr and stdout holds one JSON
        document, the addresses, once they answer (a supervisor reads it); it held their lines, none of them
        JSON. Yields the callback that prints it (None without `--json`)."""
        if not self.args.json:
            yield None
            return
        out = sys.stdout

        def ready(doc: dict[str, str]) -> None:
            self.printed = True
            out.write(json.dumps(doc) + "\n")
            out.flush()

        with redirect_stdout(sys.stderr):
            yield ready


#: Control characters but tab and newline (C0, DEL, C1): a terminal acts on them.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def for_reader(text: str) -> str:
    """`text` as a terminal should show it: a note can hold escape sequences (clear the screen, retitle the
    window, OSC 52 writes the clipboard) that printing them as they are would run. Each control character is
    shown as its escape (`\\x1b`); a pipe or a file gets the text exactly."""
    if not sys.stdout.isatty():
        return text
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)
