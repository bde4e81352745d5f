"""The `memsift` command line (SPEC section 3): parse, run the command's handler, turn what it raised into
an exit code.

Exit codes: 0 success (also "no matches"), 1 failure with a one-line reason on stderr, 2 usage error.
No traceback unless `--debug`. With `--json`, stdout holds one JSON document and nothing else.
The grammar is api/arguments.py; the handlers are api/cli_index.py (index, search, get, status),
api/cli_quality.py (eval, train-ranker) and api/cli_servers.py (serve, up, mcp, ratelimit, model), each
given the run's `api.cli_command.Command`.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable, Sequence

from api.arguments import parser
from api.cli_command import Command
from api.cli_index import cmd_get, cmd_index, cmd_search, cmd_status
from api.cli_quality import cmd_eval, cmd_train_ranker
from api.cli_servers import cmd_mcp, cmd_model, cmd_ratelimit, cmd_serve, cmd_up
from api.cli_signals import Interrupted, exit_now, interruptible
from api.schemas import status_of
from core import MemsiftError
from core.config_home import home_error, home_problem, memsift_home

# Prefect's console chatter (its "Crash detected!" and failure tracebacks among it) would interleave with our
# one-line errors; runs still log everything to the Prefect API and UI.
_QUIET_PREFECT = {
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL": "CRITICAL",
    "PREFECT_LOGGING_HANDLERS_CONSOLE_FLOW_RUNS_LEVEL": "CRITICAL",
    "PREFECT_LOGGING_HANDLERS_CONSOLE_TASK_RUNS_LEVEL": "CRITICAL",
}

_COMMANDS: dict[str, Callable[[Command], int]] = {
    "index": cmd_index,
    "search": cmd_search,
    "get": cmd_get,
    "status": cmd_status,
    "eval": cmd_eval,
    "train-ranker": cmd_train_ranker,
    "serve": cmd_serve,
    "up": cmd_up,
    "mcp": cmd_mcp,
    "ratelimit": cmd_ratelimit,
    "model": cmd_model,
}

#: Commands that handle SIGINT and SIGTERM themselves: a server stops gracefully (uvicorn's handlers).
_SERVERS = {"serve", "mcp", "up"}

_AFTER_INTERRUPT = {"index": "the index is as the last completed step left it; the next `memsift index` completes it"}


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    command = Command(args)
    if not args.debug:
        for key, value in _QUIET_PREFECT.items():
            os.environ.setdefault(key, value)
    # Nothing outside MEMSIFT_HOME (and the workspace): Prefect keeps its profiles, results and logs there, not in
    # ~/.prefect, and onnxruntime writes its device id under $XDG_CACHE_HOME (default ~/.cache).
    home = memsift_home()
    if problem := home_problem(home):
        return command.fail(f"MEMSIFT_HOME: {home} {problem}")
    os.environ.setdefault("PREFECT_HOME", str(home / "prefect"))
    os.environ.setdefault("XDG_CACHE_HOME", str(home / "cache"))
    try:
        if args.command in _SERVERS:
            return _COMMANDS[args.command](command)
        with interruptible():
            return _COMMANDS[args.command](command)
    except MemsiftError as exc:
        return command.fail(str(exc), status_of(exc))
    except Interrupted as exc:
        why = f"interrupted by {signal.Signals(exc.signum).name}; {_AFTER_INTERRUPT.get(args.command, '')}"
        command.fail(why, None)
        exit_now(128 + exc.signum)
    except KeyboardInterrupt:  # Ctrl-C outside the guard (a server's start-up, before its own handlers): 130
        command.fail("interrupted", None)
        return 128 + signal.SIGINT
    except BrokenPipeError:  # the reader went away (`memsift get ... | head`): stop quietly, as `cat` would
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the exit's flush cannot fail again
        return 128 + signal.SIGPIPE
    except Exception as exc:  # anything else is a bug or an environment problem: one line unless --debug
        return command.fail(home_error(exc, home) or f"{type(exc).__name__}: {exc}")


if __name__ == "__main__":
    sys.exit(main())
