"""Hub events across a fleet (``engine/hub/fleet/relay.py``): a turn run by one process reaches
the viewers on another (remote subscribers, a web chat socket) in order, with its token
deltas sent a few at a time; nothing of it reaches a subscriber that did not ask for other
processes' events; what queues while a notice is sent goes packed in the next, in order and
within the limit; an event too big for a notice arrives cut, a notice that is not an event
is skipped, and a gap (a lost listener, a full queue) reaches viewers as ``RemoteLagged``.

The wire form and the sending side run without a database; the fleet's tests need
PostgreSQL (``CHATHUB_TEST_POSTGRES_URL``): two hubs on one database, a PgNotifier each.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import random
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, get_args

import pytest
import uvicorn

from bot.http.app import create_app
from bot.http.signins import LoginThrottle, SignIns
from bot.webchat.auth import SocketAuth
from bot.webchat.conversations import AnyConversation
from bot.webchat.limits import MAX_FRAME_BYTES
from bot.webchat.transport import WebChat
from engine.approval.deciders import OPERATOR
from engine.bus.broadcast import Lagged
from engine.bus.chat import ToolCallEvent
from engine.config import AppConfig, EngineConfig, HubConfig, load_settings
from engine.core import Engine
from engine.hub import APPROVE, ChatHub, DecisionMade, FailureNotice, HubEvent, NewSession
from engine.hub.events import HubEvents, RemoteLagged, SourceEvents
from engine.hub.fleet.ownership import FleetConfig
from engine.hub.fleet.relay import (
    CHANNEL,
    CUT_MARKER,
    EVENT_TYPES,
    EventRelay,
    Malformed,
    _budget,
    _entry_budget,
    _size,
    decode_event,
    encode_event,
    fit,
    pack,
    unpack,
)
from engine.llm.registry import ModelRegistry
from engine.llm.scripted import ScriptedModel, text, tool_call
from engine.llm.types import LlmResponse
from engine.session.events import (
    AgentEnd,
    AgentStart,
    ApprovalRequired,
    Done,
    Error,
    ModelFallback,
    Question,
    TextDelta,
    Thinking,
    ToolCancelled,
    ToolDone,
    ToolError,
    ToolRejected,
    ToolStart,
    TurnEvent,
    UserMessage,
)
from engine.session.turn.gate import AllowAll
from engine.store.notify import (
    MAX_PAYLOAD_BYTES,
    LocalNotifier,
    Notice,
    PgNotifier,
    asyncpg_dsn,
    encode,
)
from engine.tools.preview import ApprovalPreview
from tests.bot.webchat.conftest import TOKEN, ChatServer, Client
from tests.pg import fresh_postgres_database

#: A guard against a hang, never a timing assertion.
WITHIN_S = 20.0
SOURCE = "web:relay"

# -- the wire form ---------------------------------------------------------------------------

#: One of every event the hub's bus carries (a few twice, with their optional parts).
SAMPLES: list[Any] = [
    TextDelta("Hel", 1),
    Thinking("Let me look.", "the file says so", 0),
    Thinking("Plain."),
    ModelFallback("primary", "backup", "timed out"),
    ToolStart(3, "read_file", '{"path": "a.txt"}', 1),
    ToolDone(3, "read_file", "line one\nline two", 1),
    ToolError(3, "read_file", "no such file"),
    ToolCancelled(3, "read_file"),
    ToolRejected(3, "execute_cmd", "not now"),
    ApprovalRequired(
        4,
        "write_file",
        {"path": "a.txt", "content": "x", "nested": [1, 2.5, {"k": None, "b": True}]},
        9,
        "main",
        ApprovalPreview("file", path="a.txt", old_content=None, new_content="x"),
        1,
    ),
    ApprovalRequired(5, "execute_cmd", {"command": "ls"}, 9, "main"),
    Question(6, "Which one?", 9, 2),
    AgentStart("researcher", "look it up", 1),
    AgentEnd("researcher", "done", 1),
    UserMessage(7, "hi ✓", ({"path": "uploads/a.png", "kind": "photo", "size": 12},)),
    UserMessage(7, "no files"),
    Done("The answer.", 8, 10, 20, True),
    Done("Unmetered.", 8),
    Error("every model failed"),
    FailureNotice("every model failed", "failure:1"),
    NewSession(10, 9),
    NewSession(10, None),
    DecisionMade(4, "approve", "ada@example.org", "fine"),
]


def over_the_wire(payload: dict[str, Any]) -> dict[str, Any]:
    """The payload as a receiver reads it: JSON text and back (tuples become lists)."""
    return json.loads(json.dumps(payload))


def encoded_size(payload: dict[str, Any], sender: str) -> int:
    """Bytes of the notice carrying ``payload`` as the notifier encodes it (over the limit
    too: ``encode`` would refuse it)."""
    envelope = {"sender": sender, "payload": payload}
    return len(json.dumps(envelope, separators=(",", ":"), ensure_ascii=False).encode())


def test_every_event_type_of_the_bus_has_a_wire_form_and_a_sample() -> None:
    carried = {cls.__name__ for cls in get_args(TurnEvent)} | {
        "FailureNotice",
        "NewSession",
        "DecisionMade",
    }
    assert set(EVENT_TYPES) == carried
    assert {type(event).__name__ for event in SAMPLES} == carried


@pytest.mark.parametrize("event", SAMPLES, ids=lambda event: type(event).__name__)
def test_an_event_comes_back_from_its_wire_form_equal(event: Any) -> None:
    relayed = decode_event(over_the_wire(encode_event("web:c1", 42, event)))
    assert (relayed.source, relayed.session_id, relayed.event, relayed.cut) == (
        "web:c1",
        42,
        event,
        False,
    )
    assert type(relayed.event) is type(event)


def test_a_done_travels_without_its_tool_calls() -> None:
    call = ToolCallEvent("read_file", '{"path": "a"}', "x" * 5_000, "done")
    done = Done("Read it.", 8, 1, 2, False, (call,))
    payload = encode_event("web:c1", None, done)
    assert "tool_calls" not in payload["fields"]
    assert decode_event(over_the_wire(payload)).event == replace(done, tool_calls=())


@pytest.mark.parametrize(
    ("payload", "why"),
    [
        ({"source": "web:c1", "type": "Nope", "fields": {}}, "unknown event type 'Nope'"),
        ({"source": "web:c1", "fields": {}}, "unknown event type None"),
        ({"source": "web:c1", "type": "TextDelta", "fields": {"text": 5}}, "TextDelta.text"),
        ({"source": "web:c1", "type": "TextDelta", "fields": ["a"]}, "fields are not"),
        ({"source": "web:c1", "type": "ToolStart", "fields": {"tool_call_id": 1}}, "missing"),
        (
            {
                "source": "web:c1",
                "type": "ToolCancelled",
                "fields": {"tool_call_id": True, "name": "x"},
            },
            "ToolCancelled.tool_call_id",
        ),
        (
            {
                "source": "web:c1",
                "type": "ApprovalRequired",
                "fields": {
                    "tool_call_id": 1,
                    "name": "x",
                    "arguments": {},
                    "session_id": 1,
                    "agent_id": "main",
                    "preview": {"kind": 3},
                },
            },
            "ApprovalRequired.preview",
        ),
        ({"source": "Not A Source", "type": "Error", "fields": {"message": "x"}}, "source"),
        ({"type": "Error", "fields": {"message": "x"}}, "source"),
        (
            {"source": "web:c1", "session_id": "7", "type": "Error", "fields": {"message": "x"}},
            "session_id",
        ),
    ],
)
def test_a_payload_that_is_no_event_is_refused_saying_why(
    payload: dict[str, Any], why: str
) -> None:
    with pytest.raises(Malformed, match=why.replace("(", r"\(")):
        decode_event(payload)


def test_a_field_a_newer_process_added_is_ignored() -> None:
    payload = encode_event("web:c1", 1, ToolStart(1, "ls", "{}"))
    payload["fields"]["colour"] = "blue"
    assert decode_event(payload).event == ToolStart(1, "ls", "{}")


BUDGET = _budget("host:1234:abcdef")


def test_a_long_delta_is_split_into_notices_that_join_to_its_text() -> None:
    # Escaped characters take up to six bytes each in JSON: the split counts bytes.
    streamed = ('ä\x01"\n' * 3_000) + "end"
    pieces = fit(encode_event("web:c1", 1, TextDelta(streamed, 0)), BUDGET)
    assert pieces is not None and len(pieces) > 2
    assert all(_size(piece) <= BUDGET for piece in pieces)
    assert "".join(decode_event(piece).event.text for piece in pieces) == streamed


def test_an_event_over_the_limit_has_its_longest_texts_cut_with_the_marker() -> None:
    answer = "A long answer. " * 2_000
    (payload,) = fit(encode_event("web:c1", 1, Done(answer, 8, 3, 4)), BUDGET) or [None]
    assert payload is not None and _size(payload) <= BUDGET
    relayed = decode_event(payload)
    assert relayed.cut
    done = relayed.event
    assert done.content.endswith(CUT_MARKER)
    assert answer.startswith(done.content.removesuffix(CUT_MARKER))
    assert (done.message_id, done.input_tokens, done.output_tokens) == (8, 3, 4)


def test_a_card_over_the_limit_keeps_its_ids_and_cuts_its_biggest_texts() -> None:
    content = "new line\n" * 2_000
    card = ApprovalRequired(
        4,
        "write_file",
        {"path": "a.txt", "content": content},
        9,
        "main",
        ApprovalPreview("file", path="a.txt", old_content="old\n" * 1_000, new_content=content),
    )
    (payload,) = fit(encode_event("web:c1", 9, card), BUDGET) or [None]
    assert payload is not None and _size(payload) <= BUDGET
    got = decode_event(payload).event
    assert (got.tool_call_id, got.name, got.session_id, got.agent_id) == (
        4,
        "write_file",
        9,
        "main",
    )
    assert got.arguments["path"] == "a.txt" and got.preview.path == "a.txt"
    assert got.preview.new_content.endswith(CUT_MARKER)
    assert got.arguments["content"].endswith(CUT_MARKER)


def test_an_event_that_cannot_be_cut_small_enough_does_not_fit() -> None:
    many = {f"argument{i}": i for i in range(2_000)}  # no text to cut
    assert fit(encode_event("web:c1", 1, ApprovalRequired(1, "x", many, 1, "main")), BUDGET) is None


def test_an_event_cut_to_its_budget_fits_alone_in_a_notice_with_the_envelope() -> None:
    sender = "host:1234:abcdef"
    (entry,) = fit(encode_event("web:c1", 1, Error("x" * 20_000)), _entry_budget(sender)) or [None]
    assert entry is not None
    assert MAX_PAYLOAD_BYTES - 5 <= encoded_size(pack([entry]), sender) <= MAX_PAYLOAD_BYTES


def test_a_notice_carries_its_entries_in_order_and_a_bad_one_is_refused_alone() -> None:
    entries = [encode_event("web:a", 1, TextDelta("Hi")), {"source": "web:a", "type": "Nope"}, 7]
    got = unpack(over_the_wire(pack(entries)))
    assert decode_event(got[0]).event == TextDelta("Hi")
    for bad, why in ((got[1], "unknown event type 'Nope'"), (got[2], "not an object")):
        with pytest.raises(Malformed, match=why):
            decode_event(bad)
    with pytest.raises(Malformed, match="no list of entries"):
        unpack(encode_event("web:a", 1, TextDelta("Hi")))  # one event alone is no notice


# -- the bus: remote events for those who ask -----------------------------------------------


async def test_remote_events_reach_only_the_subscribers_that_asked_for_them() -> None:
    events = HubEvents()
    everything_local, one_local = events.subscribe(None), events.subscribe("web:c1")
    everything, one, other = (
        events.subscribe(None, remote=True),
        events.subscribe("web:c1", remote=True),
        events.subscribe("web:c2", remote=True),
    )
    events.publish("web:c1", 1, TextDelta("mine"))
    events.publish_remote("web:c1", 1, TextDelta("theirs"))
    events.remote_gap("web:c1", "dropped")
    events.remote_gap(None, "reconnected")

    assert await everything_local.recv() == HubEvent("web:c1", 1, TextDelta("mine"))
    assert await one_local.recv() == HubEvent("web:c1", 1, TextDelta("mine"))
    assert everything_local.pending == 0 and one_local.pending == 0
    for subscriber in (everything, one):
        assert await subscriber.recv() == HubEvent("web:c1", 1, TextDelta("mine"))
        assert await subscriber.recv() == HubEvent("web:c1", 1, TextDelta("theirs"), remote=True)
        assert await anext(subscriber) == RemoteLagged("dropped")
        gap = await anext(subscriber)
        assert isinstance(gap, RemoteLagged) and gap.reason == "reconnected"
    gap = await anext(other)  # another chat's gap is not its own; the gap of all is
    assert isinstance(gap, RemoteLagged) and gap.reason == "reconnected"
    assert other.pending == 0


# -- the sending side (a LocalNotifier; a raw stream counts the notices) --------------------


class HeldNotifier(LocalNotifier):
    """A LocalNotifier whose every publish waits for ``gate`` (a database under load)."""

    def __init__(self, process_id: str) -> None:
        super().__init__(process_id)
        self.gate = asyncio.Event()
        self.waiting = asyncio.Event()

    async def publish(self, channel: str, payload: dict[str, Any]) -> None:
        self.waiting.set()
        await self.gate.wait()
        await super().publish(channel, payload)


async def notices_of(stream: Any, n: int) -> list[list[dict[str, Any]]]:
    """The entries of each notice on ``stream`` until ``n`` entries have come."""
    got: list[list[dict[str, Any]]] = []
    async with asyncio.timeout(WITHIN_S):
        async for item in stream:
            assert isinstance(item, Notice), item
            got.append(unpack(item.payload))
            if sum(map(len, got)) >= n:
                return got
    raise AssertionError(f"the stream ended after {got}")


async def take(stream: Any, n: int) -> list[dict[str, Any]]:
    """The next ``n`` entries of the notices on ``stream``, in order."""
    return [entry for notice in await notices_of(stream, n) for entry in notice]


def brief(payload: dict[str, Any]) -> tuple[str, str, Any]:
    fields = payload.get("fields", {})
    return payload["source"], payload["type"], fields.get("text", fields.get("content"))


async def test_deltas_go_together_and_in_order_with_the_events_between_them() -> None:
    """A stream's first delta goes at once; the rest of its window is held (here until the
    next event of its chat, the window being long) and goes out as one notice."""
    notifier = LocalNotifier("p")
    notices = notifier.subscribe(CHANNEL)
    relay = EventRelay(notifier, HubEvents(), flush_interval_s=3_600)
    await relay.start()
    for piece in ("Let ", "me ", "look."):
        relay.publish("web:a", 1, TextDelta(piece))
    relay.publish("web:b", 2, TextDelta("other chat"))
    relay.publish("web:a", 1, Thinking("Let me look."))
    relay.publish("web:a", 1, ToolStart(3, "read_file", "{}"))
    for piece in ("It ", "says ", "so."):
        relay.publish("web:a", 1, TextDelta(piece, depth=1))
    relay.publish("web:a", 1, TextDelta("Done."))  # another depth: a stream of its own
    relay.publish("web:b", 2, TextDelta(", still"))
    relay.publish("web:a", 1, Done("Done.", 5))
    await relay.close()  # what was held goes out too
    assert [brief(p) for p in await take(notices, 10)] == [
        ("web:a", "TextDelta", "Let "),
        ("web:b", "TextDelta", "other chat"),
        ("web:a", "TextDelta", "me look."),
        ("web:a", "Thinking", "Let me look."),
        ("web:a", "ToolStart", None),
        ("web:a", "TextDelta", "It "),
        ("web:a", "TextDelta", "says so."),
        ("web:a", "TextDelta", "Done."),
        ("web:a", "Done", "Done."),
        ("web:b", "TextDelta", ", still"),
    ]
    assert relay.carried == 10


async def test_once_a_front_end_names_its_sources_only_theirs_are_sent() -> None:
    """A Telegram chat has no viewer on another process: its events cost no notices."""
    notifier = LocalNotifier("p")
    notices = notifier.subscribe(CHANNEL)
    events = HubEvents()
    local = events.subscribe("telegram:7")
    relay = EventRelay(notifier, events)
    relay.relay_only("web:")
    await relay.start()
    relay.publish("telegram:7", 1, ToolStart(1, "ls", "{}"))
    relay.publish("web:a", 2, ToolStart(2, "ls", "{}"))
    await relay.close()
    assert [brief(p) for p in await take(notices, 1)] == [("web:a", "ToolStart", None)]
    assert relay.carried == 1
    assert (await local.recv()).source == "telegram:7"  # its own process still has it


async def test_held_deltas_go_out_at_the_end_of_their_window() -> None:
    notifier = LocalNotifier("p")
    notices = notifier.subscribe(CHANNEL)
    relay = EventRelay(notifier, HubEvents(), flush_interval_s=0.01)
    await relay.start()
    try:
        for piece in ("Still ", "typing ", "away"):
            relay.publish("web:a", 1, TextDelta(piece))
        assert [brief(p) for p in await take(notices, 2)] == [
            ("web:a", "TextDelta", "Still "),
            ("web:a", "TextDelta", "typing away"),
        ]
    finally:
        await relay.close()


async def test_a_full_queue_drops_deltas_first_logs_once_and_tells_the_viewers(
    caplog: pytest.LogCaptureFixture,
) -> None:
    notifier = HeldNotifier("p")
    notices = notifier.subscribe(CHANNEL)
    events = HubEvents()
    local = events.subscribe(None)
    relay = EventRelay(notifier, events, flush_interval_s=3_600, capacity=3)
    await relay.start()
    relay.publish("web:a", 1, UserMessage(1, "first"))  # sent: its publish waits
    await asyncio.wait_for(notifier.waiting.wait(), WITHIN_S)
    relay.publish("web:b", 2, TextDelta("lost"))
    relay.publish("web:b", 2, ToolStart(1, "ls", "{}"))  # the held delta is queued first
    relay.publish("web:c", 3, ToolDone(2, "ls", "x"))  # the queue is full now
    with caplog.at_level(logging.WARNING, logger="engine.hub.fleet.relay"):
        relay.publish("web:d", 4, Error("kept"))  # takes the queued delta's place
        relay.publish("web:e", 5, TextDelta("dropped"))
        relay.publish("web:e", 5, Done("dropped too", 9))  # no delta left to drop: itself
    assert len([r for r in caplog.records if "queue is full" in r.getMessage()]) == 1
    notifier.gate.set()
    got = await take(notices, 6)
    assert [brief(p) for p in got[:4]] == [
        ("web:a", "UserMessage", "first"),
        ("web:b", "ToolStart", None),
        ("web:c", "ToolDone", None),
        ("web:d", "Error", None),
    ]
    # After everything queued: the chats that lost events, for their viewers to reload.
    assert sorted(brief(p) for p in got[4:]) == [("web:b", "gap", None), ("web:e", "gap", None)]
    assert relay.dropped == 3
    await relay.close()
    # This process's own bus lost nothing.
    assert local.pending == 7


async def test_a_notifier_that_fails_never_reaches_the_turn(
    caplog: pytest.LogCaptureFixture,
) -> None:
    notifier = LocalNotifier("p")
    events = HubEvents()
    local = events.subscribe("web:a")
    relay = EventRelay(notifier, events)
    await relay.start()
    await notifier.close()  # every publish raises NotifierUnavailable now
    with caplog.at_level(logging.WARNING, logger="engine.hub.fleet.relay"):
        for n in range(5):
            relay.publish("web:a", 1, ToolStart(n, "ls", "{}"))
        await relay.close()
    assert [await local.recv() for _ in range(5)] == [
        HubEvent("web:a", 1, ToolStart(n, "ls", "{}")) for n in range(5)
    ]
    assert relay.sent == 0 and relay.dropped >= 5
    failures = [r for r in caplog.records if "sending hub events to the fleet failed" in r.message]
    assert len(failures) == 1


# -- packing: a notice carries as many queued events as fit --------------------------------


def entry_ids(entries: list[dict[str, Any]]) -> list[tuple[str, str, Any]]:
    """Each entry's chat, kind and what tells it from the others of its kind."""
    return [
        (e["source"], e["type"], e["fields"].get("tool_call_id", e["fields"].get("text")))
        for e in entries
    ]


async def held_relay(**options: Any) -> tuple[HeldNotifier, Any, EventRelay]:
    """A relay whose first notice (a ``UserMessage`` of ``web:a``) is being sent and held:
    what is published now queues behind it. Returns the notifier, its notices, the relay."""
    notifier = HeldNotifier("p")
    notices = notifier.subscribe(CHANNEL)
    relay = EventRelay(notifier, HubEvents(), flush_interval_s=3_600, **options)
    await relay.start()
    relay.publish("web:a", 1, UserMessage(1, "first"))
    await asyncio.wait_for(notifier.waiting.wait(), WITHIN_S)
    return notifier, notices, relay


async def test_events_queued_while_a_notice_is_sent_go_together_in_the_next() -> None:
    """A notice costs a round trip whatever it carries: what queued meanwhile, of every
    chat, goes in one notice, in the order it was published."""
    notifier, notices, relay = await held_relay()
    published = []
    for n in range(30):
        source = f"web:{'abc'[n % 3]}"
        relay.publish(source, 1, ToolStart(n, "read_file", "{}"))
        published.append((source, "ToolStart", n))
    notifier.gate.set()
    got = await notices_of(notices, 31)
    assert [len(notice) for notice in got] == [1, 30]
    assert entry_ids(got[1]) == published
    assert (relay.sent, relay.carried) == (2, 31)
    await relay.close()


async def test_order_is_kept_across_notices_deltas_and_other_events_alike() -> None:
    notifier, notices, relay = await held_relay()
    published = []
    for n in range(120):
        source = f"web:{'abc'[n % 3]}"
        # After a ToolDone the chat's next delta opens a window: it goes at once.
        relay.publish(source, 1, TextDelta(f"{n} "))
        relay.publish(source, 1, ToolDone(n, "read_file", f"{n}:" + "x" * 300))
        published += [(source, "TextDelta", f"{n} "), (source, "ToolDone", n)]
    notifier.gate.set()
    got = await notices_of(notices, 1 + len(published))
    assert 5 < len(got) < len(published) // 5  # several notices, each of many events
    assert entry_ids([entry for notice in got[1:] for entry in notice]) == published
    await relay.close()


async def test_an_event_over_the_limit_is_cut_to_go_alone_and_none_is_cut_to_fill_a_notice() -> (
    None
):
    """An event that does not fit in what is left of a notice waits for the next one; only
    one over the limit by itself is cut, and fills its notice alone."""
    notifier, notices, relay = await held_relay()
    medium = "m" * 4_000  # fits alone, not two in a notice
    relay.publish("web:b", 2, ToolStart(1, "read_file", "{}"))
    relay.publish("web:b", 2, ToolDone(1, "read_file", "big " * 10_000))
    relay.publish("web:c", 3, ToolDone(2, "read_file", medium))
    relay.publish("web:b", 2, ToolDone(3, "read_file", medium))
    relay.publish("web:c", 3, Error("small"))
    notifier.gate.set()
    got = await notices_of(notices, 6)
    assert [[(e["source"], e["type"]) for e in notice] for notice in got] == [
        [("web:a", "UserMessage")],
        [("web:b", "ToolStart")],
        [("web:b", "ToolDone")],
        [("web:c", "ToolDone")],
        [("web:b", "ToolDone"), ("web:c", "Error")],
    ]
    cut = decode_event(got[2][0])
    assert cut.cut and cut.event.result.endswith(CUT_MARKER)
    for entry in (got[3][0], got[4][0]):
        relayed = decode_event(entry)
        assert not relayed.cut and relayed.event.result == medium
    assert relay.dropped == 0
    await relay.close()


async def test_packed_notices_are_full_and_never_over_the_limit() -> None:
    """Events of every size, with texts JSON escapes and UTF-8 make longer than they are:
    each notice is within the limit (the notifier would refuse it), and the next notice's
    first event would not have fitted in it."""
    notifier, notices, relay = await held_relay()
    rng = random.Random(7)
    alphabet = 'aä✓"\
 '
    published = []
    for n in range(300):
        # At most 900 characters: even all escaped to six bytes, it fits alone uncut.
        result = "".join(rng.choices(alphabet, k=rng.randrange(1, 900)))
        relay.publish(f"web:{n % 7}", 1, ToolDone(n, "read_file", result))
        published.append(n)
    notifier.gate.set()
    got = await notices_of(notices, 301)
    packed = got[1:]
    assert [e["fields"]["tool_call_id"] for notice in packed for e in notice] == published
    assert not any(e.get("cut") for notice in packed for e in notice)
    for notice, after in itertools.pairwise(packed):
        assert len(encode(CHANNEL, pack(notice), "p").encode()) <= MAX_PAYLOAD_BYTES
        assert encoded_size(pack([*notice, after[0]]), "p") > MAX_PAYLOAD_BYTES
    assert relay.dropped == 0 and len(packed) < 300 // 2
    await relay.close()


async def test_a_gap_goes_in_the_notice_after_the_chats_queued_events() -> None:
    notifier, notices, relay = await held_relay(capacity=4)
    for n in range(6):  # two over the queue's room, dropped
        relay.publish("web:b", 2, ToolStart(n, "ls", "{}"))
    relay.publish("web:c", 3, Error("kept"))  # takes no one's place: dropped too
    notifier.gate.set()
    got = await notices_of(notices, 7)
    assert [len(notice) for notice in got] == [1, 6]
    assert entry_ids(got[1][:4]) == [("web:b", "ToolStart", n) for n in range(4)]
    gaps = [decode_event(entry) for entry in got[1][4:]]
    assert sorted((gap.source, gap.event) for gap in gaps) == [("web:b", None), ("web:c", None)]
    assert relay.dropped == 3
    await relay.close()


# -- the fleet (PostgreSQL) ------------------------------------------------------------------


class Streamer(ScriptedModel):
    """Scripted replies, each streamed in pieces of four characters (a token each), the
    event loop turning between them as it would between network reads."""

    def __init__(self) -> None:
        super().__init__(name="primary")
        self.deltas = 0

    async def complete(self, messages, tools, *, on_delta=None):  # type: ignore[override]
        response: LlmResponse = await super().complete(messages, tools)
        content = response.content or ""
        if on_delta is not None:
            for i in range(0, len(content), 4):
                on_delta(content[i : i + 4])
                self.deltas += 1
                await asyncio.sleep(0)
        return response


@dataclass
class Process:
    name: str
    engine: Engine
    hub: ChatHub
    model: Streamer
    notifier: PgNotifier

    @property
    def relay(self) -> EventRelay:
        assert self.hub.relay is not None
        return self.hub.relay


@pytest.fixture
async def url() -> AsyncIterator[str]:
    async with fresh_postgres_database(migrated=True) as url:
        yield url


@contextlib.asynccontextmanager
async def process(url: str, tmp_path: Path, name: str, *, rules: bool = False) -> Any:
    """One process of the fleet: its own engine, hub and PgNotifier over ``url``
    (``rules``: the default approval rules, so ``execute_cmd`` asks)."""
    notifier = PgNotifier(asyncpg_dsn(url), name)
    await notifier.start()
    settings = load_settings(
        database_url=url,
        chathub_workspace=tmp_path / f"workspace-{name}",
        chathub_timezone="UTC",
        _env_file=None,
    )
    config = AppConfig(settings=settings, models=(), engine=EngineConfig(max_tool_rounds=3))
    model = Streamer()
    engine = await Engine.open(
        config, models=ModelRegistry([model]), policy=None if rules else AllowAll()
    )
    fleet = FleetConfig(owner=name, lease_ttl_s=10, scan_interval_s=0.2)
    hub = ChatHub(engine, HubConfig(idle_evict_s=60), fleet=fleet, notifier=notifier)
    await hub.start()
    try:
        yield Process(name, engine, hub, model, notifier)
    finally:
        await hub.close()
        await engine.close()
        await notifier.close()


async def until_done(events: SourceEvents) -> list[HubEvent | Lagged]:
    """What ``events`` gets up to and including the turn's ``Done``."""
    seen: list[HubEvent | Lagged] = []
    async with asyncio.timeout(WITHIN_S):
        async for item in events:
            seen.append(item)
            if isinstance(item, HubEvent) and isinstance(item.event, Done):
                return seen
    raise AssertionError(f"the events ended: {seen}")


def collapsed(seen: list[HubEvent | Lagged]) -> list[str]:
    """The events' kinds, a run of deltas as one."""
    kinds: list[str] = []
    for item in seen:
        kind = type(item.event).__name__ if isinstance(item, HubEvent) else "Lagged"
        if not (kind == "TextDelta" and kinds and kinds[-1] == kind):
            kinds.append(kind)
    return kinds


def streamed(seen: list[HubEvent | Lagged]) -> str:
    return "".join(
        item.event.text
        for item in seen
        if isinstance(item, HubEvent) and isinstance(item.event, TextDelta)
    )


def others(seen: list[HubEvent | Lagged]) -> list[Any]:
    """Every event but the deltas, as a viewer compares them (a remote Done has no calls)."""
    return [
        replace(item.event, tool_calls=()) if isinstance(item.event, Done) else item.event
        for item in seen
        if isinstance(item, HubEvent) and not isinstance(item.event, TextDelta)
    ]


async def pending_call(engine: Engine) -> int:
    for _ in range(int(WITHIN_S / 0.01)):
        if pending := await engine.pending_approvals():
            return pending[0].tool_call_id
        await asyncio.sleep(0.01)
    raise AssertionError("no approval was asked for")


async def test_a_turn_run_by_a_streams_to_the_remote_viewers_on_b_in_order(
    url: str, tmp_path: Path
) -> None:
    """A message sent through b runs on a (the chat's lease is a's), with an approval
    asked and a streamed answer: a remote subscriber on b sees what a's own subscriber
    sees, in order; b's subscribers that did not ask for remote events see nothing; the
    deltas went as far fewer notices."""
    answer = " ".join(f"word{i}" for i in range(600))  # a thousand deltas
    async with (
        process(url, tmp_path, "a", rules=True) as a,
        process(url, tmp_path, "b", rules=True) as b,
    ):
        assert a.hub.fleet is not None
        a.model.add(
            tool_call("execute_cmd", '{"command": "echo ran"}', "c1", content="Let me run it.")
        )
        a.model.add(text(answer))
        await a.hub.fleet.ownership.claim(SOURCE)
        on_a = a.hub.events(SOURCE, capacity=4_096)  # room for every delta
        remote_on_b = b.hub.events(SOURCE, capacity=4_096, remote=True)
        local_on_b, everything_local_on_b = b.hub.events(SOURCE), b.hub.events()
        notices = b.notifier.subscribe(CHANNEL)
        await notices.ready()

        await b.hub.send_message(SOURCE, "run it")
        call = await pending_call(a.engine)
        await a.hub.decide(call, APPROVE, decider=OPERATOR, source=SOURCE)
        seen_on_a = await until_done(on_a)
        seen_on_b = await until_done(remote_on_b)

        assert b.model.deltas == 0 and a.model.deltas > 1_000
        assert collapsed(seen_on_a) == [
            "UserMessage",
            "TextDelta",
            "Thinking",
            "ToolStart",
            "ApprovalRequired",
            "ToolDone",
            "TextDelta",
            "Done",
        ]
        assert collapsed(seen_on_b) == collapsed(seen_on_a)
        assert others(seen_on_b) == others(seen_on_a)
        assert streamed(seen_on_b) == streamed(seen_on_a) == "Let me run it." + answer
        assert all(isinstance(item, HubEvent) and item.remote for item in seen_on_b)
        assert local_on_b.pending == 0 and everything_local_on_b.pending == 0

        sent_deltas = 0
        async with asyncio.timeout(WITHIN_S):
            async for notice in notices:
                assert isinstance(notice, Notice) and notice.sender == "a"
                kinds = [entry["type"] for entry in unpack(notice.payload)]
                sent_deltas += kinds.count("TextDelta")
                if "Done" in kinds:
                    break
        deltas = sum(isinstance(item.event, TextDelta) for item in seen_on_a)  # type: ignore[union-attr]
        assert deltas == a.model.deltas
        assert 2 <= sent_deltas <= deltas // 20, (sent_deltas, deltas)


async def test_an_answer_over_the_notice_limit_arrives_cut_and_the_viewer_reloads(
    url: str, tmp_path: Path
) -> None:
    answer = "".join(f"Line {i}: all of it is stored.\n" for i in range(1_000))  # ~32 kB
    async with process(url, tmp_path, "a") as a, process(url, tmp_path, "b") as b:
        assert a.hub.fleet is not None
        a.model.add(text(answer))
        await a.hub.fleet.ownership.claim(SOURCE)
        remote_on_b = b.hub.events(SOURCE, remote=True)
        await a.hub.send_message(SOURCE, "everything, please")
        seen = await until_done(remote_on_b)
        done = seen[-1].event  # type: ignore[union-attr]
        assert streamed(seen) == answer  # deltas are split to fit, never cut
        assert done.content.endswith(CUT_MARKER) and len(done.content) < len(answer)
        assert answer.startswith(done.content.removesuffix(CUT_MARKER))
        # Then the viewer is told to reload: the stored answer is whole.
        reload = await asyncio.wait_for(anext(remote_on_b), WITHIN_S)
        assert isinstance(reload, RemoteLagged)


async def test_a_notice_that_is_no_hub_event_is_logged_and_skipped(
    url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with process(url, tmp_path, "b") as b:
        intruder = PgNotifier(asyncpg_dsn(url), "intruder")
        remote_on_b = b.hub.events("web:x", remote=True)
        try:
            with caplog.at_level(logging.WARNING, logger="engine.hub.fleet.relay"):
                await intruder.publish(CHANNEL, encode_event("web:x", 1, TextDelta("lone")))
                await intruder.publish(
                    CHANNEL,
                    pack(
                        [
                            {"source": "web:x", "type": "Nope"},
                            encode_event("web:x", 1, TextDelta("fine")),
                            {"source": "web:x", "type": "TextDelta", "fields": {"text": 5}},
                            encode_event("web:x", 1, TextDelta(" too")),
                        ]
                    ),
                )
                got = [await asyncio.wait_for(remote_on_b.recv(), WITHIN_S) for _ in range(2)]
        finally:
            await intruder.close()
        # The good entries of a notice arrive, each bad one is skipped alone.
        assert got == [
            HubEvent("web:x", 1, TextDelta("fine"), remote=True),
            HubEvent("web:x", 1, TextDelta(" too"), remote=True),
        ]
        assert b.relay.skipped == 3
        skipped = [r.getMessage() for r in caplog.records if "skipped a" in r.message]
        assert len(skipped) == 3 and all("intruder" in line for line in skipped)
        assert "no list of entries" in skipped[0] and "'Nope'" in skipped[1]


async def test_events_the_sender_dropped_reach_the_viewers_elsewhere_as_a_gap_after_the_rest(
    url: str,
) -> None:
    """A packed notice carries the gap after the chat's events that were kept: the viewer
    on b shows those, then reloads."""
    dsn = asyncpg_dsn(url)
    on_a, on_b = PgNotifier(dsn, "a"), PgNotifier(dsn, "b")
    await on_a.start()
    await on_b.start()
    b_events = HubEvents()
    a, b = EventRelay(on_a, HubEvents(), capacity=10), EventRelay(on_b, b_events)
    try:
        await b.start()
        await a.start()
        remote_on_b = b_events.subscribe(SOURCE, remote=True)
        for n in range(25):  # in one go: the queue holds ten of them
            a.publish(SOURCE, 1, ToolStart(n, "ls", "{}"))
        async with asyncio.timeout(WITHIN_S):
            got = [await anext(remote_on_b) for _ in range(11)]
        assert got[:10] == [
            HubEvent(SOURCE, 1, ToolStart(n, "ls", "{}"), remote=True) for n in range(10)
        ]
        assert isinstance(got[10], RemoteLagged) and got[10].reason == "the sender dropped events"
        await a.close()  # its counts are final once it has sent everything
        assert (a.sent, a.carried, a.dropped) == (1, 11, 15)
    finally:
        await a.close()
        await b.close()
        await on_a.close()
        await on_b.close()


async def test_a_lost_listener_tells_the_remote_viewers_and_then_relays_again(
    url: str, tmp_path: Path
) -> None:
    import asyncpg

    async with process(url, tmp_path, "a") as a, process(url, tmp_path, "b") as b:
        assert a.hub.fleet is not None
        remote_on_b = b.hub.events(SOURCE, remote=True)
        local_on_b = b.hub.events(SOURCE)
        pid = b.notifier.listener_pid
        admin = await asyncpg.connect(asyncpg_dsn(url))
        try:
            assert await admin.fetchval("SELECT pg_terminate_backend($1)", pid)
        finally:
            await admin.close()
        gap = await asyncio.wait_for(anext(remote_on_b), WITHIN_S)
        assert isinstance(gap, RemoteLagged) and gap.reason == "reconnected"
        assert local_on_b.pending == 0  # a gap in other processes' events is theirs alone

        a.model.add(text("After the gap."))
        await a.hub.fleet.ownership.claim(SOURCE)
        await a.hub.send_message(SOURCE, "still there?")
        seen = await until_done(remote_on_b)
        assert streamed(seen) == "After the gap."


# -- a web chat socket on b ------------------------------------------------------------------


@contextlib.asynccontextmanager
async def web_chat(hub: ChatHub) -> AsyncIterator[ChatServer]:
    """``hub``'s web chat on a free loopback port (any well-formed conversation id)."""
    signins = SignIns(hub.engine.store.db, token=TOKEN)
    auth = SocketAuth(token=TOKEN, signins=signins, throttle=LoginThrottle())
    webchat = WebChat(hub, auth, AnyConversation())
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(
        create_app(webchat=webchat),
        log_level="warning",
        ws_max_size=2 * MAX_FRAME_BYTES,
        lifespan="off",
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        async with asyncio.timeout(WITHIN_S):
            while not server.started:
                await asyncio.sleep(0.01)
                if task.done():
                    task.result()
        yield ChatServer(sock.getsockname()[1], hub, webchat, signins)
    finally:
        server.should_exit = server.force_exit = True
        await task
        await webchat.close()


async def test_a_web_chat_socket_on_b_shows_the_answer_streamed_by_a(
    url: str, tmp_path: Path
) -> None:
    answer = "Streamed from the other process, " * 20
    async with process(url, tmp_path, "a") as a, process(url, tmp_path, "b") as b:
        assert a.hub.fleet is not None
        a.model.add(text(answer))
        await a.hub.fleet.ownership.claim("web:c1")
        async with web_chat(b.hub) as server:
            client: Client = await server.client("c1")
            try:
                await client.send(type="message", text="hello from b's page")
                frames = await client.until("done")
            finally:
                await client.close()
        kinds = [frame["type"] for frame in frames if frame["type"] != "accepted"]  # b's own
        assert kinds[0] == "user_message" and kinds[-1] == "done"
        echo = next(frame for frame in frames if frame["type"] == "user_message")
        assert echo["text"] == "hello from b's page"  # stored and echoed by a
        assert "".join(f["text"] for f in frames if f["type"] == "text_delta") == answer
        assert frames[-1]["content"] == answer
        assert a.model.deltas > 0 and b.model.deltas == 0


async def test_a_plain_message_on_b_answers_the_question_as_turn_waits_on_a(
    url: str, tmp_path: Path
) -> None:
    """The question waits in a's turn; b's page is told of it, and a plain message there
    answers it, as on every platform (b looked only at its own turns and sent the answer
    as a new message, queued behind the turn that waited for it)."""
    ask = tool_call("ask_user_clarification", '{"question": "Which city?"}', "q")
    async with process(url, tmp_path, "a") as a, process(url, tmp_path, "b") as b:
        assert a.hub.fleet is not None
        a.model.add(ask, text("Booking Rome."))
        await a.hub.fleet.ownership.claim("web:c2")
        async with web_chat(b.hub) as server:
            client: Client = await server.client("c2")
            try:
                await client.send(type="message", text="book a hotel")
                await client.until("agent_question")
                await client.send(type="message", text="Rome")
                frames = await client.until("done")
            finally:
                await client.close()
        assert frames[-1]["content"] == "Booking Rome."
        messages, _tools = a.model.requests[-1]
        assert [m["content"] for m in messages if m["role"] == "tool"] == ["Rome"]


async def test_a_gap_in_the_remote_events_makes_the_page_on_b_reload(
    url: str, tmp_path: Path
) -> None:
    import asyncpg

    async with process(url, tmp_path, "b") as b, web_chat(b.hub) as server:
        client: Client = await server.client("c1")
        try:
            admin = await asyncpg.connect(asyncpg_dsn(url))
            try:
                assert await admin.fetchval(
                    "SELECT pg_terminate_backend($1)", b.notifier.listener_pid
                )
            finally:
                await admin.close()
            # Missed notices of other processes' turns: the page reloads the conversation.
            assert await client.recv() == {"type": "lagged", "missed": 0}
        finally:
            await client.close()
