"""``EventRenderer``: what a conversation shows while its turn waits for a person."""

from __future__ import annotations

from typing import Any

from bot.platform.outgoing import EventRenderer
from engine.hub import DecisionMade, HubEvent
from engine.session import ApprovalRequired, Done, Error, Question, ToolDone

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


class Outbox:
    def tool_ended(self, *args: Any) -> None: ...

    async def show_progress(self, *args: Any, **kwargs: Any) -> None: ...

    async def final(self, *args: Any) -> None: ...

    async def notice(self, *args: Any) -> None: ...

    def reset_progress(self, source: str) -> None: ...


def renderer(activity: Activity, *, busy: bool = True) -> EventRenderer:
    outbox: Any = Outbox()
    return EventRenderer(
        "chat:", outbox, Cards(), activity, streaming=False, busy=lambda _source: busy
    )


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


async def test_no_typing_while_a_question_waits_and_typing_again_once_it_is_answered() -> None:
    """Answered in the chat (no DecisionMade): the question's tool ends, and the turn goes
    on typing (it never typed again; found by review)."""
    activity = Activity()
    render = renderer(activity).render
    await render(SOURCE, at(Question(8, "Which file?", 1)))
    assert not activity.typing
    await render(SOURCE, at(ToolDone(8, "ask_user_clarification", "notes.txt")))
    assert activity.typing


async def test_a_job_card_closing_in_a_quiet_chat_starts_no_typing() -> None:
    """A scheduled job's card timed out in a chat where no turn runs: "typing…" started
    there for good (found by review on Matrix)."""
    activity = Activity()
    activity.typing = False  # a quiet chat
    render = renderer(activity, busy=False).render
    await render(SOURCE, at(ApprovalRequired(7, "shell", {}, 9, "main", asked_by="Inbox")))
    await render(SOURCE, at(DecisionMade(7, "timed_out", "the job")))
    assert not activity.typing


async def test_a_job_card_visiting_a_chat_whose_turn_runs_leaves_its_typing_on() -> None:
    """The job's card holds no turn of this chat (until 2026-12-07 it stopped the chat's
    "typing…", and messages sent meanwhile started none; found by review)."""
    activity = Activity()
    await renderer(activity).render(
        SOURCE, at(ApprovalRequired(7, "shell", {}, 9, "main", asked_by="Morning report"))
    )
    assert activity.typing


async def test_a_queued_messages_turn_shows_typing_after_the_answer_before_it() -> None:
    """A message sent while a turn ran has its turn next: its own "typing…" had been taken
    for the running turn's, whose answer stopped it, and the queued turn ran without
    (until 2026-12-07; found by review on Discord)."""
    for ended in (Done("The first answer.", 3), Error("The model failed.")):
        activity = Activity()
        await renderer(activity).render(SOURCE, at(ended))
        assert activity.typing, ended
        quiet = Activity()
        await renderer(quiet, busy=False).render(SOURCE, at(ended))
        assert not quiet.typing, ended
