"""Words of languages other than English are found as they were written, on both back
ends (found by review on 2026-12-07)."""

from __future__ import annotations

import pytest

from engine.store import Store
from memory.search import Search, query_terms
from tests.memory.test_search import indexed


@pytest.mark.parametrize(
    ("said", "query", "snippet"),
    [
        ("我们下周去东京旅游，已经订好了酒店", "东京", "我们下周去[东京]旅游"),
        ("来週は東京に行きます", "東京", "来週は[東京]に行きます"),
        ("我们下周去东京旅游", "东京旅游", "[东京旅游]"),
        ("买了一个iPhone手机壳", "手机", "iPhone[手机]壳"),
    ],
    ids=["chinese", "japanese", "a-longer-word", "beside-latin-letters"],
)
async def test_a_cjk_word_inside_a_sentence_is_found(
    store: Store, said: str, query: str, snippet: str
) -> None:
    """Chinese and Japanese write no spaces between words, and both parsers (FTS5's
    unicode61, PostgreSQL's) kept a whole run of CJK characters as one word: until
    2026-12-07 /search 东京 did not find "我们下周去东京旅游"."""
    await indexed(store, "telegram:1", [("user", said), ("user", "我们下周去大阪")])
    hits = await Search(store.db).sessions("telegram:1", query)
    assert [h.role for h in hits] == ["user"], f"{query!r} not found in {said!r}"
    assert snippet in hits[0].snippet  # as written: no mark of the index in it


async def test_a_cjk_word_not_in_a_sentence_is_not_found(store: Store) -> None:
    await indexed(store, "telegram:1", [("user", "我们下周去东京旅游")])
    assert await Search(store.db).sessions("telegram:1", "北京") == []


def test_a_cjk_query_is_cut_into_overlapping_pairs() -> None:
    assert query_terms("东京旅游 Tokyo") == ["东京", "京旅", "旅游", "Tokyo"]
    assert query_terms("京") == ["京"]


async def test_a_word_with_a_dotted_capital_i_is_found_as_written(store: Store) -> None:
    """Python lowers "İ" (U+0130) to "i" and a combining dot, PostgreSQL's parser to "i":
    until 2026-12-07 "İstanbul" typed as the message wrote it found nothing on
    PostgreSQL."""
    await indexed(store, "telegram:1", [("user", "We fly to İstanbul on Friday, then İzmir")])
    for query in ("İstanbul", "istanbul", "ISTANBUL"):
        hits = await Search(store.db).sessions("telegram:1", query)
        assert [h.role for h in hits] == ["user"], f"{query!r} not found"
