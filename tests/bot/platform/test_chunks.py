"""Markdown answers cut to a platform's message length (``bot/platform/chunks.py``):
every message fits, nothing is lost or reordered, code stays code across a cut, and bad
limits are refused."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.platform.chunks import MIN_LIMIT, split_markdown

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,}).*$", re.M)  # a fence line, its language too


def rejoined(messages: list[str]) -> str:
    """The messages' text in order, without the fences a cut added (nor any whitespace:
    a cut may fall inside a word longer than a message)."""
    return words("\n".join(messages))


def words(text: str) -> str:
    return "".join(FENCE.sub("", text).split())


def balanced(message: str) -> bool:
    return len(FENCE.findall(message)) % 2 == 0


def test_a_short_answer_is_one_message_as_it_is() -> None:
    assert split_markdown("**hi**\n\n```py\nx = 1\n```", 2000) == ["**hi**\n\n```py\nx = 1\n```"]


def test_blank_text_is_no_message() -> None:
    assert split_markdown("", 2000) == []
    assert split_markdown(" \n\n ", 2000) == []


def test_a_4000_character_answer_with_a_fence_open_at_the_cut_reopens_it() -> None:
    prose = "Here is the script you asked for, with comments.\n\n"
    code = "\n".join(f"print('line {n:04d} of the long script')  # step {n}" for n in range(90))
    answer = f"{prose}```python\n{code}\n```\nThat is all."
    assert len(answer) > 4000

    messages = split_markdown(answer, 2000)

    assert len(messages) >= 3
    assert all(len(m) <= 2000 for m in messages)
    assert all(balanced(m) for m in messages)
    assert messages[1].startswith("```python\n")  # the code goes on as code
    assert messages[0].endswith("\n```")
    assert rejoined(messages) == words(answer)


def test_paragraphs_are_kept_whole_when_a_blank_line_allows() -> None:
    first = "A" * 50 + " first paragraph."
    second = "B" * 30 + " second paragraph."
    messages = split_markdown(f"{first}\n\n{second}\n\n{'C' * 20}", 100)
    assert messages[0] == first
    assert all(len(m) <= 100 for m in messages)


def test_a_line_longer_than_a_message_is_cut_at_spaces_else_anywhere() -> None:
    sentence = " ".join(["word"] * 600)  # 2,999 characters, no line break
    messages = split_markdown(sentence, 2000)
    assert [len(m) <= 2000 for m in messages] == [True, True]
    assert rejoined(messages) == words(sentence)

    blob = "x" * 5000
    pieces = split_markdown(blob, 2000)
    assert [len(p) for p in pieces] == [2000, 2000, 1000]
    assert "".join(pieces) == blob


def test_a_limit_too_small_for_a_reopened_fence_is_refused() -> None:
    for bad in (0, -5, MIN_LIMIT - 1):
        with pytest.raises(ValueError, match="limit: at least"):
            split_markdown("text", bad)


paragraph = st.text(alphabet=st.sampled_from("abc xyz.,!"), min_size=0, max_size=120)
block = st.one_of(
    paragraph,
    st.builds(
        lambda lang, lines: f"```{lang}\n" + "\n".join(lines) + "\n```",
        st.sampled_from(["", "py", "bash"]),
        st.lists(paragraph, max_size=12),
    ),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(block, min_size=1, max_size=20), st.integers(MIN_LIMIT, 400))
def test_any_answer_fits_keeps_its_words_in_order_and_its_code_fenced(
    blocks: list[str], limit: int
) -> None:
    answer = "\n\n".join(blocks)
    messages = split_markdown(answer, limit)
    assert all(len(m) <= limit for m in messages)
    assert all(balanced(m) for m in messages)
    assert rejoined(messages) == words(answer)


def test_a_longer_or_tilde_fence_is_closed_only_by_its_own_kind() -> None:
    """A four-backtick block holding a three-backtick line, and a tilde block, stay code
    across cuts: the inner line closes nothing, and each reopens with its own fence."""
    inner = "\n".join(["```", *(f"row {n}" for n in range(40)), "```"])
    answer = (
        f"````markdown\n{inner}\n````\n\n~~~sh\n"
        + "\n".join(f"echo {n}" for n in range(40))
        + "\n~~~"
    )
    messages = split_markdown(answer, 120)
    assert all(len(m) <= 120 for m in messages)
    for message in messages:  # each outer fence opened in a message is closed in it
        lines = message.split("\n")
        assert sum(line.startswith("````") for line in lines) % 2 == 0, message
        assert sum(line.startswith("~~~") for line in lines) % 2 == 0, message
    assert any(m.startswith("````markdown\nrow") for m in messages)  # reopened, not closed by ```
    assert rejoined(messages) == words(answer)


def test_without_tildes_a_tilde_line_is_text_and_a_later_block_stays_closed() -> None:
    """Discord draws only backtick fences: a ``~~~`` line in prose was taken for one, the
    real block after it was lost track of and cut open (found by review on 2026-12-06)."""
    code = "\n".join(f"print('line {n:04d}')" for n in range(150))  # about 3,000 characters
    text = "Notes\n~~~\nsection two\n\n```py\n" + code + "\n```\nThat is all."
    parts = split_markdown(text, 2000, tildes=False)
    assert len(parts) >= 2 and all(len(part) <= 2000 for part in parts)
    assert all(part.count("```") % 2 == 0 for part in parts), parts
    assert parts[-1].endswith("That is all.") and "~~~" in parts[0]
    assert split_markdown(text, 2000)[0].count("~~~") == 2  # CommonMark's: a tilde block


def test_without_tildes_a_fence_indented_under_a_list_item_is_closed_and_reopened() -> None:
    """Discord draws ``` as code at any indent; a fence four spaces in (under a list item,
    common in a model's answers) was not taken for one, and the block was cut open: a
    bare fence ending the first message, the code shown as text (found by review)."""
    code = "\n".join(f'    print("line number {i} of the example program")' for i in range(60))
    answer = f"Steps:\n\n1. Install it:\n\n    ```python\n{code}\n    ```\n\n2. Done."
    parts = split_markdown(answer, 2000, tildes=False)
    assert len(parts) == 2 and all(len(part) <= 2000 for part in parts)
    assert [part.count("```") % 2 for part in parts] == [0, 0], parts
    assert parts[1].startswith("```python\n") and parts[1].endswith("2. Done.")


def test_without_tildes_any_backtick_fence_ends_the_block_as_discord_draws_it() -> None:
    """A ```` block holding a ``` line: Discord ends the block there, but the splitter
    took it, by CommonMark's rule, for code going on, closed and reopened a block at
    the cut, and what followed was drawn the other way round (found by review)."""
    prose = "\n".join(f"Some words of line {n}, and some more words." for n in range(60))
    text = f"````md\nan example\n```\n{prose}\n````"
    parts = split_markdown(text, 2000, tildes=False)
    assert len(parts) == 2
    assert not parts[1].startswith("`")  # prose on Discord: no block reopened around it
    assert parts[0].endswith("more words.")


def test_a_long_one_line_code_span_then_more_text_ends_and_fits() -> None:
    """A model's minified JSON in ``` on one line, 2,400 characters, then prose: the whole
    line was reopened at the top of every later message, left no room, and the split never
    ended (the event loop and every chat froze; found by review). Run apart, with a clock."""
    blob = json.dumps({f"key{i}": "value" for i in range(150)}, separators=(",", ":"))
    answer = "Here it is:\n```" + blob + "```\n" + ("It sets every key. " * 20 + "\n\n") * 12
    program = (
        "import sys\nfrom bot.platform.chunks import split_markdown\n"
        "answer = sys.stdin.read()\n"
        "messages = split_markdown(answer, 2000)\n"
        "assert all(len(m) <= 2000 for m in messages)\n"
        "print(len(messages))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program], input=answer, capture_output=True, text=True, timeout=20
    )
    assert done.returncode == 0, done.stderr
    messages = split_markdown(answer, 2000)
    assert "".join("".join(messages).split()) == "".join(answer.split())  # no fence added


def test_an_inline_triple_backtick_span_opens_no_block() -> None:
    """CommonMark: a backtick fence's info string holds no backtick, so "```ls``` lists"
    is a closed span; read as an opener, every later message began with it, in code."""
    answer = "```ls -la``` lists the files.\n\n" + ("Then each in turn. " * 8 + "\n\n") * 30
    messages = split_markdown(answer, 500)
    assert len(messages) > 2
    assert all("```" not in m for m in messages[1:])
    assert rejoined(messages) == words(answer)


def test_a_fence_is_reopened_as_its_marks_and_language_only() -> None:
    answer = (
        '```python title="a very long title of the block" linenums=1\n'
        + "\n".join(f"x_{n} = {n}" for n in range(200))
        + "\n```"
    )
    messages = split_markdown(answer, 300)
    assert all(m.startswith("```python\n") for m in messages[1:])
    assert all(len(m) <= 300 and balanced(m) for m in messages)


@pytest.mark.parametrize(
    "unit",
    [
        "👨\u200d👩\u200d👧\u200d👦",
        "👍🏽",
        "❤️",
        "e\u0301",
        "🇫🇷",
        "🏴\U000e0067\U000e0062\U000e0065\U000e006e\U000e0067\U000e007f",
    ],
    ids=["family", "skin-tone", "variation", "accent", "flag", "subdivision-flag"],
)
def test_a_long_line_without_spaces_is_not_cut_inside_what_is_drawn_as_one(unit: str) -> None:
    """700 family emoji in a row were cut every 2,000 characters inside a family: each
    message began and ended with a broken one (found by review)."""
    text = "x" + unit * (5000 // len(unit))
    parts = split_markdown(text, 2000)
    assert "".join(parts) == text and all(len(part) <= 2000 for part in parts)
    assert all(part.lstrip("x").startswith(unit) for part in parts)


def test_a_table_cut_goes_on_under_its_header_in_the_next_message() -> None:
    """Parts after the first were raw pipe text: no header, no delimiter row, so Element
    (and Slack's rendering) drew no table (found by review)."""
    header, delimiter = "| name | size |", "| --- | ---: |"
    rows = [f"| file{n:03} | {n * 7} kB |" for n in range(120)]
    text = "Here they are:\n\n" + "\n".join([header, delimiter, *rows]) + "\n\nThat is all."
    parts = split_markdown(text, 400)
    assert len(parts) > 3 and all(len(part) <= 400 for part in parts)
    with_rows = [part for part in parts if "| file" in part]
    for part in with_rows:
        table = part[part.index("| name") :].split("\n")
        assert table[:2] == [header, delimiter], part
    said = [line for part in parts for line in part.split("\n") if line.startswith("| file")]
    assert said == rows  # every row once, in order
    assert parts[-1].endswith("That is all.")
    # Discord draws no tables: its parts carry no header again.
    discord = split_markdown(text, 400, tildes=False, tables=False)
    assert sum(part.count(header) for part in discord) == 1


def test_a_row_with_pipes_outside_a_table_is_not_taken_for_one() -> None:
    text = "a | b\n" + "\n".join(f"line {n} | x" for n in range(100))
    assert "a | b" not in "\n".join(split_markdown(text, 300)[1:])
