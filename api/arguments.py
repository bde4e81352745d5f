"""The `memsift` command line's grammar (SPEC section 3): every command, its flags, and the argparse types that
make a bad value a usage error (exit 2, with the usage line) before any work, as REST answers it a 400.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec

from api.schemas import MAX_LINES, Problem, query_too_large
from core import MemsiftError
from core.config_home import agent_id_problem
from core.config_schema import MODES, default
from core.config_values import read_number
from core.ranking import FUSIONS
from core.search_request import check_path_prefix, check_request
from core.timefilter import window


class _Parser(argparse.ArgumentParser):
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
        if _asks_json(_Parser.command_line):  # SPEC section 3: stdout holds one JSON document, REST's 400 (or 413)
            problem = Problem.of(_usage_status(sys.exc_info()[1]), message)
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
        self.argv = _Parser.command_line = sys.argv[1:] if args is None else list(args)
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


class _TooLarge(argparse.ArgumentTypeError):
    """A value refused for its size: REST answers it 413, not 400."""

    status = 413


def _usage_status(error: BaseException | None) -> int:
    """The HTTP status of a usage error: 400, or the `status` of the argparse type's error that caused it
    (argparse raises its own error while handling the type's, which stays as its `__context__`)."""
    while error is not None:
        if isinstance(status := getattr(error, "status", None), int):
            return status
        error = error.__context__
    return 400


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
    """An argparse type for search's QUERY: a blank one is a usage error (exit 2), as no query is; so is one over
    REST's 4 KiB, so that `--json` answers what REST answers."""
    try:
        check_request(text, None, None)
    except MemsiftError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("query: ")) from None
    if why := query_too_large(text):
        raise _TooLarge(why.removeprefix("query: "))
    return text


def _nonblank(text: str) -> str:
    """An argparse type for get's PATH, --config, --workspace and --host: a blank one is a usage error (exit 2), as
    a blank query is. `--workspace "$AGENT_DIR"` with the variable unset indexed the current folder in silence."""
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


def _setting(text: str) -> tuple[str, str]:
    """KEY=VALUE for --set/--compare: a dotted config key and its value as the environment would give it."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value.strip()


class _Version(argparse.Action):
    """`--version`, looked up only when asked: reading the package metadata costs ~70 ms, and every command
    builds this parser. With `--json` (before or after it) a JSON document, as every `--json` prints."""

    def __call__(self, parser: argparse.ArgumentParser, *args: Any) -> None:
        import json
        from importlib.metadata import version

        number = version("memsift")
        as_json = "--json" in getattr(parser, "argv", ())
        print(json.dumps({"version": number}, indent=2) if as_json else f"memsift {number}")
        parser.exit()


def parser() -> _Parser:
    """The whole command line: every command, its flags and their types (usage errors exit 2)."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--json",
        action="store_true",
        default=argparse.SUPPRESS,
        help="print one JSON document (on failure, REST's problem document)",
    )
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
        help="the main agent's workspace, where memsift.toml is looked for; a configured --agent keeps its own "
        "(default: config, else current folder)",
    )

    p = _Parser(prog="memsift", description="Hybrid search over an AI agent's Markdown memory.", parents=[common])
    p.add_argument("--version", action=_Version, nargs=0, help="print the installed version and exit")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)
    p.commands = sub.choices

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
    status.add_argument(
        "--deep",
        action="store_true",
        help="also probe the embedder: a request to a hosted provider (without --deep, status sends none)",
    )

    serve = sub.add_parser(
        "serve",
        parents=[common],
        help="the REST API (all agents of the configuration; --agent: the one a request naming none gets)",
    )
    serve.add_argument("--host", type=_nonblank, metavar="H", help="address to bind (default: api.host, 127.0.0.1)")
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
    mcp.add_argument(
        "--host",
        type=_nonblank,
        default="127.0.0.1",
        metavar="H",
        help="HTTP address (loopback only; default 127.0.0.1)",
    )
    mcp.add_argument("--port", type=_bounded(int, 1, 65535), default=8765, metavar="P", help="HTTP port (default 8765)")

    model = sub.add_parser("model", parents=[common], help="the local embedder's optimised graph")
    model_sub = model.add_subparsers(dest="model_command", required=True, metavar="ACTION", parser_class=_Parser)
    build = model_sub.add_parser("build", parents=[common], help="build and verify it now (e.g. in a Dockerfile)")
    build.add_argument("--rebuild", action="store_true", help="discard a cached or rejected build first")

    ev = sub.add_parser("eval", parents=[common], help="retrieval metrics for a query file")
    ev.add_argument(
        "queries", metavar="QUERIES.jsonl", help='JSON Lines: {"query", "relevant"} per line (SPEC section 6)'
    )
    ev.add_argument(
        "--k",
        type=_bounded(int, 1, 100),
        default=10,
        help="the rank the metrics are cut at, 1-100: R@k, MRR@k and nDCG@k, beside R@5 and the @10 ones when k is "
        "larger (default: 10)",
    )
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
