"""Dates and periods named in a question, as one interval of days, and how close a dated note is to it.

Agent memory is written day by day (`memory/YYYY-MM-DD.md`), and questions often say when: "on 4 August,
2023", "in June", "the week before 23 January, 2023", "last week", "last Tuesday", "this morning". The learned
ranker (core/ranker_features.py) uses the interval as a signal, date affinity: measured over memsift's own
candidates on locomo-dev it was worth +1.6 points of nDCG@10 on its own (issue 18). A year alone ("in 2022") is
too coarse to help and yields no interval. Relative phrases are anchored on a date the question names, else on
today.
"""

from __future__ import annotations

import calendar
import math
import re
from dataclasses import dataclass
from datetime import date, timedelta

from .query import STOP_WORDS

#: A note dated this many days after the interval still counts as inside it: people write about a day later.
GRACE_DAYS = 7
#: Outside the interval (and its grace), affinity decays as exp(-gap / DECAY_DAYS).
DECAY_DAYS = 14.0

_MONTHS = {name.lower(): i for i, name in enumerate(calendar.month_name) if name}
_MONTHS |= {name.lower(): i for i, name in enumerate(calendar.month_abbr) if name}
_MONTHS["sept"] = 9
_MONTH = r"(?P<month>" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"
_DAY = r"(?P<day>\d{1,2})(?:st|nd|rd|th)?"
_YEAR = r"(?P<year>(?:19|20)\d{2})"
_UNIT = r"(?P<unit>day|weekend|week|month)"
_COUNT = r"(?P<count>\d+|a|an|one|two|three|four|five|six|seven|eight|nine|ten)"
_WORDS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7}
_WORDS |= {"eight": 8, "nine": 9, "ten": 10}

# Absolute dates, most specific first; each names the span it covers ("day" or "month").
_ABSOLUTE: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"\b(?P<year>\d{4})-(?P<mnum>\d{2})-(?P<day>\d{2})\b"), "day"),
    (re.compile(rf"\b{_DAY}(?:\s+of)?\s+{_MONTH},?\s+{_YEAR}\b", re.I), "day"),
    (re.compile(rf"\b{_MONTH}\s+{_DAY},?\s+{_YEAR}\b", re.I), "day"),
    (re.compile(r"\b(?P<year>\d{4})-(?P<mnum>\d{2})\b(?!-)"), "month"),
    (re.compile(rf"\b{_MONTH},?\s+{_YEAR}\b", re.I), "month"),
    (re.compile(rf"\b{_DAY}(?:\s+of)?\s+{_MONTH}\b", re.I), "day"),
    (re.compile(rf"\b{_MONTH}\s+{_DAY}\b(?!\s*[,:]?\s*\d)", re.I), "day"),
    (
        re.compile(rf"\b(?:in|during|since|early|late|mid|of|by)\s+(?:early\s+|late\s+|mid-?\s*)?{_MONTH}\b", re.I),
        "month",
    ),
]
# A relative phrase right before an absolute date shifts it: "the week before 23 January, 2023".
_SHIFT = re.compile(rf"\b(?:the\s+|last\s+|a\s+)?{_COUNT}?\s*{_UNIT}s?\s+(?P<dir>before|after|prior\s+to|of)\s+$", re.I)
# Relative phrases anchored on the anchor day (a date named elsewhere in the question, else today).
_AGO = re.compile(rf"\b{_COUNT}\s+{_UNIT}s?\s+ago\b", re.I)
_LAST = re.compile(rf"\b(?:last|past|previous)\s+{_UNIT}\b", re.I)
_THIS = re.compile(rf"\bthis\s+{_UNIT}\b", re.I)
_YESTERDAY = re.compile(r"\b(?:yesterday|last\s+night)\b", re.I)
_TODAY = re.compile(r"\b(?:today|tonight|this\s+(?:morning|afternoon|evening))\b", re.I)
_WEEKDAYS = {name.lower(): i for i, name in enumerate(calendar.day_name)}
# "last Tuesday", "on Friday": the latest such day before the anchor. A bare weekday ("the Tuesday standup")
# names no date.
_WEEKDAY = re.compile(rf"\b(?:(?:this\s+)?past|last|previous|on)\s+(?P<weekday>{'|'.join(_WEEKDAYS)})\b", re.I)
_PHRASES = [pattern for pattern, _ in _ABSOLUTE] + [_AGO, _LAST, _WEEKDAY, _THIS, _YESTERDAY, _TODAY]
#: Words that ask for a period's notes without naming a topic: "notes from 2026-11-20", "what happened last week".
_NO_TOPIC = frozenset(
    "notes note daily day days week weeks weekend month months ago last past previous happened wrote written log "
    "entries entry journal".split()
)


@dataclass(frozen=True)
class Interval:
    """Days from `start` to `end`, both included."""

    start: date
    end: date

    def holds(self, day: date | None) -> bool:
        return day is not None and self.start <= day <= self.end


def parse(question: str, today: date) -> Interval | None:
    """The period the question is about, or None when it names none (or only a year)."""
    found = _absolute(question, today)
    if found is not None:
        interval, prefix = found
        shifted = _shift(prefix, interval)
        return shifted or interval
    return _relative(question, today)


def only_period(question: str, today: date) -> Interval | None:
    """The period of a question that names nothing else ("2026-11-20", "what did I do yesterday", "notes from
    last week"), else None. Such a question asks for the notes of that period, whatever words they hold: ranked
    on their words, the note of the next day that mentions the date came first (search puts the period's own
    notes first). No question of locomo-dev or cosqa-dev is one, so the learned ranker never sees the rule."""
    period = parse(question, today)
    if period is None:
        return None
    rest = question
    for pattern in _PHRASES:
        rest = pattern.sub(" ", rest)
    words = {w.lower() for w in re.findall(r"\w+", rest)}
    return None if words - STOP_WORDS - _NO_TOPIC else period


def affinity(note: date | None, interval: Interval | None) -> float:
    """1 for a note dated inside the interval (or up to GRACE_DAYS after), exp(-gap / DECAY_DAYS) outside it;
    0 when either is missing."""
    if note is None or interval is None:
        return 0.0
    if note < interval.start:
        gap = (interval.start - note).days
    else:
        gap = max(0, (note - interval.end).days - GRACE_DAYS)
    return math.exp(-gap / DECAY_DAYS)


def _absolute(question: str, today: date) -> tuple[Interval, str] | None:
    """The first absolute date in the question (by the most specific pattern) and the text before it."""
    for pattern, span in _ABSOLUTE:
        for m in pattern.finditer(question):
            parts = m.groupdict()
            month = int(parts["mnum"]) if parts.get("mnum") else _MONTHS[parts["month"].lower().rstrip(".")]
            year = int(parts["year"]) if parts.get("year") else _year_for(month, today)
            if not 1 <= month <= 12:
                continue
            if span == "month":
                start = date(year, month, 1)
                return Interval(start, date(year, month, calendar.monthrange(year, month)[1])), question[: m.start()]
            try:
                day = date(year, month, int(parts["day"]))
            except ValueError:
                continue
            return Interval(day, day), question[: m.start()]
    return None


def _year_for(month: int, today: date) -> int:
    """A month named without a year: its latest occurrence up to today (memory is about the past)."""
    return today.year if month <= today.month else today.year - 1


def _shift(prefix: str, interval: Interval) -> Interval | None:
    m = _SHIFT.search(prefix)
    if m is None:
        return None
    direction = m["dir"].lower()
    if direction == "of":  # "the week of 3 May": the week around it
        if m["unit"].lower() != "week":
            return None
        start = interval.start - timedelta(days=interval.start.weekday())
        return Interval(start, start + timedelta(days=6))
    days = _days(m["unit"]) * _count(m["count"])
    if direction == "after":
        return Interval(interval.end + timedelta(days=1), interval.end + timedelta(days=days))
    return Interval(interval.start - timedelta(days=days), interval.start - timedelta(days=1))


def _relative(question: str, today: date) -> Interval | None:
    if m := _AGO.search(question):
        days = _days(m["unit"]) * _count(m["count"])
        center = today - timedelta(days=days)
        slack = max(1, days // 7)
        return Interval(center - timedelta(days=slack), center + timedelta(days=slack))
    if m := _LAST.search(question):
        unit = m["unit"].lower()
        if unit == "month":
            last = today.replace(day=1) - timedelta(days=1)
            return Interval(last.replace(day=1), last)
        if unit == "day":
            return Interval(today - timedelta(days=1), today - timedelta(days=1))
        monday = today - timedelta(days=today.weekday() + 7)
        return (
            Interval(monday + timedelta(days=5), monday + timedelta(days=6))
            if unit == "weekend"
            else Interval(monday, monday + timedelta(days=6))
        )
    if m := _WEEKDAY.search(question):
        back = (today.weekday() - _WEEKDAYS[m["weekday"].lower()] - 1) % 7 + 1
        return Interval(today - timedelta(days=back), today - timedelta(days=back))
    if m := _THIS.search(question):
        unit = m["unit"].lower()
        if unit == "month":
            return Interval(today.replace(day=1), today)
        return Interval(today - timedelta(days=today.weekday()), today)
    if _YESTERDAY.search(question):
        return Interval(today - timedelta(days=1), today - timedelta(days=1))
    if _TODAY.search(question):
        return Interval(today, today)
    return None


def _days(unit: str) -> int:
    return {"day": 1, "weekend": 3, "week": 7, "month": 30}[unit.lower()]


def _count(text: str | None) -> int:
    if not text:
        return 1
    return int(text) if text.isdigit() else _WORDS[text.lower()]
