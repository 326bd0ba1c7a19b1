"""``TurnBridge``: a turn's events reach the bus tagged with their source; a failure's
recorded notice is published as a ``FailureNotice`` carrying its key, once."""

from __future__ import annotations

from typing import Any

from sqlalchemy.engine import Connection

from engine.hub.turns.bridge import TurnBridge
from engine.hub.types import FailureNotice
from engine.session import events as ev
from engine.store.history import AlsoWithKey, AlsoWithRow


class Published(list[tuple[str, int | None, Any]]):
    def __call__(self, source: str, session_id: int | None, event: Any) -> None:
        self.append((source, session_id, event))


def no_connection() -> Connection:
    return None  # type: ignore[return-value]  # the hooks below never touch it


def test_events_are_tagged_with_the_source_and_session() -> None:
    published = Published()
    bridge = TurnBridge(published, "telegram:1", 7, None, None)

    bridge(ev.Error("boom"))

    assert published == [("telegram:1", 7, ev.Error("boom"))]


def test_without_hooks_there_is_nothing_to_commit_with_the_answer_or_the_failure() -> None:
    bridge = TurnBridge(Published(), "console", 1, None, None)

    assert bridge.answer_unit("hi") is None
    assert bridge.failure_unit("it failed") is None


def test_the_answer_hook_is_asked_with_the_source_and_content() -> None:
    asked: list[tuple[str, str]] = []

    def unit(conn: Connection, message_id: int) -> None: ...

    def hook(source: str, content: str) -> AlsoWithRow:
        asked.append((source, content))
        return unit

    bridge = TurnBridge(Published(), "telegram:1", 1, hook, None)

    assert bridge.answer_unit("the answer") is unit
    assert asked == [("telegram:1", "the answer")]


def test_a_recorded_notice_is_published_as_a_failure_notice_once() -> None:
    keys: list[str] = []

    def hook(source: str, notice: str) -> AlsoWithKey:
        return lambda conn, key: keys.append(key)

    published = Published()
    bridge = TurnBridge(published, "telegram:1", 3, None, hook)
    record = bridge.failure_unit("Every model failed")
    assert record is not None

    bridge(ev.Error("Every model failed"))  # not recorded yet: said live
    record(no_connection(), "failed:9")
    bridge(ev.Error("something else"))  # another text: not the recorded notice
    bridge(ev.Error("Every model failed"))
    bridge(ev.Error("Every model failed"))

    events = [event for _, _, event in published]
    assert keys == ["failed:9"]
    assert [type(e) for e in events] == [ev.Error, ev.Error, FailureNotice, ev.Error]
    assert events[2] == FailureNotice("Every model failed", "failed:9")


def test_a_hook_that_returns_nothing_records_nothing() -> None:
    bridge = TurnBridge(Published(), "telegram:1", 1, None, lambda source, notice: None)

    assert bridge.failure_unit("it failed") is None
