"""A reply as Matrix messages: each within the homeserver's event limit, HTML included."""

from __future__ import annotations

import json

from bot.matrix.sending import CONTENT_BUDGET, contents_of


def numbers_table(rows: int = 180, columns: int = 12) -> str:
    """Right-aligned two-digit numbers: under 7,000 characters of Markdown, whose HTML
    (a tag and a style per cell) is about 90 KB."""
    lines = ["|" + "|".join(f"c{i}" for i in range(columns)) + "|"]
    lines.append("|" + "|".join(["-:"] * columns) + "|")
    lines += [
        "|" + "|".join(str(10 + (r * 7 + i) % 90) for i in range(columns)) + "|"
        for r in range(rows)
    ]
    return "\n".join(lines)


def size(content: dict) -> int:
    return len(json.dumps(content, ensure_ascii=False).encode())


def test_a_long_table_is_cut_until_each_message_fits_the_event_limit() -> None:
    """It went as one event of 96 KB, which Synapse refuses: the reply was lost (found by
    review)."""
    table = numbers_table()
    contents = contents_of(table)
    assert len(contents) > 1
    assert all(size(c) <= CONTENT_BUDGET for c in contents)
    said = [line for c in contents for line in c["body"].splitlines()]
    assert said == table.splitlines()  # every row, in order


def test_a_short_reply_is_one_message() -> None:
    [content] = contents_of("**hello**")
    assert content["body"] == "**hello**" and "<strong>hello</strong>" in content["formatted_body"]
