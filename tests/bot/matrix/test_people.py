"""The names of the people the bot meets on Matrix: asked once, never a link."""

from __future__ import annotations

from types import SimpleNamespace

from bot.matrix.people import People


class Profiles:
    """matrix-nio's ``get_displayname``, answering each user's chosen name."""

    def __init__(self, names: dict[str, str | None]) -> None:
        self.names = names
        self.asked: list[str] = []

    async def get_displayname(self, user: str) -> SimpleNamespace:
        self.asked.append(user)
        return SimpleNamespace(displayname=self.names[user])


async def test_a_display_name_is_asked_once_and_said_back_as_no_link() -> None:
    """A stranger named "[Security check](https://evil.example/login)" reacted on a card:
    the bot's refusal ("<name>: You are not allowed…"), Markdown, posted that link in its
    own voice (found by review)."""
    profiles = Profiles(
        {"@bob:hs": "[Security check](https://evil.example/login)", "@ann:hs": None}
    )
    people = People(profiles)  # type: ignore[arg-type]
    name = await people.name_of("@bob:hs")
    assert "](" not in name and name.replace("\u200b", "") == profiles.names["@bob:hs"]
    assert await people.name_of("@bob:hs") == name and profiles.asked == ["@bob:hs"]
    assert await people.name_of("@ann:hs") == "@ann:hs"  # no name: the id
