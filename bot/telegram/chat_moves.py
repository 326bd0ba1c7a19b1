"""Groups that Telegram made supergroups: the conversation goes on where it was.

A basic group becomes a supergroup, with a new chat id, when its admins turn on what only
supergroups have (a public link, topics, history hidden from newcomers, more members).
Telegram tells the bot twice, a ``migrate_to_chat_id`` message in the old chat and a
``migrate_from_chat_id`` one as the new chat's first, and answers any later call to the
old id with a 400 that names the new one. The conversation keeps the old id's source: its
history, open cards, scheduled jobs and memory hang on it. A message from the new chat is
read as the old one's (``original``), every new message to the old id goes to the new
one, and each message is edited where it is (``FollowingMoves``). Before, the group's next message began a new conversation, and
every reply, card edit and scheduled briefing to it failed for good.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from bot.telegram.sending.api import ALLOWED_UPDATES, BotApi, ChatMoved, Json
from bot.telegram.tables import telegram_chat_moves
from engine.store import Database, insert_for, quick_unit, utcnow

__all__ = [
    "MOVED",
    "ChatMoves",
    "FollowingMoves",
    "is_basic_group",
    "is_supergroup",
    "moved_message",
]

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Supergroup (and channel) ids are ``-100`` and the channel's id: -10¹² and below.
_SUPERGROUP_ABOVE = -1_000_000_000_000
#: How long a chat found not moved is taken so before the table is read again.
NOT_MOVED_KEPT_S = 60.0
#: Added to the id of a message in a former group's supergroup (``FollowingMoves``);
#: Telegram's message ids stay below 2³¹.
MOVED = 1 << 40


def moved_message(message_id: int) -> int:
    """How chathub knows message ``message_id`` of a former group's supergroup."""
    return message_id + MOVED


def _replied_in(moved: bool, message_id: int | None) -> int | None:
    """The message a new one replies to, in the chat it goes to: none when that is the
    supergroup and the message was the group's."""
    if not moved or message_id is None:
        return message_id
    return message_id - MOVED if message_id >= MOVED else None


def _known_as_moved(answer: T) -> T:
    if isinstance(answer, dict) and isinstance(answer.get("message_id"), int):
        return {**answer, "message_id": moved_message(answer["message_id"])}  # type: ignore[return-value]
    return answer


def is_basic_group(chat_id: int) -> bool:
    """A group that may still become a supergroup."""
    return _SUPERGROUP_ABOVE < chat_id < 0


def is_supergroup(chat_id: int) -> bool:
    """A chat that may be a former group's new id (a channel's too)."""
    return chat_id <= _SUPERGROUP_ABOVE


class ChatMoves:
    """The groups that became supergroups, recorded for good and kept in memory once read.

    A move once read is kept for good; that a chat has not moved is read again after
    ``NOT_MOVED_KEPT_S``: in a fleet another process may record it (from Telegram's 400,
    when the service messages never came), and until 2026-12-07 this one went on taking
    the supergroup's messages for a conversation of their own (found by review)."""

    def __init__(self, db: Database, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._db = db
        self._clock = clock
        self._new: dict[int, int] = {}  # a group's supergroup
        self._old: dict[int, int] = {}  # a supergroup's former group
        self._unmoved: dict[int, float] = {}  # a chat found not moved: until when it is kept

    async def record(self, old: int, new: int) -> bool:
        """That group ``old`` is supergroup ``new`` now; False for ids that cannot be so."""
        if not (is_basic_group(old) and is_supergroup(new)):
            log.warning("ignored a move of chat %s to %s: not a group's to a supergroup", old, new)
            return False
        if self._new.get(old) != new:
            await self._db.run(_record, old, new)
            log.info("group %s is supergroup %s now", old, new)
        self._new[old], self._old[new] = new, old
        self._unmoved.pop(old, None)
        self._unmoved.pop(new, None)
        return True

    async def current(self, chat_id: int) -> int:
        """Where a call to ``chat_id`` goes."""
        if not is_basic_group(chat_id):
            return chat_id
        return await self._looked_up(chat_id, self._new, _new_of)

    async def original(self, chat_id: int) -> int:
        """The chat whose conversation a message from ``chat_id`` continues."""
        if not is_supergroup(chat_id):
            return chat_id
        return await self._looked_up(chat_id, self._old, _old_of)

    async def _looked_up(
        self, chat_id: int, known: dict[int, int], read: Callable[[Connection, int], int | None]
    ) -> int:
        if chat_id in known:
            return known[chat_id]
        now = self._clock()
        if self._unmoved.get(chat_id, 0.0) > now:
            return chat_id
        found = await self._db.run(read, chat_id)
        if found is None:
            self._unmoved[chat_id] = now + NOT_MOVED_KEPT_S
            return chat_id
        known[chat_id] = found
        return found


@quick_unit
def _record(conn: Connection, old: int, new: int) -> None:
    insert = insert_for(conn.dialect.name, telegram_chat_moves)
    conn.execute(
        insert.values(old_chat_id=old, new_chat_id=new, moved_at=utcnow()).on_conflict_do_nothing()
    )


@quick_unit
def _new_of(conn: Connection, old: int) -> int | None:
    column = telegram_chat_moves.c
    return conn.execute(sa.select(column.new_chat_id).where(column.old_chat_id == old)).scalar()


@quick_unit
def _old_of(conn: Connection, new: int) -> int | None:
    column = telegram_chat_moves.c
    return conn.execute(sa.select(column.old_chat_id).where(column.new_chat_id == new)).scalar()


class FollowingMoves:
    """A ``BotApi`` whose new messages to a group that became a supergroup go to the
    supergroup, and whose edits reach each message where it is.

    A message in the supergroup is known by its id plus ``MOVED``: message ids count per
    chat, so the group's message 2 and the supergroup's are different messages, and an
    edit meant for the one must never change the other. A message of the group itself
    can no longer be changed (Telegram refuses it, naming the supergroup: the error is
    raised as it came). A new message Telegram refuses because the group moved is
    recorded and sent once more, to the chat Telegram names."""

    def __init__(self, api: BotApi, moves: ChatMoves) -> None:
        self._api = api
        self._moves = moves

    async def _new(
        self, chat_id: int, reply_to: int | None, call: Callable[[int, int | None], Awaitable[T]]
    ) -> T:
        target = await self._moves.current(chat_id)
        try:
            answer = await call(target, _replied_in(target != chat_id, reply_to))
        except ChatMoved as moved:
            if not await self._moves.record(target, moved.new_chat_id):
                raise
            target = moved.new_chat_id
            answer = await call(target, _replied_in(True, reply_to))
        return _known_as_moved(answer) if target != chat_id else answer

    async def _existing(
        self, chat_id: int, message_id: int, call: Callable[[int, int], Awaitable[T]]
    ) -> T:
        if message_id < MOVED:  # the group's own: never another chat's message
            return await call(chat_id, message_id)
        message_id -= MOVED
        target = await self._moves.current(chat_id)
        try:
            return await call(target, message_id)
        except ChatMoved as moved:  # the move another process of a fleet learnt
            if not await self._moves.record(target, moved.new_chat_id):
                raise
            return await call(moved.new_chat_id, message_id)

    async def send_message(
        self,
        chat_id: int,
        text: str,
        *,
        entities: Sequence[Json] | None = None,
        reply_markup: Json | None = None,
        message_thread_id: int | None = None,
        reply_to_message_id: int | None = None,
    ) -> Json:
        return await self._new(
            chat_id,
            reply_to_message_id,
            lambda chat, reply_to: self._api.send_message(
                chat,
                text,
                entities=entities,
                reply_markup=reply_markup,
                message_thread_id=message_thread_id,
                reply_to_message_id=reply_to,
            ),
        )

    async def edit_message_text(
        self,
        chat_id: int,
        message_id: int,
        text: str,
        *,
        entities: Sequence[Json] | None = None,
        reply_markup: Json | None = None,
    ) -> None:
        await self._existing(
            chat_id,
            message_id,
            lambda chat, message: self._api.edit_message_text(
                chat, message, text, entities=entities, reply_markup=reply_markup
            ),
        )

    async def delete_message(self, chat_id: int, message_id: int) -> None:
        await self._existing(chat_id, message_id, self._api.delete_message)

    async def send_chat_action(
        self, chat_id: int, action: str = "typing", *, message_thread_id: int | None = None
    ) -> None:
        await self._new(
            chat_id,
            None,
            lambda chat, _: self._api.send_chat_action(
                chat, action, message_thread_id=message_thread_id
            ),
        )

    async def send_document(
        self,
        chat_id: int,
        filename: str,
        data: bytes,
        *,
        caption: str | None = None,
        message_thread_id: int | None = None,
        reply_markup: Json | None = None,
    ) -> Json:
        return await self._new(
            chat_id,
            None,
            lambda chat, _: self._api.send_document(
                chat,
                filename,
                data,
                caption=caption,
                message_thread_id=message_thread_id,
                reply_markup=reply_markup,
            ),
        )

    async def send_voice(
        self,
        chat_id: int,
        data: bytes,
        *,
        caption: str | None = None,
        message_thread_id: int | None = None,
    ) -> Json:
        return await self._new(
            chat_id,
            None,
            lambda chat, _: self._api.send_voice(
                chat, data, caption=caption, message_thread_id=message_thread_id
            ),
        )

    async def send_message_draft(
        self,
        chat_id: int,
        draft_id: int,
        text: str,
        *,
        entities: Sequence[Json] | None = None,
        message_thread_id: int | None = None,
    ) -> None:
        await self._new(
            chat_id,
            None,
            lambda chat, _: self._api.send_message_draft(
                chat, draft_id, text, entities=entities, message_thread_id=message_thread_id
            ),
        )

    # -- calls that name no chat -------------------------------------------------------------

    async def get_me(self) -> Json:
        return await self._api.get_me()

    async def get_updates(
        self,
        offset: int | None,
        *,
        timeout: int,  # noqa: ASYNC109 — Telegram's long-poll seconds
        allowed_updates: Sequence[str] = ALLOWED_UPDATES,
        limit: int = 100,
    ) -> list[Json]:
        return await self._api.get_updates(
            offset, timeout=timeout, allowed_updates=allowed_updates, limit=limit
        )

    async def answer_callback_query(
        self, callback_query_id: str, *, text: str | None = None, show_alert: bool = False
    ) -> None:
        await self._api.answer_callback_query(callback_query_id, text=text, show_alert=show_alert)

    async def set_my_commands(self, commands: Sequence[tuple[str, str]]) -> None:
        await self._api.set_my_commands(commands)

    async def set_webhook(
        self, url: str, *, secret_token: str, allowed_updates: Sequence[str] = ALLOWED_UPDATES
    ) -> None:
        await self._api.set_webhook(url, secret_token=secret_token, allowed_updates=allowed_updates)

    async def delete_webhook(self) -> None:
        await self._api.delete_webhook()

    async def get_file(self, file_id: str) -> Json:
        return await self._api.get_file(file_id)

    async def download_file(self, file_path: str, destination: Path) -> None:
        await self._api.download_file(file_path, destination)

    async def close(self) -> None:
        await self._api.close()
