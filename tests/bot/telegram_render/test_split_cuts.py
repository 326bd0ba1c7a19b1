"""The cut finder (str.rfind and bisect over the UTF-16 table) cuts exactly where the plain
rule says: the last position that fits, after a paragraph, else a line, else a word, else
anywhere outside an entity that fits whole."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from bot.telegram.rendering.render import _blocked_cuts, _choose_cut, _utf16_table, split_text


def rule_cut(text: str, units: list[int], blocked: bytearray, start: int, limit: int) -> int:
    """The rule, one position at a time."""
    budget = units[start] + limit
    if units[len(text)] <= budget:
        return len(text)
    hard = start
    while hard + 1 <= len(text) and units[hard + 1] <= budget:
        hard += 1
    if hard == start:
        return start + 1
    for accepts in (
        lambda i: i >= 2 and text[i - 2 : i] == "\n\n",
        lambda i: text[i - 1] == "\n",
        lambda i: text[i - 1] == " ",
        lambda i: True,
    ):
        for i in range(hard, start, -1):
            if not blocked[i] and accepts(i):
                return i
    return hard


pieces = st.sampled_from(["a", "b", " ", "\n", "\n\n", "é", "😀", "xxxxx"])


@settings(max_examples=3000, deadline=None)
@given(
    text=st.lists(pieces, min_size=1, max_size=40).map("".join),
    limit=st.integers(2, 24),
    spans=st.lists(st.tuples(st.integers(0, 80), st.integers(0, 80)), max_size=4),
    data=st.data(),
)
def test_every_cut_is_the_rules_cut(text, limit, spans, data) -> None:
    units = _utf16_table(text)
    assert units == [
        sum(2 if ord(c) > 0xFFFF else 1 for c in text[:i]) for i in range(len(text) + 1)
    ]
    bounded = [(min(a, b) % (len(text) + 1), max(a, b) % (len(text) + 1), None) for a, b in spans]
    blocked = _blocked_cuts(len(text), units, [(a, b, e) for a, b, e in bounded if a < b], limit)
    start = data.draw(st.integers(0, len(text) - 1))
    assert _choose_cut(text, units, blocked, start, limit) == rule_cut(
        text, units, blocked, start, limit
    )


def test_a_long_answer_splits_at_paragraphs_within_the_limit() -> None:
    paragraphs = [f"paragraph {n} " + "word " * 150 for n in range(12)]
    chunks = split_text("\n\n".join(paragraphs), [], limit=4096)
    assert [len(c.text) <= 4096 for c in chunks] == [True, True, True]
    assert all(c.text.startswith("paragraph") for c in chunks)  # cut after a paragraph
    assert sum(c.text.count("paragraph") for c in chunks) == 12
