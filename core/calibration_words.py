"""The words of a question that calibration reads apart (core/calibration.py): identifiers (`PR #42`,
ERR_CERT_EXPIRED, `getUser`), words written as names, and whether a hit's text holds a word.

Apart from the features because the same reading decides two things: the question features count the marked
words the workspace lacks (core/calibration_features.py), and the scores cut the hits past the last one that
holds an identifier the question names (`calibration.past_identifier`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from .query import is_hex_prefix

WORD = re.compile(r"\w+", re.UNICODE)
_QUANTITY = re.compile(r"\d+(?:st|nd|rd|th|s|am|pm|k|m|h|km|kg|min)?")
# JIRA-4412, CVE-2024-3094: their numbers of 3 digits or more (UTF-8, COVID-19 and MP-3 name no ticket, and
# notes may write them utf8 or covid: a number the workspace lacks would read as something absent)
_TICKET = re.compile(r"\b[A-Z][A-Z0-9]+((?:-\d{3,})+)\b")


def identifiers(query: str) -> set[str]:
    """The question's words shaped as identifiers, lower-cased: with `_` inside, letters and digits mixed (not
    a quantity such as 15th, 10am or 5k), a lower-case letter then a capital (macOS, getUser), or a number
    after `#` (PR #42) or of 3 digits or more after an upper-case key and a hyphen (JIRA-4412, CVE-2024-3094: a
    ticket's numbers, the words the keyword leg matches; `top-10`, `covid-19` and UTF-8 are no tickets)."""
    numbers = set(re.findall(r"#(\d+)", query))
    numbers |= {n for m in _TICKET.finditer(query) for n in re.findall(r"\d+", m[1])}
    return {
        w.lower()
        for w in WORD.findall(query)
        if "_" in w.strip("_")
        or w in numbers
        or (any(c.isdigit() for c in w) and any(c.isalpha() for c in w) and not _QUANTITY.fullmatch(w.lower()))
        or re.search(r"[a-z][A-Z]", w)
    }


def marked(query: str) -> set[str]:
    """The question's words written as names, identifiers or numbers are: with a digit or `_`, or with a
    capital letter anywhere but in the first letter of the question."""
    words = WORD.findall(query)
    return {
        w.lower()
        for i, w in enumerate(words)
        if any(ch.isdigit() or ch == "_" for ch in w) or any(ch.isupper() for ch in (w[1:] if i == 0 else w))
    }


def words_in(terms: Iterable[str], lowered: str) -> set[str]:
    """Which of `terms` the lower-case text holds as words (its `\\w+` tokens), found by `str.find` and a look at
    the characters around each occurrence, twice over 10 hits a search: splitting each text into all its words
    (as before), or one regular expression of the terms between word boundaries, made `scores` 1.3-1.6 ms of
    CPU at 10,000 chunks, against 0.6 ms this way. A hex id's prefix (core.query `is_hex_prefix`) is held by the
    words it begins, as the keyword leg matches it."""
    return {t for t in terms if WORD.fullmatch(t) and _holds_word(lowered, t, is_hex_prefix(t))}


def _holds_word(text: str, word: str, prefix: bool = False) -> bool:
    """Whether `word` (word characters only) occurs in `text` with no word character either side (with `prefix`,
    before it only). A term holding another character (a combining mark left by lower(): "İ" gives "i̇") is no
    `\\w+` token of any text: `words_in` leaves it out."""
    at = text.find(word)
    while at >= 0:
        end = at + len(word)
        after = prefix or end == len(text) or not _is_word_char(text[end])
        if (at == 0 or not _is_word_char(text[at - 1])) and after:
            return True
        at = text.find(word, at + 1)
    return False


def _is_word_char(ch: str) -> bool:
    """What `\\w` matches in a str pattern: alphanumeric (`str.isalnum`) or the underscore."""
    return ch.isalnum() or ch == "_"
