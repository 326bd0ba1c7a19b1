"""The hub's small parts with rules of their own: the text check, how an approval is
named to closing cards, and the background task set."""

from __future__ import annotations

import asyncio

import pytest

from engine.approval.broker import SHORT_BYPASS_SECONDS, BypassRequest
from engine.hub.tasks import BackgroundTasks
from engine.hub.types import CHOICES, Choice, HubError, SendOptions, check_text


def test_an_empty_message_passes_only_with_attachments() -> None:
    with pytest.raises(HubError, match="empty"):
        check_text("  \n", SendOptions(), 100)
    check_text("", SendOptions(metadata={"attachments": [{"name": "a.png"}]}), 100)


def test_a_message_at_the_limit_passes_and_one_above_is_refused_with_the_numbers() -> None:
    check_text("x" * 10, SendOptions(), 10)
    with pytest.raises(HubError, match="11 characters long; the limit is 10"):
        check_text("x" * 11, SendOptions(), 10)


def test_a_text_that_is_no_string_is_refused() -> None:
    with pytest.raises(HubError, match="must be a string"):
        check_text(b"bytes", SendOptions(), 10)


@pytest.mark.parametrize(
    ("choice", "name"),
    [
        (Choice(True), "approve"),
        (Choice(True, BypassRequest("all", None, SHORT_BYPASS_SECONDS)), "bypass_15m"),
        (Choice(True, BypassRequest("tool", "execute_cmd", None)), "bypass_session"),
        (Choice(True, BypassRequest("all", None, 60.0)), "approve"),
        (Choice(False), "reject"),
    ],
)
def test_a_choice_is_named_by_its_bypass(choice: Choice, name: str) -> None:
    assert choice.name == name


def test_every_button_name_is_a_choice_and_nothing_else_is() -> None:
    for name, choice in CHOICES.items():
        assert Choice.named(name) == choice
        assert choice.name == name
    for bad in ("maybe", "", "APPROVE", None, 3, ["approve"]):
        with pytest.raises(HubError, match="choice: expected one of approve, bypass_15m"):
            Choice.named(bad)


async def test_a_background_task_is_held_until_it_ends() -> None:
    tasks = BackgroundTasks()
    release = asyncio.Event()
    task = tasks.spawn(release.wait())

    assert tasks.running() == [task]
    release.set()
    await task
    await asyncio.sleep(0)  # the done callback runs on the next loop iteration
    assert tasks.running() == []
