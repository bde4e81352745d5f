"""The `after` / `before` filters of a search (SPEC section 5): which notes a time window keeps.

A bound names a span of time. A day (`2026-11-20`, `today`, `yesterday`) is the whole local calendar day; a
date-time (`2026-11-20T14:00`, with or without an offset; without, local time) and a duration back from now
(`12h`, `7d`, `2w`, `3m`, `1y`) are instants. `after` keeps what ends at or after the start of its span,
`before` what starts at or before the end of its span: both bounds are inclusive, so `after 2026-11-20 before
2026-11-20` is that one day. In a duration `m` is months (minutes make no sense for memory notes) and months
and years are calendar ones (3m back from 31 May is 28 or 29 February).

A daily note (`memory/**/YYYY-MM-DD*.md`) spans the day in its name; any other file is the instant of its
modification time. Evergreen files (`MEMORY.md`, `memory.md`, undated `memory/` notes) carry no date: a window
keeps them unless `evergreen` is off.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta

from .errors import SearchError
from .ranking import is_evergreen, note_date

NS = 1_000_000_000
# ASCII digits, as every number memsift reads (`--max-results ٣` is refused): `\d` took `٧d` for 7 days.
_DURATION = re.compile(
    r"(\d+)\s*(h|hours?|d|days?|w|weeks?|m|mo|months?|y|years?)(?:\s+ago)?", re.IGNORECASE | re.ASCII
)
_UNIT_DAYS = {"d": 1, "w": 7}
_FORMS = "a date (YYYY-MM-DD), a date-time (YYYY-MM-DDTHH:MM), today, yesterday, or a duration such as 12h, 7d, 2w, 3m"


@dataclass(frozen=True)
class TimeWindow:
    """Inclusive bounds in epoch nanoseconds (None: open) and whether undated files are kept."""

    start_ns: int | None = None
    end_ns: int | None = None
    evergreen: bool = True
    # The same bounds as local days: a daily note's day overlaps the window exactly when it lies between them.
    # Computed once, since a filtered search asks about every file of the index.
    first_day: date | None = field(init=False, default=None, compare=False)
    last_day: date | None = field(init=False, default=None, compare=False)

    def __post_init__(self) -> None:
        for name, ns in (("first_day", self.start_ns), ("last_day", self.end_ns)):
            if ns is not None:
                try:
                    day = datetime.fromtimestamp(ns // NS).date()
                except (ValueError, OverflowError, OSError):  # `after 0001-01-01`: past the first local day
                    day = date.min if ns < 0 else date.max
                object.__setattr__(self, name, day)

    def keeps(self, path: str, mtime_ns: int) -> bool:
        day = note_date(path)
        if day is not None:
            return (self.first_day is None or day >= self.first_day) and (self.last_day is None or day <= self.last_day)
        if is_evergreen(path):
            return self.evergreen
        return (self.start_ns is None or mtime_ns >= self.start_ns) and (self.end_ns is None or mtime_ns <= self.end_ns)


def day_span(day: date) -> tuple[int, int]:
    """The first and last nanosecond of a local calendar day."""
    start = int(time.mktime(day.timetuple())) * NS
    if day == date.max:  # `before 9999-12-31`: there is no next day to start
        return start, start + 24 * 3600 * NS - 1
    end = int(time.mktime((day + timedelta(days=1)).timetuple())) * NS
    return start, end - 1


def parse_bound(text: str, now: float) -> tuple[int, int]:
    """The span (first ns, last ns) that a bound names; ValueError when it names none."""
    phrase = text.strip().lower()
    today = datetime.fromtimestamp(now).date()
    if phrase in ("today", "yesterday"):
        return day_span(today - timedelta(days=phrase == "yesterday"))
    if m := _DURATION.fullmatch(phrase):
        instant = _back(datetime.fromtimestamp(now), int(m[1]), m[2])
        ns = int(instant.timestamp() * NS)
        return ns, ns
    try:
        return day_span(date.fromisoformat(phrase))
    except ValueError:
        pass
    instant = datetime.fromisoformat(text.strip())  # naive: local time
    ns = int(instant.timestamp() * NS)
    return ns, ns


def _back(now: datetime, n: int, unit: str) -> datetime:
    u = unit[0]
    if u == "h":
        return now - timedelta(hours=n)
    if u in _UNIT_DAYS:
        return now - timedelta(days=n * _UNIT_DAYS[u])
    months = n * 12 if u == "y" else n
    year, month = divmod(now.year * 12 + now.month - 1 - months, 12)
    month += 1
    last_day = (date(year + month // 12, month % 12 + 1, 1) - timedelta(days=1)).day
    return now.replace(year=year, month=month, day=min(now.day, last_day))


def window(
    after: str | None = None, before: str | None = None, *, evergreen: bool = True, now: float | None = None
) -> TimeWindow | None:
    """The window of a search's `after`, `before` and `evergreen`, or None when they filter nothing."""
    if after is None and before is None and evergreen:
        return None
    now = time.time() if now is None else now
    start = _bound("after", after, now, 0)
    end = _bound("before", before, now, 1)
    if start is not None and end is not None and start > end:
        raise SearchError(f"after: {after!r} is later than before: {before!r}")
    return TimeWindow(start, end, evergreen)


def _bound(field: str, text: str | None, now: float, side: int) -> int | None:
    if text is None:
        return None
    if not isinstance(text, str) or not text.strip():
        raise SearchError(f"{field}: must be {_FORMS}")
    try:
        return parse_bound(text, now)[side]
    except (ValueError, OverflowError, OSError):
        if _DURATION.fullmatch(text.strip().lower()):  # a duration of the right form: "is not a duration" misled
            raise SearchError(f"{field}: {text!r} reaches back past the year 1; give a shorter duration") from None
        raise SearchError(f"{field}: {text!r} is not {_FORMS}") from None
