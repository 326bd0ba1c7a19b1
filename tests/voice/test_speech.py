"""A reply read aloud: what is said, and what is written beside it."""

from __future__ import annotations

import pytest

from voice import links, sentences, spoken


def test_a_link_is_said_by_its_words_and_written_with_its_address() -> None:
    reply = "Read [the guide](https://docs.example/start) first."
    assert spoken(reply) == "Read the guide first."
    assert links(reply) == "🔗 [the guide](https://docs.example/start)"


def test_a_bare_address_is_said_as_its_host_and_written_whole() -> None:
    reply = "It is at https://status.example.org/incidents/42?x=1, as of today."
    assert spoken(reply) == "It is at status.example.org, as of today."
    assert links(reply) == "🔗 https://status.example.org/incidents/42?x=1"


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


def test_an_address_in_code_is_a_link_too_and_the_code_is_read_plainly() -> None:
    reply = "Open `https://local.example:8080/admin` now."
    assert spoken(reply) == "Open local.example now."
    assert links(reply) == "🔗 https://local.example:8080/admin"


def test_a_long_reply_is_cut_between_sentences_within_the_limit() -> None:
    parts = sentences("One. Two two. Three three three.", limit=14)
    assert parts == ["One. Two two.", "Three three", "three."]
    assert all(len(p) <= 14 for p in parts)
