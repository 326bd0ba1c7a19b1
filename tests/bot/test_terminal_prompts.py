"""The terminal's prompts as a person at the keyboard meets them: a job's card shown at
the prompt, a card decided elsewhere, a command typed at a prompt, ``/stop`` with lines
typed meanwhile. An in-process ``TerminalChat`` on the real engine and hub, stdin a pipe."""

from __future__ import annotations

import asyncio
import io
import os
import time
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from typing import Any

import pytest

from bot.terminal import SOURCE, TerminalChat
from engine.approval import OPERATOR
from engine.core import Engine
from engine.hub import ChatHub, Choice
from engine.session.turn.conclusion import CANCELLED_MESSAGE
from scheduler.service import Scheduler
from tests.clock import FakeClock
from tests.engine.session.helpers import BlockingTool
from tests.fakes.openai_server import FakeOpenAIServer

TIMEOUT_S = 10.0


async def until(condition: Callable[[], Any], what: str) -> Any:
    deadline = time.monotonic() + TIMEOUT_S
    while not (value := condition()):
        assert time.monotonic() < deadline, f"never came: {what}"
        await asyncio.sleep(0.01)
    return value


class Keyboard:
    """A terminal chat with a pipe for stdin and a buffer for the screen."""

    def __init__(self, hub: ChatHub, *, typed_ahead_answers: bool | None = None) -> None:
        read, write = os.pipe()
        self._keys = os.fdopen(write, "w")
        self.screen = io.StringIO()
        self.chat = TerminalChat(
            hub,
            hub.events(SOURCE),
            stdin=os.fdopen(read, "r"),
            stdout=self.screen,
            typed_ahead_answers=typed_ahead_answers,
        )
        self.task = asyncio.create_task(self.chat.run())

    def type(self, line: str) -> None:
        self._keys.write(line + "\n")
        self._keys.flush()

    async def shows(self, text: str) -> None:
        await until(lambda: text in self.screen.getvalue() or self.task.done(), text)
        assert text in self.screen.getvalue(), self.screen.getvalue()

    async def leaves(self) -> str:
        await asyncio.wait_for(asyncio.shield(self.task), TIMEOUT_S)
        return self.screen.getvalue()

    async def close(self) -> str:
        if not self._keys.closed:
            self._keys.close()
        return await self.leaves()


@pytest.fixture
async def keyboard(hub: ChatHub) -> AsyncIterator[Keyboard]:
    keys = Keyboard(hub)
    yield keys
    await keys.close()


def said(model: FakeOpenAIServer, role: str = "user") -> list[str]:
    return [m["content"] for r in model.requests for m in r["messages"] if m["role"] == role]


class Briefing:
    """A job of the console that reads notes.txt (its card asks), fired on demand."""

    def __init__(self, engine: Engine, hub: ChatHub, model: FakeOpenAIServer) -> None:
        (engine.workspace.root / "notes.txt").write_text("Buy milk.")
        self.clock = FakeClock()
        self.scheduler = Scheduler(
            engine, hub, timezone="UTC", clock=self.clock, owner="terminal-test"
        )
        self._model = model

    async def fire(self) -> int:
        job = await self.scheduler.create_cron(SOURCE, "Notes", "0 8 * * *", "Brief me.")
        self._model.reply_tool_calls(("r1", "read_file", {"path": "notes.txt"}))
        self._model.reply_text("Brief: buy milk.")
        self.clock.now = job.next_run_at + timedelta(seconds=1)
        await self.scheduler.dispatcher.step()
        return job.id

    async def done(self, job_id: int) -> bool:
        await asyncio.wait_for(self.scheduler.dispatcher.drain(), TIMEOUT_S)
        [run] = await self.scheduler.store.runs(job_id)
        return run.status == "done"


@pytest.fixture
async def briefing(
    engine: Engine, hub: ChatHub, fake_openai: FakeOpenAIServer
) -> AsyncIterator[Briefing]:
    job = Briefing(engine, hub, fake_openai)
    yield job
    await job.scheduler.close()


async def test_y_at_the_prompt_decides_a_jobs_card_shown_there(
    keyboard: Keyboard, briefing: Briefing, fake_openai: FakeOpenAIServer
) -> None:
    """The card printed "Approve? [y]es …" at the prompt, but the "y" went to the model
    as a message and the job's run waited on (found by review)."""
    await keyboard.shows("› ")
    job_id = await briefing.fire()
    fake_openai.reply_text("(a chat message)")
    await keyboard.shows("Approve? [y]es")
    keyboard.type("y")
    assert await briefing.done(job_id)
    assert "y" not in said(fake_openai)


async def test_a_jobs_card_shown_during_a_turn_still_takes_y_after_that_turn(
    keyboard: Keyboard, briefing: Briefing, fake_openai: FakeOpenAIServer
) -> None:
    """The end of the console's own turn closed the job's prompt too: the card still said
    "Approve? [y]es", but the "y" went to the model as a message (found by review)."""
    fake_openai.reply_hang(partial="Thinking ")  # the console's turn
    keyboard.type("hello")
    await keyboard.shows("Thinking")
    job_id = await briefing.fire()
    await keyboard.shows("Approve? [y]es")  # the job's card, during the console's turn
    keyboard.type("/stop")  # the console's turn ends; the job's card is still open
    await keyboard.shows("Stopped")
    keyboard.type("y")
    assert await briefing.done(job_id)
    assert "y" not in said(fake_openai)


async def test_a_path_answers_a_question(keyboard: Keyboard, fake_openai: FakeOpenAIServer) -> None:
    """At a prompt every line starting with "/" ran as a command: "/home/ann/project"
    answering "Which directory?" was "Unknown command" (found by review)."""
    ask = {"question": "Which directory?"}
    fake_openai.reply_tool_calls(("q1", "ask_user_clarification", ask))
    fake_openai.reply_text("Using it.")
    keyboard.type("set up the project")
    await keyboard.shows("Which directory?")
    keyboard.type("/home/ann/project")
    await keyboard.shows("Using it.")
    assert said(fake_openai, "tool")[-1] == "/home/ann/project"


async def test_an_answer_over_the_limit_is_refused_and_the_next_line_answers(
    hub: ChatHub, keyboard: Keyboard, fake_openai: FakeOpenAIServer
) -> None:
    """A refused answer (too long) left the question waiting but the prompt gone: the
    next line went in as a new message, behind the waiting turn (found by review)."""
    fake_openai.reply_tool_calls(("q1", "ask_user_clarification", {"question": "Which city?"}))
    fake_openai.reply_text("Booking it.")
    keyboard.type("book a hotel")
    await keyboard.shows("Which city?")
    keyboard.type("R" * (hub.config.max_message_chars + 1))
    await keyboard.shows("the limit is")
    keyboard.type("Rome")
    await keyboard.shows("Booking it.")
    assert said(fake_openai, "tool")[-1] == "Rome"


async def test_a_message_starting_with_a_path_is_a_message(
    keyboard: Keyboard, fake_openai: FakeOpenAIServer
) -> None:
    fake_openai.reply_text("Let me look.")
    keyboard.type("/etc/hosts is broken")
    await keyboard.shows("Let me look.")
    assert said(fake_openai)[-1] == "/etc/hosts is broken"


async def test_a_card_decided_elsewhere_leaves_the_next_line_a_message(
    hub: ChatHub,
    keyboard: Keyboard,
    fake_openai: FakeOpenAIServer,
) -> None:
    """Decided in the web inbox, the card still took the next line typed as its answer:
    "⌛ Expired", and the line was lost (found by review)."""
    fake_openai.reply_tool_calls(("c1", "execute_cmd", {"command": "echo hi"}))
    fake_openai.reply_hang(partial="Thinking it over ")
    keyboard.type("say hi")
    await keyboard.shows("Approve? [y]es")
    [item] = await hub.pending_approvals(await hub.session_id(SOURCE))
    await hub.decide(item.tool_call_id, Choice.named("approve"), decider=OPERATOR, by="Ann")
    await keyboard.shows("✅ Approved by Ann")
    await keyboard.shows("Thinking it over")
    keyboard.type("and what about tomorrow?")  # typed while the turn runs: a message
    keyboard.type("/stop")
    await keyboard.shows("Stopped")
    screen = keyboard.screen.getvalue()
    assert "Expired" not in screen and "(1 line(s) typed meanwhile dropped)" in screen


async def test_quit_at_an_approval_prompt_leaves_with_the_call_pending(
    hub: ChatHub,
    keyboard: Keyboard,
    fake_openai: FakeOpenAIServer,
) -> None:
    """ "/quit" at the prompt rejected the call with "/quit" as its reason, and the
    terminal stayed (found by review)."""
    fake_openai.reply_tool_calls(("c1", "execute_cmd", {"command": "echo hi"}))
    fake_openai.reply_text("You rejected it.")
    keyboard.type("say hi")
    await keyboard.shows("Approve? [y]es")
    keyboard.type("/quit")
    await keyboard.leaves()
    assert not any("/quit" in (result or "") for result in said(fake_openai, "tool"))
    assert len(await hub.pending_approvals(await hub.session_id(SOURCE))) == 1


async def test_a_command_at_an_approval_prompt_runs_and_the_prompt_waits(
    hub: ChatHub,
    keyboard: Keyboard,
    fake_openai: FakeOpenAIServer,
) -> None:
    fake_openai.reply_tool_calls(("c1", "execute_cmd", {"command": "echo hi"}))
    fake_openai.reply_text("It said hi.")
    keyboard.type("say hi")
    await keyboard.shows("Approve? [y]es")
    keyboard.type("/help")
    keyboard.type("y")
    await keyboard.shows("It said hi.")
    assert said(fake_openai, "tool")[-1].startswith("hi")


async def test_stop_drops_the_lines_typed_during_the_turn(
    keyboard: Keyboard, fake_openai: FakeOpenAIServer
) -> None:
    """Every platform's /stop drops the queued messages; the terminal's own backlog went
    on to the model right after "⏹ Stopped." (found by review)."""
    fake_openai.reply_hang(partial="Working on the long job ")
    fake_openai.reply_text("Deleting the old backups.")
    keyboard.type("do the long job")
    await keyboard.shows("Working on the long job")
    keyboard.type("then delete the old backups")
    keyboard.type("/stop")
    await keyboard.shows("Stopped")
    await keyboard.close()
    assert "then delete the old backups" not in said(fake_openai)


async def test_stop_typed_right_after_a_message_gives_the_prompt_back(
    keyboard: Keyboard, fake_openai: FakeOpenAIServer
) -> None:
    """A paste "hello\\n/stop": the stop dropped the message before its turn began, no
    event said so, and the terminal waited for ever (found by review on 2026-12-07)."""
    fake_openai.reply_text("Answered.")
    fake_openai.reply_text("Answered.")
    await keyboard.shows("› ")
    keyboard.type("hello\n/stop")
    await keyboard.shows("Stopped")
    keyboard.type("second message")
    await until(lambda: "second message" in said(fake_openai), "the next message asked")
    await until(lambda: keyboard.screen.getvalue().endswith("› "), "the prompt back")


async def hello_behind_a_tasks_turn(
    hub: ChatHub, keyboard: Keyboard, blocker: BlockingTool
) -> asyncio.Task[None]:
    """A task's result told into the console: its turn (scripted to call ``wait_here``,
    approved with ``y``) holds on in the tool while "hello" is typed, which waits behind
    it. The telling, to await."""
    await keyboard.shows("› ")
    session_id = await hub.session_id(SOURCE)
    told = asyncio.create_task(hub.inject(session_id, "task_completed", '{"ok": 1}', "done"))
    await keyboard.shows("Approve? [y]es")
    keyboard.type("y")
    await asyncio.wait_for(blocker.started.wait(), TIMEOUT_S)
    keyboard.type("hello")
    await until(lambda: keyboard.chat._backlog == [] and hub.has_work(SOURCE), "queued")
    return told


async def test_a_background_turn_ending_leaves_our_message_running(
    hub: ChatHub, engine: Engine, keyboard: Keyboard, fake_openai: FakeOpenAIServer
) -> None:
    """A task's result told while our message waited: its end ended our wait, and Ctrl-C
    during our turn then left the chat (found by review on 2026-12-07)."""
    blocker = BlockingTool()
    engine.tools.register(blocker)
    fake_openai.reply_tool_calls(("b1", "wait_here", {}))  # the background turn
    fake_openai.reply_text("Your backup finished.")
    fake_openai.reply_hang(partial="Thinking ")  # our message's turn
    told = await hello_behind_a_tasks_turn(hub, keyboard, blocker)
    blocker.release.set()
    await keyboard.shows("Your backup finished.")
    await keyboard.shows("Thinking")

    keyboard.chat._interrupt()  # Ctrl-C during our turn
    await keyboard.shows(CANCELLED_MESSAGE)
    await told
    assert not keyboard.task.done(), keyboard.screen.getvalue()


async def test_a_pasted_second_line_waits_as_a_message_not_an_answer(
    hub: ChatHub, fake_openai: FakeOpenAIServer
) -> None:
    """At a terminal a line read before a prompt was shown does not answer it: the second
    line of a paste rejected the command with itself as the reason (found by review)."""
    keyboard = Keyboard(hub, typed_ahead_answers=False)
    try:
        fake_openai.reply_tool_calls(("c1", "execute_cmd", {"command": "echo deploying"}))
        fake_openai.reply_text("Deployed.")
        fake_openai.reply_text("Noted.")
        keyboard.type("run the deploy script\nit is in the repo root")
        await keyboard.shows("Approve? [y]es")
        keyboard.type("y")
        await keyboard.shows("Noted.")
        assert said(fake_openai, "tool")[0].startswith("deploying")
        assert said(fake_openai)[-1] == "it is in the repo root"  # a message of its own
    finally:
        await keyboard.close()


async def test_two_cards_at_once_are_answered_latest_first_then_the_other(
    hub: ChatHub, keyboard: Keyboard, briefing: Briefing, fake_openai: FakeOpenAIServer
) -> None:
    """A job's card shown while the chat's own waited took its place: the chat's own
    could no longer be answered, and its turn waited for ever (found by review)."""
    fake_openai.reply_tool_calls(("c1", "execute_cmd", {"command": "echo hi"}))
    keyboard.type("say hi")
    await keyboard.shows("$ echo hi")
    job_id = await briefing.fire()
    fake_openai.reply_text("It said hi.")
    await keyboard.shows("⏰ Notes: read_file wants to run")
    keyboard.type("y")  # the latest card shown: the job's
    assert await briefing.done(job_id)
    await keyboard.shows("Still waiting for an answer:")
    keyboard.type("y")  # the chat's own, shown again
    await keyboard.shows("It said hi.")
    assert said(fake_openai, "tool")[-1].startswith("hi")


async def test_a_jobs_card_closed_by_nobody_names_nobody(
    hub: ChatHub, keyboard: Keyboard, briefing: Briefing, fake_openai: FakeOpenAIServer
) -> None:
    """A job's card whose wait ran out: "⌛ Not decided in time by  — …" (found by review
    on 2026-12-07)."""
    await keyboard.shows("› ")
    job_id = await briefing.fire()
    await keyboard.shows("⏰ Notes: read_file wants to run")  # a job's card says whose
    [item] = await hub.pending_approvals(shown_in=SOURCE)
    await hub.visiting.close(SOURCE, item.tool_call_id, "timed_out")  # scheduler/asking.py
    await keyboard.shows("Not decided in time")
    assert " by  " not in keyboard.screen.getvalue()
    await hub.decide(item.tool_call_id, Choice.named("reject"), decider=OPERATOR)
    await briefing.done(job_id)


async def test_a_tool_name_of_escapes_is_shown_as_codes(
    keyboard: Keyboard, fake_openai: FakeOpenAIServer
) -> None:
    """The name is the model's until it is checked (found by review on 2026-12-07)."""
    fake_openai.reply_tool_calls(("c1", "x\x1b]52;c;cm0gLXJmIH4=\x07\x1b[2J", {}))
    fake_openai.reply_text("Sorry.")
    keyboard.type("hi")
    await keyboard.shows("Sorry.")
    screen = keyboard.screen.getvalue()
    assert "\x1b" not in screen and "\x07" not in screen


async def test_a_failure_of_ours_is_one_line_and_the_chat_goes_on(
    hub: ChatHub, keyboard: Keyboard, fake_openai: FakeOpenAIServer
) -> None:
    """The database busy past its wait (another process holding SQLite's write lock)
    ended the chat, and `chathub serve` with it, on a traceback (found by review on
    2026-12-07)."""
    send = hub.send_message
    busy = True

    async def sometimes_busy(*args: Any, **kwargs: Any) -> Any:
        if busy:
            raise RuntimeError("database is locked")
        return await send(*args, **kwargs)

    hub.send_message = sometimes_busy  # type: ignore[method-assign]
    keyboard.type("hello")
    await keyboard.shows("! That failed (error ")
    assert "database is locked" not in keyboard.screen.getvalue()
    busy = False
    fake_openai.reply_text("Hello again.")
    keyboard.type("hello")
    await keyboard.shows("Hello again.")


async def test_a_pasted_line_never_decides_a_jobs_card_shown_after_it(
    hub: ChatHub, engine: Engine, fake_openai: FakeOpenAIServer
) -> None:
    """The paste's second line, waiting during our turn, rejected a job's card shown
    after it once our turn ended (found by review on 2026-12-07): it is a message."""
    briefing = Briefing(engine, hub, fake_openai)
    keyboard = Keyboard(hub, typed_ahead_answers=False)
    try:
        fake_openai.reply_text("Thinking about it.", pause_after=1)  # our turn, paused
        keyboard.type("hello\nplease go on")
        await keyboard.shows("Thinking")
        await until(lambda: keyboard.chat._backlog, "the second line waiting")
        job_id = await briefing.fire()
        await keyboard.shows("⏰ Notes: read_file wants to run")
        fake_openai.reply_text("Noted.")
        fake_openai.go_on()  # our turn ends
        await until(lambda: "please go on" in said(fake_openai), "the line sent as a message")
        [card] = await hub.pending_approvals(shown_in=SOURCE)  # the job's card still waits
        await until(lambda: keyboard.screen.getvalue().endswith("› "), "the prompt back")
        keyboard.type("y")
        assert await briefing.done(job_id)
        assert card.tool_call_id not in [c.tool_call_id for c in await hub.pending_approvals()]
    finally:
        await keyboard.close()
        await briefing.scheduler.close()


async def test_new_at_a_background_turns_card_gives_the_prompt_back(
    hub: ChatHub, engine: Engine, keyboard: Keyboard, fake_openai: FakeOpenAIServer
) -> None:
    """/new dropped our message waiting behind a task's turn, with no event: the chat
    waited for ever (found by review on 2026-12-07)."""
    blocker = BlockingTool()
    engine.tools.register(blocker)
    fake_openai.reply_tool_calls(("b1", "wait_here", {}))  # the background turn
    fake_openai.reply_tool_calls(("c1", "execute_cmd", {"command": "echo hi"}))  # asks
    told = await hello_behind_a_tasks_turn(hub, keyboard, blocker)
    blocker.release.set()
    await keyboard.shows("$ echo hi")  # the background turn's second card
    keyboard.type("/new")
    await keyboard.shows("New conversation")
    await until(lambda: keyboard.screen.getvalue().endswith("› "), "the prompt back")
    await told
