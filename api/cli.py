"""The `memsift` command line (SPEC section 3): parse, call core or flows, print.

Exit codes: 0 success (also "no matches"), 1 failure with a one-line reason on stderr, 2 usage error.
No traceback unless `--debug`. With `--json`, stdout holds one JSON document and nothing else.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from api.schemas import MAX_LINES
from core import Config, MemoryIndex, MemsiftError, load_config
from core.config import FUSIONS, MODES, agent_id_problem, default, home_problem, memsift_home, read_number
from core.estimate import summary
from core.search import check_path_prefix, check_request
from core.sources.memory import nothing_found
from core.timefilter import window


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # usage errors: exit 2 with the usage line
        self.print_usage(sys.stderr)
        print(f"memsift: error: {message}", file=sys.stderr)
        raise SystemExit(2)

    def parse_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:  # type: ignore[override]
        """The global flags' defaults, set here since they are suppressed where they were not given (they
        may come before the command or after it)."""
        parsed = super().parse_args(args, namespace)
        for name, value in (
            ("json", False),
            ("debug", False),
            ("config", None),
            ("agent", "main"),
            ("workspace", None),
        ):
            setattr(parsed, name, getattr(parsed, name, value))
        if parsed.command == "get" and parsed.json and (parsed.lines or 0) > MAX_LINES:  # REST's 400, as a usage error
            self.error(f"argument --lines: at most {MAX_LINES} with --json, got {parsed.lines}; read on with --from")
        if getattr(parsed, "after", None) and getattr(parsed, "before", None):
            try:  # each bound is checked as it is parsed; a window they leave empty is as much a usage error
                window(parsed.after, parsed.before)
            except MemsiftError as exc:
                self.error(str(exc))
        return parsed


def _bounded(kind: type, lo: float, hi: float | None = None):
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


def _query(text: str) -> str:
    """An argparse type for search's QUERY: a blank one is a usage error (exit 2), as no query is."""
    try:
        check_request(text, None, None)
    except MemsiftError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("query: ")) from None
    return text


def _nonblank(text: str) -> str:
    """An argparse type for get's PATH, --config and --workspace: a blank one is a usage error (exit 2), as a
    blank query is. `--workspace "$AGENT_DIR"` with the variable unset indexed the current folder in silence."""
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be blank")
    return text


def _agent(text: str) -> str:
    """An argparse type for --agent: an id no configuration can have (`--agent " "`, `--agent "$AGENT"` with
    the variable unset) is a usage error (exit 2), as a blank --config is; an unknown one is the config's."""
    if why := agent_id_problem(text):
        raise argparse.ArgumentTypeError(why)
    return text


def _prefix(text: str) -> str:
    """An argparse type for --path-prefix: one no hit can have (`/memory`, `../x`) is a usage error (exit 2)."""
    try:
        check_path_prefix(text)
    except MemsiftError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("pathPrefix: ")) from None
    return text


def _when(text: str) -> str:
    """An argparse type for --after / --before: a bound that names no time is a usage error (exit 2), as a bad
    --max-results is; the window itself is built, with the same words, by the search."""
    try:
        window(after=text)
    except MemsiftError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("after: ")) from None
    return text


class _Version(argparse.Action):
    """`--version`, looked up only when asked: reading the package metadata costs ~70 ms, and every command
    builds this parser."""

    def __call__(self, parser: argparse.ArgumentParser, *args: Any) -> None:
        from importlib.metadata import version

        print(f"memsift {version('memsift')}")
        parser.exit()


def _parser() -> _Parser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print one JSON document")
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks")
    # Before the command as SPEC writes them, or after it (`memsift search tea --workspace ~/agent`); their
    # defaults are set by `_Parser.parse_args`, so a subcommand that does not see them keeps what the top
    # level parsed.
    common.add_argument(
        "--config",
        type=_nonblank,
        metavar="PATH",
        default=argparse.SUPPRESS,
        help="TOML config (default: $MEMSIFT_CONFIG, <workspace>/memsift.toml)",
    )
    common.add_argument(
        "--agent", type=_agent, metavar="ID", default=argparse.SUPPRESS, help="agent id (default: main)"
    )
    common.add_argument(
        "--workspace",
        type=_nonblank,
        metavar="DIR",
        default=argparse.SUPPRESS,
        help="the agent's workspace (default: config, else current folder)",
    )

    p = _Parser(prog="memsift", description="Hybrid search over an AI agent's Markdown memory.", parents=[common])
    p.add_argument("--version", action=_Version, nargs=0, help="print the installed version and exit")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)

    index = sub.add_parser("index", parents=[common], help="sync the index (a rebuild if needed or --force)")
    index.add_argument("--force", action="store_true", help="rebuild everything (cached vectors are reused)")
    index.add_argument(
        "--no-prefect", action="store_true", help="run the same sync in-process, without a Prefect flow run"
    )
    index.add_argument(
        "--dry-run", action="store_true", help="read and chunk, embed nothing: what the run would embed and cost"
    )

    search = sub.add_parser("search", parents=[common], help="hybrid search")
    search.add_argument(
        "query", type=_query, help="what to look for: words, an identifier, or a question in plain language"
    )
    search.add_argument(
        "--max-results",
        type=_bounded(int, 1, 100),
        metavar="N",
        help=f"at most N hits, 1-100 (default: search.maxResults, {default('search.maxResults')})",
    )
    search.add_argument(
        "--min-score",
        type=_bounded(float, 0.0, 1.0),
        metavar="X",
        help="floor on hybrid scores, which are calibrated estimates that the hit is relevant: hits under X are "
        "dropped (a prefix of the order is kept), and when every hit is under X the search abstains: no hits, "
        "and says so. 0 turns the floor off. In keyword or vector mode (or with search.calibrate = false) X "
        "is the old rule: a hit found only by meaning needs cosine similarity >= X, a hit that matched a query "
        "word is always kept "
        f"(default: search.minScore, {default('search.minScore')})",
    )
    search.add_argument(
        "--mode",
        choices=MODES,
        help="hybrid: words and meaning, fused; keyword: BM25 only; vector: meaning only "
        f"(default: search.mode, {default('search.mode')})",
    )
    search.add_argument(
        "--path-prefix",
        type=_prefix,
        metavar="P",
        help="only files under this workspace-relative prefix (default: all files)",
    )
    when = "a date (YYYY-MM-DD), a date-time, today, yesterday, or a duration back from now (12h, 7d, 2w, 3m: months)"
    search.add_argument(
        "--after", type=_when, metavar="WHEN", help=f"only notes dated at or after {when} (default: no bound)"
    )
    search.add_argument(
        "--before",
        type=_when,
        metavar="WHEN",
        help="only notes dated at or before WHEN, same forms (default: no bound)",
    )
    search.add_argument(
        "--no-evergreen",
        dest="evergreen",
        action="store_false",
        help="drop undated files (MEMORY.md, memory.md, undated memory/ notes), which filters otherwise keep",
    )
    search.add_argument("--explain", action="store_true", help="show every stage's score")
    search.add_argument(
        "--rerank",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="rerank the shortlist (default: rerank.enabled, auto: on over an index the local model built)",
    )

    get = sub.add_parser("get", parents=[common], help="print a line range of a memory file")
    get.add_argument("path", type=_nonblank, help="workspace-relative path of a memory file, as search prints it")
    get.add_argument(
        "--from", dest="start", type=_bounded(int, 1), default=1, metavar="N", help="first line, 1-based (default: 1)"
    )
    get.add_argument(
        "--lines",
        type=_bounded(int, 0),
        metavar="K",
        help=f"how many lines (default: to the end of the file; with --json at most {MAX_LINES}, as REST)",
    )

    status = sub.add_parser("status", parents=[common], help="index and embedder state")
    status.add_argument("--deep", action="store_true", help="also probe the embedder with one request")

    serve = sub.add_parser(
        "serve",
        parents=[common],
        help="the REST API (all agents of the configuration; --agent: the one a request naming none gets)",
    )
    serve.add_argument("--host", metavar="H", help="address to bind (default: api.host, 127.0.0.1)")
    serve.add_argument("--port", type=_bounded(int, 1, 65535), metavar="P", help="port (default: api.port, 8000)")
    serve.add_argument("--insecure", action="store_true", help="allow a non-loopback address without an API key")
    serve.add_argument(
        "--workers",
        type=_bounded(int, 0, 64),
        metavar="N",
        help="processes that run searches, one core each (default: api.workers, 0: in the server's threads)",
    )

    up = sub.add_parser(
        "up",
        parents=[common],
        help="Prefect server, served flows, watcher and REST API in one",
        description="Start, in one process tree: a local Prefect server (UI on http://127.0.0.1:4200), the sync "
        "and rebuild deployments of every configured agent, an initial sync, the file watcher (a sync shortly "
        "after a memory file changes; sync.watch, on by default) and the REST API on api.host:api.port "
        f"(default {default('api.host')}:{default('api.port')}, docs at /docs; --port P to choose, as for "
        "memsift serve). Runs in the foreground until Ctrl-C or SIGTERM, which stops all of it.",
    )
    up.add_argument(
        "--port",
        type=_bounded(int, 1, 65535),
        metavar="P",
        help=f"REST API port, as memsift serve --port (default: api.port, {default('api.port')})",
    )
    up.add_argument(
        "--prefect-port",
        type=_bounded(int, 1, 65535),
        metavar="P",
        help="Prefect server (and UI) port (default: 4200, or a free port when 4200 is taken)",
    )
    sub.add_parser("ratelimit", parents=[common], help="create or update the shared embedding rate limit")

    mcp = sub.add_parser("mcp", parents=[common], help="MCP server with memory_search and memory_get")
    mcp.add_argument("--transport", choices=("stdio", "http"), default="stdio", help="default: stdio")
    mcp.add_argument("--http", dest="transport", action="store_const", const="http", help="same as --transport http")
    mcp.add_argument("--host", default="127.0.0.1", metavar="H", help="HTTP address (loopback only; default 127.0.0.1)")
    mcp.add_argument("--port", type=_bounded(int, 1, 65535), default=8765, metavar="P", help="HTTP port (default 8765)")

    model = sub.add_parser("model", parents=[common], help="the local embedder's optimised graph")
    model_sub = model.add_subparsers(dest="model_command", required=True, metavar="ACTION", parser_class=_Parser)
    build = model_sub.add_parser("build", parents=[common], help="build and verify it now (e.g. in a Dockerfile)")
    build.add_argument("--rebuild", action="store_true", help="discard a cached or rejected build first")

    ev = sub.add_parser("eval", parents=[common], help="retrieval metrics for a query file")
    ev.add_argument(
        "queries", metavar="QUERIES.jsonl", help='JSON Lines: {"query", "relevant"} per line (SPEC section 6)'
    )
    ev.add_argument("--k", type=_bounded(int, 1, 100), default=10, help="metrics at rank k, 1-100 (default: 10)")
    ev.add_argument("--mode", choices=MODES, help=f"search mode (default: search.mode, {default('search.mode')})")
    ev.add_argument(
        "--fusion",
        choices=FUSIONS,
        help=f"how the two legs are fused (default: search.fusion, {default('search.fusion')})",
    )
    ev.add_argument(
        "--min-score",
        type=_bounded(float, 0.0, 1.0),
        default=0.0,
        metavar="X",
        help="score floor (default 0: rank only)",
    )
    ev.add_argument("--limit", type=_bounded(int, 1), metavar="N", help="only the first N queries (default: all)")
    ev.add_argument("--rerank", action=argparse.BooleanOptionalAction, default=None, help="force reranking on/off")
    ev.add_argument(
        "--set",
        action="append",
        default=[],
        type=_setting,
        metavar="KEY=VALUE",
        help="a config value for the run, repeatable (default: none)",
    )
    ev.add_argument(
        "--compare",
        action="append",
        default=[],
        type=_setting,
        metavar="KEY=VALUE",
        help="run again with these values on top and print both tables and the difference, repeatable "
        "(default: no comparison)",
    )

    tr = sub.add_parser("train-ranker", parents=[common], help="fit the learned ranker on labelled query files")
    tr.add_argument("queries", nargs="+", metavar="QUERIES.jsonl", help="query files in the eval format")
    tr.add_argument("--out", required=True, type=Path, metavar="PATH", help="where to write the model (JSON)")
    tr.add_argument("--l2", type=_bounded(float, 0.0, 1e6), default=1.0, metavar="X", help="L2 penalty (default 1)")
    tr.add_argument(
        "--trees",
        type=_bounded(int, 0, 10000),
        default=0,
        metavar="N",
        help="boosted trees on top of the regression (default 0; needs the training extra: memsift[train])",
    )
    return p


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


@contextmanager
def _interruptible() -> Iterator[None]:
    """SIGINT and SIGTERM raise `Interrupted` in the main thread while inside (the default SIGTERM would kill
    the process on the spot: a flow run left Running in the UI, no word to the user). Prefect's engine,
    unwinding a task run the signal cut, may raise another error in its place ("ValueError: Task run is not
    set"): that is the interrupt all the same."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []

    def interrupt(signum: int, frame: object) -> None:
        received.append(signum)
        raise Interrupted(signum)

    previous = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    except Exception as exc:
        if received:
            raise Interrupted(received[0]) from exc
        raise
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
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
        return _COMMANDS[args.command](args)
    except MemsiftError as exc:
        return _fail(args, str(exc))
    except Interrupted as exc:
        _fail(args, f"interrupted by {signal.Signals(exc.signum).name}; {_AFTER_INTERRUPT.get(args.command, '')}")
        _exit_now(128 + exc.signum)
    except KeyboardInterrupt:
        return _fail(args, "interrupted")
    except BrokenPipeError:  # the reader went away (`memsift get ... | head`): stop quietly, as `cat` would
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the exit's flush cannot fail again
        return 128 + signal.SIGPIPE
    except Exception as exc:  # anything else is a bug or an environment problem: one line unless --debug
        return _fail(args, f"{type(exc).__name__}: {exc}")


_AFTER_INTERRUPT = {"index": "the index is as the last completed step left it; the next `memsift index` completes it"}


def _exit_now(code: int) -> None:
    """Exit without joining worker threads: every index write is on the main thread, which has unwound by now
    (rolled back, temp files removed), while threads with an HTTP request in flight would hold the exit for
    as long as the request takes (a provider's timeout is 120 s)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _fail(args: argparse.Namespace, message: str) -> int:
    if args.debug:
        import traceback

        traceback.print_exc()
    print(f"memsift: error: {message.rstrip('; ')}", file=sys.stderr)
    return 1


def _setting(text: str) -> tuple[str, str]:
    """KEY=VALUE for --set/--compare: a dotted config key and its value as the environment would give it."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value.strip()


def _config(args: argparse.Namespace, **overrides: Any):
    return load_config(args.config, workspace=args.workspace, agent=args.agent, overrides=overrides)


def _print_json(doc: Any) -> None:
    sys.stdout.write(json.dumps(doc, ensure_ascii=False, indent=2) + "\n")


def cmd_index(args: argparse.Namespace) -> int:
    config = _config(args)  # validate before starting Prefect
    if args.dry_run:
        return _dry_run(args, config)
    from api.indexing import sync_agent
    from api.progress import progress_bar

    with _interruptible(), progress_bar(enabled=not args.json and sys.stderr.isatty()) as progress:
        if args.no_prefect:
            with MemoryIndex(config) as index:
                index.require_embedder()
                report, where = index.sync(force=args.force, progress=progress), None
        else:
            report, where = sync_agent(config, force=args.force, progress=progress)
    if args.json:
        _print_json(report.to_dict())
        return 0
    for warning in report.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    r = report
    if r.plan:
        print(f"plan: {summary(r.plan)}")
    done = "rebuilt" if r.rebuilt else "rebuild held for" if r.rebuildHeld else "synced"
    print(f"{done} agent {config.agent} ({config.workspace})")
    print(
        f"files: {r.filesScanned} scanned, {r.added} added, {r.changed} changed, {r.removed} removed"
        + (f", {r.skipped} skipped" if r.skipped else "")
    )
    print(f"chunks: {r.chunksEmbedded} embedded, {r.cacheHits} cache hits, {r.chunksWritten} written")
    print(f"seconds: {r.seconds:.2f}")
    if where is not None:
        print(where.note, file=sys.stderr)
    return 0


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

    config = _config(args)
    with MemoryIndex(config) as index:
        # files changed since the last sync: no hit may point at lines they no longer hold (REST's, MCP's too)
        unsynced = CatchUps().before_search(index)
        index.before_first_index = lambda done: print(  # minutes for thousands of notes: not a silent wait
            f"note: the first index of agent {config.agent} was interrupted after {done} files: completing it "
            "before searching"
            if done
            else f"note: agent {config.agent} is not indexed yet: indexing it before searching",
            file=sys.stderr,
            flush=True,
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
    response.warn(unsynced)
    if response.warning:  # said once the search answered (a search that fails too says why in its own line);
        print(f"note: {response.warning}", file=sys.stderr)  # on stderr with --json too, as get's warning
    if empty:  # a mistyped --workspace: say so rather than a bare "No matches." (also under --json, on stderr)
        print(f"warning: {nothing_found(config.workspace)}", file=sys.stderr)
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
    print("\n\n".join(blocks))
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
        print(doc["text"])
    elif args.lines != 0:  # nothing on stdout, as SPEC says (not an error); a person sees why on stderr
        total = doc["totalLines"]
        why = f"has {total} line{'' if total == 1 else 's'}" if total else "is empty or does not exist"
        print(f"note: {doc['path']} {why}", file=sys.stderr)
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    config = _config(args)
    with MemoryIndex(config) as index:
        doc = index.status(deep=args.deep)
    from flows.ratelimit import rate_limit_status

    doc["rateLimit"] = rate_limit_status(config)
    if args.json:
        _print_json(doc)
        return 0
    width = max(len(k) for k in doc)
    for key, value in doc.items():
        print(f"{key:<{width}}  {'never' if key == 'lastSync' and value is None else _word(value)}")
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
    result = evaluate(_config(args, **overrides), args.queries, **options)
    if args.compare:
        other = evaluate(_config(args, **overrides, **dict(args.compare)), args.queries, **options)
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
    from core.ranker_training import collect, train

    for path in args.queries:
        if not Path(path).is_file():
            return _fail(args, f"{path}: no such query file")
    data = collect(_config(args), args.queries)
    try:
        trained_on = [Path(p).name for p in args.queries]
        model = train(data, l2=args.l2, trees=args.trees, meta={"trainedOn": trained_on, "l2": args.l2})
    except ValueError as exc:
        return _fail(args, str(exc))
    args.out.write_text(model.to_json() + "\n", encoding="utf-8")
    doc = {"model": str(args.out), "fingerprint": model.fingerprint, **model.meta}
    if args.json:
        _print_json(doc)
    else:
        print(
            f"wrote {args.out}: {doc['questions']} questions, {doc['candidates']} candidates; "
            f'use it with rerank.rankerModel = "{args.out}"'
        )
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    from api.serve import run_serve
    from api.up import agent_configs

    # Every agent is served; --agent chooses the one a request without an `agent` field is answered for.
    main_config = load_config(args.config, workspace=args.workspace)
    return run_serve(
        main_config,
        host=args.host,
        port=args.port,
        insecure=args.insecure,
        workers=args.workers,
        load=lambda: agent_configs(args.config, args.workspace),
        agent=args.agent,
    )


def cmd_up(args: argparse.Namespace) -> int:
    from api.up import agent_configs, run_up, with_rest_port

    def load() -> dict[str, Config]:
        return with_rest_port(agent_configs(args.config, args.workspace), args.port)

    return run_up(load(), args.prefect_port, load=load, agent=args.agent)


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

    return run_mcp(_config(args), transport=args.transport, host=args.host, port=args.port)


_COMMANDS["mcp"] = cmd_mcp


if __name__ == "__main__":
    sys.exit(main())
