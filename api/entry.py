"""The `memsift` console script. It imports the CLI inside a guard: the CLI's imports (numpy, core: ~0.3 s)
run before `api.cli.main` can catch anything, so a Ctrl-C in that window printed a traceback. Here it ends as
an interrupted run does, in one line with exit status 130."""

from __future__ import annotations

import signal
import sys


def main() -> int:
    if sys.stdout is None:  # started with its standard output closed (`>&-`): as `cat` says, not an AttributeError
        if sys.stderr is not None:
            print("memsift: error: standard output is closed: nowhere to write the answer", file=sys.stderr)
        return 1
    try:
        from api.cli import main as cli
    except KeyboardInterrupt:
        print("memsift: error: interrupted", file=sys.stderr)
        return 128 + signal.SIGINT
    return cli()
