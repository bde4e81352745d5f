"""`memsift eval`: retrieval metrics for a JSON Lines query file (SPEC section 6).

A hit is relevant when its [startLine, endLine] on the query's path covers a relevant line.
Recall@k: the share of a query's relevant lines covered by the top k. MRR@k: 1 / rank of the first hit
covering a relevant line. nDCG@k: a hit gains 1 when it covers a relevant line no earlier hit covered,
against an ideal ranking that covers one new line per rank. The mean line span of hits is reported
because wider hits cover more lines for free.
"""

from __future__ import annotations

import hashlib
import json
import math
import statistics
import unicodedata
from collections import defaultdict
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from .config import load_config
from .config_types import Config
from .errors import QueryFileError, SearchError
from .learned import model_for
from .memory import MemoryIndex
from .search_request import check_request
from .search_response import Hit
from .sources import as_typed
from .words import counted


def metric_names(k: int) -> tuple[str, ...]:
    """The columns for a run cut at rank k, each named by the rank it is cut at: the default k 10 gives LoCoMo's
    usual four (R@5, R@10, MRR@10, nDCG@10), a larger k keeps them and adds its own (R@20, MRR@20, nDCG@20), a
    smaller one has only its own. Fixed @10 names put `--k 3`'s three-hit figures under @10."""
    recall = [c for c in (5, 10) if c < k] + [k]
    ranked = [c for c in (10,) if c < k] + [k]
    return (*(f"R@{c}" for c in recall), *(f"MRR@{c}" for c in ranked), *(f"nDCG@{c}" for c in ranked))


METRICS = metric_names(10)


def load_queries(path: str | Path) -> list[dict[str, Any]]:
    """The queries of a JSON Lines file, checked before any search: a bad file is a one-line error naming the
    file and line, not a traceback halfway, nor metrics of 0 over a workspace that is not there."""
    path = Path(path)
    if not path.is_file():
        raise QueryFileError(f"{path}: {'a folder, not a query file' if path.is_dir() else 'no such query file'}")
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise QueryFileError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    queries = []
    first_line: dict[str | int, int] = {}  # qid -> the line it is on
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            q = json.loads(line)
        except ValueError as exc:
            raise QueryFileError(f"{path}:{number}: not JSON ({exc})") from None
        problem = _query_problem(q, path.resolve().parent)
        if problem:
            raise QueryFileError(f"{path}:{number}: {problem}")
        if (qid := q.get("qid")) is not None:  # a copied line was scored twice and weighed double, in silence
            if qid in first_line:
                raise QueryFileError(f"{path}:{number}: duplicate qid {qid!r} (first on line {first_line[qid]})")
            first_line[qid] = number
        queries.append(q)
    if not queries:
        raise QueryFileError(f"{path}: no queries (one JSON object a line: qid, query, relevant)")
    return queries


def _query_problem(q: Any, base: Path) -> str | None:
    if not isinstance(q, dict) or not isinstance(q.get("query"), str) or not isinstance(q.get("relevant"), list):
        return "needs an object with 'query' (string) and 'relevant' (list)"
    if q.get("qid") is not None and (type(q["qid"]) not in (str, int)):
        return f"'qid' is a string (or an integer), got {json.dumps(q['qid'])}"
    try:  # a blank query, found before any search rather than after every query above it
        check_request(q["query"], None, None)
    except SearchError as exc:
        return str(exc)
    for r in q["relevant"]:
        path, line = (r.get("path"), r.get("line")) if isinstance(r, dict) else (None, None)
        if not isinstance(path, str) or type(line) is not int or line < 1:  # bool is an int; line 0 covers nothing
            return f"each 'relevant' entry needs 'path' (string) and 'line' (integer, 1-based), got {json.dumps(r)}"
        if path.startswith(("/", "~")) or "\\" in path:  # no hit is named so: every metric was 0, in silence
            return f"a 'relevant' path is workspace-relative with '/', as hits name it, got {path!r}"
    if q.get("workspace") is not None:
        if not isinstance(q["workspace"], str) or not q["workspace"].strip():  # `3` named a folder "3"
            return f"'workspace' is a folder relative to the query file, got {json.dumps(q['workspace'])}"
        ws = base / q["workspace"]
        if not ws.is_dir():
            return f"workspace {q['workspace']!r} ({ws}) is not a folder"
    return None


def query_index(indexes: dict[Path, MemoryIndex], config: Config, base: Path, query: dict[str, Any]) -> MemoryIndex:
    """The index of a query's workspace (relative to its file's folder `base`; absent: the agent's), opened and
    synced the first time it is asked for and kept in `indexes` (the caller closes them). Each workspace gets
    an agent id of its own, so evaluation never touches the user's indexes."""
    ws = (base / query["workspace"]).resolve() if query.get("workspace") else config.workspace
    if ws not in indexes:
        agent = "eval-" + hashlib.sha256(str(ws).encode()).hexdigest()[:12]
        extra = config.extra_paths if ws == config.workspace else _own_extra_paths(ws)
        indexes[ws] = MemoryIndex(replace(config, workspace=ws, agent=agent, extra_paths=extra))
        indexes[ws].sync()
    return indexes[ws]


def _own_extra_paths(ws: Path) -> tuple[str, ...]:
    """The extraPaths of another workspace named by a query: those of its own memsift.toml (none without
    one). The command's configuration is read for how to search, but its extraPaths name its own
    workspace's notes: they were indexed into every query workspace (an absolute one as is, a relative one
    resolved in the wrong folder), and the workspace's own were left out."""
    own = ws / "memsift.toml"
    if not own.is_file():
        return ()
    return load_config(own, workspace=ws).extra_paths  # an error names `own`, as every file's does


def same_name(path: str) -> str:
    """A path as evaluation compares it: `./memory/x.md` names memory/x.md, and `memory/café.md` is one file in
    either Unicode normal form. Hits name a file as the disk spells it (Linux keeps names byte for byte), a query
    file as its editor wrote it (macOS: NFD): compared as written, every metric was 0, in silence."""
    return unicodedata.normalize("NFC", as_typed(path))


def score_query(hits: list[Hit], relevant: list[dict[str, Any]], k: int) -> dict[str, float]:
    wanted = {(same_name(r["path"]), int(r["line"])) for r in relevant}
    covered: set[tuple[str, int]] = set()
    first = 0
    gains = [0.0] * (k + 1)  # gains[r]: the DCG of the first r hits
    recall_at = [0.0] * (k + 1)  # recall_at[r]: the share of relevant lines the first r hits cover
    for rank in range(1, k + 1):
        hit = hits[rank - 1] if rank <= len(hits) else None
        new = set()
        if hit is not None:
            path = same_name(hit.path)
            new = {(p, line) for p, line in wanted - covered if p == path and hit.startLine <= line <= hit.endLine}
        if new:
            first = first or rank
            covered |= new
        gains[rank] = gains[rank - 1] + (1.0 / math.log2(rank + 1) if new else 0.0)
        recall_at[rank] = len(covered) / len(wanted) if wanted else 0.0

    def ndcg(cut: int) -> float:
        ideal = sum(1.0 / math.log2(r + 1) for r in range(1, min(len(wanted), cut) + 1))
        return gains[cut] / ideal if ideal else 0.0

    def value(kind: str, cut: int) -> float:
        if kind == "R":
            return recall_at[cut]
        return ndcg(cut) if kind == "nDCG" else 1.0 / first if 0 < first <= cut else 0.0

    return {name: value(name.split("@")[0], int(name.split("@")[1])) for name in metric_names(k)}


def warn_unheld(
    warn: Callable[[str], None], queries_path: str | Path, index: MemoryIndex, query: dict[str, Any], held: dict
) -> list[dict[str, Any]]:
    """Tell `warn` of each relevant line of `query` no hit can cover, and return them: a path no file of `index`
    answers to (a typo, a note renamed since, the wrong workspace), or a line past the last its file's chunks
    cover (a line number from an older version of the note, or off by a lot). Each scores 0 on every metric,
    read as a search that missed, in silence otherwise. `held` keeps each workspace's last lines, by NFC name."""
    last = held.setdefault(index.config.workspace, {same_name(p): n for p, n in index.store.last_lines().items()})
    who = f" (query {query['qid']})" if query.get("qid") is not None else ""
    where = f"the index of {index.config.workspace}"
    unheld: list[dict[str, Any]] = []
    named: set[str] = set()
    for r in query["relevant"]:
        path, line = r["path"], int(r["line"])
        if same_name(path) not in last:
            if path not in named:
                named.add(path)
                warn(f"{queries_path}: relevant path {path!r}{who} is no file {where} holds: no hit can cover it")
        elif line > last[same_name(path)]:
            lines = last[same_name(path)]
            warn(
                f"{queries_path}: relevant line {line} of {path!r}{who} is past the last line {where} holds of it "
                f"({lines}): no hit can cover it"
            )
        else:
            continue
        unheld.append(r)
    return unheld


def _category(query: dict[str, Any]) -> str:
    """The row a query is counted in: its category as given (0 is a category, as LoCoMo numbers them), else
    "(none)", a name no row of the whole file ("overall") can be mistaken for."""
    for key in ("category_name", "category"):
        if query.get(key) not in (None, ""):
            return str(query[key])
    return "(none)"


def evaluate(
    config: Config,
    queries_path: str | Path,
    *,
    k: int = 10,
    mode: str | None = None,
    min_score: float = 0.0,
    limit: int | None = None,
    rerank: bool | None = None,
    warn: Callable[[str], None] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """The metrics of the file's queries; `warn` is told of each relevant line no hit can cover, `progress(done,
    total)` of the queries searched (locomo-dev's 760 and the indexing of their workspaces take minutes)."""
    queries = load_queries(queries_path)[:limit]
    # A query with no relevant line (an off-topic question, as bench/abstention's) has no recall to measure:
    # scored, it counted 0 on every metric and dragged the means down in silence. It is left out and counted.
    unscored = sum(not q["relevant"] for q in queries)
    queries = [q for q in queries if q["relevant"]]
    if not queries:
        raise QueryFileError(f"{queries_path}: no query has a relevant line to score")
    base = Path(queries_path).resolve().parent
    per_category: dict[str, list[dict[str, float]]] = defaultdict(list)
    spans: list[int] = []
    took: list[float] = []
    indexes: dict[Path, MemoryIndex] = {}
    held: dict[Path, dict[str, int]] = {}
    try:
        for done, q in enumerate(queries):
            if progress is not None:
                progress(done, len(queries))
            index = query_index(indexes, config, base, q)
            if warn is not None:
                warn_unheld(warn, queries_path, index, q, held)
            response = index.search(q["query"], max_results=k, min_score=min_score, mode=mode, rerank=rerank)
            took.append(response.tookMs)
            spans.extend(h.endLine - h.startLine + 1 for h in response.results)
            scores = score_query(response.results, q["relevant"], k)
            per_category[_category(q)].append(scores)
    finally:
        for index in indexes.values():
            index.close()
    if progress is not None:
        progress(len(queries), len(queries))

    def mean(rows: list[dict[str, float]]) -> dict[str, float]:
        return {m: round(statistics.fmean(r[m] for r in rows), 3) for m in metric_names(k)} | {"n": len(rows)}

    everything = [r for rows in per_category.values() for r in rows]
    reranked = _rerank_label(config, rerank, mode)
    return {
        "k": k,
        "mode": mode or config.search.mode,
        "fusion": config.search.fusion,
        "rerank": reranked,
        "weights": {"vector": config.search.vectorWeight, "text": config.search.textWeight},
        "queries": len(everything),
        "unscored": unscored,
        "overall": mean(everything) if everything else {},
        "categories": {name: mean(rows) for name, rows in sorted(per_category.items())},
        "meanSpan": round(statistics.fmean(spans), 2) if spans else 0.0,
        "p50Ms": round(statistics.median(took), 2) if took else 0.0,
        "p95Ms": round(statistics.quantiles(took, n=20)[-1], 2) if len(took) > 1 else (took[0] if took else 0.0),
    }


def _rerank_label(config: Config, rerank: bool | None, mode: str | None) -> str:
    """What reranked the runs: 'off', or the provider/model (with `auto`, what it resolved to is in each
    response's scores; the label says the setting)."""
    choice = config.rerank.enabled if rerank is None else rerank
    if choice is False:
        return "off"
    name = f"{config.rerank.provider}/{config.rerank.model or 'maxsim'} (weight {config.rerank.weight})"
    if config.rerank.method == "learned":
        name = f"{config.rerank.provider}/{config.rerank.model or 'maxsim'}, learned ranker {_ranker(config)}"
    return f"auto: {name}" if choice == "auto" else name


def _ranker(config: Config) -> str:
    return model_for(config.rerank.rankerModel).fingerprint


def format_table(result: dict[str, Any]) -> str:
    head = (
        f"mode {result['mode']}, fusion {result['fusion']}, rerank {result['rerank']}, k {result['k']}, "
        f"{counted(result['queries'], 'query', 'queries')}"
        + (f" ({result['unscored']} more without a relevant line, not scored)" if result.get("unscored") else "")
    )
    metrics = metric_names(result["k"])
    lines = [head, f"{'category':<14}{'n':>5}" + "".join(f"{m:>9}" for m in metrics)]
    for name, row in [*result["categories"].items(), ("overall", result["overall"])]:
        lines.append(f"{name:<14}{row['n']:>5}" + "".join(f"{row[m]:>9.3f}" for m in metrics))
    lines.append(
        f"mean hit span {result['meanSpan']} lines; median search {result['p50Ms']} ms, p95 {result['p95Ms']} ms"
    )
    return "\n".join(lines)


def format_comparison(a: dict[str, Any], b: dict[str, Any]) -> str:
    """Both tables, then B - A per category and metric (points of the metric, x100)."""
    lines = ["A: " + format_table(a), "", "B: " + format_table(b), "", "B - A (points)"]
    metrics = metric_names(a["k"])  # one command's two runs: the same k
    lines.append(f"{'category':<14}{'n':>5}" + "".join(f"{m:>9}" for m in metrics))
    for name in [*a["categories"], "overall"]:
        row_a = a["overall"] if name == "overall" else a["categories"][name]
        row_b = b["overall"] if name == "overall" else b["categories"].get(name)
        if row_b is None:
            continue
        lines.append(f"{name:<14}{row_a['n']:>5}" + "".join(f"{100 * (row_b[m] - row_a[m]):>+9.1f}" for m in metrics))
    lines.append(f"median search {a['p50Ms']} ms -> {b['p50Ms']} ms")
    return "\n".join(lines)
