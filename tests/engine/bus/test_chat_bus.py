"""Tests for the chat and system event buses (engine.bus.chat, engine.bus.system)."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import UTC, datetime

import pytest

from engine.bus import (
    AssistantResponse,
    BusClosed,
    BusEvent,
    ChatEvent,
    ChatEventBus,
    CompactionDone,
    CompactionEvent,
    JobCompleted,
    Lagged,
    ProviderRegistered,
    ProviderUnregistered,
    SessionCancelled,
    SystemEvent,
    SystemEventBus,
    ToolCallEvent,
    UserMessage,
)

NOW = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


def chat_event(message_id: int, role: str = "user", content: str = "hi", **kw: object) -> ChatEvent:
    return ChatEvent(
        session_id=1,
        stack_id=10,
        message_id=message_id,
        role=role,  # type: ignore[arg-type]
        content=content,
        is_synthetic=False,
        is_interactive=True,
        is_ephemeral=False,
        created_at=NOW,
        **kw,  # type: ignore[arg-type]
    )


COMPACTION = CompactionEvent(
    session_id=1, stack_id=10, summary_id=3, covers_up_to_message_id=41, triggered_by_tokens=90_000
)


async def test_turn_events_arrive_in_order_to_every_subscriber() -> None:
    bus = ChatEventBus()
    a, b = bus.subscribe(), bus.subscribe()
    call = ToolCallEvent(name="read_file", arguments='{"path": "a"}', result="x", status="done")
    user = chat_event(1, "user", "read a")
    reply = chat_event(2, "assistant", "it says x", tool_calls=(call,))

    assert bus.compaction_done(COMPACTION) == 2
    assert bus.user_message(user) == 2
    assert bus.assistant_response(reply) == 2
    bus.close()

    expected = [CompactionDone(COMPACTION), UserMessage(user), AssistantResponse(reply)]
    assert [e async for e in a] == expected
    assert [e async for e in b] == expected


async def test_publish_accepts_any_bus_event_and_match_works() -> None:
    bus = ChatEventBus()
    sub = bus.subscribe()
    events: list[BusEvent] = [
        UserMessage(chat_event(1)),
        AssistantResponse(chat_event(2, "assistant")),
        CompactionDone(COMPACTION),
    ]
    for event in events:
        bus.publish(event)
    bus.close()

    seen: list[str] = []
    async for item in sub:
        match item:
            case UserMessage(e) | AssistantResponse(e):
                seen.append(f"{e.role}:{e.message_id}")
            case CompactionDone(c):
                seen.append(f"compaction:{c.summary_id}")
            case Lagged(missed=n):
                seen.append(f"lagged:{n}")
    assert seen == ["user:1", "assistant:2", "compaction:3"]


async def test_chat_bus_default_capacity_and_lag() -> None:
    assert ChatEventBus().capacity == 256
    bus = ChatEventBus(capacity=2)
    sub = bus.subscribe()
    for i in range(5):
        bus.user_message(chat_event(i))
    bus.close()
    items = [e async for e in sub]
    assert items == [Lagged(3), UserMessage(chat_event(3)), UserMessage(chat_event(4))]


async def test_chat_bus_close_ends_consumer_loop() -> None:
    bus = ChatEventBus()
    got: list[object] = []

    async def consumer() -> None:
        async with bus.subscribe() as sub:
            async for event in sub:
                got.append(event)

    task = asyncio.create_task(consumer())
    await asyncio.sleep(0)
    bus.user_message(chat_event(1))
    bus.close()
    await asyncio.wait_for(task, timeout=1)
    assert got == [UserMessage(chat_event(1))]
    with pytest.raises(BusClosed):
        await bus.subscribe().recv()


async def test_chat_event_defaults_and_immutability() -> None:
    event = ChatEvent(1, 2, 3, "agent", "text", True, False, True)
    assert event.tool_calls == ()
    assert event.created_at.tzinfo is not None
    assert abs((datetime.now(UTC) - event.created_at).total_seconds()) < 60
    with pytest.raises(dataclasses.FrozenInstanceError):
        event.content = "changed"  # type: ignore[misc]
    assert not hasattr(event, "__dict__")  # slots
    assert hash(event) == hash(
        ChatEvent(1, 2, 3, "agent", "text", True, False, True, (), event.created_at)
    )
    assert [f.name for f in dataclasses.fields(ChatEvent)] == [
        "session_id",
        "stack_id",
        "message_id",
        "role",
        "content",
        "is_synthetic",
        "is_interactive",
        "is_ephemeral",
        "tool_calls",
        "created_at",
    ]
    assert [f.name for f in dataclasses.fields(CompactionEvent)] == [
        "session_id",
        "stack_id",
        "summary_id",
        "covers_up_to_message_id",
        "triggered_by_tokens",
    ]
    assert [f.name for f in dataclasses.fields(ToolCallEvent)] == [
        "name",
        "arguments",
        "result",
        "status",
    ]


async def test_bad_role_or_status_is_refused() -> None:
    with pytest.raises(ValueError, match="role"):
        chat_event(1, role="system")
    with pytest.raises(ValueError, match="status"):
        ToolCallEvent(name="x", arguments=None, result=None, status="running")  # type: ignore[arg-type]
    ToolCallEvent(name="x", arguments=None, result="boom", status="failed")


async def test_system_bus_variants() -> None:
    bus = SystemEventBus()
    assert bus.capacity == 256
    sub = bus.subscribe()
    events: list[SystemEvent] = [
        ProviderRegistered("openrouter"),
        ProviderUnregistered(provider="openrouter"),
        SessionCancelled(session_id=5),
        JobCompleted(job_id=1, run_id=2, status="ok"),
    ]
    for event in events:
        assert bus.publish(event) == 1
    bus.close()

    seen: list[str] = []
    async for item in sub:
        match item:
            case ProviderRegistered(p) | ProviderUnregistered(p):
                seen.append(f"{type(item).__name__}:{p}")
            case SessionCancelled(session_id=s):
                seen.append(f"cancelled:{s}")
            case JobCompleted(job_id, run_id, status):
                seen.append(f"job:{job_id}/{run_id}/{status}")
            case _:
                pass  # unknown variants are ignored, so adding one never breaks consumers
    assert seen == [
        "ProviderRegistered:openrouter",
        "ProviderUnregistered:openrouter",
        "cancelled:5",
        "job:1/2/ok",
    ]
    with pytest.raises(dataclasses.FrozenInstanceError):
        events[2].session_id = 6  # type: ignore[union-attr]


async def test_buses_are_independent() -> None:
    chat, system = ChatEventBus(), SystemEventBus()
    chat_sub, system_sub = chat.subscribe(), system.subscribe()
    chat.user_message(chat_event(1))
    assert system_sub.pending == 0
    system.publish(SessionCancelled(1))
    assert chat_sub.pending == 1
