"""``EventRenderer``: what a conversation shows while its turn waits for a person."""

from __future__ import annotations

from typing import Any

from bot.platform.outgoing import EventRenderer
from engine.hub import DecisionMade, HubEvent
from engine.session import ApprovalRequired, Question

SOURCE = "chat:1"


class Cards:
    async def send_card(self, source: str, event: ApprovalRequired) -> None: ...

    async def send_question(self, source: str, event: Question) -> None: ...

    async def close_by_id(self, *args: Any, **kwargs: Any) -> None: ...


class Activity:
    """Whether the conversation shows "typing…", as the renderer leaves it."""

    def __init__(self) -> None:
        self.typing = True  # the turn began

    def start_typing(self, source: str) -> None:
        self.typing = True

    def stop_typing(self, source: str) -> None:
        self.typing = False

    async def stream(self, source: str, delta: str) -> None: ...

    def thinking(self, source: str) -> None: ...

    async def end_stream(self, source: str) -> None: ...


def renderer(activity: Activity) -> EventRenderer:
    unused: Any = None
    return EventRenderer("chat:", unused, Cards(), activity, streaming=False)


def at(event: Any) -> HubEvent:
    return HubEvent(SOURCE, 1, event)


async def test_no_typing_while_a_card_waits_and_typing_again_once_it_is_decided() -> None:
    """A card waits for the person (for a minute, or an hour): "typing…" under it said the
    bot was working, and cost a call every few seconds (found by review on Discord)."""
    activity = Activity()
    render = renderer(activity).render
    await render(SOURCE, at(ApprovalRequired(7, "shell", {}, 1, "main")))
    assert not activity.typing
    await render(SOURCE, at(DecisionMade(7, "approve", "alice")))
    assert activity.typing


async def test_no_typing_while_a_question_waits_for_its_answer() -> None:
    activity = Activity()
    await renderer(activity).render(SOURCE, at(Question(8, "Which file?", 1)))
    assert not activity.typing
