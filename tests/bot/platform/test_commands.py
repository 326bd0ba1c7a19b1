"""The command registry every front end uses: one list, one set of words."""

from __future__ import annotations

import asyncio

import pytest

from bot.delivery import EventStore
from bot.platform.commands import (
    INTRO,
    Command,
    CommandContext,
    CommandRegistry,
    shared_commands,
)
from bot.platform.handover import marking
from engine.core import Engine
from engine.hub import ChatHub
from tests.engine.hub.conftest import EchoModel, held


class Hub:
    """The few hub calls these commands make, recorded."""

    def __init__(self) -> None:
        self.selected: list[tuple[str, str]] = []
        self.home: str | None = None

    def list_models(self) -> tuple[str, ...]:
        return ("alpha", "beta")

    async def select_model(self, source: str, choice: str) -> None:
        self.selected.append((source, choice))

    async def selected_model(self, source: str) -> str:
        return "beta"

    def is_processing(self, source: str) -> bool:
        return False

    async def is_busy(self, source: str) -> bool:
        return False

    async def cancel(self, source: str) -> bool:
        return False

    async def set_home(self, source: str) -> None:
        self.home = source


def registry() -> CommandRegistry:
    commands = CommandRegistry()
    for command in shared_commands(lambda: commands.help_text()):
        commands.register(command)

    async def secret(_c: CommandContext) -> str:
        return "done"

    commands.register(Command("pair", "Let a user in", secret, "<code>", owner_only=True))
    return commands


def context(hub: Hub, argument: str = "", *, owner: bool = False) -> CommandContext:
    return CommandContext(hub, "test:1", argument, "7", owner)  # type: ignore[arg-type]


async def test_the_help_lists_every_command_everyone_has_with_its_argument() -> None:
    text = await registry().run("help", context(Hub()))
    assert text is not None and text.startswith(INTRO)
    assert "/model <N|name|auto> — Choose a model" in text
    assert "/pair" not in text  # the owner's own command is not listed


async def test_the_menu_is_the_same_list() -> None:
    names = [name for name, _ in registry().listed()]
    assert names[:5] == ["start", "help", "new", "clear", "stop"] and "pair" not in names


async def test_an_unknown_command_gets_the_help() -> None:
    reply = await registry().run("frobnicate", context(Hub()))
    assert reply is not None and reply.startswith("Unknown command /frobnicate.")
    assert INTRO in reply


async def test_an_owner_command_does_not_exist_for_others() -> None:
    commands = registry()
    assert (await commands.run("pair", context(Hub(), "ABC"))).startswith("Unknown command")
    assert await commands.run("pair", context(Hub(), "ABC", owner=True)) == "done"


@pytest.mark.parametrize(
    ("argument", "chosen"),
    [("2", "beta"), ("alpha", "alpha"), ("auto", "auto"), ("³", "³"), ("99999999", "99999999")],
)
async def test_model_takes_a_number_or_a_name(argument: str, chosen: str) -> None:
    hub = Hub()
    reply = await registry().run("model", context(hub, argument))
    assert hub.selected == [("test:1", chosen)] and reply == f"Model: {chosen}."


async def test_model_without_an_argument_says_how() -> None:
    assert await registry().run("model", context(Hub(), "  ")) == "Usage: /model <N|name|auto>"


async def test_models_marks_the_chosen_one() -> None:
    reply = await registry().run("models", context(Hub()))
    assert reply is not None and "2. beta ✓" in reply and "1. alpha\n" in reply


async def test_stop_with_nothing_running() -> None:
    assert await registry().run("stop", context(Hub())) == "Nothing to stop."


def test_a_name_is_registered_once() -> None:
    commands = registry()
    with pytest.raises(ValueError, match="twice"):
        commands.register(Command("stop", "again", lambda c: None))  # type: ignore[arg-type,return-value]


async def test_only_people_of_the_configuration_move_the_notifications_home() -> None:
    """A paired member's /sethome would send the owner's briefings and events to their
    own chat (it did; found by review)."""
    hub = Hub()
    paired = CommandContext(hub, "test:1", "", "7")  # type: ignore[arg-type]
    refused = await registry().run("sethome", paired)
    assert refused is not None and "Only people of the bot's configuration" in refused
    assert hub.home is None
    for allowed in (
        CommandContext(hub, "test:2", "", "8", is_configured=True),  # type: ignore[arg-type]
        CommandContext(hub, "test:3", "", "9", is_owner=True),  # type: ignore[arg-type]
    ):
        said = await registry().run("sethome", allowed)
        assert said is not None and "will come to this chat" in said
        assert hub.home == allowed.source


async def test_a_new_handled_before_stops_nothing(
    engine: Engine, hub: ChatHub, model: EchoModel
) -> None:
    """A fleet's second receiver hands over the /new the first acted on (its fresh session
    and the event's mark committed together); the person has since asked something in the
    new conversation. The copy acts no more: it stopped that turn and dropped the message
    queued behind it before its mark was found taken (found by review)."""
    source = "discord:500"
    await EventStore(engine.store.db, "discord").record([("m-1", None, {"text": "/new"})])
    commands = CommandRegistry(shared_commands(lambda: "help"))

    def new() -> CommandContext:
        return CommandContext(hub, source, "", "42", also=marking("discord", "m-1"))

    assert await commands.run("new", new()) is None  # the first receiver's: acted
    session = await hub.session_id(source)
    release = held(model)
    await hub.send_message(source, "what is on my calendar?")
    await asyncio.wait_for(release.asked.wait(), 5)
    await hub.send_message(source, "and tomorrow?")  # queued behind the turn

    assert await commands.run("new", new()) is None  # the copy's: acted before

    assert await hub.session_id(source) == session
    assert [row.content for row in await engine.store.queue.pending(source)] == ["and tomorrow?"]
    assert await hub.is_busy(source)
    release.set()
