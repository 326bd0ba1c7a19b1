"""``BotApi`` over aiogram 3 (``aiogram.Bot`` with an ``AiohttpSession``, no dispatcher).

A failed answer (any non-2xx status) is classified by ``bindings/answers.py``, as in the
python-telegram-bot binding, before aiogram sees it: aiogram ignores a 429 whose
``retry_after`` is 0 (a falsy value) and cannot parse one that is not an integer. What
aiogram raises itself (a lost connection, a timeout, an answer that is not JSON) maps one
to one. Objects come
back as pydantic models and leave as Bot API dicts through
``model_dump(mode="json", by_alias=True, exclude_none=True)`` ("from", not "from_user").
"""

from __future__ import annotations

import asyncio
import contextlib
import io
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import aiohttp
from aiogram import Bot
from aiogram import exceptions as ag_error
from aiogram import methods as am
from aiogram.client.session.aiohttp import AiohttpSession
from aiogram.client.telegram import TelegramAPIServer
from aiogram.methods.base import Response, TelegramMethod
from aiogram.types import (
    BotCommand,
    BufferedInputFile,
    ForceReply,
    InlineKeyboardMarkup,
    MessageEntity,
    ReplyKeyboardMarkup,
    ReplyKeyboardRemove,
    ReplyParameters,
)

from bot.telegram.bindings.answers import error_from_answer
from bot.telegram.sending.api import (
    ALLOWED_UPDATES,
    BadRequest,
    Forbidden,
    Json,
    NetworkError,
    ServerError,
    TelegramError,
    bad_request,
)
from bot.telegram.sending.errors import NotFound, Unauthorized, retry_after

__all__ = ["AiogramBotApi"]

_LONG_POLL_MARGIN = 10
"""Seconds of request timeout on top of the getUpdates ``timeout``."""
_REQUEST_TIMEOUT = 30
_DOWNLOAD_TIMEOUT = 60


@contextlib.contextmanager
def _translated() -> Iterator[None]:
    try:
        yield
    except ag_error.TelegramRetryAfter as exc:
        raise retry_after(exc.retry_after, exc.message) from exc
    except ag_error.TelegramUnauthorizedError as exc:
        raise Unauthorized(exc.message) from exc
    except ag_error.TelegramNotFound as exc:
        raise NotFound(exc.message) from exc
    except ag_error.TelegramBadRequest as exc:
        raise bad_request(exc.message) from exc
    except ag_error.TelegramForbiddenError as exc:
        raise Forbidden(exc.message) from exc
    except ag_error.TelegramServerError as exc:
        raise ServerError(exc.message) from exc
    except ag_error.TelegramEntityTooLarge as exc:  # 413; a NetworkError subclass in aiogram
        raise BadRequest(exc.message) from exc
    except ag_error.TelegramNetworkError as exc:
        raise NetworkError(exc.message) from exc
    except ag_error.TelegramAPIError as exc:
        raise TelegramError(exc.message) from exc
    except ag_error.ClientDecodeError as exc:
        raise ServerError(f"undecodable Bot API answer: {exc.message}") from exc
    except aiohttp.ClientResponseError as exc:  # file downloads (raise_for_status)
        description = f"HTTP {exc.status}: {exc.message}"
        if exc.status >= 500:
            raise ServerError(description) from exc
        raise TelegramError(description) from exc
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise NetworkError(f"{type(exc).__name__}: {exc}") from exc


def _dump(obj: Any) -> Json:
    return obj.model_dump(mode="json", by_alias=True, exclude_none=True)


def _entities(entities: Sequence[Json] | None) -> list[MessageEntity] | None:
    if not entities:
        return None
    return [MessageEntity.model_validate(dict(entity)) for entity in entities]


def _markup(
    markup: Json | None,
) -> InlineKeyboardMarkup | ForceReply | ReplyKeyboardMarkup | ReplyKeyboardRemove | None:
    if markup is None:
        return None
    if "inline_keyboard" in markup:
        return InlineKeyboardMarkup.model_validate(dict(markup))
    if "force_reply" in markup:
        return ForceReply.model_validate(dict(markup))
    if "keyboard" in markup:
        return ReplyKeyboardMarkup.model_validate(dict(markup))
    if "remove_keyboard" in markup:
        return ReplyKeyboardRemove.model_validate(dict(markup))
    raise ValueError(f"unknown reply_markup: {sorted(markup)}")


def _reply(message_id: int | None) -> ReplyParameters | None:
    # The replied message may be gone (a question in a group replies to its asker's):
    # sent all the same, as no reply, rather than refused.
    if message_id is None:
        return None
    return ReplyParameters(message_id=message_id, allow_sending_without_reply=True)


def _write(destination: Path, data: bytes) -> None:
    destination.parent.mkdir(parents=True, exist_ok=True)
    destination.write_bytes(data)


class _RawGetUpdates(TelegramMethod[list[dict[str, Any]]]):
    """``getUpdates`` answering plain JSON dicts (see ``AiogramBotApi.get_updates``)."""

    __returning__ = list[dict[str, Any]]
    __api_method__ = "getUpdates"

    offset: int | None = None
    limit: int | None = None
    timeout: int | None = None
    allowed_updates: list[str] | None = None


class _RawSendMessage(am.SendMessage):
    """``sendMessage`` answering Telegram's JSON: the seam wants a dict, and parsing the
    reply into a ``Message`` only to dump it again cost a tenth of a reply's CPU."""

    __returning__ = dict[str, Any]  # type: ignore[assignment]


class _Session(AiohttpSession):
    """``AiohttpSession`` classifying failed answers itself (see the module docstring), and
    whose ``close`` skips the 250 ms TLS drain wait on plain HTTP."""

    def check_response(
        self, bot: Bot, method: TelegramMethod[Any], status_code: int, content: str
    ) -> Response[Any]:
        if not 200 <= status_code <= 299:
            raise error_from_answer(status_code, content)  # the core's error: passes through
        return super().check_response(bot, method, status_code, content)

    async def close(self) -> None:
        if self.api.base.startswith("https://"):
            await super().close()
        elif self._session is not None and not self._session.closed:
            await self._session.close()


def _pinned_response_types() -> tuple[type, ...]:
    """The ``Response[T]`` classes of the methods this binding calls, held strongly.

    aiogram parametrizes ``Response[method.__returning__]`` on every call, and pydantic keeps
    parametrized classes in a weak cache: after a garbage collection the next call builds
    the class again (about 5 ms, measured in bench/telegram_e2e.py's profile). Holding
    them keeps every call on the cached path.
    """
    methods = (
        am.GetMe,
        am.SendMessage,
        am.EditMessageText,
        am.DeleteMessage,
        am.AnswerCallbackQuery,
        am.SendChatAction,
        am.SetMyCommands,
        am.SetWebhook,
        am.DeleteWebhook,
        am.GetFile,
        am.SendDocument,
        am.SendMessageDraft,
        _RawGetUpdates,
        _RawSendMessage,
    )
    return tuple(Response[method.__returning__] for method in methods)  # type: ignore[name-defined,misc]


class AiogramBotApi:
    """``BotApi`` over ``aiogram.Bot``; ``api_root`` is e.g. ``https://api.telegram.org``."""

    def __init__(self, token: str, api_root: str = "https://api.telegram.org") -> None:
        session = _Session(api=TelegramAPIServer.from_base(api_root.rstrip("/")))
        self._bot = Bot(token, session=session)
        self._response_types = _pinned_response_types()

    @property
    def bot(self) -> Bot:
        """The underlying ``aiogram.Bot`` (for what the protocol does not cover)."""
        return self._bot

    async def get_me(self) -> Json:
        with _translated():
            user = await self._bot.get_me(request_timeout=_REQUEST_TIMEOUT)
        return _dump(user)

    async def get_updates(
        self,
        offset: int | None,
        *,
        timeout: int,  # noqa: ASYNC109 - Telegram's long-poll timeout, not ours
        allowed_updates: Sequence[str] = ALLOWED_UPDATES,
        limit: int = 100,
    ) -> list[Json]:
        # Raw JSON, not ``Bot.get_updates``: aiogram validates the whole batch, and one
        # update it cannot parse would fail every poll (the offset never moves past it).
        method = _RawGetUpdates(
            offset=offset, limit=limit, timeout=timeout, allowed_updates=list(allowed_updates)
        )
        with _translated():
            updates = await self._bot(method, request_timeout=timeout + _LONG_POLL_MARGIN)
        return [u for u in updates if isinstance(u, dict)]

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
        method = _RawSendMessage(
            chat_id=chat_id,
            text=text,
            entities=_entities(entities),
            reply_markup=_markup(reply_markup),
            message_thread_id=message_thread_id,
            reply_parameters=_reply(reply_to_message_id),
        )
        with _translated():
            message = await self._bot(method, request_timeout=_REQUEST_TIMEOUT)
        return message if isinstance(message, dict) else {}

    async def edit_message_text(
        self,
        chat_id: int,
        message_id: int,
        text: str,
        *,
        entities: Sequence[Json] | None = None,
        reply_markup: Json | None = None,
    ) -> None:
        markup = _markup(reply_markup)
        if markup is not None and not isinstance(markup, InlineKeyboardMarkup):
            raise BadRequest("Bad Request: only an inline keyboard can be set by an edit")
        with _translated():
            await self._bot.edit_message_text(
                text,
                chat_id=chat_id,
                message_id=message_id,
                entities=_entities(entities),
                reply_markup=markup,
                request_timeout=_REQUEST_TIMEOUT,
            )

    async def delete_message(self, chat_id: int, message_id: int) -> None:
        with _translated():
            await self._bot.delete_message(chat_id, message_id, request_timeout=_REQUEST_TIMEOUT)

    async def answer_callback_query(
        self, callback_query_id: str, *, text: str | None = None, show_alert: bool = False
    ) -> None:
        with _translated():
            await self._bot.answer_callback_query(
                callback_query_id,
                text=text,
                show_alert=show_alert or None,
                request_timeout=_REQUEST_TIMEOUT,
            )

    async def send_chat_action(
        self, chat_id: int, action: str = "typing", *, message_thread_id: int | None = None
    ) -> None:
        with _translated():
            await self._bot.send_chat_action(
                chat_id,
                action,
                message_thread_id=message_thread_id,
                request_timeout=_REQUEST_TIMEOUT,
            )

    async def set_my_commands(self, commands: Sequence[tuple[str, str]]) -> None:
        with _translated():
            await self._bot.set_my_commands(
                [BotCommand(command=command, description=text) for command, text in commands],
                request_timeout=_REQUEST_TIMEOUT,
            )

    async def set_webhook(
        self, url: str, *, secret_token: str, allowed_updates: Sequence[str] = ALLOWED_UPDATES
    ) -> None:
        with _translated():
            await self._bot.set_webhook(
                url,
                secret_token=secret_token,
                allowed_updates=list(allowed_updates),
                request_timeout=_REQUEST_TIMEOUT,
            )

    async def delete_webhook(self) -> None:
        with _translated():
            await self._bot.delete_webhook(request_timeout=_REQUEST_TIMEOUT)

    async def get_file(self, file_id: str) -> Json:
        with _translated():
            file = await self._bot.get_file(file_id, request_timeout=_REQUEST_TIMEOUT)
        return _dump(file)

    async def download_file(self, file_path: str, destination: Path) -> None:
        buffer = io.BytesIO()
        with _translated():
            await self._bot.download_file(file_path, buffer, timeout=_DOWNLOAD_TIMEOUT)
        await asyncio.to_thread(_write, Path(destination), buffer.getvalue())

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
        with _translated():
            message = await self._bot.send_document(
                chat_id,
                BufferedInputFile(data, filename=filename),
                caption=caption,
                message_thread_id=message_thread_id,
                reply_markup=_markup(reply_markup),
                request_timeout=_REQUEST_TIMEOUT,
            )
        return _dump(message)

    async def send_voice(
        self,
        chat_id: int,
        data: bytes,
        *,
        caption: str | None = None,
        message_thread_id: int | None = None,
    ) -> Json:
        with _translated():
            message = await self._bot.send_voice(
                chat_id,
                BufferedInputFile(data, filename="reply.ogg"),
                caption=caption,
                message_thread_id=message_thread_id,
                request_timeout=_REQUEST_TIMEOUT,
            )
        return _dump(message)

    async def send_message_draft(
        self,
        chat_id: int,
        draft_id: int,
        text: str,
        *,
        entities: Sequence[Json] | None = None,
        message_thread_id: int | None = None,
    ) -> None:
        with _translated():
            await self._bot.send_message_draft(
                chat_id,
                draft_id,
                text=text,
                entities=_entities(entities),
                message_thread_id=message_thread_id,
                request_timeout=_REQUEST_TIMEOUT,
            )

    async def close(self) -> None:
        """Close the HTTP session; safe to call twice."""
        await self._bot.session.close()
