"""Turning a user's text into an FTS5 MATCH expression that can never carry FTS syntax.

CJK, kana and Hangul have no spaces between words, so the FTS tokenizers would see a whole sentence as one
token (unicode61) or need 3+ characters (trigram). `fts_text` spaces such characters apart in what is
indexed; in the query a run of them becomes its overlapping two-character pairs (bigrams), each a quoted
phrase of two single characters. A two-character word is then found inside any sentence, and a longer
phrase matches notes that share most of its pairs in any order (BM25 ranks those that share more higher),
under either tokenizer.

The trigram tokenizer cannot match a term shorter than three characters (`PR`, `17`, one CJK character).
`fts_text` therefore also turns punctuation and whitespace runs into one space and pads the text with a
space at each end, so every word stands between spaces; a short term is queried as the phrase `" pr "`,
which trigram matches as a whole word and unicode61 reads as the plain word `pr`.

The text is split into Unicode word tokens (letters, digits, underscore, so `ERR_SSL_PROTOCOL` stays one
token and FTS5 matches it as the phrase `err ssl protocol`). Each token is quoted, so `AND`, `NEAR(`,
`*`, `^`, `:` and quotes are plain text. Tokens are OR'ed and BM25 ranks documents that match more of
them higher; common English stop words are dropped unless nothing else is left.

FTS5 matches tokens whole, so the 7-12 characters of a commit hash that `git log --oneline` shows would not
find the note holding the full 40. A term that looks like such a hex id (`is_hex_prefix`) is also a prefix:
`"a1b2c3d"*` finds `a1b2c3d4e5...`. Words (`defaced`, `facade`: no digit) and numbers (no letter) stay exact.
"""

from __future__ import annotations

import re
import unicodedata

from .chunking import WIDE

# Vowel signs and viramas of the Indic scripts (Devanagari to Sinhala) are combining marks, which Python's `\w`
# and unicode61 both read as separators: दिल्ली (Delhi) was queried as द OR ल and matched दाल (lentils) and any
# note holding those letters, and nothing under trigram. The query keeps them in its words; `fts_text` writes
# them as private-use characters, which unicode61 reads as word characters, so a word is indexed whole. Thai,
# Lao and the other scripts written without spaces are left as they were: a whole sentence would be one word.
_INDIC_MARKS = [c for c in range(0x0900, 0x0E00) if unicodedata.category(chr(c)).startswith("M")]
_TOKEN = re.compile(r"\w+")
_MARKED_TOKEN = re.compile("[\\w" + "".join(map(chr, _INDIC_MARKS)) + "]+")  # slower: for text that is not ASCII
_WIDE_RUN = re.compile(WIDE.pattern + "+")
_SCRIPT_PARTS = re.compile(f"({_WIDE_RUN.pattern})")  # split keeping the CJK runs
# Whitespace, ASCII punctuation but `_`, and the dashes, quotes and bullets of General Punctuation: separators
# under unicode61 too, so replacing them changes nothing there. Combining marks are kept (Devanagari, Thai).
_SEPARATORS = re.compile(r"[\s!-/:-@\[-^`{-~\u2010-\u2027\u2030-\u205e]+")
MAX_TERMS = 64
HEX_PREFIX_MIN = 7  # `git log --oneline`'s short SHA
# Part of the index identity: a change to `fts_text` makes existing FTS rows wrong, so the index is rebuilt.
FTS_TEXT_VERSION = 4


def _folds() -> dict[int, str | None]:
    """Letters that users type in another form than their notes hold, which neither tokenizer folds
    (unicode61's remove_diacritics folds Latin letters only; trigram, in SQLite 3.40, nothing): Latin letters
    without their accents for trigram (unicode61 reads them so already, but for ten rare ones such as ǽ); German ß as
    `ss`; Turkish ı and İ as `i` (unicode61 lower-cases the I of `Işık` to `i`, so `ışık` missed it, and
    trigram kept the mark of `İ` lower-cased to `i` + U+0307); Russian ё as е; Greek without its accents
    (tonos, dialytika, polytonic marks); Arabic alef without its hamza or madda, and without vowel marks or
    tatweel, and Hebrew without its points (unicode61 splits a word at each such mark). Of all this the English
    dev sets hold one `é`, which unicode61 read as `e` already: their index and scores are the same."""
    table: dict[int, str | None] = {}
    for code in [*range(0x00C0, 0x0250), *range(0x1E00, 0x1F00), *range(0x0370, 0x0400), *range(0x1F00, 0x2000)]:
        letter = chr(code)
        base = "".join(c for c in unicodedata.normalize("NFD", letter) if not unicodedata.combining(c))
        if unicodedata.category(letter).startswith("L") and base and base != letter:
            table[code] = base
    table |= {ord("ß"): "ss", ord("ẞ"): "ss", ord("ı"): "i", ord("İ"): "i"}
    table |= {ord("ё"): "е", ord("Ё"): "Е", ord("\u0640"): None}
    table |= {ord(alef): "ا" for alef in "أإآٱ"}
    table |= {mark: None for mark in [*range(0x064B, 0x0660), 0x0670]}
    table |= {mark: None for mark in range(0x0591, 0x05C8) if unicodedata.category(chr(mark)).startswith("M")}
    return table


_FOLDS = _folds() | {mark: chr(0xE000 + mark - 0x0900) for mark in _INDIC_MARKS}
_DROPPED = {code: None for code, to in _FOLDS.items() if to is None}


# A short list: question words and function words that carry no topic. Measured on locomo-dev
# (docs/search-and-ranking.md).
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
    """The text as the FTS table indexes it: CJK, kana and Hangul characters spaced apart, punctuation and
    whitespace runs made one space, a space at each end. Composed (NFC), as `query_terms` composes the query:
    a note saved decomposed (macOS, `e` + U+0301) and a query typed composed, or the reverse, are the same
    words under trigram too, which compares code points as they are. Then `_FOLDS`: the query's terms pass
    here too (`_phrase`), so `strasse` finds `Straße` and `Straße` finds `Strasse`."""
    if not text.isascii():
        text = unicodedata.normalize("NFC", text).replace("i\u0307", "i").translate(_FOLDS)
        text = _WIDE_RUN.sub(lambda m: " " + " ".join(m.group()) + " ", text)
    return " " + _SEPARATORS.sub(" ", text).strip() + " "


def _split_scripts(token: str) -> list[str]:
    """A word token as query terms: its non-CJK parts whole, each CJK run as its bigrams (or its one
    character), so `alice的会议记录` gives `alice`, `的会`, `会议`, `议记`, `记录`."""
    if token.isascii():
        return [token]
    terms: list[str] = []
    for part in _SCRIPT_PARTS.split(token):
        if not part:
            continue
        if WIDE.match(part) and len(part) > 1:
            terms.extend(part[i : i + 2] for i in range(len(part) - 1))
        else:
            terms.append(part)
    return terms


def query_terms(text: str) -> list[str]:
    """Lower-cased word tokens (CJK runs as bigrams), de-duplicated in order, stop words dropped unless they
    are all there is. Composed (NFC) first: a combining mark is no word character, so a decomposed `Zürich`
    (`u` + U+0308, as macOS input and file names give it) would split into `zu` and `rich`. The marks that
    `fts_text` drops (Arabic vowels, Hebrew points) go first for the same reason: `كَتَبَ` is one word."""
    text = unicodedata.normalize("NFC", text.replace("\x00", " "))
    found = _TOKEN.findall(text) if text.isascii() else _MARKED_TOKEN.findall(text.translate(_DROPPED))
    words = (t.lower() for t in found)
    tokens = list(dict.fromkeys(term for word in words for term in _split_scripts(word)))
    kept = [t for t in tokens if t not in STOP_WORDS]
    return (kept or tokens)[:MAX_TERMS]


def used_as_name(query: str, text: str) -> bool:
    """Whether `text` writes a word of the query as a name, in the case the query types it: a word in capitals
    ("IT", "US") anywhere, a capitalised one ("Will") inside a sentence (after a lower-case word, a digit or a
    comma), where it is no sentence's first word. Lower-case words and one letter ("I") are never names. A query
    of one stop word abstains unless its notes use it so (`core.search`): "IT" over notes on the IT desk."""
    text = unicodedata.normalize("NFC", text)
    for word in dict.fromkeys(_TOKEN.findall(unicodedata.normalize("NFC", query))):
        if len(word) < 2 or word == word.lower():
            continue
        capitals = word == word.upper()
        for m in re.finditer(rf"(?<!\w){re.escape(word)}(?!\w)", text):
            before = text[max(0, m.start() - 2) : m.start()]
            if capitals or (
                len(before) == 2 and before[1] == " " and (before[0].islower() or before[0] in "0123456789,;")
            ):
                return True
    return False


def is_hex_prefix(term: str) -> bool:
    """Whether a (lower-case) query term is matched as the start of longer words too: a hex id's prefix, 7 or more
    hex digits with a digit and a letter among them (a short git SHA, a full one, another hex id). String methods,
    not a regular expression: every term of every search is asked (a lookahead pattern cost ~5 us a query)."""
    return (
        len(term) >= HEX_PREFIX_MIN and not term.strip("0123456789abcdef") and not term.isdigit() and not term.isalpha()
    )


def _phrase(term: str) -> str:
    body = " ".join(fts_text(term).split())
    if len(body) < 3:  # trigram needs 3 characters: match the word between the spaces `fts_text` guarantees
        body = f" {body} "
    quoted = '"' + body.replace('"', '""') + '"'
    return f"{quoted}*" if is_hex_prefix(term) else quoted


def fts_phrases(text: str) -> list[str]:
    """The quoted phrases, one per query term, whose OR is the MATCH expression for `text` (empty when it holds
    no word): the keyword leg of large indexes scores each apart (core.keyword_cache)."""
    return [_phrase(t) for t in query_terms(text)]


def term_match(term: str) -> str:
    """The MATCH expression for one query term (how often a term occurs: core.calibration)."""
    return _phrase(term)


def fts_match(text: str) -> str | None:
    """The MATCH expression for `text`, or None when it holds no word at all."""
    return " OR ".join(fts_phrases(text)) or None
