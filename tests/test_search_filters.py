"""`after` / `before` / `evergreen` and `pathPrefix` in core search, on real index files and the real model:
daily notes by the date in their name, other files by mtime, evergreen files kept unless asked, and the
filter applied inside both legs' candidate selection (a filtered search is never short of hits that exist)."""

from __future__ import annotations

import os
from datetime import datetime

import pytest

from core import SearchError

NOTES = {
    "MEMORY.md": "# Memory\nDana is the team lead. She drinks a flat white every morning before work.\n",
    "memory/2026-11-20.md": "Deploy failed with ERR_SSL_PROTOCOL after the proxy upgrade.\nRolled back at 14:05.\n",
    "memory/2026-11-21.md": "Code review: the deploy of PR #17 merged, it fixes the flaky login test.\n",
    "memory/2026-11-22.md": "SSL certificates renewed for the staging proxy; deploy protocol errors gone.\n",
    "memory/2026-11-23.md": "PR #71 still waits for QA on the payment page before the deploy.\n",
    "memory/people.md": "Dana adopted a golden retriever puppy named Biscuit last spring.\n",
    "notes/deploys.md": "Deploy checklist: proxy, certificates, then the smoke test.\n",
}
MODES = ("hybrid", "keyword", "vector")


def stamp(ws, rel: str, *when: int) -> None:
    t = datetime(*when).timestamp()
    os.utime(ws / rel, (t, t))


@pytest.fixture
def ws(workspace):
    root = workspace(NOTES)
    stamp(root, "notes/deploys.md", 2026, 11, 22, 9, 0)
    return root


@pytest.fixture
def index(ws, make_config, open_index, counting_embedder):
    idx = open_index(make_config(ws, extraPaths=["notes"]), embedder=counting_embedder)
    idx.sync()
    return idx


def paths(response) -> list[str]:
    return [h.path for h in response.results]


@pytest.mark.parametrize("mode", MODES)
def test_a_window_keeps_daily_notes_by_the_date_in_their_name(index, mode):
    response = index.search(
        "deploy proxy", mode=mode, after="2026-11-21", before="2026-11-22", evergreen=False, min_score=0
    )
    found = set(paths(response))
    assert found and found <= {"memory/2026-11-21.md", "memory/2026-11-22.md", "notes/deploys.md"}, found
    assert "memory/2026-11-22.md" in found  # the last day is in: inclusive bounds


@pytest.mark.parametrize("mode", MODES)
def test_other_files_are_dated_by_modification_time(index, ws, mode):
    kept = index.search("deploy checklist", mode=mode, after="2026-11-22", before="2026-11-22", min_score=0)
    assert "notes/deploys.md" in paths(kept)
    gone = index.search("deploy checklist", mode=mode, after="2026-11-23", min_score=0)
    assert "notes/deploys.md" not in paths(gone)
    stamp(ws, "notes/deploys.md", 2026, 11, 23, 8, 0)  # touched later: the next sync records the new mtime
    index.sync()
    assert "notes/deploys.md" in paths(index.search("deploy checklist", mode=mode, after="2026-11-23", min_score=0))


def test_evergreen_files_are_kept_unless_asked_otherwise(index):
    assert {"MEMORY.md", "memory/people.md"} <= set(paths(index.search("Dana", after="2026-11-23", min_score=0)))
    dated_only = paths(index.search("Dana flat white puppy", after="2026-11-23", evergreen=False, min_score=0))
    assert "MEMORY.md" not in dated_only and "memory/people.md" not in dated_only
    # Without a bound, evergreen=False alone keeps only dated notes.
    assert not {"MEMORY.md", "memory/people.md"} & set(paths(index.search("Dana", evergreen=False, min_score=0)))


def test_durations_count_back_from_now(index):
    now = datetime(2026, 11, 23, 12, 0).timestamp()
    found = set(paths(index.search("deploy", after="1d", evergreen=False, min_score=0, now=now)))
    assert found == {"memory/2026-11-22.md", "memory/2026-11-23.md"}
    found = set(paths(index.search("deploy", before="2d", evergreen=False, min_score=0, now=now, mode="keyword")))
    assert found == {"memory/2026-11-20.md", "memory/2026-11-21.md"}


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"after": "last tuesday"}, "^after: 'last tuesday' is not a date"),
        ({"before": "2026-02-30"}, "^before: '2026-02-30' is not a date"),
        ({"after": "2026-11-22", "before": "2026-11-21"}, "^after: '2026-11-22' is later than before: '2026-11-21'"),
        # a prefix no hit can have: "No matches." in silence (`--path-prefix /memory`, `~/agent/memory`)
        ({"path_prefix": "/memory"}, "^pathPrefix: '/memory' is not workspace-relative"),
        ({"path_prefix": "~/agent/memory"}, "^pathPrefix: '~/agent/memory' is not workspace-relative"),
        ({"path_prefix": "memory/../MEMORY"}, "^pathPrefix: 'memory/../MEMORY' is not workspace-relative"),
        ({"path_prefix": "memory//"}, r"^pathPrefix: 'memory//' has an empty folder name \(//\)"),
        ({"path_prefix": "memory/./"}, r"^pathPrefix: 'memory/./' has a folder named '\.'"),
        ({"path_prefix": "./memory/./2026"}, r"^pathPrefix: './memory/./2026' has a folder named '\.'"),
        # a Windows path (`memory\2026-11`): hits name paths with '/', and `get` refuses a backslash
        ({"path_prefix": "memory\\2026-11"}, r"^pathPrefix: 'memory\\\\2026-11' holds a backslash; use '/'"),
    ],
)
def test_bad_bounds_are_search_errors(index, options, message):
    with pytest.raises(SearchError, match=message):
        index.search("deploy", **options)


def test_a_bad_bound_fails_before_a_never_indexed_agent_is_synced(ws, make_config, open_index):
    index = open_index(make_config(ws), embedder=None)
    with pytest.raises(SearchError, match="^after:"):
        index.search("deploy", after="soon")
    assert index.store.identity() is None


@pytest.mark.parametrize("mode", ("keyword", "vector", "hybrid"))
def test_a_filter_acts_inside_candidate_selection(workspace, make_config, open_index, counting_embedder, mode):
    """250 old notes match better than the 5 recent ones, more than any leg over-fetches: a filter applied after
    the legs' cut would find none of the recent ones."""
    notes = {f"memory/2025-01-{1 + i % 28:02d}-n{i}.md": "roadmap roadmap budget roadmap\n" for i in range(250)}
    notes |= {
        f"memory/2026-11-{20 + i}.md": f"the roadmap came up in a long meeting about hiring, item {i}\n"
        for i in range(5)
    }
    index = open_index(make_config(workspace(notes)), embedder=counting_embedder)
    index.sync()
    response = index.search("roadmap budget", mode=mode, after="2026-11-01", max_results=5, min_score=0)
    assert sorted(paths(response)) == [f"memory/2026-11-{20 + i}.md" for i in range(5)]


@pytest.mark.parametrize("mode", MODES)
def test_the_matrix_vector_leg_filters_too(index, mode, monkeypatch):
    monkeypatch.setattr("core.store_search.MATRIX_MIN_CHUNKS", 1)  # every index counts as large: numpy answers
    response = index.search("deploy proxy", mode=mode, after="2026-11-23", evergreen=False, min_score=0)
    assert paths(response) == ["memory/2026-11-23.md"]
    response = index.search("deploy proxy", mode=mode, path_prefix="memory/2026-11-2", min_score=0, max_results=10)
    assert len(response.results) == 4 and all(p.startswith("memory/2026-11-2") for p in paths(response))


def test_path_prefix_and_window_combine(index):
    response = index.search("deploy", path_prefix="memory/", after="2026-11-22", min_score=0, max_results=10)
    # the two notes that say "deploy" first; with no floor, vector neighbours follow, inside both filters
    assert set(paths(response)[:2]) == {"memory/2026-11-22.md", "memory/2026-11-23.md"}
    assert all(
        p.startswith("memory/") and p not in ("memory/2026-11-20.md", "memory/2026-11-21.md") for p in paths(response)
    )


@pytest.mark.parametrize("prefix", ["./memory/2026-11-2", "././memory/2026-11-2"])
def test_a_path_prefix_as_a_shell_completes_it_names_the_same_files(index, prefix):
    """`--path-prefix ./memory/` (tab completion) answered nothing: no indexed path starts with "./". `get`
    takes `./MEMORY.md` for `MEMORY.md` already; a prefix is read the same way."""
    plain = index.search("deploy proxy", path_prefix="memory/2026-11-2", min_score=0, max_results=10)
    dotted = index.search("deploy proxy", path_prefix=prefix, min_score=0, max_results=10)
    assert len(paths(plain)) == 4
    assert paths(dotted) == paths(plain)


def test_a_daily_note_whose_name_is_no_calendar_date_is_said_to_be_undated(workspace, make_config, open_index):
    """`memory/2026-02-30.md` looks like a daily note but names no day: it is undated, so a window keeps it as
    evergreen (`after` May included) and `evergreen=False` drops it. The sync says so, naming the file, rather
    than leaving the user to wonder why a February note answers a question about May."""
    ws = workspace(
        {
            "memory/2026-02-30.md": "The ibex climbed the north cliff.\n",
            "memory/2026-13-01-meeting.md": "The ibex meeting moved to the annex.\n",
            "memory/2026-05-14.md": "The ibex was seen again near the lake.\n",
            "memory/2026-5-7.md": "The ibex slept all day.\n",  # a day, written unpadded: not a daily note's name
            "memory/2026-05-14-2.md": "The ibex again.\n",  # dated, and a number after: no warning
        }
    )
    index = open_index(make_config(ws))
    warnings = [w for w in index.sync().warnings if "in its name" in w]
    assert len(warnings) == 3, warnings
    assert warnings[0].startswith("memory/2026-02-30.md: 2026-02-30 in its name is not a calendar date")
    assert warnings[1].startswith("memory/2026-13-01-meeting.md: 2026-13-01 in its name is not a calendar date")
    assert warnings[2].startswith("memory/2026-5-7.md: 2026-5-7 in its name is not written YYYY-MM-DD")
    assert all("undated" in w for w in warnings)
    kept = paths(index.search("ibex", after="2026-05-01", min_score=0))
    assert "memory/2026-02-30.md" in kept  # as the warning says: undated, kept as evergreen
    dated = paths(index.search("ibex", before="2026-03-31", evergreen=False, min_score=0))
    assert "memory/2026-02-30.md" not in dated


def test_a_question_that_only_names_a_day_answers_with_that_days_note_first(workspace, make_config, open_index):
    """The learned hybrid search put the next day's note, which names the date in its text, above the day's own."""
    day = "# {}\n\n- Morning: {}.\n- Lunch with the team at {}.\n"
    ws = workspace(
        {
            "memory/2026-11-19.md": day.format("2026-11-19", "rotated the API keys", "Sakura"),
            "memory/2026-11-20.md": day.format("2026-11-20", "shipped the search ranking fix", "Luigi"),
            "memory/2026-11-21.md": day.format("2026-11-21", "paired with Ben on the index", "Luigi")
            + "- Follow-up from 2026-11-20: still waiting on review.\n",
            "memory/2026-11-23.md": day.format("2026-11-23", "planned the roadmap", "the canteen"),
        }
    )
    index = open_index(make_config(ws))
    index.sync()
    now = datetime(2026, 12, 3, 12).timestamp()
    for query in ("2026-11-20", "notes from 2026-11-20"):
        response = index.search(query, now=now, min_score=0)
        assert paths(response)[0] == "memory/2026-11-20.md", (query, paths(response))
        scores = [h.score for h in response.results]
        assert scores == sorted(scores, reverse=True)
    # With a topic the ranker's order stands: the rule is for questions that name nothing but the day.
    assert paths(index.search("Follow-up review 2026-11-20", now=now, min_score=0))[0] == "memory/2026-11-21.md"


def test_a_question_that_only_names_a_day_finds_that_days_note_among_many(workspace, make_config, open_index):
    """Its words match nothing: the day's note, unlike the others, was not among the vector leg's nearest chunks."""
    chores = ["answered mail", "had lunch with the team", "wrote some code", "went for a walk", "read a book"]
    notes = {
        f"memory/2026-{10 + i // 30:02d}-{1 + i % 30:02d}.md": f"I did: {chores[i % 5]}, then {chores[i % 3]}.\n"
        for i in range(45)
    }
    notes["memory/2026-12-01.md"] = "Kubernetes cluster upgraded to 1.31; etcd snapshot restored on the spare node.\n"
    index = open_index(make_config(workspace(notes)))
    index.sync()
    response = index.search("what did I do two days ago", now=datetime(2026, 12, 3, 12).timestamp(), min_score=0)
    assert paths(response)[0] == "memory/2026-12-01.md", paths(response)


def test_a_question_that_only_names_a_period_answers_at_the_default_floor(workspace, make_config, open_index):
    """ "What did I do last week" abstained at the default floor (0.082): calibration reads how much of the
    question the notes hold as text, and a daily note's date is in its name. The notes of the period are what
    it asks for: they answer, first and above the floor; a period without notes still abstains."""
    chores = ["answered mail", "had lunch with the team", "wrote some code", "went for a walk", "read a book"]
    notes = {f"memory/2026-11-{d:02d}.md": f"I did: {chores[d % 5]}, then {chores[d % 3]}.\n" for d in range(2, 30)}
    notes["MEMORY.md"] = "# Memory\n- The team lunch is on Thursdays.\n"
    index = open_index(make_config(workspace(notes)))
    index.sync()
    now = datetime(2026, 12, 3, 12).timestamp()  # a Thursday: last week is 23-29 November
    response = index.search("what did I do last week", now=now)
    days = paths(response)
    assert len(days) == 6 and all("2026-11-23" <= p[7:17] <= "2026-11-29" for p in days), days
    assert all(h.score >= 0.9 for h in response.results)
    assert index.search("what did I do on 1 March 2026", now=now).results == []
