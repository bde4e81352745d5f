"""The `memsift` commands on one agent's index (SPEC section 3): `index` (a sync, a rebuild, or its dry run),
`search`, `get` and `status`, each printing for a person or, with `--json`, REST's document.
"""

from __future__ import annotations

import sys
from typing import Any

from api.cli_command import Command, for_reader
from api.cli_signals import stop_if_interrupted
from api.schemas import MAX_LINES
from core import Config, MemoryIndex
from core.estimate import summary
from core.sources.memory import nothing_found
from core.sync_plan import SyncReport


def cmd_index(command: Command) -> int:
    args = command.args
    config = command.config()  # validate before starting Prefect
    if args.dry_run:
        return _dry_run(command, config)
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
        command.print_json(report.to_dict())
    else:
        _print_report(config, report)
    if where is not None:  # the run's page, or why it has none: on stderr, under --json too (a script's log)
        print(where.note, file=sys.stderr)
    return 0


def _print_report(config: Config, r: SyncReport) -> None:
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


def _dry_run(command: Command, config: Config) -> int:
    args = command.args
    with MemoryIndex(config) as index:
        plan = index.plan(force=args.force).to_dict()
    if args.json:
        command.print_json(plan)
        return 0
    kind = "a rebuild" if plan["rebuild"] else "a sync"
    print(f"dry run: {kind} of agent {config.agent} ({config.workspace}); nothing was embedded")
    if plan["rebuildHeld"]:
        print(f"note: `memsift index` does nothing now: {plan['rebuildHeld']}; the figures are those of --force")
    print(f"files: {plan['filesToRead']} to read, {plan['filesToEmbed']} with text to embed")
    print(f"chunks: {plan['chunksToEmbed']} to embed, {plan['cacheHits']} cache hits")
    print(f"estimate: {summary(plan)}")
    return 0


def cmd_search(command: Command) -> int:
    from api.catch_up import CatchUps
    from api.progress import first_index_note

    args = command.args
    config = command.config()
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
    stop_if_interrupted()  # not a keyword answer blaming the embedder for a Ctrl-C
    unsynced.tell(response)
    if response.warning:  # said once the search answered (a search that fails too says why in its own line);
        print(f"note: {response.warning}", file=sys.stderr)  # on stderr with --json too, as get's warning
    # a mistyped --workspace: say so rather than a bare "No matches." (also under --json, on stderr), once: the
    # first search's sync said it in its warning already
    if empty and (why := nothing_found(config.workspace)) not in (response.warning or ""):
        print(f"warning: {why}", file=sys.stderr)
    if args.json:
        command.print_json(response.to_dict())
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
    print(for_reader("\n\n".join(blocks)))
    if args.explain and response.timings:
        stages = ", ".join(f"{k} {v:.1f}" for k, v in response.timings.items())
        print(f"\ntook {response.tookMs:.1f} ms ({stages})")
    return 0


def cmd_get(command: Command) -> int:
    args = command.args
    config = command.config()
    # `--json` is REST's answer to the same request (SPEC section 3), so it stops at REST's MAX_LINES; the plain
    # text is for a person or a pipe (`| less`), and prints the rest of the file, as `cat` would.
    count = MAX_LINES if args.json and args.lines is None else args.lines
    doc = MemoryIndex(config).get(args.path, args.start, count)
    if "warning" in doc:  # on stderr with --json too: U+FFFD in the text is otherwise silent
        print(f"warning: {doc['path']}: {doc['warning']}", file=sys.stderr)
    if args.json:
        command.print_json(doc)
    elif doc["lines"]:  # a range of blank lines prints them; only an empty range prints nothing
        print(for_reader(doc["text"]))
    elif args.lines != 0:  # nothing on stdout, as SPEC says (not an error); a person sees why on stderr
        total = doc["totalLines"]
        why = f"has {total} line{'' if total == 1 else 's'}" if total else "is empty or does not exist"
        print(f"note: {doc['path']} {why}", file=sys.stderr)
    return 0


def cmd_status(command: Command) -> int:
    args = command.args
    config = command.config()
    with MemoryIndex(config) as index:
        doc = index.status(deep=args.deep)
    stop_if_interrupted()  # the probe's embedder may have taken a Ctrl-C for a failure to load
    from flows.ratelimit import rate_limit_status

    doc["rateLimit"] = rate_limit_status(config)
    if args.json:
        command.print_json(doc)
    else:
        width = max(len(k) for k in doc)
        for key, value in doc.items():
            print(f"{key:<{width}}  {'never' if key == 'lastSync' and value is None else _word(value)}")
    # `status --deep` is a health check (cron, a container's probe): the report is printed either way, and a
    # failed probe is a failure's exit code with its reason, as any other. Keyword-only (`provider = "none"`
    # in the configuration, whatever an older index was built with) is a choice, not a fault.
    if args.deep and not doc["probe"]["ok"] and config.embedding.provider != "none":
        return command.fail(f"the embedder probe failed: {doc['probe']['error']}")
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
