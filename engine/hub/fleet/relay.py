"""``EventRelay``: in a fleet, a turn's events reach the viewers of every process.

A web chat socket is served by whichever process its connection reached; the turn it
watches runs in the process holding the conversation's lease. So every event published on
this process's bus is also sent on ``chathub_events`` (PostgreSQL ``NOTIFY``), and every
other process publishes what it receives into its own bus marked ``remote``: only
subscribers that ask for remote events get it (``HubEvents.subscribe(..., remote=True)``),
never one that delivers what it receives (the Telegram adapter would send another
process's answers). A notice carries several events, of any chats, in the order they were
published: ``{"entries": [{"source", "session_id", "type", "fields"}, ...]}``.

What keeps the turn unharmed and the notices few:

* ``publish`` never waits and never raises: events go into a bounded queue that one task
  sends in order, one notice at a time (two in flight could overtake each other on the
  notifier's pool), each packed with as many of the queued events as fit. A notice costs
  a round trip to PostgreSQL whatever it carries, so under load the queue drains in packs
  of dozens of events; when idle, an event goes alone at once. When the queue is full,
  token deltas go first (logged once per overflow), and the viewers of the chats that
  lost events are told.
* Token deltas (``TextDelta``, ``Thinking``) go out at most once per ``flush_interval_s``
  per source: the first of a stream at once, those after it held for the rest of the
  window and sent together at its end, at the source's next other event (so order is
  kept), or once ``MAX_HELD_CHARS`` have gathered. A streamed answer is an event every
  0.1 s, not one per token.
* A notice may carry 7,000 bytes. An event that does not fit in the rest of a notice waits
  for the next one; only an event over that alone has its longest texts cut, each ending
  in ``CUT_MARKER`` (the full text is in the tables: a reload shows it; after a cut
  ``Done``, the viewers are told to reload at once). Deltas are split, never cut.
* Events of other processes that may have been missed (the listening connection was lost,
  the sender dropped or could not send some) reach remote subscribers as ``RemoteLagged``,
  which a web chat socket already answers with its ``lagged`` frame: the page reloads.

A remote ``Done`` carries no ``tool_calls``: its calls reached the viewers as their own
events, and the stored conversation has them.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import json
import logging
import types
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Union, get_args, get_origin, get_type_hints

from engine.hub.events import HubEvents
from engine.hub.types import (
    DecisionMade,
    FailureNotice,
    HubError,
    NewSession,
    validate_source,
)
from engine.session.events import Done, TextDelta, Thinking, TurnEvent
from engine.store.notify import MAX_PAYLOAD_BYTES, Notice, Notifier, Resync

__all__ = [
    "CHANNEL",
    "CUT_MARKER",
    "EVENT_TYPES",
    "FLUSH_INTERVAL_S",
    "EventRelay",
    "Malformed",
    "Relayed",
    "carried",
    "decode_event",
    "encode_event",
    "fit",
    "is_cut",
    "pack",
    "unpack",
]

log = logging.getLogger(__name__)

CHANNEL = "chathub_events"
#: Token deltas of one source go out at most this often (held meanwhile).
FLUSH_INTERVAL_S = 0.1
#: Held deltas of one source are sent once this many characters have gathered.
MAX_HELD_CHARS = 2_000
#: Events waiting to be sent; beyond it deltas are dropped first.
QUEUE_CAPACITY = 1_000
#: How long ``start`` waits for the channel to be listened on before going on without.
READY_TIMEOUT_S = 5.0
#: How long ``close`` waits for the queued events to go out.
CLOSE_TIMEOUT_S = 1.0
#: Ends a text cut to fit in a notice.
CUT_MARKER = "\n… [cut: the full text is in the conversation's history]"
#: The wire ``type`` of "events of this source were lost": its viewers reload.
GAP = "gap"

DELTAS = (TextDelta, Thinking)

#: Every event the bus carries, by its wire name (the class's name).
EVENT_TYPES: dict[str, type] = {
    cls.__name__: cls for cls in (*get_args(TurnEvent), FailureNotice, NewSession, DecisionMade)
}
# Left out of the wire form (the receiver gets the field's default).
_NOT_SENT: dict[type, frozenset[str]] = {Done: frozenset({"tool_calls"})}


class Malformed(ValueError):
    """A notice on the channel that is not a hub event this process can read."""


@dataclass(frozen=True, slots=True)
class Relayed:
    """One decoded entry of a notice: an event of ``source``, or (``event`` None) a gap in
    them."""

    source: str
    session_id: int | None
    event: Any
    #: Some of its texts were cut to fit (they end in ``CUT_MARKER``).
    cut: bool = False


# -- the wire form ---------------------------------------------------------------------------


def pack(entries: list[dict[str, Any]]) -> dict[str, Any]:
    """The payload of a notice carrying ``entries`` (``encode_event``'s, in order)."""
    return {"entries": entries}


def unpack(payload: Mapping[str, Any]) -> list[Any]:
    """The entries a notice's payload carries (each for ``decode_event``), or ``Malformed``."""
    entries = payload.get("entries")
    if not isinstance(entries, list):
        raise Malformed("no list of entries")
    return entries


#: Bytes of a notice's payload around its entries (each after the first adds a comma).
_PACK_BYTES = len(json.dumps(pack([]), separators=(",", ":")))


def encode_event(source: str, session_id: int | None, event: Any) -> dict[str, Any]:
    """The full entry of ``event`` in a notice (``fit`` makes it small enough to send)."""
    cls = type(event)
    if EVENT_TYPES.get(cls.__name__) is not cls:
        raise TypeError(f"{cls.__name__} is not an event the relay carries")
    skipped = _NOT_SENT.get(cls, frozenset())
    fields = {
        f.name: _plain(getattr(event, f.name))
        for f in dataclasses.fields(event)
        if f.name not in skipped
    }
    return {"source": source, "session_id": session_id, "type": cls.__name__, "fields": fields}


def _gap_payload(source: str) -> dict[str, Any]:
    return {"source": source, "session_id": None, "type": GAP}


def decode_event(payload: Any) -> Relayed:
    """What an entry of a notice carries; ``Malformed`` says why it is not a hub event."""
    if not isinstance(payload, Mapping):
        raise Malformed(f"an entry is not an object: {payload!r:.80}")
    source = payload.get("source")
    try:
        validate_source(source)
    except HubError as exc:
        raise Malformed(f"source: {exc}") from None
    assert isinstance(source, str)
    session_id = payload.get("session_id")
    if session_id is not None and (not isinstance(session_id, int) or isinstance(session_id, bool)):
        raise Malformed(f"session_id: {session_id!r} is not an integer")
    name = payload.get("type")
    if name == GAP:
        return Relayed(source, session_id, None)
    cls = EVENT_TYPES.get(name) if isinstance(name, str) else None
    if cls is None:
        raise Malformed(f"unknown event type {name!r}")
    fields = payload.get("fields")
    if not isinstance(fields, dict):
        raise Malformed(f"{name}: fields are not an object")
    return Relayed(source, session_id, _build(cls, fields), cut=payload.get("cut") is True)


def is_cut(text: str) -> bool:
    """Whether a relayed event's ``text`` was cut to fit its notice."""
    return text.endswith(CUT_MARKER)


def carried(relayed: str, whole: str) -> bool:
    """Whether ``relayed`` is ``whole`` as a notice carried it: the same, or cut to fit."""
    if relayed == whole:
        return True
    return is_cut(relayed) and whole.startswith(relayed.removesuffix(CUT_MARKER))


def fit(payload: dict[str, Any], budget: int) -> list[dict[str, Any]] | None:
    """``payload`` as entries of at most ``budget`` bytes each: itself; a text delta split
    in pieces (they join to the same text); another event with its longest texts cut
    (``"cut": true``). ``None`` when even cut it does not fit."""
    if _size(payload) <= budget:
        return [payload]
    if payload["type"] == TextDelta.__name__:
        text = payload["fields"]["text"]
        if len(text) < 2:
            return None
        half = len(text) // 2
        pieces = []
        for part in (text[:half], text[half:]):
            piece = fit({**payload, "fields": {**payload["fields"], "text": part}}, budget)
            if piece is None:
                return None
            pieces += piece
        return pieces
    cut = _cut(payload, budget)
    return None if cut is None else [cut]


def _cut(payload: dict[str, Any], budget: int) -> dict[str, Any] | None:
    out = {**payload, "fields": copy.deepcopy(payload["fields"]), "cut": True}
    marker = _size(CUT_MARKER) - 2  # as it is written inside a JSON string
    while (size := _size(out)) > budget:
        longest = _longest_text(out["fields"])
        if longest is None:
            return None
        holder, key, text = longest
        if len(text) <= marker:
            return None  # cutting it would not make it smaller
        # Every character removed takes at least one byte off: this cut is enough unless
        # the text is shorter than the excess (then the next longest is cut too).
        keep = max(0, len(text) - (size - budget) - marker)
        holder[key] = text[:keep] + CUT_MARKER
    return out


def _longest_text(value: Any) -> tuple[Any, Any, str] | None:
    """The longest string inside ``value`` (dict values and list items, never keys), with
    the container and key holding it."""
    best: tuple[Any, Any, str] | None = None
    stack = [value]
    while stack:
        node = stack.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node)
        for key, item in items:
            if isinstance(item, str):
                if best is None or len(item) > len(best[2]):
                    best = (node, key, item)
            elif isinstance(item, dict | list):
                stack.append(item)
    return best


def _size(value: Any) -> int:
    """Bytes of ``value`` encoded as the notifier encodes it."""
    return len(
        json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()
    )


def _budget(sender: str) -> int:
    """Bytes left for a payload once the notifier's envelope is around it."""
    return MAX_PAYLOAD_BYTES - (_size({"sender": sender, "payload": {}}) - 2)


def _entry_budget(sender: str) -> int:
    """Bytes an entry may take to be sent alone in a notice."""
    return _budget(sender) - _PACK_BYTES


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    if isinstance(value, dict):
        return {str(key): _plain(item) for key, item in value.items()}
    return value


_hints: dict[type, dict[str, Any]] = {}


def _build(cls: type, data: Mapping[str, Any]) -> Any:
    hints = _hints.get(cls)
    if hints is None:
        hints = _hints[cls] = get_type_hints(cls)
    kwargs = {}
    # A field it does not know is left out: a newer process may send more.
    for f in dataclasses.fields(cls):
        where = f"{cls.__name__}.{f.name}"
        if f.name in data:
            kwargs[f.name] = _convert(data[f.name], hints[f.name], where)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise Malformed(f"{where} is missing")
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as exc:
        raise Malformed(f"{cls.__name__}: {exc}") from None


def _convert(value: Any, hint: Any, where: str) -> Any:
    """``value`` as the field's type wants it, or ``Malformed``."""
    if hint is Any:
        return value
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):
        for arm in get_args(hint):
            with contextlib.suppress(Malformed):
                return _convert(value, arm, where)
        raise Malformed(f"{where}: {value!r:.80} is none of {hint}")
    if hint is type(None):
        if value is None:
            return None
    elif hint is bool:
        if isinstance(value, bool):
            return value
    elif hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif hint is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    elif hint is str:
        if isinstance(value, str):
            return value
    elif origin is dict:
        if isinstance(value, dict):
            item = (get_args(hint) or (str, Any))[1]
            return {key: _convert(v, item, where) for key, v in value.items()}
    elif origin is tuple:
        if isinstance(value, list):
            args = get_args(hint)
            if len(args) == 2 and args[1] is Ellipsis:
                return tuple(_convert(v, args[0], where) for v in value)
            if len(args) == len(value):
                return tuple(_convert(v, a, where) for v, a in zip(value, args, strict=True))
    elif dataclasses.is_dataclass(hint) and isinstance(hint, type):
        if isinstance(value, dict):
            return _build(hint, value)
    else:
        raise Malformed(f"{where}: no wire form for {hint}")
    raise Malformed(f"{where}: {value!r:.80} is not a {getattr(hint, '__name__', hint)}")


# -- the relay -------------------------------------------------------------------------------


@dataclass(slots=True)
class _Out:
    source: str
    session_id: int | None
    event: Any


@dataclass(slots=True)
class _Entry:
    """An event encoded to fit (or a gap), with what it takes in a notice."""

    payload: dict[str, Any]
    source: str
    size: int

    @classmethod
    def of(cls, payload: dict[str, Any], source: str) -> _Entry:
        return cls(payload, source, _size(payload))


@dataclass(slots=True)
class _Pack:
    """The entries of the next notice, within ``budget`` bytes of payload."""

    budget: int
    entries: list[dict[str, Any]] = field(default_factory=list)
    sources: set[str] = field(default_factory=set)
    gaps: bool = False
    size: int = _PACK_BYTES

    def add(self, entry: _Entry) -> bool:
        """Take ``entry`` if it fits in what is left (False: it goes in the next one)."""
        size = self.size + entry.size + (1 if self.entries else 0)
        if size > self.budget:
            return False
        self.entries.append(entry.payload)
        self.sources.add(entry.source)
        self.size = size
        return True


@dataclass(slots=True)
class _Held:
    """A source's open window of token deltas: what came since its first went out."""

    kind: type
    session_id: int | None
    depth: int
    timer: asyncio.TimerHandle | None = None
    texts: list[str] = field(default_factory=list)
    reasonings: list[str] = field(default_factory=list)
    chars: int = 0

    def add(self, event: TextDelta | Thinking) -> None:
        text = event.text if isinstance(event, TextDelta) else event.content
        self.texts.append(text)
        self.chars += len(text)
        if isinstance(event, Thinking) and event.reasoning:
            self.reasonings.append(event.reasoning)
            self.chars += len(event.reasoning)

    def key(self) -> tuple[type, int | None, int]:
        return self.kind, self.session_id, self.depth

    def take(self) -> TextDelta | Thinking | None:
        """The deltas held as one (``None``: none), and the window empty again."""
        if not self.texts:
            return None
        text = "".join(self.texts)
        reasoning = "".join(self.reasonings) or None
        self.texts, self.reasonings, self.chars = [], [], 0
        if self.kind is TextDelta:
            return TextDelta(text, self.depth)
        return Thinking(text, reasoning, self.depth)


class EventRelay:
    """Sends this process's hub events to the fleet and publishes the others' into
    ``events`` as remote (see the module's docstring)."""

    def __init__(
        self,
        notifier: Notifier,
        bus: HubEvents,
        *,
        flush_interval_s: float = FLUSH_INTERVAL_S,
        capacity: int = QUEUE_CAPACITY,
    ) -> None:
        self._notifier = notifier
        self._events = bus
        self._interval = flush_interval_s
        self._capacity = capacity
        self._budget = _budget(notifier.process_id)
        self._entry_budget = _entry_budget(notifier.process_id)
        self._queue: deque[_Out] = deque()
        #: The queue's first events, encoded: what did not fit in the last notice.
        self._encoded: deque[_Entry] = deque()
        self._queued_deltas = 0
        self._held: dict[str, _Held] = {}
        #: Sources whose viewers elsewhere missed some of their events: told when the
        #: queue is empty (after everything queued before, so a reload shows it all).
        self._gaps: set[str] = set()
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._tasks: list[asyncio.Task[None]] = []
        self._stream: Any = None
        self._closed = False
        #: Only these sources' events are sent, once a viewer named them (``relay_only``).
        self._prefixes: tuple[str, ...] | None = None
        self._overflowing = False
        self._failing = False
        #: Notices sent, the events (and gaps) they carried, events dropped (queue full,
        #: unsendable), events from other processes skipped as unreadable.
        self.sent = 0
        self.carried = 0
        self.dropped = 0
        self.skipped = 0

    # -- sending (this process's events)

    def relay_only(self, prefix: str) -> None:
        """Send only the events of sources starting with ``prefix`` (or another prefix so
        named): a front end whose viewers watch from any process names its own. Until one
        does, every source's events are sent."""
        self._prefixes = (*(self._prefixes or ()), prefix)

    def publish(self, source: str, session_id: int | None, event: Any) -> None:
        """The hub's publish in a fleet: this process's bus, then the fleet."""
        self._events.publish(source, session_id, event)
        self.send(source, session_id, event)

    def send(self, source: str, session_id: int | None, event: Any) -> None:
        """Queue ``event`` for the other processes; never waits, never raises."""
        if self._closed or (self._prefixes is not None and not source.startswith(self._prefixes)):
            return
        try:
            if isinstance(event, DELTAS):
                self._hold(source, session_id, event)
            else:
                self._flush(source)
                self._enqueue(_Out(source, session_id, event))
        except Exception:  # the turn goes on; its viewers elsewhere reload
            log.exception("queueing a hub event of %s for the fleet failed", source)
            self._gaps.add(source)

    def _hold(self, source: str, session_id: int | None, event: TextDelta | Thinking) -> None:
        held = self._held.get(source)
        if held is not None and held.key() != (type(event), session_id, event.depth):
            self._flush(source)
            held = None
        if held is None:
            # The first delta goes at once (the answer starts to show); those after it
            # wait for the window to end, and go out together.
            self._enqueue(_Out(source, session_id, event))
            held = self._held[source] = _Held(type(event), session_id, event.depth)
            held.timer = asyncio.get_running_loop().call_later(self._interval, self._tick, source)
            return
        held.add(event)
        if held.chars >= MAX_HELD_CHARS:
            self._send_held(source, held)

    def _tick(self, source: str) -> None:
        """A window's end: what it held goes out and a new window opens; a window that
        held nothing closes (the next delta goes at once)."""
        held = self._held.get(source)
        if held is None:
            return
        if self._send_held(source, held):
            held.timer = asyncio.get_running_loop().call_later(self._interval, self._tick, source)
        else:
            del self._held[source]

    def _send_held(self, source: str, held: _Held) -> bool:
        event = held.take()
        if event is None:
            return False
        self._enqueue(_Out(source, held.session_id, event))
        return True

    def _flush(self, source: str) -> None:
        """Before another event of ``source``: its held deltas go first; the window closes."""
        held = self._held.pop(source, None)
        if held is None:
            return
        if held.timer is not None:
            held.timer.cancel()
        self._send_held(source, held)

    def _enqueue(self, item: _Out) -> None:
        if len(self._queue) >= self._capacity and not self._make_room(item):
            return
        self._queue.append(item)
        self._queued_deltas += isinstance(item.event, DELTAS)
        self._idle.clear()
        self._wake.set()

    def _make_room(self, item: _Out) -> bool:
        """Drop a queued delta for ``item`` (False: ``item`` itself is dropped)."""
        if not self._overflowing:
            self._overflowing = True
            log.warning(
                "the fleet's event queue is full (%d events): dropping token deltas first; "
                "viewers of the affected chats on other processes will reload",
                self._capacity,
            )
        self.dropped += 1
        # Counted, so that a queue of other events only is not searched at every event.
        if not isinstance(item.event, DELTAS) and self._queued_deltas:
            for index, queued in enumerate(self._queue):
                if isinstance(queued.event, DELTAS):
                    del self._queue[index]
                    self._queued_deltas -= 1
                    self._gaps.add(queued.source)
                    return True
        self._gaps.add(item.source)
        return False

    async def _drain(self) -> None:
        gaps_due = True
        while True:
            notice = self._pack(gaps_due)
            if notice.entries:
                if not await self._publish(notice) and notice.gaps:
                    gaps_due = False  # tried again once there is something new to send
                continue
            self._idle.set()
            self._wake.clear()
            await self._wake.wait()
            gaps_due = True

    def _pack(self, gaps_due: bool) -> _Pack:
        """The next notice: queued events in order while they fit; once none is left, the
        gaps (after every event queued before them: a reload shows those too)."""
        notice = _Pack(self._budget)
        while self._encoded or self._queue:
            if not self._encoded:
                self._encode(self._queue.popleft())
                continue
            if not notice.add(self._encoded[0]):
                return notice
            self._encoded.popleft()
        self._overflowing = False
        if gaps_due:
            for source in list(self._gaps):
                if not notice.add(_Entry.of(_gap_payload(source), source)):
                    break
                self._gaps.discard(source)
                notice.gaps = True
        return notice

    def _encode(self, item: _Out) -> None:
        """``item`` as entries that each fit in a notice alone, or a gap for its source."""
        self._queued_deltas -= isinstance(item.event, DELTAS)
        entries: list[_Entry] | None = None
        try:
            payload = encode_event(item.source, item.session_id, item.event)
            size = _size(payload)
            # Most events fit as they are: measured once (encoding is most of the cost).
            if size <= self._entry_budget:
                entries = [_Entry(payload, item.source, size)]
            elif (pieces := fit(payload, self._entry_budget)) is not None:
                entries = [_Entry.of(piece, item.source) for piece in pieces]
        except Exception:
            log.exception("a hub event of %s could not be encoded for the fleet", item.source)
        if entries is None:
            log.warning(
                "a %s of %s does not fit in a notice even cut; its viewers elsewhere reload",
                type(item.event).__name__,
                item.source,
            )
            self.dropped += 1
            self._gaps.add(item.source)
            return
        self._encoded.extend(entries)

    async def _publish(self, notice: _Pack) -> bool:
        try:
            await self._notifier.publish(CHANNEL, pack(notice.entries))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the database is away: the viewers elsewhere reload later
            self.dropped += len(notice.entries)
            self._gaps.update(notice.sources)
            if not self._failing:
                self._failing = True
                log.warning("sending hub events to the fleet failed (%r); going on", exc)
            return False
        if self._failing:
            self._failing = False
            log.info("sending hub events to the fleet works again")
        self.sent += 1
        self.carried += len(notice.entries)
        return True

    # -- receiving (the other processes' events)

    async def _listen(self, stream: Any) -> None:
        async for item in stream:
            try:
                self._receive(item)
            except Exception:
                log.exception("publishing a hub event from another process failed")

    def _receive(self, item: Notice | Resync) -> None:
        if isinstance(item, Resync):
            self._events.remote_gap(None, item.reason)
            return
        if item.sender == self._notifier.process_id:
            return  # this process's own: its bus had it already
        try:
            entries = unpack(item.payload)
        except Malformed as exc:
            self.skipped += 1
            log.warning("skipped a notice from process %s: %s", item.sender, exc)
            return
        for entry in entries:
            try:
                relayed = decode_event(entry)
            except Malformed as exc:
                self.skipped += 1
                log.warning("skipped a hub event from process %s: %s", item.sender, exc)
                continue
            self._publish_remote(relayed)

    def _publish_remote(self, relayed: Relayed) -> None:
        if relayed.event is None:
            self._events.remote_gap(relayed.source, "the sender dropped events")
            return
        self._events.publish_remote(relayed.source, relayed.session_id, relayed.event)
        if relayed.cut and isinstance(relayed.event, Done):
            # The answer was cut to fit: a reload shows the stored one, whole.
            self._events.remote_gap(relayed.source, "the answer was cut to fit a notice")

    # -- life cycle

    async def start(self) -> None:
        """Listen on the channel and start sending; returns once listening (or, should the
        notifier not be listening within ``READY_TIMEOUT_S``, logs that and goes on)."""
        if self._tasks or self._closed:
            return
        self._stream = stream = self._notifier.subscribe(CHANNEL)
        self._tasks = [
            asyncio.create_task(self._drain(), name="relay:send"),
            asyncio.create_task(self._listen(stream), name="relay:receive"),
        ]
        try:
            await asyncio.wait_for(stream.ready(), READY_TIMEOUT_S)
        except TimeoutError:
            log.warning("not yet listening for other processes' hub events; going on")

    async def close(self) -> None:
        """Send what is queued (waiting at most ``CLOSE_TIMEOUT_S``), then stop."""
        if self._closed:
            return
        for source in list(self._held):
            self._flush(source)
        self._closed = True
        if self._tasks and not self._tasks[0].done():
            try:
                await asyncio.wait_for(self._idle.wait(), CLOSE_TIMEOUT_S)
            except TimeoutError:
                unsent = len(self._queue) + len(self._encoded)
                log.warning("%d hub events were not sent to the fleet", unsent)
        if self._stream is not None:
            self._stream.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
