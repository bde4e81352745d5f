"""The `memsift` command line's grammar (SPEC section 3): every command and its flags, one function a command.
The values are checked by the argparse types of api/argument_types.py, usage errors printed by the parser of
api/argument_parser.py.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from api.argument_parser import Parser, Version
from api.argument_types import agent, bounded, nonblank, prefix, query, setting, when
from api.schemas import MAX_LINES
from core.config_schema import MODES, default
from core.ranking import FUSIONS


def parser() -> Parser:
    """The whole command line: every command, its flags and their types (usage errors exit 2)."""
    common = _common()
    p = Parser(prog="memsift", description="Hybrid search over an AI agent's Markdown memory.", parents=[common])
    p.add_argument("--version", action=Version, nargs=0, help="print the installed version and exit")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=Parser)
    p.commands = sub.choices
    for add in (_index, _search, _get, _status, _serve, _up, _ratelimit, _mcp, _model, _eval, _train_ranker):
        add(sub, common)
    return p


def _common() -> argparse.ArgumentParser:
    """The flags every command takes, before the command as SPEC writes them or after it."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--json",
        action="store_true",
        default=argparse.SUPPRESS,
        help="print one JSON document (on failure, REST's problem document)",
    )
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks")
    # Before the command as SPEC writes them, or after it (`memsift search tea --workspace ~/agent`); their
    # defaults are set by `Parser.parse_args`, so a subcommand that does not see them keeps what the top
    # level parsed.
    common.add_argument(
        "--config",
        type=nonblank,
        metavar="PATH",
        default=argparse.SUPPRESS,
        help="TOML config (default: $MEMSIFT_CONFIG, <workspace>/memsift.toml)",
    )
    common.add_argument("--agent", type=agent, metavar="ID", default=argparse.SUPPRESS, help="agent id (default: main)")
    common.add_argument(
        "--workspace",
        type=nonblank,
        metavar="DIR",
        default=argparse.SUPPRESS,
        help="the main agent's workspace, where memsift.toml is looked for; a configured --agent keeps its own "
        "(default: config, else current folder)",
    )
    return common


def _index(sub: argparse._SubParsersAction[Parser], common: argparse.ArgumentParser) -> None:
    index = sub.add_parser("index", parents=[common], help="sync the index (a rebuild if needed or --force)")
    index.add_argument("--force", action="store_true", help="rebuild everything (cached vectors are reused)")
    index.add_argument(
        "--no-prefect", action="store_true", help="run the same sync in-process, without a Prefect flow run"
    )
    index.add_argument(
        "--dry-run", action="store_true", help="read and chunk, embed nothing: what the run would embed and cost"
    )


def _search(sub: argparse._SubParsersAction[Parser], common: argparse.ArgumentParser) -> None:
    search = sub.add_parser("search", parents=[common], help="hybrid search")
    search.add_argument(
        "query", type=query, help="what to look for: words, an identifier, or a question in plain language"
    )
    search.add_argument(
        "--max-results",
        type=bounded(int, 1, 100),
        metavar="N",
        help=f"at most N hits, 1-100 (default: search.maxResults, {default('search.maxResults')})",
    )
    search.add_argument(
        "--min-score",
        type=bounded(float, 0.0, 1.0),
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
        type=prefix,
        metavar="P",
        help="only files under this workspace-relative prefix (default: all files)",
    )
    forms = "a date (YYYY-MM-DD), a date-time, today, yesterday, or a duration back from now (12h, 7d, 2w, 3m: months)"
    search.add_argument(
        "--after", type=when, metavar="WHEN", help=f"only notes dated at or after {forms} (default: no bound)"
    )
    search.add_argument(
        "--before",
        type=when,
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


def _get(sub: argparse._SubParsersAction[Parser], common: argparse.ArgumentParser) -> None:
    get = sub.add_parser("get", parents=[common], help="print a line range of a memory file")
    get.add_argument("path", type=nonblank, help="workspace-relative path of a memory file, as search prints it")
    get.add_argument(
        "--from", dest="start", type=bounded(int, 1), default=1, metavar="N", help="first line, 1-based (default: 1)"
    )
    get.add_argument(
        "--lines",
        type=bounded(int, 0),
        metavar="K",
        help=f"how many lines (default: to the end of the file; with --json at most {MAX_LINES}, as REST)",
    )


def _status(sub: argparse._SubParsersAction[Parser], common: argparse.ArgumentParser) -> None:
    status = sub.add_parser("status", parents=[common], help="index and embedder state")
    status.add_argument(
        "--deep",
        action="store_true",
        help="also probe the embedder: a request to a hosted provider (without --deep, status sends none)",
    )


def _serve(sub: argparse._SubParsersAction[Parser], common: argparse.ArgumentParser) -> None:
    serve = sub.add_parser(
        "serve",
        parents=[common],
        help="the REST API (all agents of the configuration; --agent: the one a request naming none gets)",
    )
    serve.add_argument("--host", type=nonblank, metavar="H", help="address to bind (default: api.host, 127.0.0.1)")
    serve.add_argument("--port", type=bounded(int, 1, 65535), metavar="P", help="port (default: api.port, 8000)")
    serve.add_argument("--insecure", action="store_true", help="allow a non-loopback address without an API key")
    serve.add_argument(
        "--workers",
        type=bounded(int, 0, 64),
        metavar="N",
        help="processes that run searches, one core each (default: api.workers, 0: in the server's threads)",
    )


def _up(sub: argparse._SubParsersAction[Parser], common: argparse.ArgumentParser) -> None:
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
        type=bounded(int, 1, 65535),
        metavar="P",
        help=f"REST API port, as memsift serve --port (default: api.port, {default('api.port')})",
    )
    up.add_argument(
        "--prefect-port",
        type=bounded(int, 1, 65535),
        metavar="P",
        help="Prefect server (and UI) port (default: 4200, or a free port when 4200 is taken)",
    )


def _ratelimit(sub: argparse._SubParsersAction[Parser], common: argparse.ArgumentParser) -> None:
    sub.add_parser("ratelimit", parents=[common], help="create or update the shared embedding rate limit")


def _mcp(sub: argparse._SubParsersAction[Parser], common: argparse.ArgumentParser) -> None:
    mcp = sub.add_parser("mcp", parents=[common], help="MCP server with memory_search and memory_get")
    mcp.add_argument("--transport", choices=("stdio", "http"), default="stdio", help="default: stdio")
    mcp.add_argument("--http", dest="transport", action="store_const", const="http", help="same as --transport http")
    mcp.add_argument(
        "--host",
        type=nonblank,
        default="127.0.0.1",
        metavar="H",
        help="HTTP address (loopback only; default 127.0.0.1)",
    )
    mcp.add_argument("--port", type=bounded(int, 1, 65535), default=8765, metavar="P", help="HTTP port (default 8765)")


def _model(sub: argparse._SubParsersAction[Parser], common: argparse.ArgumentParser) -> None:
    model = sub.add_parser("model", parents=[common], help="the local embedder's optimised graph")
    model_sub = model.add_subparsers(dest="model_command", required=True, metavar="ACTION", parser_class=Parser)
    build = model_sub.add_parser("build", parents=[common], help="build and verify it now (e.g. in a Dockerfile)")
    build.add_argument("--rebuild", action="store_true", help="discard a cached or rejected build first")


def _eval(sub: argparse._SubParsersAction[Parser], common: argparse.ArgumentParser) -> None:
    ev = sub.add_parser("eval", parents=[common], help="retrieval metrics for a query file")
    ev.add_argument(
        "queries", metavar="QUERIES.jsonl", help='JSON Lines: {"query", "relevant"} per line (SPEC section 6)'
    )
    ev.add_argument(
        "--k",
        type=bounded(int, 1, 100),
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
        type=bounded(float, 0.0, 1.0),
        default=0.0,
        metavar="X",
        help="score floor (default 0: rank only)",
    )
    ev.add_argument("--limit", type=bounded(int, 1), metavar="N", help="only the first N queries (default: all)")
    ev.add_argument("--rerank", action=argparse.BooleanOptionalAction, default=None, help="force reranking on/off")
    ev.add_argument(
        "--set",
        action="append",
        default=[],
        type=setting,
        metavar="KEY=VALUE",
        help="a config value for the run, repeatable (default: none)",
    )
    ev.add_argument(
        "--compare",
        action="append",
        default=[],
        type=setting,
        metavar="KEY=VALUE",
        help="run again with these values on top and print both tables and the difference, repeatable "
        "(default: no comparison)",
    )


def _train_ranker(sub: argparse._SubParsersAction[Parser], common: argparse.ArgumentParser) -> None:
    tr = sub.add_parser("train-ranker", parents=[common], help="fit the learned ranker on labelled query files")
    tr.add_argument("queries", nargs="+", metavar="QUERIES.jsonl", help="query files in the eval format")
    tr.add_argument("--out", required=True, type=Path, metavar="PATH", help="where to write the model (JSON)")
    tr.add_argument("--l2", type=bounded(float, 0.0, 1e6), default=1.0, metavar="X", help="L2 penalty (default 1)")
    tr.add_argument(
        "--trees",
        type=bounded(int, 0, 10000),
        default=0,
        metavar="N",
        help="boosted trees on top of the regression (default 0; needs the training extra: memsift[train])",
    )
