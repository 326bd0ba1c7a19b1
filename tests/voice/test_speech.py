"""A reply read aloud: what is said, and what is written beside it."""

from __future__ import annotations

import pytest

from voice import links, sentences, spoken, spoken_parts

WIKI = "https://en.wikipedia.org/wiki/Python_(programming_language)"


@pytest.mark.parametrize(
    ("reply", "said", "written"),
    [
        (  # a link: said by its words, written with its address
            "Read [the guide](https://docs.example/start) first.",
            "Read the guide first.",
            "🔗 [the guide](https://docs.example/start)",
        ),
        (  # a bare address: said as its host, written whole
            "It is at https://status.example.org/incidents/42?x=1, as of today.",
            "It is at status.example.org, as of today.",
            "🔗 https://status.example.org/incidents/42?x=1",
        ),
        (  # an address in code is a link too, and the code is read plainly
            "Open `https://local.example:8080/admin` now.",
            "Open local.example now.",
            "🔗 https://local.example:8080/admin",
        ),
        # Shapes found by review, each cut, missed or read out whole before:
        (  # a target with parentheses (Wikipedia's)
            f"See [Python]({WIKI}) for more.",
            "See Python for more.",
            f"🔗 [Python]({WIKI})",
        ),
        (f"See {WIKI} now.", "See en.wikipedia.org now.", f"🔗 {WIKI}"),
        (  # an address in parentheses
            "More details (https://docs.example/start).",
            "More details (docs.example).",
            "🔗 https://docs.example/start",
        ),
        (  # an autolink
            "Autolink <https://docs.example/start> here.",
            "Autolink docs.example here.",
            "🔗 https://docs.example/start",
        ),
        (  # a link with a title
            'See [the docs](https://docs.example/start "Docs").',
            "See the docs.",
            "🔗 [the docs](https://docs.example/start)",
        ),
        (  # a bold address
            "Bold **https://docs.example/start** here.",
            "Bold docs.example here.",
            "🔗 https://docs.example/start",
        ),
    ],
)
def test_what_is_said_aloud_and_what_is_written_beside_it(
    reply: str, said: str, written: str
) -> None:
    assert spoken(reply) == said
    assert links(reply) == written


def test_each_link_is_written_once_in_the_order_said() -> None:
    reply = "See https://b.example/ and [a](https://a.example/) and https://b.example/ again."
    assert links(reply).splitlines() == ["🔗 https://b.example/", "🔗 [a](https://a.example/)"]


@pytest.mark.parametrize(
    "reply",
    [
        "",
        "no links at all",
        "an address with no scheme: example.com",
        "[a label with no target]",
        "ftp://files.example/x is not a web link",
        "(https://)",
    ],
)
def test_a_reply_without_a_web_link_writes_nothing_beside_its_voice(reply: str) -> None:
    assert links(reply) == ""


def test_a_reply_is_said_in_parts_that_keep_its_own_words_for_the_text() -> None:
    """What a chat shows when speech fails is the reply's Markdown, cut between blocks:
    a code block whole with its indentation, a list with its lines (until 2026-12-07 it
    was the spoken form, run together on one line)."""
    code = "```python\nfor x in items:\n    print(x)\n```"
    reply = f"Steps:\n1. Install it.\n2. Run it.\n\n{code}\n\nThat is all."
    [(said, written)] = spoken_parts(reply)
    assert written == reply and said == spoken(reply)
    parts = spoken_parts(reply, limit=45)
    assert [w for _s, w in parts] == ["Steps:\n1. Install it.\n2. Run it.", code, "That is all."]
    assert all(len(s) <= 45 and len(w) <= 45 for s, w in parts)
    # A code block longer than a part: cut between its lines, each piece fenced, and
    # read without its fence.
    long_code = "```python\n" + "\n".join(f"print({i})  # step {i}." for i in range(60)) + "\n```"
    pieces = spoken_parts(long_code, limit=200)
    assert len(pieces) > 1
    for said, written in pieces:
        assert written.startswith("```python\n") and written.endswith("\n```")
        assert len(written) <= 200 and "```" not in said and "python" not in said
        assert "\nprint(" in written or written.count("print(") == 1  # its lines kept
    # A code block right after a line of text (no blank line between): its own block,
    # so every piece of it is fenced and none is read with its fence (found by review).
    joined = f"Here is the script:\n{long_code[:-4]}\n```\nThat is all."
    for said, written in spoken_parts(joined, limit=200):
        assert written.count("```") in (0, 2) and "`" not in said
    assert spoken("~~~\nls -la\n~~~") == "ls -la" and spoken("```sh\nunclosed") == "unclosed"
    # Links say little and write much: the written text fits a part too (a Discord
    # message's 2,000 characters).
    links = " ".join(f"[l{i}](https://example.org/a/long/path/{i})" for i in range(40))
    assert all(len(w) <= 400 for _s, w in spoken_parts(links, limit=400))
    long = spoken_parts("One. Two two. Three three three.", limit=14)
    assert long == [(p, p) for p in sentences("One. Two two. Three three three.", limit=14)]
    assert spoken_parts("") == [] and spoken_parts("\n\n") == []


def test_a_long_reply_is_cut_between_sentences_within_the_limit() -> None:
    parts = sentences("One. Two two. Three three three.", limit=14)
    assert parts == ["One. Two two.", "Three three", "three."]
    assert all(len(p) <= 14 for p in parts)


@pytest.mark.parametrize(
    ("reply", "said"),
    [
        ("The room is 5 * 3 = 15 square metres.", "The room is 5 * 3 = 15 square metres."),
        ("Write to first_last@example.com today.", "Write to first_last@example.com today."),
        ("Set MAX_RETRIES to 5 in `my_notes.txt`.", "Set MAX_RETRIES to 5 in my_notes.txt."),
        ("**Bold**, *it*, _it_, __b__ and ~~gone~~.", "Bold, it, it, b and gone."),
    ],
)
def test_a_mark_that_pairs_with_none_is_kept(reply: str, said: str) -> None:
    """Every ``*`` and ``_`` was dropped: the voice said "firstlast at example dot com",
    and the text sent when speech failed wrote it so (found by review)."""
    assert spoken(reply) == said


def test_reference_style_links_are_said_by_their_words_and_written_with_their_address() -> None:
    """A reference-style link was said with its label ("the install guide one"), and
    each definition line read out with its host; a footnote with its mark and its text
    (found by review on 2026-12-07). The written side names each link by its words."""
    reply = (
        "See [the install guide][1] and [the API reference][api], or [Docs][].\n"
        "It is stable[^n].\n\n"
        "[1]: https://docs.example.com/guide/install\n"
        '[api]: <https://api.example.com/v2/reference> "API"\n'
        "[docs]: https://docs.example.com/\n"
        "[^n]: Since version 2.\n"
    )
    [(said, written)] = spoken_parts(reply)
    assert said == "See the install guide and the API reference, or Docs.\nIt is stable."
    assert written == reply.strip()
    assert links(reply).splitlines() == [
        "🔗 [the install guide](https://docs.example.com/guide/install)",
        "🔗 [the API reference](https://api.example.com/v2/reference)",
        "🔗 [Docs](https://docs.example.com/)",
    ]
    # Words that only look like a definition are said.
    assert spoken("[Note]: remember this well") == "[Note]: remember this well"


def test_brackets_that_are_no_reference_are_said_as_written() -> None:
    """The first version of the reference rule took every "[a][b]" for a link and every
    "[^x]" for a footnote's mark: "grid[0][1]" was said "grid0", a pattern's "[^0-9]+"
    as "+" (found by review on 2026-12-07). Only what the text defines is a reference."""
    assert spoken("Use grid[0][1] to read the cell.") == "Use grid[0][1] to read the cell."
    assert spoken("Set `a[i][j] = 0` first.") == "Set a[i][j] = 0 first."
    assert spoken("The pattern `[^0-9]+` skips digits.") == "The pattern [^0-9]+ skips digits."
