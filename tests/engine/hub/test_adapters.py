"""The adapter registry's ``PrefixMap``: a source gets what was registered for its longest prefix."""

from __future__ import annotations

from engine.hub.adapters import PrefixMap


def test_the_longest_prefix_wins_whatever_the_order_of_registration() -> None:
    hooks: PrefixMap[str] = PrefixMap()
    hooks.add("telegram:", "every chat")
    hooks.add("telegram:-100", "groups")
    hooks.add("", "everything")

    assert hooks.get("telegram:-100123") == "groups"
    assert hooks.get("telegram:42") == "every chat"
    assert hooks.get("console") == "everything"


def test_a_source_without_a_registered_prefix_gets_nothing() -> None:
    hooks: PrefixMap[str] = PrefixMap()
    hooks.add("telegram:", "chats")

    assert hooks.get("console") is None


def test_of_two_equal_prefixes_the_first_registered_wins() -> None:
    hooks: PrefixMap[str] = PrefixMap()
    hooks.add("web:", "first")
    hooks.add("web:", "second")

    assert hooks.get("web:ada") == "first"
