"""ChatHub scenarios: ordering, steering, /stop, isolation, notifications, eviction, bad input."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest

from engine.approval import BypassRequest
from engine.approval.deciders import OPERATOR
from engine.config import HubConfig
from engine.core import Engine
from engine.hub import (
    APPROVE,
    REJECT,
    ChatHub,
    Choice,
    HubError,
    NewSession,
    Notification,
    SendOptions,
)
from engine.llm.registry import ModelRegistry
from engine.llm.scripted import text, tool_call
from engine.session import events as ev
from engine.session.context.compaction import CompactionError
from engine.store.inbox import InboxError
from tests.engine.hub.conftest import EchoModel, ManualSleep, held, wait_done
from tests.engine.session.helpers import BlockingTool, EchoTool, roles


async def user_rows(engine: Engine, session_id: int) -> list[tuple[str, str]]:
    detail = await engine.store.views.session_detail(session_id)
    assert detail is not None
    return [(m["content"], m["status"]) for m in detail["messages"] if m["kind"] == "user"]


async def session_of(hub: ChatHub, source: str) -> int:
    session_id = await hub.engine.store.sessions.active_for_source(source)
    assert session_id is not None
    return session_id


async def test_a_message_is_stored_before_it_is_acknowledged(hub: ChatHub, engine, model):
    blocker = BlockingTool()
    engine.tools.register(blocker)
    model.add(tool_call("wait_here", "{}", "w"))
    events = hub.events("telegram:1")
    await hub.send_message("telegram:1", "first")
    await asyncio.wait_for(blocker.started.wait(), 5)

    queued_id = await hub.send_message("telegram:1", "second")

    [row] = await engine.store.queue.pending("telegram:1")
    assert (row.id, row.content) == (queued_id, "second")
    blocker.release.set()
    await wait_done(events)
    assert await engine.store.queue.pending() == []


async def test_a_hundred_rapid_messages_keep_their_order(hub: ChatHub, engine, model):
    events = hub.events("telegram:1")
    sent = [f"message {i}" for i in range(100)]
    for message in sent:
        await hub.send_message("telegram:1", message)
    answered: list[str] = []
    while len(answered) < 100:
        event = await asyncio.wait_for(events.recv(), 5)
        if isinstance(event.event, ev.UserMessage):
            answered.append(event.event.content)
        if isinstance(event.event, ev.Done) and len(answered) == 100:
            break

    assert answered == sent
    rows = await user_rows(engine, await session_of(hub, "telegram:1"))
    assert rows == [(m, "ok") for m in sent]
    assert await engine.store.queue.pending() == []


async def test_a_message_sent_while_a_tool_runs_steers_the_next_round(hub: ChatHub, engine, model):
    blocker = BlockingTool()
    engine.tools.register(blocker)
    model.add(tool_call("wait_here", "{}", "w"), text("Switched to Paris as you asked."))
    events = hub.events("telegram:1")
    await hub.send_message("telegram:1", "find hotels in Rome")
    await asyncio.wait_for(blocker.started.wait(), 5)

    await hub.send_message("telegram:1", "actually, Paris")
    blocker.release.set()
    seen = await wait_done(events)

    assert seen[-1].event.content == "Switched to Paris as you asked."
    second = model.requests[1][0]
    assert roles(second)[1:-1] == ["user", "assistant", "tool", "user"]
    assert second[-2]["content"] == "actually, Paris"
    rows = await user_rows(engine, await session_of(hub, "telegram:1"))
    assert rows == [("find hotels in Rome", "ok"), ("actually, Paris", "ok")]  # two rows


async def test_stop_during_a_tool_drops_the_three_queued_messages(hub: ChatHub, engine, model):
    blocker = BlockingTool()
    engine.tools.register(blocker)
    model.add(tool_call("wait_here", "{}", "w"))
    events = hub.events("telegram:1")
    await hub.send_message("telegram:1", "long job")
    await asyncio.wait_for(blocker.started.wait(), 5)
    for message in ("one", "two", "three"):
        await hub.send_message("telegram:1", message)

    assert await hub.cancel("telegram:1") == 3

    async def until_error() -> None:
        while not isinstance((await events.recv()).event, ev.Error):
            pass

    await asyncio.wait_for(until_error(), 5)
    assert blocker.cancelled
    rows = await user_rows(engine, await session_of(hub, "telegram:1"))
    assert rows == [("long job", "ok")]  # answered by the cancelled call: not resumed
    assert await engine.interrupted_sessions() == []
    assert await engine.store.queue.pending() == []
    assert len(model.requests) == 1  # none of the three was ever answered


async def test_a_turn_that_raises_does_not_stop_later_messages(hub: ChatHub, engine, model):
    events = hub.events("telegram:1")
    clash = SendOptions(interface_tools=(EchoTool("read_file"),))  # a duplicate tool name
    await hub.send_message("telegram:1", "broken", clash)
    await hub.send_message("telegram:1", "fine")

    seen = await wait_done(events)

    errors = [e.event for e in seen if isinstance(e.event, ev.Error)]
    assert errors and "could not be processed" in errors[0].message
    assert seen[-1].event.content == "echo: fine"
    assert await engine.store.queue.pending() == []


async def test_two_sources_never_wait_for_each_other(hub: ChatHub, engine, model):
    blocker = BlockingTool()
    engine.tools.register(blocker)
    model.add(tool_call("wait_here", "{}", "w"))
    slow, fast = hub.events("telegram:1"), hub.events("telegram:2")
    await hub.send_message("telegram:1", "slow job")
    await asyncio.wait_for(blocker.started.wait(), 5)

    await hub.send_message("telegram:2", "quick question")
    seen = await wait_done(fast)

    assert seen[-1].event.content == "echo: quick question"
    assert hub.is_processing("telegram:1") and not hub.is_processing("telegram:2")
    blocker.release.set()
    await wait_done(slow)


async def test_events_of_other_sources_are_filtered_out(hub: ChatHub):
    mine, everything = hub.events("telegram:1"), hub.events()
    await hub.send_message("telegram:2", "not for you")
    await hub.send_message("telegram:1", "for you")
    seen = await wait_done(mine)
    assert {e.source for e in seen} == {"telegram:1"}
    assert len(await wait_done(everything, 2)) > len(seen)


async def test_clear_starts_a_fresh_session_and_drops_the_queue(hub: ChatHub, engine, model):
    events = hub.events("telegram:1")
    await hub.send_message("telegram:1", "remember 42")
    await wait_done(events)
    old = await session_of(hub, "telegram:1")

    new = await hub.clear("telegram:1")

    event = await asyncio.wait_for(events.recv(), 5)
    assert event.event == NewSession(new, old) and new != old
    await hub.send_message("telegram:1", "what did I say?")
    await wait_done(events)
    assert roles(model.requests[-1][0])[1:-1] == ["user"]  # the old history is gone


async def test_five_notifications_make_one_message_and_one_turn(
    hub: ChatHub, engine, model, manual_sleep: ManualSleep
):
    await hub.set_home("telegram:1")
    events = hub.events("telegram:1")
    model.add(text("You have five updates: ..."))
    for i in range(5):
        hub.notify(Notification("cron", "job_done", f"job {i} finished"))
    await manual_sleep.release(hub.config.notify_window_s)  # the 200 ms batching window ends

    seen = await wait_done(events)

    assert seen[-1].event.content == "You have five updates: ..."
    assert len(model.requests) == 1
    [tool_message] = [m for m in model.requests[0][0] if m["role"] == "tool"]
    items = json.loads(tool_message["content"])
    assert [item["summary"] for item in items] == [f"job {i} finished" for i in range(5)]
    detail = await engine.store.views.session_detail(await session_of(hub, "telegram:1"))
    [synthetic] = [m for m in detail["messages"] if m["kind"] == "thinking"]
    assert synthetic["is_synthetic"] is True


async def test_a_notification_for_an_unknown_target_goes_home(
    hub: ChatHub, engine, model, manual_sleep, caplog
):
    await hub.set_home("telegram:1")
    events = hub.events("telegram:1")
    with caplog.at_level(logging.WARNING):
        hub.notify(Notification("cron", "job_done", "backup finished", target="telegram:999"))
        await manual_sleep.release(hub.config.notify_window_s)
        await wait_done(events)
    assert "unknown target 'telegram:999'" in caplog.text
    assert await engine.store.sessions.active_for_source("telegram:999") is None


async def test_the_model_reading_notifications_itself_gets_nothing(hub: ChatHub, model):
    model.add(tool_call("read_notification", "{}", "r"), text("Nothing new."))
    events = hub.events("telegram:1")
    await hub.send_message("telegram:1", "anything new?")
    await wait_done(events)
    assert [m["content"] for m in model.requests[1][0] if m["role"] == "tool"] == ["[]"]


async def test_the_home_source_survives_a_restart(engine: Engine, hub: ChatHub, hub_config):
    await hub.set_home("telegram:7")
    again = ChatHub(engine, hub_config)
    await again.start()
    try:
        assert again.home == "telegram:7"
    finally:
        await again.close()


async def test_an_evicted_source_reloads_its_session(hub: ChatHub, engine, model):
    events = hub.events("telegram:1")
    await hub.send_message("telegram:1", "my name is Ada")
    await wait_done(events)
    session_id = await session_of(hub, "telegram:1")
    assert hub.evict_idle(now=10**9) == 1 and hub.live_sources == 0

    await hub.send_message("telegram:1", "who am I?")
    await wait_done(events)

    assert await session_of(hub, "telegram:1") == session_id
    users = [m["content"] for m in model.requests[-1][0] if m["role"] == "user"]
    assert users == ["my name is Ada\n\nwho am I?"] or users == ["my name is Ada", "who am I?"]


async def test_a_busy_or_recent_source_is_not_evicted(hub: ChatHub, engine, model):
    blocker = BlockingTool()
    engine.tools.register(blocker)
    model.add(tool_call("wait_here", "{}", "w"))
    events = hub.events("telegram:1")
    await hub.send_message("telegram:1", "work")
    await asyncio.wait_for(blocker.started.wait(), 5)
    assert hub.evict_idle(now=10**9) == 0
    blocker.release.set()
    await wait_done(events)
    assert hub.evict_idle() == 0  # idle, but not for long enough


async def test_decisions_are_taken_only_for_the_source_s_own_calls(app_config, model: EchoModel):
    engine = await Engine.open(app_config, models=ModelRegistry([model]))  # the default rules
    hub = ChatHub(engine)
    await hub.start()
    try:
        model.add(tool_call("execute_cmd", '{"command": "echo hi"}', "c"), text("Ran it."))
        events = hub.events("telegram:1")
        await hub.send_message("telegram:1", "run it")

        async def approval() -> ev.ApprovalRequired:
            while not isinstance((event := await events.recv()).event, ev.ApprovalRequired):
                pass
            return event.event

        request = await asyncio.wait_for(approval(), 5)
        for attempt in (
            hub.decide(request.tool_call_id, APPROVE, decider=OPERATOR, source="telegram:2"),
            hub.decide(
                request.tool_call_id, REJECT, decider=OPERATOR, note="no", source="telegram:2"
            ),
        ):
            with pytest.raises(InboxError) as err:
                await attempt
            assert err.value.code == "other_session"
        await hub.decide(
            request.tool_call_id,
            Choice(True, BypassRequest("all", None, 60)),
            decider=OPERATOR,
            source="telegram:1",
        )
        seen = await wait_done(events)
        assert seen[-1].event.content == "Ran it."
    finally:
        await hub.close()
        await engine.close()


async def test_a_session_cancelled_through_the_hub_stops_its_turn(hub: ChatHub, engine, model):
    blocker = BlockingTool()
    engine.tools.register(blocker)
    model.add(tool_call("wait_here", "{}", "w"))
    events = hub.events("telegram:1")
    await hub.send_message("telegram:1", "work")
    await asyncio.wait_for(blocker.started.wait(), 5)

    await hub.cancel_session(await session_of(hub, "telegram:1"))

    async def until_error() -> ev.Error:
        while not isinstance((event := await events.recv()).event, ev.Error):
            pass
        return event.event

    assert (await asyncio.wait_for(until_error(), 5)).message == "Interrupted by user."
    assert blocker.cancelled


async def test_model_selection_usage_and_tool_reset(hub: ChatHub, engine, model):
    assert hub.list_models() == ["primary"]
    assert await hub.select_model("telegram:1", "primary") == "primary"
    assert await hub.selected_model("telegram:1") == "primary"
    with pytest.raises(HubError, match="not configured"):
        await hub.select_model("telegram:1", "gpt-9")
    assert await hub.select_model("telegram:1", "auto") == "auto"
    assert await hub.selected_model("telegram:1") == "auto"

    model.add(text("hi", input_tokens=120, output_tokens=7))
    events = hub.events("telegram:1")
    await hub.send_message("telegram:1", "hello")
    await wait_done(events)
    usage = await hub.context_info("telegram:1")
    assert (usage.last_input_tokens, usage.last_output_tokens) == (120, 7)
    assert (await hub.cost_info("telegram:1")).model_calls == 1
    assert await hub.reset_tools("telegram:1") == 0
    with pytest.raises(CompactionError, match="not enabled"):
        await hub.force_compact("telegram:1")  # compaction is opt-in


async def test_compact_while_a_turn_waits_is_refused_at_once(hub: ChatHub, model):
    """/compact waited for the running turn's lock; front ends run commands in the chat's
    lane, so the answer to the turn's question and /stop queued behind it, until the turn
    ended (found by review)."""
    model.add(tool_call("ask_user_clarification", json.dumps({"question": "Which city?"}), "q"))
    model.add(text("Booking Rome."))
    events = hub.events("telegram:1")
    await hub.send_message("telegram:1", "book a hotel")
    while not isinstance((await events.recv()).event, ev.Question):
        pass
    with pytest.raises(CompactionError, match="a turn is running"):
        await asyncio.wait_for(hub.force_compact("telegram:1"), 5)


@pytest.mark.parametrize("source", ["", "Telegram:1", "telegram 1", "telegram::1", "x" * 300, 42])
async def test_a_bad_source_name_is_refused(hub: ChatHub, source):
    with pytest.raises(HubError, match="source"):
        await hub.send_message(source, "hi")  # type: ignore[arg-type]


async def test_an_oversized_or_empty_message_is_refused_clearly(hub: ChatHub, engine):
    with pytest.raises(HubError, match="1048576 characters long; the limit is 32000"):
        await hub.send_message("telegram:1", "x" * 1_048_576)
    with pytest.raises(HubError, match="empty"):
        await hub.send_message("telegram:1", "   ")
    assert await engine.store.queue.pending() == []
    attachment = SendOptions(metadata={"attachments": [{"path": "uploads/a.png"}]})
    assert await hub.send_message("telegram:1", "", attachment) > 0  # a photo alone is fine


async def test_an_answer_hook_writes_in_the_answers_own_transaction(hub: ChatHub, engine, model):
    import sqlalchemy as sa

    from engine.store.schema import chat_history

    seen: list[tuple[str, str, int, bool]] = []

    def hook(source: str, content: str):
        def unit(conn, message_id: int) -> None:
            stored = conn.execute(
                sa.select(chat_history.c.content).where(chat_history.c.id == message_id)
            ).scalar_one()
            seen.append((source, content, message_id, stored == content))

        return unit

    hub.on_answer("telegram:", hook)
    events = hub.events("telegram:7")
    model.add(text("the answer"))
    await hub.send_message("telegram:7", "question")
    done = (await wait_done(events))[-1].event
    assert seen == [("telegram:7", "the answer", done.message_id, True)]

    other = hub.events("console")
    await hub.send_message("console", "no hook here")
    await wait_done(other)
    assert len(seen) == 1  # only the sources of the prefix


async def test_a_failing_answer_hook_never_loses_the_answer(hub: ChatHub, engine, model):
    def broken(source: str, content: str):
        raise RuntimeError("adapter bug")

    hub.on_answer("telegram:", broken)
    events = hub.events("telegram:8")
    model.add(text("still answered"))
    await hub.send_message("telegram:8", "question")
    done = (await wait_done(events))[-1].event
    assert done.content == "still answered"


class Marks:
    """An adapter's durable record of a message (like a stored Telegram update)."""

    def __init__(self, engine: Engine) -> None:
        import sqlalchemy as sa

        self.sa = sa
        self.engine = engine
        self.table = sa.Table(
            "test_marks", sa.MetaData(), sa.Column("name", sa.String, primary_key=True)
        )

    async def create(self) -> None:
        await self.engine.store.db.run(lambda conn: self.table.create(conn))

    def mark(self, name: str):
        return lambda conn: conn.execute(self.table.insert().values(name=name))

    async def names(self) -> list[str]:
        rows = await self.engine.store.db.run(
            lambda conn: conn.execute(self.sa.select(self.table.c.name)).scalars().all()
        )
        return sorted(rows)


async def test_a_redeliverable_message_to_an_idle_chat_is_stored_once_with_its_user_row(
    hub: ChatHub, engine, model
):
    marks = Marks(engine)
    await marks.create()
    events = hub.events("telegram:3")
    queued = await hub.send_message(
        "telegram:3", "hello", also=marks.mark("u1"), redelivered_if_lost=True
    )
    assert queued is None  # no queue row: the user row is the first write
    await wait_done(events)
    assert await marks.names() == ["u1"]
    assert await user_rows(engine, await session_of(hub, "telegram:3")) == [("hello", "ok")]
    assert await engine.store.queue.pending() == []


async def test_a_redeliverable_message_to_a_busy_chat_is_queued_as_usual(
    hub: ChatHub, engine, model
):
    marks = Marks(engine)
    await marks.create()
    blocker = BlockingTool()
    engine.tools.register(blocker)
    model.add(tool_call("wait_here", "{}", "w"))
    events = hub.events("telegram:4")
    await hub.send_message("telegram:4", "first")
    await asyncio.wait_for(blocker.started.wait(), 5)
    queued = await hub.send_message(
        "telegram:4", "second", also=marks.mark("u2"), redelivered_if_lost=True
    )
    assert isinstance(queued, int)
    assert await marks.names() == ["u2"]  # marked with its queue row, before the answer
    blocker.release.set()
    await wait_done(events)


async def test_stop_while_a_taken_messages_context_is_read_drops_that_message(
    hub: ChatHub, engine, model
):
    """/stop came while the consumer read the taken message's context (the memory
    profile): its turn ran all the same (found by review on 2026-12-07)."""
    entered, release = asyncio.Event(), asyncio.Event()

    async def slow_profile(source: str, metadata: object) -> None:
        if not entered.is_set():
            entered.set()
            await release.wait()

    hub.add_turn_context(slow_profile)  # type: ignore[arg-type]
    events = hub.events("telegram:1")
    await hub.send_message("telegram:1", "do the long thing")
    await asyncio.wait_for(entered.wait(), 5)

    await hub.cancel("telegram:1")
    release.set()
    await hub.send_message("telegram:1", "and now this")
    seen = await wait_done(events)

    assert seen[-1].event.content == "echo: and now this"
    asked = [m["content"] for request in model.requests for m in request[0] if m["role"] == "user"]
    assert "do the long thing" not in asked


async def test_stop_settles_a_redeliverable_message_it_drops(hub: ChatHub, engine, model):
    marks = Marks(engine)
    await marks.create()
    await hub.send_message("telegram:5", "dropped", also=marks.mark("u3"), redelivered_if_lost=True)
    await hub.cancel("telegram:5")  # before the consumer ran it
    for _ in range(50):
        if await marks.names():
            break
        await asyncio.sleep(0)
    assert await marks.names() == ["u3"]  # never handed over again after a restart
    assert await user_rows(engine, await session_of(hub, "telegram:5")) == []


async def test_stop_while_a_taken_message_waits_for_a_notification_turn_drops_it(
    hub: ChatHub, engine, model, manual_sleep: ManualSleep
):
    """A notification turn held the session when the next message was taken: /stop
    stopped that turn, and the taken message, waiting for it, ran all the same (found
    by review on 2026-12-07; fixed the same day)."""
    await hub.set_home("telegram:1")
    release = held(model)
    events = hub.events("telegram:1")
    hub.notify(Notification("cron", "job_done", "backup finished"))
    await manual_sleep.release(hub.config.notify_window_s)
    await asyncio.wait_for(release.asked.wait(), 5)  # the notification turn asks the model
    taken = asyncio.Event()

    async def noting(source: str, metadata: object) -> None:
        taken.set()  # the consumer goes on to the session's lock without a pause

    hub.add_turn_context(noting)  # type: ignore[arg-type]
    await hub.send_message("telegram:1", "do the long thing")
    await asyncio.wait_for(taken.wait(), 5)

    assert await hub.cancel("telegram:1") == 0  # the message was taken: none waited
    release.set()
    await hub.send_message("telegram:1", "and now this")
    seen = await wait_done(events)
    while seen[-1].event.content != "echo: and now this":
        seen = await wait_done(events)

    asked = [m["content"] for request in model.requests for m in request[0] if m["role"] == "user"]
    assert "do the long thing" not in asked
    assert "do the long thing" not in [
        c for c, _ in await user_rows(engine, await session_of(hub, "telegram:1"))
    ]


# -- a waiting message corrected -----------------------------------------------------------

SOURCE = "telegram:1"
_EDITED = {"telegram_message_id": 7, "sender": {"id": "1", "name": "Alice"}}


async def _platforms_message(hub: ChatHub, marks: Marks, text: str) -> None:
    """Message 7, as Telegram's handler gives it: redeliverable, marked with its update."""
    await hub.send_message(
        SOURCE,
        text,
        SendOptions(metadata=dict(_EDITED)),
        also=marks.mark("u1"),
        redelivered_if_lost=True,
    )


async def test_an_edit_reaches_a_message_waiting_behind_a_notifications_turn(
    hub: ChatHub, engine: Engine, model, manual_sleep
) -> None:
    """A message to a source that looks idle is taken in without a queue row (its
    platform keeps its own record): waiting behind a notification's turn, an edit of it
    found no row, and the agent read the words taken back (found by review on
    2026-12-07)."""
    marks = Marks(engine)
    await marks.create()
    await hub.set_home(SOURCE)
    release = held(model)
    events = hub.events(SOURCE)
    hub.notify(Notification("cron", "job_done", "backup finished"))
    await manual_sleep.release(hub.config.notify_window_s)
    await asyncio.wait_for(release.asked.wait(), 5)  # the agent is busy (a notification)
    await _platforms_message(hub, marks, "deploy to prod")
    assert await hub.amend(SOURCE, "telegram_message_id", 7, "deploy to staging")
    release.set()
    rows: list[str] = []
    for _ in range(3):
        await wait_done(events)
        rows = [c for c, _ in await user_rows(engine, await session_of(hub, SOURCE))]
        if any(row.startswith("deploy") for row in rows):
            break
    assert "deploy to staging" in rows and "deploy to prod" not in rows, rows


async def test_an_edit_reaches_a_message_waiting_out_the_debounce(engine: Engine, model) -> None:
    sleep = ManualSleep()
    hub = ChatHub(engine, HubConfig(idle_evict_s=60, debounce_s=2.0), sleep=sleep)
    await hub.start()
    try:
        marks = Marks(engine)
        await marks.create()
        events = hub.events(SOURCE)
        await _platforms_message(hub, marks, "deploy to prod")
        assert await hub.amend(SOURCE, "telegram_message_id", 7, "deploy to staging")
        assert not await hub.amend(SOURCE, "telegram_message_id", 8, "another message")
        await sleep.release(2.0)
        await wait_done(events)
        rows = [c for c, _ in await user_rows(engine, await session_of(hub, SOURCE))]
        assert rows == ["deploy to staging"]
    finally:
        await hub.close()


# -- a waiting message taken back ----------------------------------------------------------


async def test_a_message_taken_back_while_it_waits_behind_a_notification_is_not_read(
    hub: ChatHub, engine: Engine, model, manual_sleep
) -> None:
    """Deleted while the agent was busy with a notification's turn: it had no queue row
    (its platform keeps its own record), and it was read all the same (found by review on
    2026-12-07). Its platform's record is marked, so it is not handed over again."""
    marks = Marks(engine)
    await marks.create()
    await hub.set_home(SOURCE)
    release = held(model)
    events = hub.events(SOURCE)
    hub.notify(Notification("cron", "job_done", "backup finished"))
    await manual_sleep.release(hub.config.notify_window_s)
    await asyncio.wait_for(release.asked.wait(), 5)
    await _platforms_message(hub, marks, "my password is hunter2")
    assert await hub.withdraw(SOURCE, "telegram_message_id", 7)
    release.set()
    await wait_done(events)
    await hub.send_message(SOURCE, "sentinel")
    while (await wait_done(events))[-1].event.content != "echo: sentinel":
        pass
    rows = [c for c, _ in await user_rows(engine, await session_of(hub, SOURCE))]
    assert "my password is hunter2" not in rows, rows
    assert await marks.names() == ["u1"]


async def test_a_queued_message_taken_back_is_not_read(hub: ChatHub, engine: Engine, model) -> None:
    release = held(model)
    events = hub.events(SOURCE)
    await hub.send_message(SOURCE, "first")
    await asyncio.wait_for(release.asked.wait(), 5)
    await hub.send_message(SOURCE, "my password is hunter2", SendOptions(metadata=dict(_EDITED)))
    assert [row.content for row in await hub.waiting_messages(SOURCE)] == ["my password is hunter2"]
    assert await hub.withdraw(SOURCE, "telegram_message_id", 7, by="1")
    assert await hub.waiting_messages(SOURCE) == []
    assert not await hub.withdraw(SOURCE, "telegram_message_id", 7)  # gone already
    release.set()
    await wait_done(events)
    asked = [m["content"] for request in model.requests for m in request[0] if m["role"] == "user"]
    assert "my password is hunter2" not in asked
