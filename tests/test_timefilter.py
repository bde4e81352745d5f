"""core/timefilter.py: the phrases `after` / `before` accept, and which files a window keeps.

Expected spans are written with datetime in local time (the module uses time.mktime), so the table holds in
any time zone.
"""

from __future__ import annotations

from datetime import datetime

import pytest

from core.errors import SearchError
from core.timefilter import NS, TimeWindow, parse_bound, window

NOW = datetime(2026, 5, 31, 15, 30)  # local time; the 31st shows how months clamp


def ns(*parts: int) -> int:
    return int(datetime(*parts).timestamp()) * NS


def day(y: int, m: int, d: int) -> tuple[int, int]:
    start = ns(y, m, d)
    end = int(datetime.fromordinal(datetime(y, m, d).toordinal() + 1).timestamp()) * NS - 1
    return start, end


def instant(*parts: int) -> tuple[int, int]:
    return ns(*parts), ns(*parts)


PHRASES = [
    ("2026-11-20", day(2026, 11, 20)),
    ("  2026-11-20 ", day(2026, 11, 20)),
    ("2026-11-20T14:05", instant(2026, 11, 20, 14, 5)),
    ("2026-11-20 14:05:30", instant(2026, 11, 20, 14, 5, 30)),
    ("2026-11-20T14:05:00+00:00", (int(datetime.fromisoformat("2026-11-20T14:05:00+00:00").timestamp()) * NS,) * 2),
    ("2026-11-20T14:05Z", (int(datetime.fromisoformat("2026-11-20T14:05:00+00:00").timestamp()) * NS,) * 2),
    ("today", day(2026, 5, 31)),
    ("Today", day(2026, 5, 31)),
    ("yesterday", day(2026, 5, 30)),
    ("12h", instant(2026, 5, 31, 3, 30)),
    ("1 hour", instant(2026, 5, 31, 14, 30)),
    ("7d", instant(2026, 5, 24, 15, 30)),
    ("7 days ago", instant(2026, 5, 24, 15, 30)),
    ("0d", instant(2026, 5, 31, 15, 30)),
    ("2w", instant(2026, 5, 17, 15, 30)),
    ("3m", instant(2026, 2, 28, 15, 30)),  # calendar months, the day clamped to February's last
    ("6mo", instant(2025, 11, 30, 15, 30)),
    ("1 month", instant(2026, 4, 30, 15, 30)),
    ("17m", instant(2024, 12, 31, 15, 30)),
    ("1y", instant(2025, 5, 31, 15, 30)),
    ("2 YEARS", instant(2024, 5, 31, 15, 30)),
]


@pytest.mark.parametrize(("phrase", "span"), PHRASES)
def test_a_phrase_names_a_span(phrase, span):
    assert parse_bound(phrase, NOW.timestamp()) == span


@pytest.mark.parametrize(
    "phrase", ["", "  ", "last week", "7", "7x", "-7d", "d7", "2026-13-01", "2026-02-30", "tomorrow", "7d later", "٧d"]
)
def test_a_bad_phrase_is_a_clear_error_naming_the_field(phrase):
    with pytest.raises(SearchError, match=r"^before: .*(YYYY-MM-DD).*7d"):
        window(before=phrase, now=NOW.timestamp())


def test_a_huge_duration_is_an_error_not_a_crash():
    """A duration past the year 1 said "is not ... a duration such as 12h", of a duration of that very form."""
    for phrase in ("999999y", "99999999d", "9" * 5000 + "h"):
        with pytest.raises(SearchError, match=f"^after: '{phrase}' reaches back past the year 1"):
            window(after=phrase, now=NOW.timestamp())


def test_a_duration_of_many_digits_is_a_duration():
    """`1000000h` (114 years) was "not a date ... or a duration": the pattern took at most 6 digits."""
    assert parse_bound("1000000h", NOW.timestamp()) == instant(1912, 5, 2, 23, 30)


def test_the_first_and_last_dates_are_open_bounds():
    """`after 0001-01-01` was a ValueError ("year 0 is out of range": a 500 over REST), `before 9999-12-31`
    "not a date"; both are the usual way to say "no bound"."""
    w = window(after="0001-01-01", before="9999-12-31", evergreen=False)
    assert w is not None and w.keeps("memory/2026-11-20.md", 0) and w.keeps("notes/a.md", 1_700_000_000 * NS)
    assert w.keeps("memory/0001-01-01.md", 0) and w.keeps("memory/9999-12-31.md", 0)
    assert not window(before="0001-01-01", evergreen=False).keeps("memory/2026-11-20.md", 0)
    assert not window(after="9999-12-31", evergreen=False).keeps("notes/a.md", 1_700_000_000 * NS)


def test_after_later_than_before_is_an_error():
    with pytest.raises(SearchError, match="^after: '2026-11-21' is later than before: '2026-11-20'"):
        window(after="2026-11-21", before="2026-11-20")


def test_no_bound_and_evergreen_is_no_window():
    assert window() is None
    assert window(evergreen=False) == TimeWindow(None, None, False)


def test_bounds_are_inclusive_days():
    w = window(after="2026-11-20", before="2026-11-20", now=NOW.timestamp())
    assert (w.start_ns, w.end_ns) == day(2026, 11, 20)
    assert w.keeps("memory/2026-11-20.md", 0)
    assert not w.keeps("memory/2026-11-19.md", 0) and not w.keeps("memory/2026-11-21.md", 0)
    # Other files by modification time: the first and last nanosecond of the day are in.
    first, last = day(2026, 11, 20)
    assert w.keeps("notes/a.md", first) and w.keeps("notes/a.md", last)
    assert not w.keeps("notes/a.md", first - 1) and not w.keeps("notes/a.md", last + 1)


def test_a_daily_note_is_dated_by_name_not_mtime():
    w = window(after="7d", now=NOW.timestamp())
    recent = ns(2026, 5, 30)
    assert not w.keeps("memory/2026-01-02.md", recent)
    assert w.keeps("memory/2026-05-24-standup.md", 0)  # its day ends after 7d back, 15:30
    assert w.keeps("memory/work/2026-05-29.md", 0)
    assert not w.keeps("memory/2026-05-23.md", recent)
    assert w.keeps("sessions/abc.jsonl", recent) and not w.keeps("sessions/abc.jsonl", ns(2026, 5, 1))


def test_evergreen_files_are_kept_unless_asked_otherwise():
    kept = window(after="1d", now=NOW.timestamp())
    dropped = window(after="1d", evergreen=False, now=NOW.timestamp())
    for path in ("MEMORY.md", "memory.md", "memory/people.md"):
        assert kept.keeps(path, 0)
        assert not dropped.keeps(path, ns(2026, 5, 31))
    assert dropped.keeps("memory/2026-05-31.md", 0)
