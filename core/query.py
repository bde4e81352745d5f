"""Turning a user's text into an FTS5 MATCH expression that can never carry FTS syntax.

CJK, kana and Hangul have no spaces between words, so the FTS tokenizers would see a whole sentence as one
token (unicode61) or need 3+ characters (trigram). `fts_text` spaces such characters apart, both in what is
indexed and in the query, where a run becomes a quoted phrase of single characters: a two-character word
is then found inside any sentence, under either tokenizer.

The text is split into Unicode word tokens (letters, digits, underscore, so `ERR_SSL_PROTOCOL` stays one
token and FTS5 matches it as the phrase `err ssl protocol`). Each token is quoted, so `AND`, `NEAR(`,
`*`, `^`, `:` and quotes are plain text. Tokens are OR'ed and BM25 ranks documents that match more of
them higher; common English stop words are dropped unless nothing else is left.
"""

from __future__ import annotations

import re

from .chunking import WIDE

_TOKEN = re.compile(r"\w+", re.UNICODE)
_WIDE_RUN = re.compile(WIDE.pattern + "+")
MAX_TERMS = 64

# A short list: question words and function words that carry no topic. Measured on locomo-dev (README).
STOP_WORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before being below
    between both but by can could did do does doing down during each few for from further had has have
    having he her here hers herself him himself his how i if in into is it its itself just me more most my
    myself no nor not now of off on once only or other our ours ourselves out over own same she should so
    some such than that the their theirs them themselves then there these they this those through to too
    under until up very was we were what when where which while who whom why will with would you your
    yours yourself yourselves""".split()
)


def fts_text(text: str) -> str:
    """The text as the FTS table indexes it: each CJK, kana or Hangul character spaced apart."""
    if text.isascii():
        return text
    return _WIDE_RUN.sub(lambda m: " " + " ".join(m.group()) + " ", text)


def query_terms(text: str) -> list[str]:
    """Lower-cased word tokens, de-duplicated in order, stop words dropped unless they are all there is."""
    tokens = list(dict.fromkeys(t.lower() for t in _TOKEN.findall(text.replace("\x00", " "))))
    kept = [t for t in tokens if t not in STOP_WORDS]
    return (kept or tokens)[:MAX_TERMS]


def fts_match(text: str) -> str | None:
    """The MATCH expression for `text`, or None when it holds no word at all."""
    terms = query_terms(text)
    if not terms:
        return None
    return " OR ".join('"' + " ".join(fts_text(t).split()).replace('"', '""') + '"' for t in terms)
