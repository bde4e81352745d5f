"""Leaving out of the MATCH the phrases found in at least half of the rows (Store.common_phrases, fts_match):
BM25 gives them no weight, so the others rank as before, and fewer rows are matches to score."""

from __future__ import annotations

import pytest

from core.query import fts_match
from core.store import Store

TOKENIZERS = {"unicode61": "porter unicode61 remove_diacritics 2", "trigram": "trigram"}
# 10 notes: `kettle` in 8 of them, `zebra` in 3 (once, twice, three times), `quasar` in 1.
NOTES = [
    "kettle zebra zebra zebra",
    "kettle zebra zebra quasar",
    "kettle zebra",
    "kettle boiled water",
    "kettle on the stove",
    "kettle whistle",
    "kettle descaled",
    "kettle bought",
    "ERR_SSL_PROTOCOL seen in the browser",
    "an ssl error and a protocol error",
]


def build(path, tokenize: str, notes: list[str]) -> Store:
    """A real index file holding each note as one chunk (chunk id = position + 1)."""
    store = Store(path, use_vec=False)
    store.reset({"tokenizer": tokenize}, tokenize)
    with store.transaction():
        for i, text in enumerate(notes):
            store.replace_file(f"memory/{i}.md", "memory", len(text), 0, str(i), [(1, 1, text, f"h{i}")], None)
    return store


@pytest.fixture(params=sorted(TOKENIZERS))
def store(request, tmp_path):
    with build(tmp_path / "i.sqlite", TOKENIZERS[request.param], NOTES) as s:
        yield s


def test_a_phrase_in_most_rows_is_left_out_and_the_others_rank_as_before(store):
    assert store.common_phrases(["kettle", "zebra", "quasar"]) == {"kettle"}
    pruned = fts_match("kettle zebra quasar", store.common_phrases)
    assert pruned == '"zebra" OR "quasar"'

    full = store.fts_search(fts_match("kettle zebra quasar"), 20)
    kept = store.fts_search(pruned, 20)
    assert len(full) == 8 and len(kept) == 3  # the rows holding only `kettle` are no longer matches
    assert [cid for cid, _ in kept] == [cid for cid, _ in full][:3]
    # `kettle`'s clamped IDF (1e-6) was all it added to a score
    assert [s for _, s in kept] == pytest.approx([s for _, s in full[:3]], abs=1e-5)


def test_a_query_of_common_phrases_only_keeps_them_and_finds_their_rows(store):
    assert fts_match("kettle", store.common_phrases) == '"kettle"'
    assert len(store.fts_search(fts_match("kettle", store.common_phrases), 20)) == 8


def test_a_rare_phrase_of_common_tokens_is_kept(tmp_path):
    # `err`, `ssl`, `protocol` are each in 3 of 4 rows; the phrase `err ssl protocol` in one.
    notes = ["ERR_SSL_PROTOCOL", "ssl protocol err", "err ssl and protocol", "nothing here"]
    with build(tmp_path / "p.sqlite", TOKENIZERS["unicode61"], notes) as s:
        assert s.common_phrases(["err_ssl_protocol", "ssl"]) == {"ssl"}
        assert fts_match("ERR_SSL_PROTOCOL ssl", s.common_phrases) == '"err_ssl_protocol"'


def test_query_phrases_are_tokenised_as_the_index_was(tmp_path):
    # porter stems `deploying` and `deployed` alike: the query's word counts the rows of the indexed one
    with build(tmp_path / "s.sqlite", TOKENIZERS["unicode61"], ["deployed"] * 3 + ["rolled back"]) as s:
        assert s.common_phrases(["deploying", "rolling"]) == {"deploying"}
        s.reset({"tokenizer": "trigram"}, "trigram")  # a rebuild may change the tokenizer of the same file
        with s.transaction():
            for i, text in enumerate(["deployed"] * 3 + ["rolled back"]):
                s.replace_file(f"memory/{i}.md", "memory", 1, 0, str(i), [(1, 1, text, f"h{i}")], None)
        assert s.common_phrases(["deploying", "deployed", "rolled"]) == {"deployed"}


def test_a_read_only_open_and_an_index_without_rows_drop_nothing(tmp_path):
    path = tmp_path / "r.sqlite"
    with Store(path, use_vec=False) as empty:
        assert empty.common_phrases(["kettle"]) == set()  # no FTS table yet
    build(path, TOKENIZERS["unicode61"], NOTES).close()
    with Store(path, use_vec=False, readonly=True) as ro:
        assert ro.common_phrases(["kettle", "zebra"]) == {"kettle"}
