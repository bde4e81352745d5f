"""The `memsift` commands that measure and fit the search on labelled query files (SPEC section 6): `eval`
(retrieval metrics, or two configurations compared) and `train-ranker` (the learned ranker's model).
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Any

from api.cli_command import Command
from core.words import counted


def cmd_eval(command: Command) -> int:
    from core.evaluate import evaluate, format_comparison, format_table

    args = command.args
    overrides: dict[str, Any] = dict(args.set)
    if args.fusion:
        overrides["search.fusion"] = args.fusion
    options = {"k": args.k, "mode": args.mode, "min_score": args.min_score, "limit": args.limit, "rerank": args.rerank}
    options["warn"] = lambda message: print(f"warning: {message}", file=sys.stderr)
    config = command.config(**overrides)
    # B's settings are checked before A runs a query: a bad value stops the command before any work
    config_b = command.config(**overrides, **dict(args.compare)) if args.compare else None
    from api.progress import count_bar

    shown = not args.json and sys.stderr.isatty()
    with count_bar("A: questions" if config_b else "questions", enabled=shown) as progress:
        result = evaluate(config, args.queries, **options, progress=progress)
    if config_b is not None:
        with count_bar("B: questions", enabled=shown) as progress:  # A named the warnings already
            other = evaluate(config_b, args.queries, **options | {"warn": None}, progress=progress)
        if args.json:
            command.print_json({"a": result, "b": other})
        else:
            print(format_comparison(result, other))
    elif args.json:
        command.print_json(result)
    else:
        print(format_table(result))
    return 0


def cmd_train_ranker(command: Command) -> int:
    from core.ranker_training import FEW_QUESTIONS, collect, require_lightgbm, train

    args = command.args
    for path in args.queries:
        if not Path(path).is_file():
            return command.fail(f"{path}: no such query file", 400)  # as eval's QueryFileError
    if not args.out.parent.is_dir():  # before the searches and the fit, not when writing their result
        return command.fail(f"--out: {args.out.parent} is not a folder", 400)
    if args.out.is_dir():  # it was "IsADirectoryError: [Errno 21] Is a directory", after all the work
        return command.fail(
            f"--out: {args.out} is a folder; give the model file's name ({args.out / 'ranker.json'})", 400
        )
    if args.trees:  # it said so after indexing and searching every question
        try:
            require_lightgbm()
        except ValueError as exc:
            return command.fail(str(exc))
    from api.progress import count_bar

    # The model the configuration names is what this run replaces, not one it needs: the signals are the same
    # whatever scores them. Read, a model of another version (whose error says "fit it again with train-ranker")
    # or one not written yet (the config pointed at it first) stopped the very command that writes it.
    config = command.config(**{"rerank.rankerModel": None})
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
        return command.fail(str(exc), 400)
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
        command.print_json(doc)
    else:
        left_out = f" ({data.left_out} left out: no relevant line a hit can cover)" if data.left_out else ""
        print(
            f"wrote {args.out}: {questions}{left_out}, {counted(doc['candidates'], 'candidate')}; "
            f'use it with rerank.rankerModel = "{args.out.absolute()}"'  # the config file's folder is not the cwd
        )
    return 0
