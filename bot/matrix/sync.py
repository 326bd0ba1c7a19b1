"""The sync loop: every event for the bot stored before the sync token moves past it.

Each ``/sync`` answer's events for the bot (``MessageHandler.addressed``) are stored in
``platform_events`` under their event ids; only then is the answer's ``next_batch``
stored (``app_settings``), so a crash between the two repeats the batch, whose events
are already stored and are not taken again. A restart goes on from the stored token; a
room whose timeline the homeserver cut (``limited``: more happened than one answer
holds, e.g. while the bot was down) is read back to the stored token through
``/messages``. The very first sync of an account takes no history, only invites.

Synapse answers an identical ``/sync`` from a cache for two minutes: a process that
restarts with the same token may be given the batch it handled before. Its events are
recognized by their ids.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

from nio import AsyncClient, InviteMemberEvent, MessageDirection, RoomMessagesResponse, SyncResponse

from bot.delivery import Backoff, RetryLater, Unavailable
from bot.matrix.incoming import Incoming, is_room_id, writable
from bot.matrix.people import MatrixMe
from bot.matrix.sending import MatrixError, Rooms, TokenRevoked, call
from engine.store import AppSettings

__all__ = ["SyncLoop", "token_key"]

log = logging.getLogger(__name__)

Json = dict[str, Any]
Take = Callable[[list[Incoming]], Awaitable[None]]

_BACKOFF = Backoff(first_s=0.5, cap_s=30.0)
#: At most this many events are read back into a room's gap (the oldest are left).
_GAP_LIMIT = 1000


def token_key(user_id: str) -> str:
    return f"matrix:next_batch:{user_id}"


def sync_filter(timeline_limit: int) -> Json:
    return {
        "presence": {"types": []},
        "account_data": {"types": []},
        "room": {
            "timeline": {"limit": timeline_limit},
            "state": {"lazy_load_members": True},
            "ephemeral": {"types": []},
            "account_data": {"types": []},
        },
    }


class SyncLoop:
    def __init__(
        self,
        nio: AsyncClient,
        me: MatrixMe,
        rooms: Rooms,
        settings: AppSettings,
        take: Take,
        *,
        timeline_limit: int = 50,
        timeout_ms: int = 30_000,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._nio = nio
        self._sleep = sleep
        self._me = me
        self._rooms = rooms
        self._settings = settings
        self._take = take
        self._filter = sync_filter(timeline_limit)
        self._timeout_ms = timeout_ms
        #: Set once a sync answered (``/healthz``: ok).
        self.synced = asyncio.Event()

    async def run(self) -> None:
        """Sync until cancelled; ``TokenRevoked`` ends it (the service says so)."""
        key = token_key(self._me.user_id)
        token = await self._settings.get(key)
        first_ever, full_state = token is None, True
        failures = 0
        while True:
            try:
                answer = await self._sync(token, full_state)
            except TokenRevoked:
                raise
            except MatrixError as exc:
                failures += 1
                delay = _waited(exc, failures)
                log.warning("Matrix sync failed (%s); again in %.1f s", exc.description, delay)
                await self._sleep(delay)
                continue
            failures = 0
            try:
                events = await self._events(answer, token, history=not first_ever)
                if events:
                    await self._take(events)  # stored before the token moves past them
                # Its failure (the database away) takes the batch again, its events
                # stored by id: until 2026-12-07 it ended receiving for the life of the
                # process (found by review).
                await self._settings.set(key, answer.next_batch)
            except TokenRevoked:
                raise
            except MatrixError as exc:  # the homeserver, asked about one: the batch again
                failures += 1
                delay = _waited(exc, failures)
                log.warning("Matrix events not taken (%s); again in %.1f s", exc.description, delay)
                await self._sleep(delay)
                continue
            except Exception:  # the database away: the batch again (it ended receiving for
                # the life of the process until 2026-12-06; found by review)
                failures += 1
                delay = _BACKOFF.delay(failures)
                log.exception("Matrix events not taken; again in %.1f s", delay)
                await asyncio.sleep(delay)
                continue
            token, first_ever, full_state = answer.next_batch, False, False
            self.synced.set()

    async def _sync(self, since: str | None, full_state: bool) -> SyncResponse:
        answer = await call(
            self._nio.sync(
                timeout=self._timeout_ms,
                sync_filter=self._filter,
                since=since,
                full_state=full_state or None,
            )
        )
        assert isinstance(answer, SyncResponse)
        return answer

    async def _events(
        self, answer: SyncResponse, since: str | None, *, history: bool
    ) -> list[Incoming]:
        """The events of ``answer`` in order, room by room (a room's gap read back)."""
        me = self._me.user_id
        events: list[Incoming] = []
        for room_id, invited in answer.rooms.invite.items():
            inviter = _inviter(invited.invite_state, me)
            if is_room_id(room_id) and writable(room_id) and inviter is not None:
                events.append(Incoming.invite(room_id, *inviter, batch=answer.next_batch))
        for room_id in answer.rooms.leave:
            self._forget(room_id)
        for room_id, joined in answer.rooms.join.items():
            if not is_room_id(room_id):
                continue
            self._learn(room_id, [e.source for e in joined.state], joined.summary)
            timeline = [e.source for e in joined.timeline.events]
            if history and joined.timeline.limited and since is not None:
                timeline = await self._gap(room_id, joined.timeline.prev_batch, since) + timeline
            self._learn(room_id, timeline, None)
            if not history:
                continue  # the account's first sync: what was said before is not answered
            members = _members_when_sent(timeline, joined.summary)
            for raw in _as_edited(_since_invited(timeline, me)):
                incoming = _read(raw, room_id, me)
                if incoming is not None:
                    count = members.get(incoming.event_id)
                    events.append(incoming if count is None else replace(incoming, members=count))
        return events

    async def _gap(self, room_id: str, start: str | None, since: str) -> list[Json]:
        """The events between ``since`` and the timeline's start, oldest first."""
        if not start:
            return []
        found: list[Json] = []
        while start and len(found) < _GAP_LIMIT:
            try:
                answer = await call(
                    self._nio.room_messages(
                        room_id, start=start, end=since, direction=MessageDirection.back, limit=100
                    )
                )
            except (RetryLater, Unavailable):
                raise  # the batch again, later: its gap was lost until 2026-12-06
            except MatrixError as exc:
                log.warning("reading back %s failed: %s", room_id, exc.description)
                break
            assert isinstance(answer, RoomMessagesResponse)
            if not answer.chunk:
                break
            found.extend(e.source for e in answer.chunk)
            if answer.end == start:
                break
            start = answer.end
        found.reverse()
        return found

    def _learn(self, room_id: str, raw_events: list[Any], summary: Any) -> None:
        """Encryption and membership, from state and timeline events."""
        joined = getattr(summary, "joined_member_count", None)
        if isinstance(joined, int):
            self._rooms.members[room_id] = joined
        for raw in raw_events:
            if not isinstance(raw, dict):
                continue
            kind = raw.get("type")
            if kind == "m.room.encryption":
                self._rooms.encrypted.add(room_id)
            elif kind == "m.room.member" and joined is None:
                self._rooms.members.pop(room_id, None)  # asked again when needed

    def _forget(self, room_id: str) -> None:
        self._rooms.members.pop(room_id, None)


def _waited(error: MatrixError, failures: int) -> float:
    """How long after a failed step the next one goes: the backoff, or the wait a 429
    asked for when longer (until 2026-12-07 a limited sync came back after half a second,
    into the same limit; found by review)."""
    delay = _BACKOFF.delay(failures)
    return max(delay, error.seconds) if isinstance(error, RetryLater) else delay


def _inviter(invite_state: list[Any], me: str) -> tuple[str, str | None] | None:
    """Who invited the bot (and the invite's event id, when the state has it), from
    matrix-nio's parsed invite state (its ``source`` has lost the content)."""
    for event in invite_state:
        if (
            isinstance(event, InviteMemberEvent)
            and event.state_key == me
            and event.membership == "invite"
            and isinstance(event.sender, str)
        ):
            return event.sender, event.source.get("event_id")
    return None


def _since_invited(timeline: list[Any], me: str) -> list[Any]:
    """A room the bot joins in this batch: its timeline from the bot's invite on (from its
    join when the invite is not in it). What was said before the bot was invited is not
    for it: until 2026-12-06 it answered a room's earlier messages, up to 50 at once
    (found by review)."""
    cut = None
    for index, raw in enumerate(timeline):
        if not isinstance(raw, dict) or raw.get("type") != "m.room.member":
            continue
        if raw.get("state_key") != me:
            continue
        membership = (raw.get("content") or {}).get("membership")
        unsigned = raw.get("unsigned") if isinstance(raw.get("unsigned"), dict) else {}
        before = (unsigned.get("prev_content") or {}).get("membership")
        if membership == "invite":
            cut = index
        elif membership == "join" and before != "join" and cut is None:
            cut = index  # a join, not a change of the bot's name in a room it is in
    return timeline if cut is None else timeline[cut + 1 :]


def _members_when_sent(timeline: list[Any], summary: Any) -> dict[str, int]:
    """The room's joined members when each event of the timeline was sent, by event id:
    walked back from the batch's end (the summary's count) through the timeline's member
    events. A direct room's message followed in the same batch by a third member's join
    was judged by the count at the end, taken for a group room's message to nobody and
    dropped (until 2026-12-07; found by review). Empty when the timeline changes no
    membership (the room's count holds for all of it) or the count at its end is not
    known; the events before a member event whose change cannot be read are left out
    (their room's members are asked, as before)."""
    count = getattr(summary, "joined_member_count", None)
    if not isinstance(count, int) or not any(
        isinstance(raw, dict) and raw.get("type") == "m.room.member" for raw in timeline
    ):
        return {}
    counts: dict[str, int] = {}
    for raw in reversed(timeline):
        if not isinstance(raw, dict):
            continue
        if raw.get("type") == "m.room.member":
            change = _joined_change(raw)
            if change is None:
                break
            count -= change
        elif isinstance(raw.get("event_id"), str):
            counts[raw["event_id"]] = count
    return counts


def _joined_change(member: Json) -> int | None:
    """What a member event did to the count of joined members: 1 (a join), -1 (a joined
    member's leave, kick or ban), 0 (a new name, an invite); ``None`` when the membership
    it replaced is not shown (``unsigned.prev_content``)."""
    content = member.get("content") if isinstance(member.get("content"), dict) else {}
    unsigned = member.get("unsigned") if isinstance(member.get("unsigned"), dict) else {}
    before = unsigned.get("prev_content")
    if isinstance(before, dict):
        was = before.get("membership")
    elif "replaces_state" in unsigned:
        return None  # it replaced a membership this does not show
    else:
        was = None  # the member's first
    return int(content.get("membership") == "join") - int(was == "join")


def _as_edited(timeline: list[Any]) -> list[Any]:
    """The timeline with each message as its sender last edited it in the same batch (an
    edit later on is not answered: the first version was). A message corrected while the
    bot was down, or before it read the batch, was answered as first written: the agent
    acted on words the person took back (until 2026-12-07; found by review). A message
    its sender deleted takes no edit: it stays empty, and is not answered (its last edit
    was, until 2026-12-07; found by review)."""
    edits: dict[str, Json] = {}
    senders: dict[str, Any] = {}  # each message's sender: only their own edits count
    deleted = {
        str(raw.get("redacts") or (raw.get("content") or {}).get("redacts"))
        for raw in timeline
        if isinstance(raw, dict) and raw.get("type") == "m.room.redaction"
    }
    for raw in timeline:
        if not isinstance(raw, dict) or raw.get("type") != "m.room.message":
            continue
        content = raw.get("content")
        if not isinstance(content, dict):
            continue
        event_id = str(raw.get("event_id"))
        unsigned = raw.get("unsigned") if isinstance(raw.get("unsigned"), dict) else {}
        if content and "redacted_because" not in unsigned and event_id not in deleted:
            senders[event_id] = raw.get("sender")
        relates, new = content.get("m.relates_to"), content.get("m.new_content")
        if isinstance(relates, dict) and relates.get("rel_type") == "m.replace":
            target = relates.get("event_id")
            if isinstance(target, str) and _whole(new) and senders.get(target) == raw.get("sender"):
                edits[target] = new
    deleted.discard("None")
    if not edits and not deleted:
        return timeline
    edited = []
    for raw in timeline:
        if isinstance(raw, dict) and raw.get("event_id") in deleted:
            raw = {**raw, "content": {}}  # deleted in this batch: nothing to answer
        edit = edits.get(raw.get("event_id")) if isinstance(raw, dict) else None
        content = raw.get("content") if isinstance(raw, dict) else None
        if edit is not None and isinstance(content, dict):
            relations = (
                {"m.relates_to": content["m.relates_to"]} if "m.relates_to" in content else {}
            )
            raw = {**raw, "content": {**edit, **relations}}
        edited.append(raw)
    return edited


def _whole(new_content: object) -> bool:
    """Whether an edit's new content is a message of its own (its type and its words)."""
    return (
        isinstance(new_content, dict)
        and isinstance(new_content.get("msgtype"), str)
        and isinstance(new_content.get("body"), str)
    )


def _read(raw: object, room_id: str, me: str | None) -> Incoming | None:
    """An event as the bot takes it; ``None`` for one it cannot read. Any member may send
    any shape (another homeserver's events are not checked): one that raised here made the
    loop ask for the same batch forever, and nothing after it was ever received (found by
    review on 2026-12-06)."""
    if not isinstance(raw, dict):
        return None
    try:
        return Incoming.of(raw, room_id, me)
    except Exception:
        log.warning("a Matrix event in %s could not be read; skipped", room_id, exc_info=True)
        return None
