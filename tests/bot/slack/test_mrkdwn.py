"""Markdown as models write it, into Slack's mrkdwn: each construct, and nothing the model
writes ever becoming a ping or a link of its own making."""

from __future__ import annotations

import random
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.slack.mrkdwn import _parsed, escape, escape_within, to_mrkdwn

ZWSP = "\u200b"


@pytest.mark.parametrize(
    ("markdown", "mrkdwn"),
    [
        ("**bold** and *it* and _it_ ~~gone~~", "*bold* and _it_ and _it_ ~gone~"),
        ("***both***", "_*both*_"),
        ("[docs](https://example.com/a_b)", "<https://example.com/a_b|docs>"),
        ("<https://example.com>", "<https://example.com>"),
        ("[mail me](mailto:a@b.c)", "<mailto:a@b.c|mail me>"),
        ("# Title **x**\n\ntext", "*Title x*\n\ntext"),
        ("- one\n- two **b**", "• one\n• two *b*"),
        ("1. one\n2. two", "1. one\n2. two"),
        ("3. three\n4. four", "3. three\n4. four"),
        ("- a\n  - b\n    - c", "• a\n    ◦ b\n        ▪ c"),
        ("> quoted **b**\n> more", "> quoted *b*\n> more"),
        ("inline `**code** <x>` ok", "inline `**code** &lt;x&gt;` ok"),
        ("```python\nx = **1** < 2\n```", "```\nx = **1** &lt; 2\n```"),
        ("snake_case_name stays", "snake_case_name stays"),
        ("a\n\n---\n\nb", "a\n\n――――――――\n\nb"),
        ("", ""),
        ("   \n  ", ""),
    ],
)
def test_each_construct(markdown: str, mrkdwn: str) -> None:
    assert to_mrkdwn(markdown) == mrkdwn


@pytest.mark.parametrize(
    "ping", ["<!channel>", "<!here>", "<!everyone>", "<@U0123ABC>", "<#C0123ABC>"]
)
def test_nothing_the_model_writes_pings(ping: str) -> None:
    for markdown in (ping, f"**{ping}**", f"`{ping}`", f"```\n{ping}\n```", f"> {ping}"):
        shown = to_mrkdwn(markdown)
        assert "<!" not in shown and "<@" not in shown and "<#" not in shown, shown


def test_ampersands_and_angles_are_escaped_once() -> None:
    assert to_mrkdwn("a < b & c > d &amp;") == "a &lt; b &amp; c &gt; d &amp;"


def test_a_link_cannot_be_broken_out_of() -> None:
    shown = to_mrkdwn("[a|b>c](https://e.x/?q=1&r=|>)")
    assert shown == "<https://e.x/?q=1&amp;r=%7C%3E|a|b&gt;c>"


@pytest.mark.parametrize(
    "markdown", ["[x](javascript:alert(1))", "[x](data:text/html,hi)", "![i](javascript:x)"]
)
def test_only_web_and_mail_links_become_links(markdown: str) -> None:
    shown = to_mrkdwn(markdown)
    assert "<javascript" not in shown and "<data" not in shown


def test_raw_html_is_text() -> None:
    assert to_mrkdwn("<b>hi</b>") == "&lt;b&gt;hi&lt;/b&gt;"
    assert to_mrkdwn("<div>\nblock\n</div>") == "&lt;div&gt;\nblock\n&lt;/div&gt;"


def test_emphasis_against_letters_gets_a_zero_width_space() -> None:
    assert to_mrkdwn("a**b**c") == f"a{ZWSP}*b*{ZWSP}c"
    assert to_mrkdwn("(**b**)") == "(*b*)"


def test_a_table_is_an_aligned_code_block() -> None:
    shown = to_mrkdwn("| name | n |\n|---|---|\n| alpha **x** | 1 |\n| b | 22 |")
    assert shown == "```\nname     n\n-------  --\nalpha x  1\nb        22\n```"


def test_an_unclosed_code_block_is_closed() -> None:
    assert to_mrkdwn("look:\n```\nx = 1") == "look:\n\n```\nx = 1\n```"


@pytest.mark.parametrize(
    "markdown",
    [
        "Save this as README.md:\n\n````markdown\n# Tool\n\n```bash\npip install *tool*\n```\n````",
        "~~~\n```python\nx = 1\n```\n~~~",
        "````\n````` five\n````",
    ],
    ids=["four-backticks", "tildes", "five-inside"],
)
def test_code_that_holds_a_fence_stays_one_code_block(markdown: str) -> None:
    """A Markdown example inside a ```` or ~~~ fence closed Slack's block early, the rest
    of the code shown formatted (found by review on 2026-12-06)."""
    out = to_mrkdwn(markdown)
    assert re.findall(r"`{3,}", out) == ["```", "```"], out
    assert "*tool*" not in out.split("```")[0] + out.split("```")[-1]


def test_an_image_is_a_link_to_it() -> None:
    assert to_mrkdwn("![a cat](https://e.x/cat.png)") == "<https://e.x/cat.png|a cat>"


def test_it_never_raises() -> None:
    pieces = [
        "*",
        "_",
        "~",
        "`",
        "```",
        "[",
        "]",
        "(",
        ")",
        "<",
        ">",
        "&",
        "|",
        "#",
        "-",
        "1.",
        ">",
        "\n",
        " ",
        "a",
        "é",
        "http://x",
        "!",
        "\\",
        "    ",
        "\t",
        "---",
    ]
    rng = random.Random(7)
    for _ in range(2000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 40)))
        shown = to_mrkdwn(text)
        assert isinstance(shown, str)
        assert "<!" not in shown and "<@" not in shown


#: What models write on one line, Markdown's own characters among the rest.
_LINE = st.text(
    alphabet=st.sampled_from(
        list("abcXYZ019 .,;:!?'\"()/@%$^{}")
        + list("\\`*_~[]<>&#|=+-\t")
        + ["é", "中", "🙂", "\u00a0", "\u2028", "\u200b", "\u3000", "\x0b", "\x00", "\r"]
    ),
    max_size=24,
)


@settings(max_examples=600, deadline=None)
@given(text=st.one_of(_LINE, st.builds(lambda a, b: f"{a}\n{b}", _LINE, _LINE)))
def test_plain_text_comes_out_as_the_parser_would_give_it(text: str) -> None:
    """A line without Markdown skips the parser: never with another result."""
    assert to_mrkdwn(text) == _parsed(text)


@pytest.mark.parametrize(
    "text",
    ["echo: ping 12", "Sure! I'll do that at 5 p.m. (your time).", "Ça marche, à demain 🙂"],
)
def test_a_plain_sentence_is_itself(text: str) -> None:
    assert to_mrkdwn(text) == text


#: An escape Slack reads, or a character that needs none.
_WHOLE_ESCAPES = re.compile(r"&(?!amp;|lt;|gt;)")


@given(st.text(alphabet="<>&a", max_size=60), st.integers(min_value=1, max_value=40))
@settings(max_examples=200, deadline=None)
def test_text_escaped_within_a_limit_is_never_cut_inside_an_escape(text: str, limit: int) -> None:
    """A progress line or an outcome line was escaped, then cut: ``&am`` on screen."""
    shown = escape_within(text, limit)
    assert len(shown) <= limit
    assert not _WHOLE_ESCAPES.search(shown), shown
    assert shown.removesuffix("…") == escape(text)[: len(shown.removesuffix("…"))]
    if len(escape(text)) <= limit:
        assert shown == escape(text)
