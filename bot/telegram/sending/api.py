"""The Bot API surface the framework-neutral core uses, and the errors it understands.

A binding (python-telegram-bot or aiogram, ``bot/telegram/bindings/``) implements
``BotApi`` over its library's bot client. Everything crossing this seam is plain Bot API
JSON: updates, messages, entities and reply markups are ``dict``s exactly as Telegram
documents them (``from``, not ``from_user``), so the core never imports a framework.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from bot.delivery import Gone, PlatformError, Refused, RetryLater, Unavailable

__all__ = [
    "ALLOWED_UPDATES",
    "BadRequest",
    "BotApi",
    "ChatMoved",
    "ChatNotFound",
    "Forbidden",
    "Json",
    "NetworkError",
    "RetryAfter",
    "ServerError",
    "TelegramError",
    "bad_request",
    "is_not_modified",
]

Json = dict[str, Any]

#: The update kinds chathub handles; asked for explicitly so nothing else is delivered.
ALLOWED_UPDATES = ("message", "edited_message", "callback_query")


class TelegramError(PlatformError):
    """A Bot API call failed; ``description`` is Telegram's text when it sent one."""


class RetryAfter(TelegramError, RetryLater):
    """429 Too Many Requests: wait ``seconds`` before the next call to that chat."""


class BadRequest(TelegramError, Refused):
    """400: the request itself is wrong (bad entities, message not modified, ...)."""


class ChatMoved(BadRequest):
    """400: the group became a supergroup, ``new_chat_id`` (``bot/telegram/chat_moves.py``)."""

    def __init__(self, description: str, new_chat_id: int) -> None:
        super().__init__(description)
        self.new_chat_id = new_chat_id


class ChatNotFound(BadRequest, Gone):
    """400 "chat not found": the chat was deleted, or the person never started the bot."""


def bad_request(description: str) -> BadRequest:
    """A 400 as its kind (``ChatMoved`` is told apart by its parameters, not here)."""
    if "chat not found" in description.lower():
        return ChatNotFound(description)
    return BadRequest(description)


class Forbidden(TelegramError, Gone):
    """403: the bot was blocked, removed from the chat, or may not start one there."""


class ServerError(TelegramError, Unavailable):
    """5xx from the Bot API: worth retrying."""


class NetworkError(TelegramError, Unavailable):
    """The request did not get an answer (connection, timeout): worth retrying."""


def is_not_modified(error: TelegramError) -> bool:
    """Telegram's answer to an edit that changes nothing; callers treat it as success."""
    return "message is not modified" in error.description.lower()


class BotApi(Protocol):
    """What the core needs from Telegram. Implementations raise the errors above."""

    async def get_me(self) -> Json: ...

    async def get_updates(
        self,
        offset: int | None,
        *,
        timeout: int,  # noqa: ASYNC109 — Telegram's long-poll seconds, not an asyncio timeout
        allowed_updates: Sequence[str] = ALLOWED_UPDATES,
        limit: int = 100,
    ) -> list[Json]: ...

    async def send_message(
        self,
        chat_id: int,
        text: str,
        *,
        entities: Sequence[Json] | None = None,
        reply_markup: Json | None = None,
        message_thread_id: int | None = None,
        reply_to_message_id: int | None = None,
    ) -> Json: ...

    async def edit_message_text(
        self,
        chat_id: int,
        message_id: int,
        text: str,
        *,
        entities: Sequence[Json] | None = None,
        reply_markup: Json | None = None,
    ) -> None: ...

    async def delete_message(self, chat_id: int, message_id: int) -> None: ...

    async def answer_callback_query(
        self, callback_query_id: str, *, text: str | None = None, show_alert: bool = False
    ) -> None: ...

    async def send_chat_action(
        self, chat_id: int, action: str = "typing", *, message_thread_id: int | None = None
    ) -> None: ...

    async def set_my_commands(self, commands: Sequence[tuple[str, str]]) -> None: ...

    async def set_webhook(
        self, url: str, *, secret_token: str, allowed_updates: Sequence[str] = ALLOWED_UPDATES
    ) -> None: ...

    async def delete_webhook(self) -> None: ...

    async def get_file(self, file_id: str) -> Json:
        """``{file_id, file_unique_id, file_size?, file_path}``."""
        ...

    async def download_file(self, file_path: str, destination: Path) -> None: ...

    async def send_document(
        self,
        chat_id: int,
        filename: str,
        data: bytes,
        *,
        caption: str | None = None,
        message_thread_id: int | None = None,
        reply_markup: Json | None = None,
    ) -> Json: ...

    async def send_voice(
        self,
        chat_id: int,
        data: bytes,
        *,
        caption: str | None = None,
        message_thread_id: int | None = None,
    ) -> Json:
        """An OGG/Opus voice message."""
        ...

    async def send_message_draft(
        self,
        chat_id: int,
        draft_id: int,
        text: str,
        *,
        entities: Sequence[Json] | None = None,
        message_thread_id: int | None = None,
    ) -> None: ...

    async def close(self) -> None: ...
