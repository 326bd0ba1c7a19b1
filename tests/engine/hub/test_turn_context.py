"""Turn contexts (``ChatHub.add_turn_context``): asked as each turn starts with the
message's source and metadata, their parts join the dynamic tail after the adapter's, and
one that fails (or says nothing) leaves the turn to run without it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine.hub import ChatHub, SendOptions, SourceDefaults
from tests.engine.hub.conftest import EchoModel, wait_done


class Context:
    """A turn context that records its calls and answers ``reply`` (or raises it)."""

    def __init__(self, reply: str | Exception | None) -> None:
        self.reply = reply
        self.calls: list[tuple[str, Mapping[str, Any] | None]] = []

    async def __call__(self, source: str, metadata: Mapping[str, Any] | None) -> str | None:
        self.calls.append((source, metadata))
        if isinstance(self.reply, Exception):
            raise self.reply
        return self.reply


def tail(model: EchoModel, n: int = -1) -> str:
    messages, _tools = model.requests[n]
    assert messages[-1]["role"] == "system"
    return str(messages[-1]["content"])


async def test_each_turn_asks_the_contexts_with_its_source_and_metadata(
    hub: ChatHub, model: EchoModel
) -> None:
    memory = Context("PROFILE of the speaker")
    hub.add_turn_context(memory)
    events = hub.events("telegram:1")
    metadata = {"sender": {"id": "1", "name": "Ann"}}
    await hub.send_message("telegram:1", "hello", SendOptions(metadata=metadata))
    await wait_done(events)
    assert memory.calls == [("telegram:1", metadata)]
    assert tail(model).startswith("PROFILE of the speaker\n\nCurrent date and time: ")


async def test_a_failing_context_leaves_the_turn_to_run_without_it(
    hub: ChatHub, model: EchoModel, caplog: Any
) -> None:
    broken = Context(RuntimeError("database is on fire"))
    silent = Context(None)
    empty = Context("")
    working = Context("PROFILE")
    for context in (broken, silent, empty, working):
        hub.add_turn_context(context)
    events = hub.events("telegram:1")
    await hub.send_message("telegram:1", "hello")
    [*_, done] = await wait_done(events)

    assert done.event.content == "echo: hello"  # the turn ran
    assert tail(model).startswith("PROFILE\n\nCurrent date and time: ")
    request = str(model.requests[-1][0])
    assert "on fire" not in request and "RuntimeError" not in request
    assert "on fire" not in done.event.content
    assert [len(c.calls) for c in (broken, silent, empty, working)] == [1, 1, 1, 1]
    assert "turn context" in caplog.text and "the turn goes on without it" in caplog.text

    await hub.send_message("telegram:1", "again")  # and the next turn asks it again
    await wait_done(events)
    assert len(broken.calls) == 2


async def test_parts_follow_the_adapters_dynamic_extra_in_registration_order(
    hub: ChatHub, model: EchoModel
) -> None:
    hub.register("telegram:", SourceDefaults(extra_system_dynamic="ADAPTER"))
    hub.add_turn_context(Context("FIRST"))
    hub.add_turn_context(Context("SECOND"))
    events = hub.events("telegram:1")
    await hub.send_message("telegram:1", "hi")
    await wait_done(events)
    assert tail(model).startswith("ADAPTER\n\nFIRST\n\nSECOND\n\nCurrent date and time: ")
    await hub.send_message("telegram:1", "hi", SendOptions(extra_system_dynamic="MESSAGE"))
    await wait_done(events)
    assert tail(model).startswith("MESSAGE\n\nFIRST\n\nSECOND\n\nCurrent date and time: ")


async def test_the_static_prefix_does_not_change_with_the_context(
    hub: ChatHub, model: EchoModel
) -> None:
    context = Context("PROFILE one")
    hub.add_turn_context(context)
    events = hub.events("telegram:1")
    await hub.send_message("telegram:1", "first")
    await wait_done(events)
    context.reply = "PROFILE two, longer"
    await hub.send_message("telegram:1", "second")
    await wait_done(events)
    first, second = model.requests[-2][0], model.requests[-1][0]
    assert second[: len(first) - 1] == first[:-1]  # all but the tail, byte for byte
    assert tail(model, -2).startswith("PROFILE one\n\n")
    assert tail(model, -1).startswith("PROFILE two, longer\n\n")


async def test_a_resumed_turn_asks_the_contexts_without_metadata(hub: ChatHub) -> None:
    context = Context(None)
    hub.add_turn_context(context)
    assert await hub.resume("telegram:1") is None  # nothing was interrupted
    assert context.calls == [("telegram:1", None)]
