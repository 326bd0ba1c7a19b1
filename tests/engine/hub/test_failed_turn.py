"""A failed turn ends durably: its messages are marked failed in the commit that records
the user's notice (``ChatHub.on_failure``), so recovery never runs it again and the notice
is delivered once; the user never sees a Python exception, only an id found in the log."""

from __future__ import annotations

import asyncio
import json
import logging
import re
from typing import Any

import pytest
from sqlalchemy.engine import Connection

from engine.core import Engine
from engine.hub import ChatHub, FailureNotice, HubEvent, SendOptions
from engine.llm.scripted import tool_call
from engine.llm.types import LlmServerError
from engine.session import events as ev
from engine.session.protocols import Decision, Verdict
from engine.store.history import AlsoWithKey
from engine.store.schema import app_settings, utcnow
from tests.engine.hub.conftest import EchoModel, wait_done
from tests.engine.session.helpers import EchoTool

SOURCE = "telegram:1"
NOTICE = re.compile(
    r"Sorry, your message could not be processed \(error ([0-9a-f]{6})\)\. Please try again\."
)


class NoticeLog:
    """An adapter's failure hook: each notice becomes an ``app_settings`` row keyed by the
    failure's key, in the transaction that ends the turn (as an outbox row would)."""

    def __init__(self, *, broken: bool = False) -> None:
        self.asked: list[tuple[str, str]] = []
        self.broken = broken

    def __call__(self, source: str, notice: str) -> AlsoWithKey:
        self.asked.append((source, notice))

        def record(conn: Connection, key: str) -> None:
            if self.broken:
                raise RuntimeError("the outbox is full")
            conn.execute(app_settings.insert().values(key=key, value=notice, updated_at=utcnow()))

        return record


async def user_rows(engine: Engine, source: str = SOURCE) -> list[tuple[int, str, str]]:
    session_id = await engine.store.sessions.active_for_source(source)
    assert session_id is not None
    detail = await engine.store.views.session_detail(session_id)
    assert detail is not None
    return [(m["id"], m["content"], m["status"]) for m in detail["messages"] if m["kind"] == "user"]


async def next_error(events) -> ev.Error:
    async def find() -> ev.Error:
        while not isinstance((item := await events.recv()).event, ev.Error):
            pass
        assert isinstance(item, HubEvent)
        return item.event

    return await asyncio.wait_for(find(), 5)


def fail_storing_answers(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    """The turn raises after its user row is stored: storing the answer blows up."""

    async def boom(*args: object, **kwargs: object) -> None:
        raise RuntimeError("disk on fire: /var/lib/secret.db")

    monkeypatch.setattr(engine.store.history, "append_assistant", boom)


async def test_a_turn_that_raises_is_failed_and_told_once_in_one_commit(
    hub: ChatHub, engine: Engine, model: EchoModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    notices = NoticeLog()
    hub.on_failure("telegram:", notices)
    fail_storing_answers(engine, monkeypatch)
    events = hub.events(SOURCE)

    await hub.send_message(SOURCE, "hello?")
    error = await next_error(events)

    [(row_id, content, status)] = await user_rows(engine)
    assert (content, status) == ("hello?", "failed")
    assert isinstance(error, FailureNotice) and error.key == f"failed:{row_id}"
    assert await engine.store.settings.get(error.key) == error.message  # committed with it
    assert notices.asked == [(SOURCE, error.message)]
    assert await engine.interrupted_sessions() == []  # recovery will not run it again


async def test_the_user_sees_a_plain_sentence_and_the_log_has_its_id(
    hub: ChatHub, engine: Engine, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    fail_storing_answers(engine, monkeypatch)
    events = hub.events(SOURCE)
    caplog.set_level(logging.ERROR, logger="engine.hub.hub")

    await hub.send_message(SOURCE, "hello?")
    error = await next_error(events)

    match = NOTICE.fullmatch(error.message)
    assert match, error.message
    assert "RuntimeError" not in error.message and "disk on fire" not in error.message
    [record] = [r for r in caplog.records if match.group(1) in r.getMessage()]
    assert record.exc_info is not None and "disk on fire" in str(record.exc_info[1])
    assert not isinstance(error, FailureNotice)  # no hook for this source: said live


async def test_after_a_restart_the_failed_message_is_not_run_again(
    hub: ChatHub, engine: Engine, model: EchoModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    hub.on_failure("telegram:", NoticeLog())
    fail_storing_answers(engine, monkeypatch)
    events = hub.events(SOURCE)
    await hub.send_message(SOURCE, "the failing one")
    await next_error(events)
    await hub.close()
    monkeypatch.undo()
    asked = len(model.requests)

    restarted = ChatHub(engine)
    await restarted.start()
    try:
        again = restarted.events(SOURCE)
        await restarted.send_message(SOURCE, "a new one")
        seen = await wait_done(again)
    finally:
        await restarted.close()

    assert seen[-1].event.content == "echo: a new one"
    assert len(model.requests) == asked + 1  # only the new message went to the model
    users = [m["content"] for m in model.requests[-1][0] if m["role"] == "user"]
    assert users == ["a new one"]


async def test_a_failed_turns_open_calls_never_run_later(
    hub: ChatHub, engine: Engine, model: EchoModel, tmp_path
) -> None:
    """The turn raised with its tool round open: the person was told it failed, and until
    2026-12-07 the chat's next message ran its command (found by review)."""

    class FailsOnce:
        def __init__(self) -> None:
            self.failed = False

        async def check(self, request: Any) -> Verdict:
            if not self.failed:
                self.failed = True
                raise RuntimeError("a hiccup of the rules")
            return Verdict(Decision.ALLOW)

    hub.on_failure("telegram:", NoticeLog())
    engine.policy = FailsOnce()
    events = hub.events(SOURCE)
    command = json.dumps({"command": "echo sent >> mail.log"})
    model.add(tool_call("execute_cmd", command, "c1"))
    await hub.send_message(SOURCE, "mail Bob")
    await next_error(events)

    await hub.send_message(SOURCE, "hello")
    await wait_done(events)
    assert not (tmp_path / "workspace" / "mail.log").exists()
    assert await engine.interrupted_sessions() == []


async def test_a_message_whose_turn_cannot_be_prepared_is_told_and_not_left_queued(
    hub: ChatHub, engine: Engine, model: EchoModel
) -> None:
    """Opening its session's handler failed (the database away a moment): the consumer
    died, nobody was told, and the message waited for a restart (found by review on
    2026-12-07). It is the turn's failure now; the next message is answered."""
    hub.on_failure("telegram:", NoticeLog())
    opened = engine.open_session
    failures = iter([OSError("database is locked")])

    async def flaky(session_id: int) -> Any:
        failure = next(failures, None)
        if failure is not None:
            raise failure
        return await opened(session_id)

    engine.open_session = flaky  # type: ignore[method-assign]
    events = hub.events(SOURCE)
    await hub.send_message(SOURCE, "first")
    await next_error(events)
    assert await engine.store.queue.pending(SOURCE) == []

    await hub.send_message(SOURCE, "second")
    seen = await wait_done(events)
    assert seen[-1].event.content == "echo: second"


async def test_every_model_failing_records_the_notice_with_the_failed_mark(
    hub: ChatHub, engine: Engine, model: EchoModel
) -> None:
    notices = NoticeLog()
    hub.on_failure("telegram:", notices)
    model.add(LlmServerError("primary: HTTP 503: overloaded", status=503))
    events = hub.events(SOURCE)

    await hub.send_message(SOURCE, "are you there?")
    error = await next_error(events)

    [(row_id, _, status)] = await user_rows(engine)
    assert status == "failed"
    assert isinstance(error, FailureNotice) and error.key == f"failed:{row_id}"
    assert error.message.startswith("Every model failed: primary: HTTP 503: overloaded")
    assert await engine.store.settings.get(error.key) == error.message
    assert await engine.interrupted_sessions() == []


async def test_a_message_the_turn_never_stored_leaves_the_queue_with_its_notice(
    hub: ChatHub, engine: Engine
) -> None:
    hub.on_failure("telegram:", NoticeLog())
    events = hub.events(SOURCE)
    clash = SendOptions(interface_tools=(EchoTool("read_file"),))  # raises before storing

    await hub.send_message(SOURCE, "broken", clash)
    error = await next_error(events)
    await hub.send_message(SOURCE, "fine")
    seen = await wait_done(events)

    assert isinstance(error, FailureNotice) and re.fullmatch(r"failed:[0-9a-f]{12}", error.key)
    assert await engine.store.settings.get(error.key) == error.message
    assert NOTICE.fullmatch(error.message)
    assert seen[-1].event.content == "echo: fine"
    assert await engine.store.queue.pending() == []
    assert [(c, s) for _, c, s in await user_rows(engine)] == [("fine", "ok")]


async def test_a_caller_record_of_an_unstored_message_is_settled_with_the_notice(
    hub: ChatHub, engine: Engine
) -> None:
    """A message that skipped the queue (``redelivered_if_lost``): its ``also`` commits with
    the notice, so the platform does not hand the message over again."""
    hub.on_failure("telegram:", NoticeLog())
    events = hub.events(SOURCE)
    clash = SendOptions(interface_tools=(EchoTool("read_file"),))

    def handled(conn: Connection) -> None:
        conn.execute(app_settings.insert().values(key="handled", value="1", updated_at=utcnow()))

    assert (
        await hub.send_message(SOURCE, "broken", clash, also=handled, redelivered_if_lost=True)
        is None
    )
    error = await next_error(events)

    assert isinstance(error, FailureNotice)
    assert await engine.store.settings.get("handled") == "1"
    assert await engine.store.settings.get(error.key) == error.message


async def test_a_failing_hook_still_fails_the_turn_and_tells_the_user_live(
    hub: ChatHub, engine: Engine, model: EchoModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    hub.on_failure("telegram:", NoticeLog(broken=True))
    fail_storing_answers(engine, monkeypatch)
    events = hub.events(SOURCE)

    await hub.send_message(SOURCE, "hello?")
    error = await next_error(events)
    monkeypatch.undo()
    await hub.send_message(SOURCE, "still there?")
    seen = await wait_done(events)

    assert type(error) is ev.Error and NOTICE.fullmatch(error.message)  # live, not recorded
    assert seen[-1].event.content == "echo: still there?"  # the consumer went on


async def test_only_the_sources_of_the_hooks_prefix_use_it(hub: ChatHub, engine: Engine) -> None:
    notices = NoticeLog()
    hub.on_failure("telegram:", notices)
    events = hub.events("console")
    clash = SendOptions(interface_tools=(EchoTool("read_file"),))

    await hub.send_message("console", "broken", clash)
    error = await next_error(events)

    assert type(error) is ev.Error and notices.asked == []
