"""Ctrl-C and SIGTERM during a `memsift` command (api/cli.py): the command unwinds as Ctrl-C unwinds it
(transactions roll back, a rebuild's temp file goes, a flow run is marked crashed), then the process exits
with 128 + the signal's number, without waiting for threads that hold an HTTP request.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM during `memsift index`: unwinds like Ctrl-C (transactions roll back, a rebuild's temp
    file goes, a flow run is marked crashed), then the process exits with 128 + the signal's number."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


#: The signals `interruptible` caught in this process, for `stop_if_interrupted`: a signal is the process's,
#: and the process ends once it came (`exit_now`).
_RECEIVED: list[int] = []


@contextmanager
def interruptible() -> Iterator[None]:
    """SIGINT and SIGTERM raise `Interrupted` in the main thread while inside (the default SIGTERM would kill
    the process on the spot: a flow run left Running in the UI, no word to the user). Prefect's engine,
    unwinding a task run the signal cut, may raise another error in its place ("ValueError: Task run is not
    set"): that is the interrupt all the same."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: object) -> None:
        _RECEIVED.append(signum)
        raise Interrupted(signum)

    previous = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
        stop_if_interrupted()
    except Exception as exc:
        if _RECEIVED:
            raise Interrupted(_RECEIVED[0]) from exc
        raise
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def stop_if_interrupted() -> None:
    """Raise the interrupt a broad `except Exception` swallowed: a C extension's module init (numpy,
    onnxruntime) that a Ctrl-C cuts raises ImportError in its place, which a search took for a failed
    embedder and answered from keywords. Called before a command prints its answer, so none is printed."""
    if _RECEIVED:
        raise Interrupted(_RECEIVED[0])


def exit_now(code: int) -> None:
    """Exit without joining worker threads: every index write is on the main thread, which has unwound by now
    (rolled back, temp files removed), while threads with an HTTP request in flight would hold the exit for
    as long as the request takes (a provider's timeout is 120 s)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
