"""The FTS5 query builder (core/query.py): user text is plain words, never FTS syntax."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.query import fts_match, query_terms
from core.store import Store
from tests.sample import NOTES

DOCS = [
    "alpha AND beta OR gamma NOT delta",
    'NEAR(foo bar) prefix* ^caret "quoted words" col:on (paren thesis)',
    "'; DROP TABLE chunks; -- select star from files",
    "ERR_SSL_PROTOCOL seen after PR #17 merged",
    "日本語のメモ 한국어 메모 café",
    "the deploy was on a friday",
]
TOKENIZERS = {"unicode61": "porter unicode61 remove_diacritics 2", "trigram": "trigram"}


@pytest.fixture(scope="module", params=sorted(TOKENIZERS))
def store(request, tmp_path_factory):
    """A real index file with an FTS5 table holding DOCS, under each tokenizer."""
    tokenize = TOKENIZERS[request.param]
    s = Store(tmp_path_factory.mktemp("q") / "q.sqlite", use_vec=False)
    s.reset({"tokenizer": tokenize}, tokenize)
    with s.transaction():
        for i, text in enumerate(DOCS):
            rows = [(1, 1, text, hashlib.sha256(text.encode()).hexdigest())]
            s.replace_file(f"memory/{i}.md", "memory", len(text), 0, str(i), rows, None)
    yield s
    s.close()


def hits(store: Store, text: str) -> list[str]:
    match = fts_match(text)
    if match is None:
        return []
    found = store.chunks_by_ids(cid for cid, _ in store.fts_search(match, 10))
    return sorted(r.text for r in found.values())


def test_terms_are_lowercased_deduplicated_words():
    assert query_terms("Deploy deploy DEPLOY failed!") == ["deploy", "failed"]
    assert query_terms("ERR_SSL_PROTOCOL") == ["err_ssl_protocol"]
    assert query_terms("PR #17") == ["pr", "17"]


def test_stop_words_are_dropped_unless_they_are_all_there_is():
    assert query_terms("what is the deploy status") == ["deploy", "status"]
    assert query_terms("what is it") == ["what", "is", "it"]
    assert fts_match("who was there") == '"who" OR "was" OR "there"'


def test_operators_become_quoted_plain_terms():
    assert fts_match("alpha AND beta") == '"alpha" OR "beta"'
    assert fts_match('NEAR(foo bar) prefix* ^caret col:umn "x') == (
        '"near" OR "foo" OR "bar" OR "prefix" OR "caret" OR "col" OR "umn" OR " x "'
    )


def test_no_words_gives_none():
    for text in ("", "   ", "***", "()", '"', "🙂🙂", "\x00", "-- ;"):
        assert fts_match(text) is None, repr(text)


def test_nul_separates_words():
    assert query_terms("deploy\x00status") == ["deploy", "status"]


@pytest.mark.parametrize(
    "text",
    [
        "alpha AND beta",
        "alpha OR",
        "NOT delta",
        "NEAR(foo bar, 2)",
        "prefix*",
        "^caret",
        '"quoted words',
        'col:on "',
        "(paren thesis",
        "'; DROP TABLE chunks; --",
        "\x00deploy\x00",
        "friday 🙂 🚀",
        "files MATCH '*'",
        "col : on",
        "-beta +gamma",
    ],
)
def test_fts_syntax_in_user_text_runs_as_plain_words(store, text):
    found = hits(store, text)  # would raise apsw.SQLError on an FTS syntax error
    assert found, f"{text!r} found nothing"
    assert store.conn.execute("SELECT count(*) FROM chunks").fetchone()[0] == len(DOCS)


def test_sql_text_finds_the_note_that_contains_it(store):
    assert hits(store, "DROP TABLE") == [DOCS[2]]


def test_identifier_matches_its_note(store):
    assert hits(store, "ERR_SSL_PROTOCOL") == [DOCS[3]]


def found_in_one_note(tmp_path, tokenizer: str, note: str, query: str) -> bool:
    with Store(tmp_path / f"{tokenizer}.sqlite", use_vec=False) as s:
        s.reset({}, TOKENIZERS[tokenizer])
        s.replace_file("memory/a.md", "memory", 1, 0, "h", [(1, 1, note, "x")], None)
        return bool(s.fts_search(fts_match(query), 5))


def test_issue_number_matches_its_note_under_unicode61(tmp_path):
    assert found_in_one_note(tmp_path, "unicode61", DOCS[3], "PR #17")
    assert not found_in_one_note(tmp_path, "unicode61", DOCS[3], "#71")


def test_issue_number_matches_its_note_under_trigram(tmp_path):
    assert found_in_one_note(tmp_path, "trigram", DOCS[3], "PR #17")
    assert not found_in_one_note(tmp_path, "trigram", DOCS[3], "#71")


@pytest.mark.parametrize("tokenizer", sorted(TOKENIZERS))
def test_short_terms_match_whole_words_only(tmp_path, tokenizer):
    note = "Bob opened PR-7 (v2) for the CI job"
    assert found_in_one_note(tmp_path, tokenizer, note, "CI")
    assert found_in_one_note(tmp_path, tokenizer, note, "v2")
    assert found_in_one_note(tmp_path, tokenizer, note, "7")
    assert not found_in_one_note(tmp_path, tokenizer, note, "ob")  # inside "Bob": not a word


def test_whole_cjk_runs_and_diacritics_are_findable(store):
    assert hits(store, "日本語のメモ") == [DOCS[4]]
    assert hits(store, "café") == [DOCS[4]]


@pytest.mark.parametrize("tokenizer", sorted(TOKENIZERS))
def test_cjk_word_inside_a_sentence_is_findable(tmp_path, tokenizer):
    assert found_in_one_note(tmp_path, tokenizer, "明日は東京で会議があります", "東京")


def test_cjk_runs_become_bigrams_and_scripts_split():
    assert query_terms("会议记录") == ["会议", "议记", "记录"]
    assert query_terms("Alice的会") == ["alice", "的会"]
    assert query_terms("東") == ["東"]
    assert fts_match("東京") == '"東 京"'
    assert fts_match("東") == '" 東 "'


@pytest.mark.parametrize("tokenizer", sorted(TOKENIZERS))
@pytest.mark.parametrize(
    ("note", "query"),
    [
        ("明日は東京で会議があります", "会議"),  # a two-character word inside a sentence
        ("明日は東京で会議があります", "東京の会議"),  # a phrase the note does not hold verbatim
        ("我们决定下周三发布新版本", "新版本发布"),  # words in another order
        ("다음 주 회의는 화요일입니다", "회의"),  # a Korean word with a particle attached in the note
        ("다음 주 회의는 화요일입니다", "화요일 회의 일정"),
        ("Deploy 计划：周五上线 v2", "上线计划"),  # mixed scripts, punctuation between
    ],
)
def test_cjk_word_and_non_verbatim_phrase_are_findable(tmp_path, tokenizer, note, query):
    assert found_in_one_note(tmp_path, tokenizer, note, query)


@pytest.mark.parametrize("tokenizer", sorted(TOKENIZERS))
def test_cjk_query_sharing_no_pair_finds_nothing(tmp_path, tokenizer):
    assert not found_in_one_note(tmp_path, tokenizer, "明日は東京で会議があります", "京都")


@pytest.mark.parametrize("tokenizer", sorted(TOKENIZERS))
@pytest.mark.parametrize(
    ("note", "query"),
    [
        ("Işık Bey ılık çay içti", "ışık"),  # Turkish: unicode61 folds the note's I to i, not to ı
        ("Işık Bey ılık çay içti", "ilik"),  # typed without a Turkish keyboard
        ("Işık Bey ılık çay içti", "ILIK"),  # Turkish capitals of ı
        ("Toplantı İstanbul'da yapıldı", "İstanbul"),  # lower-cased to i + U+0307, which trigram kept
        ("Toplantı İstanbul'da yapıldı", "istanbul"),
        ("Die Straße zum Büro ist gesperrt", "strasse"),  # ß, and ss as Swiss German and ASCII keyboards write it
        ("Die Strasse zum Büro ist gesperrt", "Straße"),
        ("Отчёт написал Сергей", "отчет"),  # Russian writes ё as е more often than not
        ("Отчет написал Сергей", "ОТЧЁТ"),
        ("Ο καφές στην Αθήνα ήταν υπέροχος", "καφες"),  # Greek typed without its accents (tonos)
        ("Ο καφες στην Αθηνα", "Αθήνα"),
        ("كتب أحمد التقرير", "احمد"),  # Arabic alef with or without hamza
        ("كَتَبَ أحمد التقرير", "كتب"),  # vowel marks (harakat): unicode61 splits the word at each one
        ("Le café près de la gare", "cafe"),  # Latin accents: unicode61 folds them, trigram (SQLite 3.40) did not
        ("Une creme brulee delicieuse", "crème brûlée"),
        ("Wir treffen uns in München", "Munchen"),
        ("Die Größe der Datenbank", "grosse"),
        ("El niño comió piña", "nino pina"),
        ("שָׁלוֹם לְכֻלָּם", "שלום"),  # Hebrew vowel points (niqqud), as the harakat
        ("שלום לכולם", "שָׁלוֹם"),
        ("كتب أحمد التقرير", "كَتَبَ"),
    ],
)
def test_a_letter_typed_as_its_plain_or_foreign_keyboard_form_finds_the_note(tmp_path, tokenizer, note, query):
    assert found_in_one_note(tmp_path, tokenizer, note, query)


@pytest.mark.parametrize("tokenizer", sorted(TOKENIZERS))
def test_an_indic_word_is_matched_whole_not_by_its_consonants(tmp_path, tokenizer):
    """Vowel signs are combining marks, which unicode61 and Python's \\w both read as separators: दिल्ली (Delhi)
    was the terms द OR ल, found दाल (lentils) and any note holding those letters, and nothing under trigram."""
    assert query_terms("दिल्ली में बैठक") == ["दिल्ली", "में", "बैठक"]
    hindi = "कल हमने दिल्ली में डेटाबेस के बारे में बैठक की। राहुल ने रिपोर्ट लिखी।"
    assert found_in_one_note(tmp_path, tokenizer, hindi, "दिल्ली")
    assert found_in_one_note(tmp_path, tokenizer, hindi, "राहुल की रिपोर्ट")
    assert not found_in_one_note(tmp_path, tokenizer, hindi, "दाल")
    assert not found_in_one_note(tmp_path, tokenizer, hindi, "कुल")  # क and ल, as कल and लिखी hold them
    tamil = "நாளை சென்னையில் கூட்டம் உள்ளது"
    assert found_in_one_note(tmp_path, tokenizer, tamil, "சென்னையில்")
    assert not found_in_one_note(tmp_path, tokenizer, tamil, "கோட்டை")  # fort: கூட்டம்'s letters, another word


@pytest.mark.parametrize("tokenizer", sorted(TOKENIZERS))
def test_folded_letters_do_not_merge_other_words(tmp_path, tokenizer):
    assert not found_in_one_note(tmp_path, tokenizer, "Işık Bey ılık çay içti", "ilk")
    assert not found_in_one_note(tmp_path, tokenizer, "Мой отчёт", "мои")  # й is a letter of its own, kept


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(max_size=80))
def test_any_text_never_breaks_match(store, text):
    match = fts_match(text)
    if match is None:
        assert not query_terms(text)
        return
    assert match.count('"') % 2 == 0
    store.fts_search(match, 5)  # must not raise


SHA = "9f3c2a1b7e4d5c6f8a9b0c1d2e3f4a5b6c7d8e9f"
SHA_NOTE = f"The deploy fix landed in commit {SHA} on Friday"


def test_a_hex_id_prefix_is_matched_as_a_prefix_and_words_and_numbers_stay_exact():
    assert fts_match("9f3c2a1") == '"9f3c2a1"*'  # a short SHA, as `git log --oneline` shows it
    assert fts_match(f"commit {SHA.upper()}") == f'"commit" OR "{SHA}"*'
    # no digit (words), no letter (numbers, dates), fewer than 7 characters, not hex: exact, as before
    assert fts_match("defaced facade deadbeef") == '"defaced" OR "facade" OR "deadbeef"'
    assert fts_match("20261202 1234567 abc1234x a1b2c3 0x1f2e3d4") == (
        '"20261202" OR "1234567" OR "abc1234x" OR "a1b2c3" OR "0x1f2e3d4"'
    )


@pytest.mark.parametrize("tokenizer", sorted(TOKENIZERS))
def test_a_short_sha_finds_the_note_holding_the_full_one(tmp_path, tokenizer):
    """FTS5 matches tokens whole: `9f3c2a1` found nothing in a note holding the 40 characters (unicode61)."""
    for query in (SHA[:7], SHA[:12], SHA, f"commit {SHA[:10]}"):
        assert found_in_one_note(tmp_path, tokenizer, SHA_NOTE, query), query
    assert not found_in_one_note(tmp_path, tokenizer, SHA_NOTE, "9f3c2a2")  # another id
    # its middle is no prefix (trigram matches any substring of 3+ characters, as it always did)
    assert found_in_one_note(tmp_path, tokenizer, SHA_NOTE, "1b7e4d5") == (tokenizer == "trigram")


def test_memsift_search_of_a_short_sha_answers_with_its_note(workspace, make_config, open_index):
    """The whole search (hybrid, calibrated, the floor): `memsift search 9f3c2a1` said `No matches.`."""
    ws = workspace({**NOTES, "memory/2026-05-20.md": f"# 2026-05-20\n- {SHA_NOTE}.\n"})
    index = open_index(make_config(ws))
    index.sync()
    for query in (SHA[:7], SHA[:12]):
        results = index.search(query).results
        assert results and results[0].path == "memory/2026-05-20.md", query


def test_the_calibrated_score_counts_a_short_sha_as_held_by_the_note_it_begins():
    """`hit_cover` (the share of the question's terms a hit holds) read the short SHA as absent from the note
    the keyword leg found by it; a word is still held whole only (`defaced` is not held by `defacedly`)."""
    from core import calibration_features

    cover = calibration_features.FEATURES.index("hit_cover")

    def hit_cover(query: str, text: str) -> float:
        terms = tuple(query_terms(query))
        inputs = calibration_features.Inputs(query, terms, (1,) * len(terms), 100, (0.5,), (5.0,), (text,))
        return float(calibration_features.features(inputs)[0][cover])

    assert hit_cover(SHA[:7], SHA_NOTE) == hit_cover(SHA, SHA_NOTE) == 1.0
    assert hit_cover("9f3c2a2", SHA_NOTE) == 0.0
    assert hit_cover("defaced", "the wall was defacedly painted") == 0.0
