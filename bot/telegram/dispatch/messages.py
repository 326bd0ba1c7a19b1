"""A Telegram message, from its parsed form to the hub (or to its one answer here).

In order: in groups only what is addressed to the bot; strangers get a pairing code;
commands run from the registry; a reply may answer a question or give a reject reason;
files are downloaded (voice files too long or large refused first) and voice notes
transcribed, their text said back; the rest becomes a hub message, stored and marked
handled in one commit.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from sqlalchemy.engine import Connection

from bot.delivery import CardRow, EventAlreadyHandled
from bot.platform.access import Access
from bot.platform.commands import CommandRegistry
from bot.platform.failures import SORRY_MESSAGE, report_failure
from bot.platform.handover import hand_over_edit
from bot.platform.open_cards import with_files
from bot.platform.outgoing import typing_for_its_turn
from bot.platform.tasks import Runtime
from bot.platform.voice_notes import VoiceNotes
from bot.telegram.dispatch.albums import ALBUM_QUIET_S, Album, Albums, Unaddressed
from bot.telegram.dispatch.approvals import ApprovalTaps
from bot.telegram.inbound.downloads import Downloads
from bot.telegram.inbound.media import FileRef
from bot.telegram.inbound.updates import MESSAGE_ID_KEY, Message
from bot.telegram.rendering.chat_cards import ChatCards
from bot.telegram.rendering.progress import ChatActivity
from bot.telegram.sending.api import Json
from bot.telegram.sending.delivery import TelegramSender
from bot.telegram.store import mark_handled_in
from engine.hub import ChatHub, HubError, SendOptions
from engine.store import SENDER_KEY

__all__ = ["UNREADABLE_MESSAGE", "BotIdentity", "MessageHandler"]

log = logging.getLogger(__name__)
#: Albums whose first item was for the bot, by chat (the oldest forgotten first).
_ALBUMS_KEPT = 200

UNREADABLE_MESSAGE = "I cannot read this kind of message yet; please send text, a photo or a file."


#: ``/name@another_bot`` in a private chat (in a group it is that bot's, and not ours to
#: answer).
ANOTHER_BOTS_COMMAND = "That command names another bot; mine are in /help."


@dataclass(frozen=True, slots=True)
class _Files:
    """What a message's files gave: attachments, sentences of what failed, what was heard."""

    attachments: list[Json] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    texts: Sequence[str] = ()


@dataclass(slots=True)
class BotIdentity:
    """Who the bot is, known once getMe answered (a group message may mention it)."""

    id: int | None = None
    username: str | None = None


class MessageHandler:
    def __init__(
        self,
        hub: ChatHub,
        me: BotIdentity,
        access: Access,
        commands: CommandRegistry,
        cards: ChatCards,
        approvals: ApprovalTaps,
        sender: TelegramSender,
        downloads: Downloads,
        activity: ChatActivity,
        runtime: Runtime,
        mark_handled: Callable[[int], Awaitable[None]],
        voice: VoiceNotes | None = None,
        album_quiet_s: float = ALBUM_QUIET_S,
    ) -> None:
        """``mark_handled``: an update marked handled (an album whose sending failed);
        ``voice``: voice notes transcribed (``None``: they stay files)."""
        self._hub = hub
        self._me = me
        self._access = access
        self._commands = commands
        self._cards = cards
        self._approvals = approvals
        self._sender = sender
        self._downloads = downloads
        self._activity = activity
        self._voice = voice
        self._mark_handled = mark_handled
        self._addressed_albums: dict[tuple[int, str], None] = {}
        self._albums = Albums(self._send_album, runtime, album_quiet_s)
        self._unaddressed: Unaddressed[Message] = Unaddressed(
            self._mark_all_handled, runtime, album_quiet_s
        )

    async def handle(self, m: Message) -> bool:
        """True when the update was marked handled along the way. A failure of ours is
        logged with a short error id, and the sender told that id: never the exception."""
        try:
            return await self._on_message(m)
        except Exception:
            error = report_failure(log, f"message {m.message_id} in chat {m.chat_id}")
            if self._access.is_allowed(m.user_id):  # a stranger learns nothing more
                await self._sender.say_in(m.chat_id, m.thread_id, SORRY_MESSAGE.format(error=error))
            return False

    async def _on_message(self, m: Message) -> bool:
        if m.is_group and not self._addressed(m):
            if m.album is None:
                return False
            # A later item's caption may mention the bot: held, marked handled by then.
            self._unaddressed.hold((m.chat_id, m.album), m.update_id, m)
            return True
        if m.album is not None:  # its items before this one that mentioned no one
            for earlier in self._unaddressed.take((m.chat_id, m.album)):
                if not await self.handle(earlier):
                    await self._mark_handled(earlier.update_id)
        if m.album is None and self._albums.open:  # an album the chat sent before goes first
            await self._albums.flush(m.chat_id)
        user = str(m.user_id)
        if not self._access.is_allowed(user):
            if not m.is_group:
                await self._offer_pairing(m, user)
            return False
        command = m.command(self._me.username)
        if command is not None:
            await self._command(m, user, *command)
            return False
        if m.is_command:  # ``/name@another_bot``: never a message to the model (it was)
            await self._sender.say_in(m.chat_id, m.thread_id, ANOTHER_BOTS_COMMAND)
            return False
        target = await self._cards.answered_now(
            m.source,
            reply_to=None if m.reply_to_message_id is None else str(m.reply_to_message_id),
            is_command=m.is_command,
        )
        say = self._sender.say_in
        metadata: dict[str, Any] = {
            MESSAGE_ID_KEY: m.message_id,
            # Who asked: with APPROVERS requester+owner they may decide what this turn gates.
            SENDER_KEY: {"id": user, "name": m.user_name},
        }
        if m.album is not None:  # one message of every item (albums.py), answering or not
            return await self._album_item(m, (m.chat_id, m.album), metadata, target)
        files = await self._files(m) if m.files else _Files()
        attachments, problems = files.attachments, files.problems
        text = self._words(m, files.texts)
        if problems:  # one warning per message, whatever went wrong with its files
            await say(m.chat_id, m.thread_id, "⚠️ " + " ".join(problems))
        update_id = m.update_id
        marked = partial(_marked, [update_id])
        usable = bool(text.strip() or attachments)
        # For an approval card's ❌, heard; a reply with nothing left (a voice note that
        # could not be transcribed) leaves the window open, so the person may give the
        # reason again (until 2026-12-07 it rejected the call at once with an empty
        # reason; found by review).
        if target is not None and target[0] == "reason" and usable:
            return await self._reason(target[1], m.user_name, user, text, attachments, marked)
        if not usable:
            if not problems:
                await say(m.chat_id, m.thread_id, UNREADABLE_MESSAGE)
            return False
        # An open question is answered by the whole message: its voice heard, its files
        # named (they were dropped, a voice answer was an empty one).
        answering = target is not None and target[0] == "answer"
        if answering and await self._answer_question(
            m.source, target[1], text, attachments, marked, user
        ):
            return False
        if attachments:
            metadata["attachments"] = attachments
        try:
            # Stored and marked handled in one commit: a crash leaves both or neither (and
            # an update left unhandled is handed over again at the next start).
            await self._hub.send_message(
                m.source,
                text,
                SendOptions(metadata=metadata),
                also=lambda conn: mark_handled_in(conn, update_id),
                redelivered_if_lost=True,
            )
        except HubError as exc:
            await say(m.chat_id, m.thread_id, f"⚠️ {exc}")
            return False
        except EventAlreadyHandled:  # another poller of the fleet handed it over too
            log.info("update %s was handled already; not queued again", update_id)
            return True
        await typing_for_its_turn(self._activity, self._cards, m.source)
        return True

    async def edited(self, m: Message) -> None:
        """A person's correction of a message that still waits for its turn: the turn
        reads it as corrected (until 2026-12-07 every edit was ignored, and the agent
        acted on the words taken back; found by review). One read already keeps its
        answer; a message with files keeps its words (they hold what the files gave)."""
        if m.files or m.album is not None or m.is_command:
            return
        # Only its author edits a message, and only one addressed to the bot waits: an
        # edit that takes the mention out ("never mind") corrects it too (until 2026-12-07
        # the addressed words stayed; found by review).
        if not self._access.is_allowed(m.user_id):
            return
        text = self._words(m)
        if not text.strip():
            return
        await hand_over_edit(self._hub, m.source, MESSAGE_ID_KEY, m.message_id, text)

    def _words(self, m: Message, heard: Sequence[str] = ()) -> str:
        """What the model reads of a message: whose words it forwards, what it replies
        to, its text, what its voice notes said, the kinds described, where it points."""
        lines = [m.forwarded, self._replied(m), m.text_with_links, *heard, *m.described]
        if m.location is not None:
            lat, lon = m.location
            lines.append(f"📍 Location: {lat:.6f}, {lon:.6f}")
        return "\n".join(line for line in lines if line)

    async def _album_item(
        self,
        m: Message,
        key: tuple[int, str],
        metadata: dict[str, Any],
        target: tuple[str, CardRow] | None,
    ) -> bool:
        """An item of an album, held by its album from before its download to the end;
        True: its update is marked in the album's commit (a crash before: handed over
        again). ``target``: what the album answers, when it is its first item."""
        first = Album(m.source, m.chat_id, m.thread_id, metadata, target=target)
        await self._albums.hold(key, first)
        try:
            files = await self._files(m) if m.files else _Files()
        except BaseException:
            self._albums.release(key)
            raise
        gathered = self._albums.open.get(key)
        # Each item of an album is forwarded alike and replies alike: the album says each
        # once (a forwarded album's line came once per item until 2026-12-07; review).
        once = [
            line
            for line in (m.forwarded, self._replied(m))
            if line and not (gathered is not None and any(line in t for t in gathered.texts))
        ]
        said = [*once, m.text_with_links, *files.texts, *m.described]
        text = "\n".join(line for line in said if line)
        self._albums.add(key, first, text, files.attachments, m.update_id, files.problems)
        return True

    async def gathered(self) -> None:
        """Until every album gathered so far was sent (a fleet's receiver lets its lease go
        only then: the next holder would hand its items over again)."""
        await self._albums.flush_all()
        self._unaddressed.forget_all()

    async def _mark_all_handled(self, update_ids: list[int]) -> None:
        for update_id in update_ids:
            await self._mark_handled(update_id)

    async def _send_album(self, album: Album) -> None:
        """An album's items as one message, every item's update marked handled in its
        commit; a failure tells the chat and marks them handled (as a message's does)."""
        update_ids = list(album.update_ids)
        mark = partial(_marked, update_ids)
        say = partial(self._sender.say_in, album.chat_id, album.thread_id)
        if album.problems:
            await say("⚠️ " + " ".join(album.problems))
        if album.text or album.attachments:  # else nothing could be read: told just now
            try:
                if album.target is not None and await self._album_answers(album, mark):
                    return
                await self._hub.send_message(
                    album.source,
                    album.text,
                    SendOptions(metadata=album.options_metadata),
                    also=mark,
                    redelivered_if_lost=True,
                )
            except EventAlreadyHandled:  # another poller of the fleet handed them over too
                log.info("album updates %s were handled already; not queued again", update_ids)
                return
            except HubError as exc:
                await say(f"⚠️ {exc}")
            except Exception:
                error = report_failure(log, f"album of updates {update_ids} in {album.source}")
                await say(SORRY_MESSAGE.format(error=error))
            else:
                await typing_for_its_turn(self._activity, self._cards, album.source)
                return
        await self._mark_all_handled(update_ids)

    async def _album_answers(self, album: Album, mark: Callable[[Connection], None]) -> bool:
        """The album as the answer to its first item's question, or as the reason of its
        ❌; whether it was taken so (an expired question: the album is a message)."""
        assert album.target is not None
        kind, card = album.target
        sender = album.metadata[SENDER_KEY]
        text, attachments = album.text, album.attachments
        if kind == "reason":  # taken, or refused (the window left open): never a message
            if not await self._reason(card, sender["name"], sender["id"], text, attachments, mark):
                await self._mark_all_handled(album.update_ids)
            return True
        return await self._answer_question(
            album.source, card, text, attachments, mark, sender["id"]
        )

    async def _reason(
        self,
        card: CardRow,
        user_name: str,
        user: str,
        text: str,
        attachments: list[Json],
        mark: Callable[[Connection], None],
    ) -> bool:
        """A rejection's reason, its updates marked handled in the decision's commit (a
        kill between the two made the reason a message to the agent after the restart);
        True when it was. A photo's caption: the agent told where the photo is, the card
        its name."""
        try:
            return await self._approvals.reject(
                card,
                user_name,
                with_files(text, attachments),
                self._access.decider(user),
                shown=" ".join(
                    [text, *(f"📎 {Path(a['path']).name}" for a in attachments)]
                ).strip(),
                also=mark,
            )
        except EventAlreadyHandled:  # another poller of the fleet gave it already
            log.info("a reason for card %s was handled already; no second", card.tool_call_id)
            return True

    async def _files(self, m: Message) -> _Files:
        """The message's files downloaded, its voice notes heard (what was heard is said
        back first), and a sentence for each file that could not be."""
        refused, files = self._voice_limits(m)
        attachments, problems = await self._downloads.fetch(m, files)
        if self._voice is None:
            return _Files(attachments, refused + problems)
        heard = await self._voice.hear(attachments)
        if heard.quotes:
            await self._sender.say_in(m.chat_id, m.thread_id, heard.quotes)
        return _Files(heard.attachments, refused + problems + heard.problems, heard.texts)

    def _voice_limits(self, m: Message) -> tuple[list[str], list[FileRef]]:
        """Voice files too long or too large to transcribe (refused before download), and
        the files to download."""
        if self._voice is None:
            return [], list(m.files)
        refused, kept = [], []
        for ref in m.files:
            why = self._voice.refusal(ref.kind, ref.name, ref.size, ref.duration)
            if why is None:
                kept.append(ref)
            else:
                refused.append(why)
        return refused, kept

    def _replied(self, m: Message) -> str | None:
        """What the message replies to, unless the bot said it (that is in the history),
        but for the part of it the person quoted (which of its lines they mean: lost until
        2026-12-07; found by review)."""
        if m.replying_to is None:
            return None
        if self._me.id is not None and m.reply_to_user_id == self._me.id and not m.quoted:
            return None
        return m.replying_to

    def _addressed(self, m: Message) -> bool:
        """In groups the bot answers only when mentioned, replied to, or commanded; an
        album's later items when its first one was (only that one has the caption: the
        model saw one photo of "@bot compare these" until 2026-12-06; found by review)."""
        album = (m.chat_id, m.album) if m.album is not None else None
        if album is not None and album in self._addressed_albums:
            return True
        addressed = self._mentions_me(m)
        if addressed and album is not None:
            if len(self._addressed_albums) >= _ALBUMS_KEPT:
                self._addressed_albums.pop(next(iter(self._addressed_albums)))
            self._addressed_albums[album] = None
        return addressed

    def _mentions_me(self, m: Message) -> bool:
        me = self._me
        if m.is_command:  # a path ("/etc/hosts is broken @bot") is no command
            # Telegram gives a command without "@bot" to every bot of the group: one that
            # is not ours is another bot's (until 2026-12-07 each got "Unknown command"
            # and the whole help text, and as a reply to the bot's message it still did;
            # found by review).
            command = m.command(me.username)
            return command is not None and (m.names_a_bot or self._commands.knows(command[0]))
        if me.id is not None and m.reply_to_user_id == me.id:
            return True
        for entity in m.entities:
            kind = entity.get("type")
            if kind == "text_mention" and (entity.get("user") or {}).get("id") == me.id:
                return True
            if kind == "mention" and me.username:
                mention = _utf16_slice(m.text, entity.get("offset", 0), entity.get("length", 0))
                if mention.lower() == f"@{me.username.lower()}":
                    return True
        return False

    async def _offer_pairing(self, m: Message, user: str) -> None:
        offer = await self._access.offer_pairing(user, str(m.chat_id), m.user_name)
        if offer.to_user is not None:
            await self._sender.say_in(m.chat_id, None, offer.to_user)
        owner = self._access.owner
        if offer.to_owner is not None and owner is not None:
            await self._sender.say_in(int(owner), None, offer.to_owner)

    async def _command(self, m: Message, user: str, name: str, argument: str) -> None:
        # Pairing is the owner's: TELEGRAM_OWNER_ID, never the single-user fallback.
        update_id = m.update_id
        context = self._access.command_context(
            self._hub, m.source, argument, user, also=lambda conn: mark_handled_in(conn, update_id)
        )
        reply = await self._commands.run(name, context)
        if reply:
            await self._sender.say_in(m.chat_id, m.thread_id, reply)

    async def _answer_question(
        self,
        source: str,
        card: CardRow,
        text: str,
        attachments: list[dict[str, Any]],
        mark: Callable[[Connection], None],
        user: str,
    ) -> bool:
        """A reply to a question (or any message while one is open) answers it, when its
        sender may (``APPROVERS``); else it is a message."""
        return await self._cards.answer(
            card,
            text,
            by=None,
            quietly=True,
            also=mark,
            goes_on=partial(self._activity.start_typing, source),
            attachments=attachments,
            decider=self._access.decider(user),
        )


def _marked(update_ids: list[int], conn: Connection) -> None:
    """Every update marked handled; one handled already (by another poller of a fleet) is
    not handed over again, but the others go on (``EventAlreadyHandled``: all were)."""
    handled = 0
    for update_id in update_ids:
        try:
            mark_handled_in(conn, update_id)
        except EventAlreadyHandled:
            handled += 1
    if handled == len(update_ids):
        raise EventAlreadyHandled(str(update_ids))


def _utf16_slice(text: str, offset: int, length: int) -> str:
    data = text.encode("utf-16-le")
    return data[offset * 2 : (offset + length) * 2].decode("utf-16-le", errors="ignore")
