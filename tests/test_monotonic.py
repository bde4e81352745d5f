"""Top-k is monotonic (SPEC section 5): with maxResults k, the first j < k hits are those of maxResults j.

Hypothesis draws queries from the words of a real index (the real local model, real files) and compares the
top j of maxResults 10 with maxResults j for j = 1..9, in every mode, with the rerank, MMR and decay on. It
fails when any stage before the cut sees candidates that depend on maxResults (the legs once over-fetched
`maxResults x candidateMultiplier`).
"""

from __future__ import annotations

import random
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

PEOPLE = ["Dana", "Marco", "Priya", "Jon", "Aiko", "Lena"]
THINGS = [
    "the deploy failed with a certificate error on the staging proxy",
    "booked flights to Lisbon for the conference in March",
    "the puppy Biscuit chewed the garden hose again",
    "payment page waits for QA before the release",
    "switched the ledger service to PostgreSQL 15",
    "started learning the cello on Tuesday evenings",
    "the roadmap review moved the offline mode to Q1",
    "ran a half marathon in the rain and felt great",
    "the flaky login test was fixed by retrying the token fetch",
    "planted tomatoes and basil on the balcony",
    "the budget spreadsheet needs the new hiring numbers",
    "adopted a grey cat from the shelter downtown",
]
WORDS = sorted({w.strip(".,").lower() for t in THINGS for w in t.split()} | {p.lower() for p in PEOPLE})


def notes() -> dict[str, str]:
    """Ninety daily notes of overlapping topics: more candidates than a small maxResults ever over-fetched."""
    rng = random.Random(18)
    out = {"MEMORY.md": "# Memory\n" + "".join(f"- {p} {rng.choice(THINGS)}.\n" for p in PEOPLE)}
    for i in range(90):
        day = f"2026-{1 + i // 28:02d}-{1 + i % 28:02d}"
        lines = [f"{rng.choice(PEOPLE)}: {rng.choice(THINGS)}." for _ in range(rng.randint(2, 6))]
        out[f"memory/{day}.md"] = f"# {day}\n\n" + "\n".join(lines) + "\n"
    return out


@pytest.fixture
def index(workspace, make_config, open_index):
    config = make_config(
        workspace(notes()),
        **{"search.mmr.enabled": True, "search.temporalDecay.enabled": True, "rerank.enabled": True},
    )
    idx = open_index(config)
    idx.sync()
    return idx


def key(response) -> list[tuple[str, int, float]]:
    return [(h.path, h.startLine, h.score) for h in response.results]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    words=st.lists(st.sampled_from(WORDS), min_size=1, max_size=4),
    mode=st.sampled_from(["hybrid", "keyword", "vector"]),
    floor=st.sampled_from([0.0, None]),
)
def test_the_first_j_hits_of_k_10_are_those_of_k_j(index, words: list[str], mode: str, floor: float | None) -> None:
    """With no floor and with the default one (calibrated scores never increase down the order, so the floor
    keeps a prefix of it): the same hits in the same order, with the same scores to 1e-6. One `now` for every
    search, since decay is continuous in a note's age; and scores compared to a tolerance, since the rerank's
    float32 products may differ in their last bits between a cold and a warm cache, which the six decimals of a
    hit's score show when a value sits on a rounding boundary (CI saw 0.001553 against 0.001554 once)."""
    query = " ".join(words)
    now = time.time()
    top = key(index.search(query, mode=mode, max_results=10, min_score=floor, now=now))
    for j in range(1, 10):
        got = key(index.search(query, mode=mode, max_results=j, min_score=floor, now=now))
        assert [(p, line) for p, line, _ in got] == [(p, line) for p, line, _ in top[:j]], (query, mode, j)
        assert [s for _, _, s in got] == pytest.approx([s for _, _, s in top[:j]], abs=1.5e-6), (query, mode, j)
