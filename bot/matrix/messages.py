"""A Matrix event, from its stored form to the hub (or to its one answer here).

In order: an invite is joined when an allowed person sent it, declined otherwise (the
decline's reason carries the pairing code); an encrypted event gets the one notice that
the bot cannot read encrypted rooms; a reaction or a reply on a card decides it
(``decisions.py``); strangers get a pairing code; ``/commands`` run from the registry; a
message may answer a question; files are not read (said so); the rest becomes a hub
message, stored and marked handled in one commit.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

from aiohttp import ClientError
from nio import AsyncClient, RoomGetEventResponse
from sqlalchemy.engine import Connection

from bot.delivery import OTHER, KeyedLocks, RetryLater, Unavailable
from bot.matrix.activity import RoomActivity
from bot.matrix.cards import MatrixCards
from bot.matrix.decisions import Decisions
from bot.matrix.incoming import MATRIX, Incoming, Place, source_of
from bot.matrix.people import MatrixMe, People
from bot.matrix.sending import MatrixError, MatrixRefused, MatrixSender, Rooms, call, leave
from bot.platform.access import ASKED_ALREADY, Access
from bot.platform.commands import CommandRegistry
from bot.platform.failures import SORRY_MESSAGE, report_failure
from bot.platform.handover import hand_over, hand_over_edit, marking
from bot.platform.outgoing import typing_for_its_turn
from bot.platform.threads import JoinedThreads
from bot.platform.voice_notes import Heard, VoiceNotes
from engine.hub import ChatHub
from engine.store import SENDER_KEY, AppSettings

__all__ = ["ENCRYPTED", "FILES_NOT_READ", "MessageHandler"]

log = logging.getLogger(__name__)
#: Thread roots remembered as the bot's or not (the oldest forgotten first).
_ROOTS_KEPT = 1000

FILES_NOT_READ = "I cannot read files sent on Matrix yet; please write what you need as text."
ENCRYPTED = (
    "I cannot read encrypted rooms yet, so I will not answer here. Invite me to a room "
    "without encryption."
)
_SAFE = re.compile(r"[^A-Za-z0-9._-]+")
#: Matrix 1.11's authenticated media (what matrix-nio's ``download`` asks).
_MEDIA = "/_matrix/client/v1/media/download"
_MEDIA_TIMEOUT_S = 120.0
_CHUNK_BYTES = 64 * 1024
_COMMAND = re.compile(r"^/([a-z0-9_]{1,32})(?:\s+(.*))?$", re.DOTALL)


class MessageHandler:
    def __init__(
        self,
        hub: ChatHub,
        nio: AsyncClient,
        me: MatrixMe,
        people: People,
        rooms: Rooms,
        access: Access,
        commands: CommandRegistry,
        cards: MatrixCards,
        decisions: Decisions,
        sender: MatrixSender,
        activity: RoomActivity,
        settings: AppSettings,
        voice: VoiceNotes | None = None,
    ) -> None:
        """``voice``: audio messages transcribed (``None``: not read, said so)."""
        self._hub = hub
        self._threads = JoinedThreads(hub)
        self._nio = nio
        self._me = me
        self._people = people
        self._rooms = rooms
        self._access = access
        self._commands = commands
        self._cards = cards
        self._decisions = decisions
        self._sender = sender
        self._activity = activity
        self._settings = settings
        self._voice = voice
        self._roots: dict[tuple[str, str], bool] = {}
        #: One direct room opened at a time per person (two notices at once opened two).
        self._opening: KeyedLocks[str] = KeyedLocks()

    # -- what is stored at all --------------------------------------------------------------

    async def addressed(self, m: Incoming) -> bool:
        """Whether the bot answers ``m`` at all (checked before it is stored): an invite,
        an encrypted event, a reaction on a card; a message in a direct room, mentioning
        the bot, replying to it, or in a thread the bot is in by someone allowed (a
        stranger talking to colleagues there is offered no pairing code)."""
        if m.kind in ("invite", "encrypted", "upgrade"):
            return True
        if m.kind == "edit":  # it changes only a waiting message of its sender's
            return self._access.is_allowed(m.sender)
        if m.kind == "reaction":
            return (
                m.relates_to is not None
                and await self._cards.at(m.room_id, m.relates_to) is not None
            )
        # As the room was when it was sent: a direct message followed in the same batch
        # by a third member's join was judged a group room's, and dropped (until
        # 2026-12-07; found by review).
        direct = m.members <= 2 if m.members is not None else await self.is_direct(m.room_id)
        if direct:
            return True
        if m.mentions_user(self._me.user_id, self._me.display_name) or (
            m.relates_to is not None and await self._is_mine(m.room_id, m.relates_to)
        ):
            if self._access.is_allowed(m.sender):  # a stranger's mention brings no one in
                self._threads.join(m.source)
            return True
        if m.thread is None or not self._access.is_allowed(m.sender):
            return False
        if await self._threads.joined(m.source):
            return True
        # Element's "Reply in thread" on the bot's answer: no mention, and its reply is a
        # thread's fallback (not read as one); it was for no one until 2026-12-06 (found
        # by review).
        if await self._root_is_mine(m.room_id, m.thread):
            self._threads.join(m.source)
            return True
        return False

    async def _root_is_mine(self, room_id: str, root: str) -> bool:
        """Whether the bot wrote a thread's root (asked once per thread and process)."""
        key = (room_id, root)
        known = self._roots.get(key)
        if known is None:
            known = await self._is_mine(room_id, root)
            if len(self._roots) >= _ROOTS_KEPT:
                self._roots.pop(next(iter(self._roots)))
            self._roots[key] = known
        return known

    async def is_direct(self, room_id: str) -> bool:
        """A room of the bot and one person (its joined members, asked once per change)."""
        count = self._rooms.members.get(room_id)
        if count is None:
            try:
                answer = await call(self._nio.joined_members(room_id))
            except (RetryLater, Unavailable):
                raise  # not knowing is not "no": the sync takes its batch again later
            except MatrixError as exc:  # refused (not in the room): not a room of ours
                log.info("joined members of %s: %s", room_id, exc.description)
                return False
            count = self._rooms.members[room_id] = len(answer.members)
        return count <= 2

    async def _note_direct(self, m: Incoming) -> None:
        """The person's direct room, as this message shows it, kept for the next start:
        the owner who declined the room the bot opened and wrote in one of their own was
        invited into a new room at every start (until 2026-12-07; found by review). A
        homeserver away a moment (the members unknown after a restart) loses nothing
        (until 2026-12-07 its 502 failed the message: "Sorry", marked handled, never
        given to the agent; found by review)."""
        try:
            if await self.is_direct(m.room_id) and self._me.direct.get(m.sender) != m.room_id:
                self._me.direct[m.sender] = m.room_id
                await self._settings.set(f"matrix:direct:{m.sender}", m.room_id)
        except (RetryLater, Unavailable) as exc:
            log.info("members of %s unknown for now: %s", m.room_id, exc.description)
        except Exception:  # only a cache: the database away a moment fails no message
            log.exception("keeping %s as the direct room of %s failed", m.room_id, m.sender)

    async def _is_mine(self, room_id: str, event_id: str) -> bool:
        if await self._cards.at(room_id, event_id) is not None:
            return True
        try:
            answer = await call(self._nio.room_get_event(room_id, event_id))
        except (RetryLater, Unavailable):
            # Not knowing is not "no", as for is_direct: a reply to the bot was dropped
            # during a 429 until 2026-12-06 (found by review).
            raise
        except MatrixError:
            return False
        return isinstance(answer, RoomGetEventResponse) and answer.event.sender == self._me.user_id

    # -- handling -----------------------------------------------------------------------------

    async def handle(self, m: Incoming) -> bool:
        """True when the event was marked handled along the way. A failure of ours is
        logged with a short error id, and the sender told that id: never the exception."""
        try:
            return await self._on_event(m)
        except Exception:
            error = report_failure(log, f"matrix event {m.event_id}")
            if m.kind == "message" and self._access.is_allowed(m.sender):
                await self._sender.say_at(m.place, SORRY_MESSAGE.format(error=error))
            return False

    async def _on_event(self, m: Incoming) -> bool:
        if m.kind == "invite":
            await self._on_invite(m)
            return False
        if m.kind == "upgrade":
            await self._on_upgrade(m)
            return False
        if m.kind == "encrypted" or m.room_id in self._rooms.encrypted:
            await self._sender.notice_once(m.room_id, f"encrypted:{m.room_id}", ENCRYPTED)
            return False
        if m.kind == "reaction":
            await self._decisions.reaction(m)
            return False
        if m.kind == "edit":
            await self._on_edit(m)
            return False
        if not self._access.is_allowed(m.sender):
            await self._stranger(m)
            return False
        await self._note_direct(m)
        text = m.text_to(self._me.display_name)
        command = _COMMAND.match(text)
        if command is not None:
            name, argument = command.group(1), command.group(2) or ""
            reply = await self.run_command(
                m.source, name, argument, m.sender, also=marking(MATRIX, m.key)
            )
            if reply:
                await self._sender.say_at(m.place, reply)
            return False
        attachments: list[dict[str, Any]] = []
        if m.audio is not None and self._voice is not None:
            heard = await self._hear(m, m.audio)
            if heard is None:
                return False
            text, attachments = "\n".join([text, *heard.texts]).strip(), heard.attachments
        elif m.files:
            await self._sender.say_at(m.place, "⚠️ " + FILES_NOT_READ)
            return False
        if not text:
            return False
        # A reply to a card (a reason) and an open question's answer are the whole
        # message, its audio heard (a voice answer was lost behind the waiting turn).
        goes_on = partial(self._activity.start_typing, m.source)
        to_card = await self._to_card(m)
        replied = None
        if to_card is not None:
            replied = await self._decisions.reply(to_card, text, attachments, goes_on)
        if replied:
            return False
        # A reply to a question that did not take it is a message: it answers no other
        # question (a review of 2026-12-07's change found it given to the newest one).
        if replied is None and await self._answer_question(m, text, attachments, goes_on):
            return False
        metadata = {
            "matrix_event_id": m.event_id,
            "matrix_room_id": m.room_id,
            SENDER_KEY: {"id": m.sender, "name": await self.name_of(m.sender)},
        }
        if attachments:
            metadata["attachments"] = attachments
        handed = await hand_over(
            self._hub, MATRIX, m.key, m.source, text, metadata, reads_files=False
        )
        if handed.refusal is not None:
            await self._sender.say_at(m.place, handed.refusal)
            return False
        if handed.before:
            return True
        await typing_for_its_turn(self._activity, self._cards, m.source)
        return True

    async def _on_edit(self, m: Incoming) -> None:
        """A person's correction of their message that still waits for its turn: the
        turn reads it as corrected (until 2026-12-07 an edit after the sync batch of its
        message was ignored, and the agent acted on the words taken back). Only the
        message's sender's edit counts (anyone may send an ``m.replace``); the edit
        does not say the message's thread, so the room's threads are looked in too."""
        text = m.text_to(self._me.display_name)
        if not m.relates_to or not self._access.is_allowed(m.sender) or not text:
            return
        if _COMMAND.match(text):
            return
        await hand_over_edit(
            self._hub,
            source_of(m.room_id),
            "matrix_event_id",
            m.relates_to,
            text,
            by=m.sender,
            threads=True,
        )

    async def _to_card(self, m: Incoming) -> Incoming | None:
        """``m`` as a reply to the card it answers, if it may be one: a reply, or a
        message in the thread of a card (Element's "Reply in thread" beside "Reply": the
        card is its root, its reply a thread's fallback; it began a conversation of its own
        and the card waited on, until 2026-12-06; found by review)."""
        if m.relates_to is not None:
            return m
        if m.thread is not None and await self._cards.at(m.room_id, m.thread) is not None:
            return replace(m, relates_to=m.thread)
        return None

    async def _hear(self, m: Incoming, audio: dict[str, Any]) -> Heard | None:
        """An audio message transcribed (refused first when too long or large); what was
        heard is said back. ``None``: nothing to hand over (said why)."""
        assert self._voice is not None
        folder = Path("uploads") / "matrix" / _SAFE.sub("_", m.room_id)[:80]
        heard = await self._voice.fetch([audio], folder, m.event_id[1:20], self._media)
        for line in heard.said():
            await self._sender.say_at(m.place, line)
        if not heard.texts and not heard.problems:  # an audio file nobody transcribes
            await self._sender.say_at(m.place, "⚠️ " + FILES_NOT_READ)
        return heard if heard.texts else None

    async def _media(self, url: str) -> bytes:
        """A voice file of the homeserver's media repository (authenticated media), read
        to one byte past the voice limit at most: enough to know it is too large (until
        2026-12-07 matrix-nio read it whole first, 30 MB held for a 1 MB limit when the
        message gave no size; found by review)."""
        assert self._voice is not None
        limit = self._voice.max_bytes
        place = urlsplit(url)
        media_id = place.path.strip("/")
        if place.scheme != "mxc" or not place.netloc or not media_id or "/" in media_id:
            raise ValueError("not a media URL")
        path = f"{_MEDIA}/{quote(place.netloc, safe='')}/{quote(media_id, safe='')}"
        headers = {"Authorization": f"Bearer {self._nio.access_token}"}
        data = bytearray()
        try:
            answer = await self._nio.send("GET", path, None, headers, timeout=_MEDIA_TIMEOUT_S)
            try:
                if answer.status != 200:
                    raise OSError(f"HTTP {answer.status}")
                async for chunk in answer.content.iter_chunked(_CHUNK_BYTES):
                    data += chunk
                    if len(data) > limit:
                        break
            finally:
                answer.release()
        except (ClientError, TimeoutError) as exc:
            raise OSError(f"the download failed: {type(exc).__name__}") from None
        return bytes(data[: limit + 1])

    async def run_command(
        self,
        source: str,
        name: str,
        argument: str,
        user: str,
        also: Callable[[Connection], None] | None = None,
    ) -> str | None:
        """``also``: the event that gave it, marked in the commit of what it changes."""
        context = self._access.command_context(self._hub, source, argument.strip(), user, also)
        return await self._commands.run(name, context)

    async def name_of(self, user: str) -> str:
        return await self._people.name_of(user)

    # -- invites and strangers ------------------------------------------------------------

    async def _on_invite(self, m: Incoming) -> None:
        if self._access.is_allowed(m.sender):
            try:  # paced and retried: a 429 or a 5xx lost the invite until 2026-12-06
                await self._sender.outbound.call(
                    m.room_id, lambda: call(self._nio.join(m.room_id)), kind=OTHER
                )
            except MatrixError as exc:
                log.warning("joining %s failed: %s", m.room_id, exc.description)
            return
        offer = await self._access.offer_pairing(m.sender, m.room_id, await self.name_of(m.sender))
        # Within the reminder window their code was given already: "invite me to ask"
        # told them to do what they had just done (until 2026-12-07; found by review).
        reason = offer.to_user or ASKED_ALREADY
        try:  # the decline's reason is what the stranger reads; paced and retried (a
            # 429 left the bot invited and the stranger without their code until
            # 2026-12-07; found by review)
            await self._sender.outbound.call(
                m.room_id, lambda: leave(self._nio, m.room_id, reason[:500]), kind=OTHER
            )
        except MatrixError as exc:
            log.info("declining %s failed: %s", m.room_id, exc.description)
        await self._tell_owner(offer.to_owner)

    async def _on_upgrade(self, m: Incoming) -> None:
        """The room was upgraded (``m.room.tombstone``): the bot follows to the new room,
        paced and retried as an invite's join, when someone allowed upgraded it (a
        stranger with the power to upgrade a group room would lead it anywhere). Until
        2026-12-07 it stayed in the old room, read-only after the upgrade, and its
        replies there were refused (found by review)."""
        if not self._access.is_allowed(m.sender):
            log.info("%s upgraded %s; not followed (not allowed)", m.sender, m.room_id)
            return
        new_room = m.text
        try:
            await self._sender.outbound.call(
                new_room, lambda: call(self._nio.join(new_room)), kind=OTHER
            )
        except MatrixError as exc:  # an invite-only room: the invite brings the bot in
            log.warning("following %s to %s failed: %s", m.room_id, new_room, exc.description)

    async def _stranger(self, m: Incoming) -> None:
        offer = await self._access.offer_pairing(m.sender, m.room_id, await self.name_of(m.sender))
        if offer.to_user is not None:
            await self._sender.say_at(m.place, offer.to_user)
        await self._tell_owner(offer.to_owner)

    async def _tell_owner(self, text: str | None) -> None:
        owner = self._access.owner
        if text is not None and owner is not None:
            await self.say_to_user(owner, text)

    async def say_to_user(self, user: str, text: str) -> None:
        """A message in ``user``'s direct room with the bot (made and kept when none is
        known); a failure is logged."""
        room = await self.direct_room(user)
        if room is not None:
            await self._sender.say_at(Place(room), text)

    async def direct_room(self, user: str) -> str | None:
        """``user``'s direct room with the bot: the one stored (another process may have
        opened a new one), else the one this process saw them write in, while they are
        still in it; else a new one, stored. One at a time here: two notices at once
        opened two rooms."""
        key = f"matrix:direct:{user}"
        async with self._opening.hold(user):
            stored = await self._settings.get(key)
            tried = [r for r in dict.fromkeys((stored, self._me.direct.get(user))) if r]
            for room in tried:
                if await self._still_with(room, user):
                    self._me.direct[user] = room
                    if room != stored:
                        await self._settings.set(key, room)
                    return room
            try:  # paced and retried: a 429 dropped the owner's notice until 2026-12-07
                answer = await self._sender.outbound.call(
                    None,
                    lambda: call(self._nio.room_create(is_direct=True, invite=[user])),
                    kind=OTHER,
                )
            except MatrixError as exc:
                log.warning("could not open a direct room with %s: %s", user, exc.description)
                return None
            made = str(answer.room_id)
            # Another process may have opened one meanwhile (each process looks for the
            # owner's at start): the first stored stays, and this one is left.
            room = await self._settings.change(
                key, lambda now: made if now in (None, *tried) else now
            )
            if room != made:
                with contextlib.suppress(MatrixError):
                    await leave(self._nio, made, "another room was opened for this talk")
            self._me.direct[user] = room
            return room

    async def _still_with(self, room: str, user: str) -> bool:
        """Whether ``room`` still holds ``user`` and the bot (joined, or ``user`` invited):
        a room either left is nobody's talk with the bot any more (until 2026-12-07 the
        owner's notices, a stranger's pairing request among them, went on into a room the
        owner had left; found by review). Not knowing (the homeserver away) is yes."""
        try:
            answer = await call(self._nio.room_get_state_event(room, "m.room.member", user))
        except MatrixRefused:  # the bot is no longer in the room, or it has no such member
            return False
        except MatrixError:
            return True
        membership = answer.content.get("membership") if isinstance(answer.content, dict) else None
        return membership in ("join", "invite")

    # -- questions ----------------------------------------------------------------------------

    async def _answer_question(
        self,
        m: Incoming,
        text: str,
        attachments: list[dict[str, Any]],
        goes_on: Callable[[], object],
    ) -> bool:
        """Any plain message in the conversation while a question is open answers it."""
        card = await self._cards.question_now(m.source)
        if card is None:
            return False
        return await self._cards.answer(
            card,
            text,
            by=await self.name_of(m.sender),
            also=marking(MATRIX, m.key),
            goes_on=goes_on,
            attachments=attachments,
            decider=self._access.decider(m.sender),
        )
