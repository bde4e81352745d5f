"""The question-side date parser on a table of phrases, and the date affinity of a note."""

from datetime import date

import pytest

from core.dates import Interval, affinity, only_period, parse

TODAY = date(2026, 12, 1)  # a Tuesday
D = date


@pytest.mark.parametrize(
    ("question", "start", "end"),
    [
        ("What did Nate do on 4 August, 2023?", D(2023, 8, 4), D(2023, 8, 4)),
        ("What happened on 2023-08-04 at the office?", D(2023, 8, 4), D(2023, 8, 4)),
        ("Who did Maria have dinner with on May 3, 2023?", D(2023, 5, 3), D(2023, 5, 3)),
        ("What did Joanna just finish last Friday on 23rd January 2022?", D(2022, 1, 23), D(2022, 1, 23)),
        ("What setback did Melanie face in October 2023?", D(2023, 10, 1), D(2023, 10, 31)),
        ("What changed in 2023-02?", D(2023, 2, 1), D(2023, 2, 28)),
        ("What is John doing as of November 2023?", D(2023, 11, 1), D(2023, 11, 30)),
        ("When did Melanie go camping in June?", D(2026, 6, 1), D(2026, 6, 30)),
        ("What did we decide in December?", D(2026, 12, 1), D(2026, 12, 31)),  # the current month counts
        ("What did John do the week before 23 January, 2023?", D(2023, 1, 16), D(2023, 1, 22)),
        ("What is the puppy she got two weeks before August 11, 2023?", D(2023, 7, 28), D(2023, 8, 10)),
        ("What did Maria do last weekend before April 10, 2023?", D(2023, 4, 7), D(2023, 4, 9)),
        ("What happened the day after 1 March 2024?", D(2024, 3, 2), D(2024, 3, 2)),
        ("What did we ship the week of 2024-05-08?", D(2024, 5, 6), D(2024, 5, 12)),
        ("What did I fix last week?", D(2026, 11, 23), D(2026, 11, 29)),
        ("What event did John volunteer at last weekend?", D(2026, 11, 28), D(2026, 11, 29)),
        ("What broke last month?", D(2026, 11, 1), D(2026, 11, 30)),
        ("What did Joanna write yesterday?", D(2026, 11, 30), D(2026, 11, 30)),
        ("What did we deploy 3 days ago?", D(2026, 11, 27), D(2026, 11, 29)),
        # A weekday is the latest one before today (a Tuesday): "last Tuesday" on a Tuesday is a week ago.
        ("What did I do last Tuesday?", D(2026, 11, 24), D(2026, 11, 24)),
        ("What did Dana say on Friday?", D(2026, 11, 27), D(2026, 11, 27)),
        ("What did we fix this past Monday?", D(2026, 11, 30), D(2026, 11, 30)),
        ("What did I do this morning?", D(2026, 12, 1), D(2026, 12, 1)),
        ("Who called tonight?", D(2026, 12, 1), D(2026, 12, 1)),
        ("What did we watch last night?", D(2026, 11, 30), D(2026, 11, 30)),
    ],
)
def test_phrases_give_their_interval(question: str, start: date, end: date) -> None:
    assert parse(question, TODAY) == Interval(start, end)


@pytest.mark.parametrize(
    "question",
    [
        "How many times has Melanie gone to the beach in 2023?",  # a year alone is too coarse
        "Where did Caroline move from 4 years ago?",
        "What does Dana drink in the morning?",
        "Why did PR #17 fail with ERR_SSL_PROTOCOL?",
        "What may I bring to the party?",
        "What did the Tuesday standup decide?",  # a bare weekday names no date
    ],
)
def test_no_period_gives_none(question: str) -> None:
    assert parse(question, TODAY) is None


def test_affinity_is_one_inside_and_in_the_grace_week_then_decays() -> None:
    week = Interval(D(2023, 1, 16), D(2023, 1, 22))
    assert affinity(D(2023, 1, 16), week) == 1.0
    assert affinity(D(2023, 1, 29), week) == 1.0  # 7 days after the end
    assert affinity(D(2023, 2, 12), week) == pytest.approx(0.3679, abs=1e-4)  # 14 days past the grace: e^-1
    assert affinity(D(2023, 1, 2), week) == pytest.approx(0.3679, abs=1e-4)  # 14 days before: e^-1
    assert affinity(None, week) == 0.0
    assert affinity(D(2023, 1, 16), None) == 0.0


@pytest.mark.parametrize(
    ("question", "start", "end"),
    [
        ("2026-11-20", D(2026, 11, 20), D(2026, 11, 20)),
        ("notes from 2026-11-20", D(2026, 11, 20), D(2026, 11, 20)),
        ("November 20", D(2026, 11, 20), D(2026, 11, 20)),
        ("What did I do yesterday?", D(2026, 11, 30), D(2026, 11, 30)),
        ("what happened last week", D(2026, 11, 23), D(2026, 11, 29)),
        ("What did I do in October?", D(2026, 10, 1), D(2026, 10, 31)),
        ("two days ago", D(2026, 11, 28), D(2026, 11, 30)),
        ("what did I do last Tuesday", D(2026, 11, 24), D(2026, 11, 24)),
        ("this morning", D(2026, 12, 1), D(2026, 12, 1)),
    ],
)
def test_a_question_that_only_names_a_period_is_told_apart(question, start, end):
    assert only_period(question, TODAY) == Interval(start, end)


@pytest.mark.parametrize(
    "question",
    [
        "lunch on 2026-11-20",  # a topic as well: the ranker weighs the date against it
        "What did Nate do on 4 August, 2023?",
        "what did I do",
        "in 2022",  # a year alone is no period
    ],
)
def test_a_question_with_a_topic_or_no_period_is_not(question):
    assert only_period(question, TODAY) is None
