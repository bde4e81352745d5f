"""The `memsift` console script. It imports the CLI inside a guard: the CLI's imports (numpy, core: ~0.3 s)
run before `api.cli.main` can catch anything, so a Ctrl-C in that window printed a traceback. Here it ends as
an interrupted run does, in one line with exit status 130."""

from __future__ import annotations

import signal
import sys


def main() -> int:
    try:
        from api.cli import main as cli
    except KeyboardInterrupt:
        print("memsift: error: interrupted", file=sys.stderr)
        return 128 + signal.SIGINT
    return cli()
