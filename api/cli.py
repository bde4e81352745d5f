"""The `memsift` command line (SPEC section 3): parse, call core or flows, print.

Exit codes: 0 success (also "no matches"), 1 failure with a one-line reason on stderr, 2 usage error.
No traceback unless `--debug`. With `--json`, stdout holds one JSON document and nothing else.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext, redirect_stdout
from pathlib import Path
from typing import Any

import msgspec

from api.arguments import parser
from api.schemas import MAX_LINES, Problem, status_of
from core import Config, MemoryIndex, MemsiftError, load_config
from core.config_home import home_error, home_problem, memsift_home
from core.estimate import summary
from core.sources.memory import nothing_found
from core.words import counted

# Prefect's console chatter (its "Crash detected!" and failure tracebacks among it) would interleave with our
# one-line errors; runs still log everything to the Prefect API and UI.
_QUIET_PREFECT = {
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL": "CRITICAL",
    "PREFECT_LOGGING_HANDLERS_CONSOLE_FLOW_RUNS_LEVEL": "CRITICAL",
    "PREFECT_LOGGING_HANDLERS_CONSOLE_TASK_RUNS_LEVEL": "CRITICAL",
}


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM during `memsift index`: unwinds like Ctrl-C (transactions roll back, a rebuild's temp
    file goes, a flow run is marked crashed), then the process exits with 128 + the signal's number."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


#: The signals `_interruptible` caught in this process, for `_stop_if_interrupted`.
_RECEIVED: list[int] = []


@contextmanager
def _interruptible() -> Iterator[None]:
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
        _stop_if_interrupted()
    except Exception as exc:
        if _RECEIVED:
            raise Interrupted(_RECEIVED[0]) from exc
        raise
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _stop_if_interrupted() -> None:
    """Raise the interrupt a broad `except Exception` swallowed: a C extension's module init (numpy,
    onnxruntime) that a Ctrl-C cuts raises ImportError in its place, which a search took for a failed
    embedder and answered from keywords. Called before a command prints its answer, so none is printed."""
    if _RECEIVED:
        raise Interrupted(_RECEIVED[0])


#: Commands that handle SIGINT and SIGTERM themselves: a server stops gracefully (uvicorn's handlers).
_SERVERS = {"serve", "mcp", "up"}


def main(argv: Sequence[str] | None = None) -> int:
    _PRINTED.clear()  # a process may run several commands (tests do)
    args = parser().parse_args(argv)
    if not args.debug:
        for key, value in _QUIET_PREFECT.items():
            os.environ.setdefault(key, value)
    # Nothing outside MEMSIFT_HOME (and the workspace): Prefect keeps its profiles, results and logs there, not in
    # ~/.prefect, and onnxruntime writes its device id under $XDG_CACHE_HOME (default ~/.cache).
    home = memsift_home()
    if problem := home_problem(home):
        return _fail(args, f"MEMSIFT_HOME: {home} {problem}")
    os.environ.setdefault("PREFECT_HOME", str(home / "prefect"))
    os.environ.setdefault("XDG_CACHE_HOME", str(home / "cache"))
    try:
        if args.command in _SERVERS:
            return _COMMANDS[args.command](args)
        with _interruptible():
            return _COMMANDS[args.command](args)
    except MemsiftError as exc:
        return _fail(args, str(exc), status_of(exc))
    except Interrupted as exc:
        why = f"interrupted by {signal.Signals(exc.signum).name}; {_AFTER_INTERRUPT.get(args.command, '')}"
        _fail(args, why, None)
        _exit_now(128 + exc.signum)
    except KeyboardInterrupt:  # Ctrl-C outside the guard (a server's start-up, before its own handlers): 130
        _fail(args, "interrupted", None)
        return 128 + signal.SIGINT
    except BrokenPipeError:  # the reader went away (`memsift get ... | head`): stop quietly, as `cat` would
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the exit's flush cannot fail again
        return 128 + signal.SIGPIPE
    except Exception as exc:  # anything else is a bug or an environment problem: one line unless --debug
        return _fail(args, home_error(exc, home) or f"{type(exc).__name__}: {exc}")


_AFTER_INTERRUPT = {"index": "the index is as the last completed step left it; the next `memsift index` completes it"}


def _exit_now(code: int) -> None:
    """Exit without joining worker threads: every index write is on the main thread, which has unwound by now
    (rolled back, temp files removed), while threads with an HTTP request in flight would hold the exit for
    as long as the request takes (a provider's timeout is 120 s)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _fail(args: argparse.Namespace, message: str, status: int | None = 500) -> int:
    """The one-line reason on stderr, and under `--json` the problem document REST would answer with `status`
    on stdout (SPEC section 3: one JSON document there; it was empty, and `json.loads` of it failed). A command
    that printed its document already (`status --deep` with a failed probe) prints no second one; an interrupt
    (`status` None) prints none: the command was stopped, not answered, and its exit status (130) says so."""
    if args.debug and sys.exc_info()[1] is not None:  # a failure found without an exception has no traceback
        import traceback

        traceback.print_exc()
    message = message.rstrip("; ")
    print(f"memsift: error: {message}", file=sys.stderr)
    if status is not None and _json_on_stdout(args) and not _PRINTED:
        _print_json(msgspec.to_builtins(Problem.of(status, message)))
    return 1


def _json_on_stdout(args: argparse.Namespace) -> bool:
    """Whether stdout is for one JSON document: `--json`, but for `mcp` over stdio, whose stdout is the protocol."""
    return getattr(args, "json", False) and getattr(args, "transport", None) != "stdio"


def _config(args: argparse.Namespace, **overrides: Any):
    return load_config(args.config, workspace=args.workspace, agent=args.agent, overrides=overrides)


#: Set once a JSON document went to stdout: a failure after it (a server's, once its addresses are printed)
#: prints no second one.
_PRINTED: list[bool] = []


def _print_json(doc: Any) -> None:
    _PRINTED.append(True)
    sys.stdout.write(json.dumps(doc, ensure_ascii=False, indent=2) + "\n")


#: Control characters but tab and newline (C0, DEL, C1): a terminal acts on them.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _for_reader(text: str) -> str:
    """`text` as a terminal should show it: a note can hold escape sequences (clear the screen, retitle the
    window, OSC 52 writes the clipboard) that printing them as they are would run. Each control character is
    shown as its escape (`\\x1b`); a pipe or a file gets the text exactly."""
    if not sys.stdout.isatty():
        return text
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def cmd_index(args: argparse.Namespace) -> int:
    config = _config(args)  # validate before starting Prefect
    if args.dry_run:
        return _dry_run(args, config)
    from api.indexing import sync_agent
    from api.progress import progress_bar

    with progress_bar(enabled=not args.json and sys.stderr.isatty()) as progress:
        if args.no_prefect:
            with MemoryIndex(config) as index:
                index.require_embedder()
                report, where = index.sync(force=args.force, progress=progress), None
        else:
            report, where = sync_agent(config, force=args.force, progress=progress)
    for warning in report.warnings:  # under --json too, as search's: a mistyped --workspace is said where seen
        print(f"warning: {warning}", file=sys.stderr)
    if args.json:
        _print_json(report.to_dict())
    else:
        _print_report(config, report)
    if where is not None:  # the run's page, or why it has none: on stderr, under --json too (a script's log)
        print(where.note, file=sys.stderr)
    return 0


def _print_report(config: Any, r: Any) -> None:
    """SPEC's summary of a run (core.sync_plan.SyncReport); its warnings are on stderr already."""
    if r.plan:
        print(f"plan: {summary(r.plan)}")
    kinds = (("first index of", r.firstIndex), ("rebuilt", r.rebuilt), ("rebuild held for", r.rebuildHeld))
    done = next((kind for kind, applies in kinds if applies), "synced")
    print(f"{done} agent {config.agent} ({config.workspace})")
    print(
        f"files: {r.filesScanned} scanned, {r.added} added, {r.changed} changed, {r.removed} removed"
        + (f", {r.skipped} skipped" if r.skipped else "")
    )
    print(f"chunks: {r.chunksEmbedded} embedded, {r.cacheHits} cache hits, {r.chunksWritten} written")
    print(f"seconds: {r.seconds:.2f}")


def _dry_run(args: argparse.Namespace, config: Any) -> int:
    with MemoryIndex(config) as index:
        plan = index.plan(force=args.force).to_dict()
    if args.json:
        _print_json(plan)
        return 0
    kind = "a rebuild" if plan["rebuild"] else "a sync"
    print(f"dry run: {kind} of agent {config.agent} ({config.workspace}); nothing was embedded")
    if plan["rebuildHeld"]:
        print(f"note: `memsift index` does nothing now: {plan['rebuildHeld']}; the figures are those of --force")
    print(f"files: {plan['filesToRead']} to read, {plan['filesToEmbed']} with text to embed")
    print(f"chunks: {plan['chunksToEmbed']} to embed, {plan['cacheHits']} cache hits")
    print(f"estimate: {summary(plan)}")
    return 0


def cmd_search(args: argparse.Namespace) -> int:
    from api.catch_up import CatchUps
    from api.progress import first_index_note

    config = _config(args)
    with MemoryIndex(config) as index:
        # files changed since the last sync: no hit may point at lines they no longer hold (REST's, MCP's too)
        unsynced = CatchUps().before_search(index)
        index.before_first_index = lambda done: print(  # minutes for thousands of notes: not a silent wait
            f"note: {first_index_note(config.agent, done)} before searching", file=sys.stderr, flush=True
        )
        response = index.search(
            args.query,
            max_results=args.max_results,
            min_score=args.min_score,
            mode=args.mode,
            path_prefix=args.path_prefix,
            after=args.after,
            before=args.before,
            evergreen=args.evergreen,
            explain=args.explain,
            rerank=args.rerank,
        )
        empty = not response.results and not response.partial and not sum(index.store.stats()["files"].values())
    _stop_if_interrupted()  # not a keyword answer blaming the embedder for a Ctrl-C
    unsynced.tell(response)
    if response.warning:  # said once the search answered (a search that fails too says why in its own line);
        print(f"note: {response.warning}", file=sys.stderr)  # on stderr with --json too, as get's warning
    # a mistyped --workspace: say so rather than a bare "No matches." (also under --json, on stderr), once: the
    # first search's sync said it in its warning already
    if empty and (why := nothing_found(config.workspace)) not in (response.warning or ""):
        print(f"warning: {why}", file=sys.stderr)
    if args.json:
        _print_json(response.to_dict())
        return 0
    if response.degraded:
        print(f"note: {response.degraded}", file=sys.stderr)
    if response.abstained:  # SPEC's "No matches." on stdout; why, on stderr as the degraded note is
        print(f"note: no relevant hit: {response.abstained}", file=sys.stderr)
    if not response.results:
        print("No matches.")
        return 0
    blocks = []
    for hit in response.results:
        head = f"{hit.score:.3f} {hit.path}:{hit.startLine}-{hit.endLine}"
        if hit.scores:
            head += "  (" + ", ".join(f"{k} {v:.3f}" for k, v in hit.scores.items()) + ")"
        # search.citations = "on" (SPEC section 2): each hit ends with its source, to quote in an answer.
        blocks.append(f"{head}\n{hit.snippet}" + (f"\nSource: {hit.citation}" if hit.citation else ""))
    print(_for_reader("\n\n".join(blocks)))
    if args.explain and response.timings:
        stages = ", ".join(f"{k} {v:.1f}" for k, v in response.timings.items())
        print(f"\ntook {response.tookMs:.1f} ms ({stages})")
    return 0


def cmd_get(args: argparse.Namespace) -> int:
    config = _config(args)
    # `--json` is REST's answer to the same request (SPEC section 3), so it stops at REST's MAX_LINES; the plain
    # text is for a person or a pipe (`| less`), and prints the rest of the file, as `cat` would.
    count = MAX_LINES if args.json and args.lines is None else args.lines
    doc = MemoryIndex(config).get(args.path, args.start, count)
    if "warning" in doc:  # on stderr with --json too: U+FFFD in the text is otherwise silent
        print(f"warning: {doc['path']}: {doc['warning']}", file=sys.stderr)
    if args.json:
        _print_json(doc)
    elif doc["lines"]:  # a range of blank lines prints them; only an empty range prints nothing
        print(_for_reader(doc["text"]))
    elif args.lines != 0:  # nothing on stdout, as SPEC says (not an error); a person sees why on stderr
        total = doc["totalLines"]
        why = f"has {total} line{'' if total == 1 else 's'}" if total else "is empty or does not exist"
        print(f"note: {doc['path']} {why}", file=sys.stderr)
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    config = _config(args)
    with MemoryIndex(config) as index:
        doc = index.status(deep=args.deep)
    _stop_if_interrupted()  # the probe's embedder may have taken a Ctrl-C for a failure to load
    from flows.ratelimit import rate_limit_status

    doc["rateLimit"] = rate_limit_status(config)
    if args.json:
        _print_json(doc)
    else:
        width = max(len(k) for k in doc)
        for key, value in doc.items():
            print(f"{key:<{width}}  {'never' if key == 'lastSync' and value is None else _word(value)}")
    # `status --deep` is a health check (cron, a container's probe): the report is printed either way, and a
    # failed probe is a failure's exit code with its reason, as any other. Keyword-only (`provider = "none"`
    # in the configuration, whatever an older index was built with) is a choice, not a fault.
    if args.deep and not doc["probe"]["ok"] and config.embedding.provider != "none":
        return _fail(args, f"the embedder probe failed: {doc['probe']['error']}")
    return 0


def _word(value: Any) -> str:
    """A status value as a person reads it: yes/no rather than Python's True/False, a dash for nothing,
    a table as `key=value, ...` (nested ones in parentheses)."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, dict):
        return (
            ", ".join(f"{k}={_word(v) if not isinstance(v, dict) else f'({_word(v)})'}" for k, v in value.items())
            or "—"
        )
    return str(value)


def cmd_eval(args: argparse.Namespace) -> int:
    from core.evaluate import evaluate, format_comparison, format_table

    overrides: dict[str, Any] = dict(args.set)
    if args.fusion:
        overrides["search.fusion"] = args.fusion
    options = {"k": args.k, "mode": args.mode, "min_score": args.min_score, "limit": args.limit, "rerank": args.rerank}
    options["warn"] = lambda message: print(f"warning: {message}", file=sys.stderr)
    config = _config(args, **overrides)
    # B's settings are checked before A runs a query: a bad value stops the command before any work
    config_b = _config(args, **overrides, **dict(args.compare)) if args.compare else None
    from api.progress import count_bar

    shown = not args.json and sys.stderr.isatty()
    with count_bar("A: questions" if config_b else "questions", enabled=shown) as progress:
        result = evaluate(config, args.queries, **options, progress=progress)
    if config_b is not None:
        with count_bar("B: questions", enabled=shown) as progress:  # A named the warnings already
            other = evaluate(config_b, args.queries, **options | {"warn": None}, progress=progress)
        if args.json:
            _print_json({"a": result, "b": other})
        else:
            print(format_comparison(result, other))
    elif args.json:
        _print_json(result)
    else:
        print(format_table(result))
    return 0


def cmd_train_ranker(args: argparse.Namespace) -> int:
    from core.ranker_training import FEW_QUESTIONS, collect, require_lightgbm, train

    for path in args.queries:
        if not Path(path).is_file():
            return _fail(args, f"{path}: no such query file", 400)  # as eval's QueryFileError
    if not args.out.parent.is_dir():  # before the searches and the fit, not when writing their result
        return _fail(args, f"--out: {args.out.parent} is not a folder", 400)
    if args.out.is_dir():  # it was "IsADirectoryError: [Errno 21] Is a directory", after all the work
        return _fail(
            args, f"--out: {args.out} is a folder; give the model file's name ({args.out / 'ranker.json'})", 400
        )
    if args.trees:  # it said so after indexing and searching every question
        try:
            require_lightgbm()
        except ValueError as exc:
            return _fail(args, str(exc))
    from api.progress import count_bar

    # The model the configuration names is what this run replaces, not one it needs: the signals are the same
    # whatever scores them. Read, a model of another version (whose error says "fit it again with train-ranker")
    # or one not written yet (the config pointed at it first) stopped the very command that writes it.
    config = _config(args, **{"rerank.rankerModel": None})
    with count_bar("questions", enabled=not args.json and sys.stderr.isatty()) as progress:
        data = collect(
            config,
            args.queries,
            warn=lambda message: print(f"warning: {message}", file=sys.stderr),
            progress=progress,
        )
    try:
        trained_on = [Path(p).name for p in args.queries]
        model = train(data, l2=args.l2, trees=args.trees, meta={"trainedOn": trained_on, "l2": args.l2})
    except ValueError as exc:  # too few questions or candidates to fit: the query files' fault
        return _fail(args, str(exc), 400)
    model.save(args.out)
    questions = counted(model.meta["questions"], "question")
    if model.meta["questions"] < FEW_QUESTIONS:  # it wrote a model from 1 question as from 760, in silence
        where = shlex.quote(str(args.out.absolute()))
        print(
            f"warning: {questions} for {len(model.features)} signals: a model "
            "fitted on so few is likely to order other questions worse than the shipped one; compare them first: "
            f"memsift eval QUERIES.jsonl --compare rerank.rankerModel={where}",
            file=sys.stderr,
        )
    doc = {"model": str(args.out), "fingerprint": model.fingerprint, **model.meta, "leftOut": data.left_out}
    if args.json:
        _print_json(doc)
    else:
        left_out = f" ({data.left_out} left out: no relevant line a hit can cover)" if data.left_out else ""
        print(
            f"wrote {args.out}: {questions}{left_out}, {counted(doc['candidates'], 'candidate')}; "
            f'use it with rerank.rankerModel = "{args.out.absolute()}"'  # the config file's folder is not the cwd
        )
    return 0


@contextmanager
def _addresses_as_json(args: argparse.Namespace) -> Iterator[Callable[[dict[str, str]], None] | None]:
    """`serve`, `up` and `mcp --http` with `--json`: their lines go to stderr and stdout holds one JSON document,
    the addresses, once they answer (a supervisor reads it); it held their lines, none of them JSON."""
    if not args.json:
        yield None
        return
    out = sys.stdout

    def ready(doc: dict[str, str]) -> None:
        _PRINTED.append(True)
        out.write(json.dumps(doc) + "\n")
        out.flush()

    with redirect_stdout(sys.stderr):
        yield ready


def cmd_serve(args: argparse.Namespace) -> int:
    from api.serve import run_serve
    from api.up import agent_configs

    # Every agent is served; --agent chooses the one a request without an `agent` field is answered for.
    main_config = load_config(args.config, workspace=args.workspace)
    with _addresses_as_json(args) as ready:
        return run_serve(
            main_config,
            host=args.host,
            port=args.port,
            insecure=args.insecure,
            workers=args.workers,
            load=lambda: agent_configs(args.config, args.workspace),
            agent=args.agent,
            ready=ready,
        )


def cmd_up(args: argparse.Namespace) -> int:
    from api.up import agent_configs, run_up, with_rest_port

    def load() -> dict[str, Config]:
        return with_rest_port(agent_configs(args.config, args.workspace), args.port)

    with _addresses_as_json(args) as ready:
        return run_up(load(), args.prefect_port, load=load, agent=args.agent, ready=ready)


def cmd_ratelimit(args: argparse.Namespace) -> int:
    from api.up import ratelimit

    doc = ratelimit(_config(args))
    if args.json:
        _print_json(doc)
    elif doc is None:
        print("no embedding rate limit (embedding.requestsPerMinute is not set)")
    else:
        print(f"{doc['name']}: limit {doc['limit']}, {doc['slotDecayPerSecond']:g} slots freed per second")
    return 0


def cmd_model(args: argparse.Namespace) -> int:
    from core.embedders.local import build_optimized_graph
    from core.embedders.model_graph import verification

    path = build_optimized_graph(rebuild=args.rebuild)
    doc = {"graph": str(path), **(verification(path) or {})}
    if args.json:
        _print_json(doc)
    else:
        print(f"optimised graph: {path} (min cosine vs shipped {doc.get('minCosine', '?')})")
    return 0


_COMMANDS = {
    "index": cmd_index,
    "search": cmd_search,
    "get": cmd_get,
    "status": cmd_status,
    "eval": cmd_eval,
    "train-ranker": cmd_train_ranker,
    "up": cmd_up,
    "ratelimit": cmd_ratelimit,
    "model": cmd_model,
}
_COMMANDS["serve"] = cmd_serve


def cmd_mcp(args: argparse.Namespace) -> int:
    from api.mcp import run_mcp
    from core.config import every_agent

    # Every agent is served, as by `serve`; --agent chooses the one a call without an `agent` argument is for.
    main_config = load_config(args.config, workspace=args.workspace)
    configs = every_agent(main_config)
    if args.agent not in configs:  # no file names it: --workspace's folder under that name, alone (as before)
        configs = {args.agent: _config(args)}

    # over stdio, stdout carries the protocol: no addresses document there
    with nullcontext() if args.transport == "stdio" else _addresses_as_json(args) as ready:
        return run_mcp(
            main_config,
            transport=args.transport,
            host=args.host,
            port=args.port,
            agent=args.agent,
            configs=configs,
            ready=ready,
        )


_COMMANDS["mcp"] = cmd_mcp


if __name__ == "__main__":
    sys.exit(main())
