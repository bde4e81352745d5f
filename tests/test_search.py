"""Hybrid search end to end (core/search.py via MemoryIndex.search) on real index files and the real model."""

from __future__ import annotations

import json
import re
import unicodedata
from datetime import date, timedelta

import pytest
from conftest import CountingEmbedder, python_calls

from core import SearchError
from core.query import fts_phrases
from core.ranking import bm25_score
from core.snippets import snippet
from core.store import Store

NOTES = {
    "MEMORY.md": "# Memory\nDana is the team lead. She drinks a flat white every morning before work.\n",
    "memory/2026-11-20.md": "Deploy failed with ERR_SSL_PROTOCOL after the proxy upgrade.\nRolled back at 14:05.\n",
    "memory/2026-11-21.md": "Code review: PR #17 merged, it fixes the flaky login test.\n",
    "memory/2026-11-23.md": "PR #71 still waits for QA on the payment page.\n",
    "memory/2026-11-22.md": "SSL certificates renewed for the staging proxy; protocol errors gone.\n",
    "memory/people.md": "We adopted a golden retriever puppy named Biscuit last spring.\n",
    "memory/trips.md": "Travel: flights to Lisbon booked for the conference in March.\n",
}


@pytest.fixture
def index(workspace, make_config, open_index, counting_embedder):
    idx = open_index(make_config(workspace(NOTES)), embedder=counting_embedder)
    idx.sync()
    return idx


def paths(response) -> list[str]:
    return [h.path for h in response.results]


def test_hybrid_finds_an_exact_identifier(index):
    response = index.search("ERR_SSL_PROTOCOL")
    assert response.mode == "hybrid" and response.degraded is None
    assert paths(response)[0] == "memory/2026-11-20.md"


def test_hybrid_finds_an_issue_number(index):
    response = index.search("PR #17")
    assert paths(response)[0] == "memory/2026-11-21.md"


def test_vector_mode_finds_a_paraphrase_without_shared_words(index):
    query = "which beverage does she enjoy at breakfast"
    assert index.search(query, mode="keyword").results == []  # no keyword in common
    response = index.search(query, mode="vector")
    assert response.mode == "vector"
    assert paths(response)[0] == "MEMORY.md"
    assert index.search("what dog did they get", mode="vector").results[0].path == "memory/people.md"


def test_vector_only_hits_below_min_score_are_dropped(index):
    response = index.search("which beverage does she enjoy at breakfast", mode="vector", min_score=0.35, explain=True)
    assert all(h.scores["vector"] >= 0.35 for h in response.results)
    assert len(response.results) < len(NOTES)


@pytest.mark.parametrize("mode", ["vector", "keyword"])
def test_a_floor_that_drops_every_hit_says_why_in_every_mode(index, mode):
    """In vector (or keyword) mode a floor that kept nothing answered [] with no reason, where hybrid search
    says `abstained`: the CLI printed a bare "No matches." for a question whose notes were all there."""
    query = "which beverage does she enjoy at breakfast"
    response = index.search(query, mode=mode, min_score=0.99)
    assert response.results == []
    if mode == "keyword":  # no keyword in common: nothing was found, there is nothing to abstain from
        assert response.abstained is None and response.empty == "no_match"
        return
    assert response.empty == "below_floor"
    assert re.fullmatch(r"the best hit's cosine was 0\.\d{3}, under the floor minScore 0\.99 .*", response.abstained)
    assert response.to_dict()["abstained"] == response.abstained
    assert index.search(query, mode=mode, min_score=0).results  # the floor, not the search, removed them


@pytest.mark.parametrize("query", ["ERR_SSL_PROTOCOL", "PR #17", "flat white", "Biscuit", "Lisbon"])
def test_the_abstention_shows_the_best_score_under_the_floor(index, query):
    """A floor just over the best hit's score: the reason read "the best hit scored 0.997, under the floor
    minScore 0.997" (and "1.000 under minScore 1"), the score rounded to three places up to the floor."""
    best = index.search(query, min_score=0).results[0].score
    floor = round(best, 3) if round(best, 3) > best + 1e-6 else round(best, 3) + 0.001
    reason = index.search(query, min_score=floor).abstained
    shown = re.fullmatch(r"the best hit scored ([0-9.]+), under the floor minScore [0-9.]+", reason)
    assert shown and float(shown[1]) < floor and abs(float(shown[1]) - best) < 1e-3, reason


def test_keyword_hit_survives_the_floor(index):
    # BM25 is tiny in a small workspace; the floor on uncalibrated (keyword-mode) scores must not drop the only
    # keyword evidence. In hybrid search the calibrated default floor keeps it too.
    assert paths(index.search("Lisbon", mode="keyword", min_score=0.99)) == ["memory/trips.md"]
    assert paths(index.search("Lisbon"))[0] == "memory/trips.md"


def test_degraded_without_embedder_answers_in_keyword_mode(workspace, make_config, open_index):
    index = open_index(make_config(workspace(NOTES)), embedder=None)
    response = index.search("ERR_SSL_PROTOCOL proxy")  # never indexed: the search syncs first
    assert response.mode == "keyword"
    assert response.degraded and "no embedder" in response.degraded
    assert response.to_dict()["degraded"] == response.degraded
    assert paths(response)[0] == "memory/2026-11-20.md"


def test_degraded_when_the_index_has_no_vectors(workspace, make_config, open_index, counting_embedder):
    config = make_config(workspace(NOTES))
    open_index(config, embedder=None).sync()
    response = open_index(config, embedder=counting_embedder).search("Biscuit puppy", mode="vector")
    assert response.mode == "keyword" and "no vectors" in response.degraded
    assert paths(response) == ["memory/people.md"]


def test_configured_provider_none_is_keyword_only(workspace, make_config, open_index):
    index = open_index(make_config(workspace(NOTES), **{"embedding.provider": "none"}))
    response = index.search("golden retriever")
    assert response.mode == "keyword" and response.degraded
    assert paths(response) == ["memory/people.md"]


def test_never_indexed_agent_with_a_broken_provider_degrades(workspace, make_config, open_index):
    # SPEC 5: the first search syncs, and never fails because the embedder cannot start.
    index = open_index(make_config(workspace(NOTES), **{"embedding.provider": "openai"}))
    response = index.search("Lisbon conference")
    assert response.mode == "keyword" and response.degraded
    assert paths(response) == ["memory/trips.md"]


def test_indexed_agent_with_a_broken_provider_degrades(workspace, make_config, open_index):
    ws = workspace(NOTES)
    open_index(make_config(ws), embedder=None).sync()
    index = open_index(make_config(ws, **{"embedding.provider": "openai"}))
    response = index.search("Lisbon conference")
    assert response.mode == "keyword" and "openai" in response.degraded
    assert paths(response) == ["memory/trips.md"]


# A newcomer's first workspace: two chunks. FTS5 floors the idf of a term in half the rows or more at 1e-6, so
# every keyword-only hit scored 2e-06 (shown as 0.000) and said nothing; Lucene's idf (core/keyword_cache.py).
TINY = {
    "MEMORY.md": "# Memory\n\nThe deploy key lives in vault under ops/deploy.\n",
    "memory/2026-11-30.md": "Met Priya about the ledger migration to Postgres.\n",
}


class QueryFailingEmbedder(CountingEmbedder):
    """The real model for documents; every query embedding fails (a provider down between sync and search)."""

    def embed_query(self, text: str):
        raise ConnectionError("provider unreachable")


def _keyword_only(workspace, make_config, open_index, how: str):
    ws = workspace(TINY)
    if how == "no embedder":
        index = open_index(make_config(ws, **{"embedding.provider": "none"}))
        return index, lambda query: index.search(query, explain=True)
    if how == "query embedding failed":
        index = open_index(make_config(ws), embedder=QueryFailingEmbedder())
        return index, lambda query: index.search(query, explain=True)
    index = open_index(make_config(ws), embedder=CountingEmbedder())
    return index, lambda query: index.search(query, mode="keyword", explain=True)


@pytest.mark.parametrize("how", ["mode keyword", "no embedder", "query embedding failed"])
def test_keyword_only_scores_say_something_on_a_tiny_index(workspace, make_config, open_index, how):
    _, search = _keyword_only(workspace, make_config, open_index, how)
    response = search("deploy key")
    assert response.mode == "keyword" and (how == "mode keyword") == (response.degraded is None)
    [hit] = response.results
    assert hit.path == "MEMORY.md" and hit.score == hit.scores["text"] > 0.5  # 2e-06 before
    # Both notes match: the one holding `deploy` twice first, and each score tells them apart.
    both = search("ledger deploy").results
    assert [h.path for h in both] == ["MEMORY.md", "memory/2026-11-30.md"]
    assert both[0].score > both[1].score > 0.3
    assert [h.path for h in search("deploy ledger vault").results] == ["MEMORY.md", "memory/2026-11-30.md"]


def test_hybrid_keeps_fts5_bm25_on_a_tiny_index(workspace, make_config, open_index):
    """The learned ranker and the calibration were trained on FTS5's bm25: hybrid search feeds them that, floor
    and all, so its results do not move (only keyword-only searches take Lucene's idf)."""
    index = open_index(make_config(workspace(TINY)), embedder=CountingEmbedder())
    index.sync()
    [(_, raw)] = index.store.fts_search(" OR ".join(fts_phrases("deploy key")), 10)
    hit = next(h for h in index.search("deploy key", explain=True, min_score=0).results if h.path == "MEMORY.md")
    assert hit.scores["text"] == round(bm25_score(raw), 6) < 1e-5


@pytest.mark.parametrize("query", ["", "   ", "\n\t"])
def test_blank_query_is_an_error(index, query):
    with pytest.raises(SearchError, match="blank"):
        index.search(query)


def test_unknown_mode_is_an_error(index):
    with pytest.raises(SearchError, match="mode"):
        index.search("proxy", mode="fuzzy")


def test_query_with_only_symbols_runs(index):
    response = index.search("*** ((( ^^^", min_score=0.0)
    assert response.mode == "hybrid"  # keyword leg empty, vector leg still answers


def test_snippet_is_cut_to_snippet_chars(workspace, make_config, open_index, counting_embedder):
    long = "The quarterly budget spreadsheet " + "with many columns " * 40 + "\n"
    ws = workspace({"MEMORY.md": long})
    index = open_index(make_config(ws, **{"search.snippetChars": 50}), embedder=counting_embedder)
    [hit] = index.search("quarterly budget spreadsheet").results
    assert len(hit.snippet) <= 50 and hit.snippet.endswith("…")  # the ellipsis counts toward the budget
    assert long.startswith(hit.snippet[:-1])


@pytest.mark.parametrize(
    "line",
    [
        "Menu " + "Phe\u0302\u0301" * 60,  # Vietnamese decomposed, as macOS writes it: `ế` is e + two accents
        "Standup " + "\U0001f469\u200d\U0001f4bb\U0001f3fd" * 40,  # woman technologist, skin tone: one emoji
    ],
)
def test_a_snippet_cut_at_the_budget_keeps_whole_characters(workspace, make_config, open_index, line):
    """A line with no space near the budget is cut there, and the cut fell between a letter and its accent
    (`Phế` shown as `Phe…`) or inside an emoji joined by U+200D: the snippet showed another word, or a stray
    joiner. It now ends before the character the budget would split."""
    ws = workspace({"MEMORY.md": line + "\n"})
    for limit in range(20, 60):
        index = open_index(make_config(ws, **{"search.snippetChars": limit}), embedder=None)
        [hit] = index.search(line.split()[0], min_score=0.0).results
        body = hit.snippet.removesuffix("…")
        assert len(hit.snippet) <= limit and hit.snippet.endswith("…") and line.startswith(body)
        after = line[len(body)]
        assert not unicodedata.category(after).startswith("M"), (limit, hit.snippet)
        assert after not in "\u200d\U0001f3fd" and not body.endswith("\u200d"), (limit, hit.snippet)


def test_result_shape_and_citation(index):
    [hit, *_] = index.search("golden retriever puppy").results
    d = hit.to_dict()
    assert d["path"] == "memory/people.md" and d["source"] == "memory"
    assert (d["startLine"], d["endLine"]) == (1, 1)
    assert d["citation"] == "memory/people.md#L1-L1"
    assert "scores" not in d
    for h in index.search("proxy ssl deploy").results:
        assert re.fullmatch(r"[\w/.-]+#L(\d+)-L(\d+)", h.citation)
        assert h.citation == f"{h.path}#L{h.startLine}-L{h.endLine}"
        assert 1 <= h.startLine <= h.endLine


def test_citations_off(workspace, make_config, open_index):
    index = open_index(make_config(workspace(NOTES), **{"search.citations": "off"}), embedder=None)
    assert index.search("Biscuit").results[0].citation is None


def test_explain_shows_leg_scores(index):
    [hit, *_] = index.search("ERR_SSL_PROTOCOL", explain=True).results
    assert set(hit.scores) >= {"vector", "text"}
    assert 0 < hit.scores["text"] < 1 and -1 <= hit.scores["vector"] <= 1


def test_results_are_sorted_by_score(index):
    scores = [h.score for h in index.search("proxy ssl certificates deploy", min_score=0.0).results]
    assert scores == sorted(scores, reverse=True)


def test_max_results_is_respected(workspace, make_config, open_index):
    ws = workspace({f"memory/n{i}.md": f"standup note {i} about the roadmap\n" for i in range(12)})
    index = open_index(make_config(ws, **{"search.maxResults": 4}), embedder=None)
    assert len(index.search("roadmap").results) == 4
    assert len(index.search("roadmap", max_results=2).results) == 2
    assert len(index.search("roadmap", max_results=10).results) == 10


@pytest.mark.parametrize("mode", ["keyword", "vector"])
def test_a_long_list_past_the_candidate_pool_is_complete_in_one_leg_modes(workspace, make_config, open_index, mode):
    """`maxResults` 100 over 120 notes gave the pool's 40 hits in keyword and vector mode; a leg's own order does
    not depend on how many it fetches, so it now fetches what is asked for, and the first 40 are still those of
    `maxResults` 40."""
    notes = {f"memory/n{i:03d}.md": f"Standup {i}: the roadmap review of team {i}.\n" for i in range(120)}
    index = open_index(make_config(workspace(notes), **{"rerank.enabled": False}))
    long = index.search("roadmap review", mode=mode, max_results=100, min_score=0).results
    assert len(long) == 100
    short = index.search("roadmap review", mode=mode, max_results=40, min_score=0).results
    assert [(h.path, h.score) for h in short] == [(h.path, h.score) for h in long[:40]]


def test_path_prefix_filters_every_leg(index):
    for mode in ("hybrid", "keyword", "vector"):
        response = index.search("proxy ssl deploy certificates", mode=mode, path_prefix="memory/2026-11-2", min_score=0)
        assert response.results, mode
        assert all(h.path.startswith("memory/2026-11-2") for h in response.results), mode
    assert paths(index.search("Dana flat white", path_prefix="memory/", min_score=0)).count("MEMORY.md") == 0
    assert paths(index.search("Dana flat white", path_prefix="MEMORY.md")) == ["MEMORY.md"]
    # `.` and `./` are the workspace, as a shell names it: every hit (`.` matched no path, "No matches.")
    everything = paths(index.search("Dana flat white", min_score=0))
    assert paths(index.search("Dana flat white", path_prefix=".", min_score=0)) == everything
    assert paths(index.search("Dana flat white", path_prefix="./", min_score=0)) == everything


def test_search_on_a_never_indexed_agent_syncs_first(workspace, make_config, open_index, counting_embedder):
    index = open_index(make_config(workspace(NOTES)), embedder=counting_embedder)
    assert index.store.identity() is None
    assert paths(index.search("Lisbon conference"))[0] == "memory/trips.md"
    assert index.store.identity() is not None


def test_changed_model_identity_degrades_instead_of_mixing_vectors(
    workspace, make_config, open_index, counting_embedder
):
    config = make_config(workspace(NOTES))
    open_index(config, embedder=counting_embedder).sync()
    with Store(config.db_path) as store, store.transaction():
        identity = store.identity()
        identity["fingerprint"] = "another-model-build"
        store.set_meta("identity", json.dumps(identity, sort_keys=True))
    response = open_index(config, embedder=counting_embedder).search("Biscuit")
    assert response.mode == "keyword" and "memsift index" in response.degraded
    assert paths(response) == ["memory/people.md"]


def test_temporal_decay_orders_the_learned_ranker_too(workspace, make_config, open_index):
    """The learned ranker (the default second stage) re-scored every candidate and read the decayed fused score
    as one signal among forty: three notes alike, 10, 20 and 30 days old, came in the same order with decay on
    (`halfLifeDays = 3`: factors 0.1, 0.01, 0.001) as with it off, the 30-day-old note above the 20-day-old one.
    Decay now scales the ranker's probability as it scales the fused score."""
    today = date.today()
    days = (30, 20, 10)
    topics = ["Dana prefers oolong tea in the morning"] * 3 + [
        "deploy pipeline broke because of the expired TLS certificate",
        "Bob is moving to the Berlin office",
        "the cat Whiskers needs a vet appointment",
    ]
    notes = {}
    for i, (age, topic) in enumerate(zip((*days, 40, 41, 42), topics)):
        day = today - timedelta(days=age)
        notes[f"memory/{day}.md"] = f"# {day}\n\n- {topic}\n- note number {i}\n"
    config = make_config(
        workspace(notes), **{"search.temporalDecay.enabled": True, "search.temporalDecay.halfLifeDays": 3}
    )
    index = open_index(config)  # the local model, whose index the learned ranker (MaxSim) needs
    index.sync()
    newest_first = [f"memory/{today - timedelta(days=d)}.md" for d in reversed(days)]
    assert paths(index.search("Dana oolong tea", min_score=0))[:3] == newest_first


RUNBOOK = "\n".join(
    ["# On-call runbook", "", "## Paging", "Page the payments rotation through the pager app."]
    + [f"- step {i}: check the dashboard panel {i} and write down what it shows" for i in range(1, 15)]
    + ["", "## Dead letter queue", "Replay the dead letter queue with `replay_dlq --since 1h` from the bastion."]
)


PARAGRAPH = " ".join(  # one long line, as a note's paragraph often is (the editor wraps it, the file does not)
    [f"Sentence {i} of the retrospective covers routine scheduling and staffing details." for i in range(1, 19)]
    + ["The outage was traced to the expired wildcard certificate on the ingress proxy."]
)


def test_a_snippet_of_a_line_longer_than_snippet_chars_shows_the_words_of_the_question(
    workspace, make_config, open_index
):
    """The window is whole lines, and a line longer than the snippet (a paragraph written as one line, a
    pasted log line) showed its first 700 characters: the words that made the hit were past them. The snippet
    now starts inside such a line, near the first of its words that holds the most of the question's."""
    ws = workspace({"memory/retro.md": "# Retro\n" + PARAGRAPH + "\n"})
    index = open_index(make_config(ws), embedder=None)
    [hit] = index.search("wildcard certificate ingress", min_score=0.0).results
    assert len(PARAGRAPH) > 1000 and len(hit.snippet) <= 700
    assert "expired wildcard certificate on the ingress proxy." in hit.snippet
    assert hit.snippet.startswith("…") and PARAGRAPH.endswith(hit.snippet[1:])
    assert hit.snippet[1:].split(" ", 1)[0] in PARAGRAPH.split(" ")  # it starts at a whole word
    assert (hit.startLine, hit.endLine) == (1, 2)  # the hit is still the whole chunk, which `get` reads
    # the long line's start holds as many of the words: the snippet starts with the line, as before
    [hit] = index.search("routine staffing", min_score=0.0).results
    assert hit.snippet.startswith("…Sentence 1 of the retrospective") and hit.snippet.endswith("…")
    assert snippet("x" * 1000 + "(zebra", 700, "zebra") == "…zebra"  # no word starts before it: at the match


def test_a_long_line_s_snippet_costs_a_few_steps_a_word():
    """The start inside a long line was found by taking, for every matching word, the union of the stems of
    every matching word in reach afresh: 153,000 calls for a line of 2,200 words (12 ms a hit at the default
    chunk of 1,600 characters, 0.45 s at 16,000). A window sliding over the words counts each in and out once."""
    line = "filler " * 600 + "deploy failed " * 800
    cut = ""

    def make() -> None:
        nonlocal cut
        cut = snippet(line, 700, "deploy failed")

    calls = python_calls(make)
    assert cut.startswith("…filler filler") and "deploy failed deploy failed" in cut and len(cut) <= 700
    assert calls < 8 * len(line.split()), calls  # 11,400: five a word


def test_a_snippet_shows_the_lines_that_hold_the_question_s_words(workspace, make_config, open_index):
    """A long chunk answered a question about its last section with its first 700 characters, which never
    held the answer: the snippet is now the window of whole lines holding the most of the question's words."""
    ws = workspace({"MEMORY.md": RUNBOOK + "\n"})
    index = open_index(make_config(ws), embedder=None)
    [hit] = index.search("how do I replay the dead letter queue", min_score=0.0).results
    assert len(RUNBOOK) > 700 >= len(hit.snippet)
    assert hit.snippet.startswith("…## Dead letter queue\nReplay the dead letter queue with `replay_dlq")
    assert RUNBOOK.endswith(hit.snippet[1:])
    # the hit is still the whole chunk, which `get` reads
    assert (hit.path, hit.startLine, hit.endLine) == ("MEMORY.md", 1, RUNBOOK.count("\n") + 1)
    # the start holds as many of the words as any window: the snippet is the chunk's start
    [hit] = index.search("page the payments rotation", min_score=0.0).results
    assert RUNBOOK.startswith(hit.snippet[:-1]) and hit.snippet.endswith("…")
    # and so it is when no word of the question is in the chunk (a paraphrase the vector leg found)
    assert snippet(RUNBOOK, 700, "how do I roll back a release") == snippet(RUNBOOK, 700)
