"""``BotApi`` over python-telegram-bot 22 (``telegram.Bot``, no ``Application``).

Errors are classified from the HTTP answer itself: a request subclass turns every
non-2xx answer into ``_HttpError`` carrying the core's error for its status and body
(``bindings/answers.py``) before ptb's own mapping runs (ptb reports 5xx as a plain
``NetworkError``, indistinguishable from a lost connection, and rewrites descriptions:
"Bad Request: message is not modified" becomes "Message is not modified"). An answer that
is not JSON is a ``ServerError`` (ptb: a bare ``TelegramError``), as in aiogram. What
ptb raises itself (timeouts, connection errors) becomes ``NetworkError``.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dtm
import json
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from bot.telegram.bindings.answers import error_from_answer
from bot.telegram.bindings.ptb_library import HTTPXRequest, telegram, tg_error
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
from bot.telegram.sending.errors import retry_after
from engine.tls import shared_tls_context

__all__ = ["PtbBotApi"]

_LONG_POLL_MARGIN = 10.0
#: Methods called for their raw JSON through ``Bot.do_api_request`` (ptb's public door for
#: any method). The Bot API's method names are case-insensitive; in lower case they are
#: not the name of a ptb method, which ``do_api_request`` would otherwise warn us to use
#: (and that one parses the answer into objects: the cost and the fragility avoided here).
_RAW = {name: name.lower() for name in ("getUpdates", "sendMessage")}
"""Seconds of read timeout on top of the getUpdates ``timeout`` (ptb adds the two)."""


class _HttpError(tg_error.TelegramError):
    """A failed Bot API answer, raised from the request so ptb re-raises it untouched."""

    def __init__(self, error: TelegramError) -> None:
        super().__init__(error.description)
        self.error = error


class _ClassifyingRequest(HTTPXRequest):
    """``HTTPXRequest`` that raises ``_HttpError`` for any non-2xx or non-JSON answer."""

    async def do_request(self, *args: Any, **kwargs: Any) -> tuple[int, bytes]:
        code, payload = await super().do_request(*args, **kwargs)
        if 200 <= code <= 299:
            return code, payload
        raise _HttpError(error_from_answer(code, payload))

    @staticmethod
    def parse_json_payload(payload: bytes) -> Any:
        # ptb's own logs a traceback and raises a bare TelegramError; an answer that is not
        # JSON (a proxy's HTML page) is a server-side failure like a 502, retried as one.
        try:
            return json.loads(payload.decode("utf-8", "replace"))
        except ValueError:
            described = f"undecodable Bot API answer: {payload[:80]!r}"
            raise _HttpError(ServerError(described)) from None


@contextlib.contextmanager
def _translated() -> Iterator[None]:
    try:
        yield
    except _HttpError as exc:
        raise exc.error from exc
    except tg_error.RetryAfter as exc:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # ptb 22 deprecates the int form of retry_after
            value = exc.retry_after
        seconds = value.total_seconds() if isinstance(value, dtm.timedelta) else value
        raise retry_after(seconds, exc.message) from exc
    except tg_error.BadRequest as exc:  # a NetworkError subclass in ptb: test it first
        raise bad_request(exc.message) from exc
    except tg_error.Forbidden as exc:
        raise Forbidden(exc.message) from exc
    except tg_error.NetworkError as exc:  # TimedOut included
        raise NetworkError(exc.message) from exc
    except tg_error.TelegramError as exc:
        raise TelegramError(exc.message) from exc


# Service-message flags ptb fills in (as False) on every Message it parses.
_SERVICE_FLAGS = (
    "delete_chat_photo",
    "group_chat_created",
    "supergroup_chat_created",
    "channel_chat_created",
)


def _plain(obj: telegram.TelegramObject) -> Json:
    """Bot API JSON for a ptb object: plain str/int (no enums), no invented False flags."""
    data = json.loads(obj.to_json())
    _strip_flags(data)
    return data


def _strip_flags(value: Any) -> None:
    if isinstance(value, dict):
        if "message_id" in value and "chat" in value:
            for flag in _SERVICE_FLAGS:
                if value.get(flag) is False:
                    del value[flag]
        for item in value.values():
            _strip_flags(item)
    elif isinstance(value, list):
        for item in value:
            _strip_flags(item)


def _entities(entities: Sequence[Json] | None) -> list[telegram.MessageEntity] | None:
    if not entities:
        return None
    return [telegram.MessageEntity.de_json(dict(entity), None) for entity in entities]


def _markup(markup: Json | None) -> telegram.TelegramObject | None:
    if markup is None:
        return None
    kinds: tuple[tuple[str, type[telegram.TelegramObject]], ...] = (
        ("inline_keyboard", telegram.InlineKeyboardMarkup),
        ("force_reply", telegram.ForceReply),
        ("keyboard", telegram.ReplyKeyboardMarkup),
        ("remove_keyboard", telegram.ReplyKeyboardRemove),
    )
    for key, cls in kinds:
        if key in markup:
            return cls.de_json(dict(markup), None)
    raise ValueError(f"unknown reply_markup: {sorted(markup)}")


def _reply(message_id: int | None) -> telegram.ReplyParameters | None:
    # The replied message may be gone (a question in a group replies to its asker's):
    # sent all the same, as no reply, rather than refused.
    if message_id is None:
        return None
    return telegram.ReplyParameters(message_id=message_id, allow_sending_without_reply=True)


def _write(destination: Path, data: bytes) -> None:
    destination.parent.mkdir(parents=True, exist_ok=True)
    destination.write_bytes(data)


class PtbBotApi:
    """``BotApi`` over ``telegram.Bot``; ``api_root`` is e.g. ``https://api.telegram.org``."""

    def __init__(self, token: str, api_root: str = "https://api.telegram.org") -> None:
        root = api_root.rstrip("/")
        self._token = token
        self._file_prefix = f"{root}/file/bot{token}/"
        tls = {"verify": shared_tls_context()}  # one CA bundle load for both clients
        self._requests = (
            _ClassifyingRequest(
                connection_pool_size=2, read_timeout=_LONG_POLL_MARGIN, httpx_kwargs=tls
            ),
            _ClassifyingRequest(
                connection_pool_size=64, read_timeout=30.0, pool_timeout=10.0, httpx_kwargs=tls
            ),
        )
        self._bot = telegram.Bot(
            token,
            base_url=f"{root}/bot",
            base_file_url=f"{root}/file/bot",
            get_updates_request=self._requests[0],
            request=self._requests[1],
        )
        self._ready = False
        self._ready_lock = asyncio.Lock()

    @property
    def bot(self) -> telegram.Bot:
        """The underlying ``telegram.Bot`` (for what the protocol does not cover)."""
        return self._bot

    async def _start(self) -> None:
        if self._ready:
            return
        async with self._ready_lock:
            if not self._ready:
                with _translated():
                    await self._bot.initialize()  # one getMe
                self._ready = True

    async def get_me(self) -> Json:
        if not self._ready:
            await self._start()
            return _plain(self._bot.bot)
        with _translated():
            user = await self._bot.get_me()
        return _plain(user)

    async def get_updates(
        self,
        offset: int | None,
        *,
        timeout: int,  # noqa: ASYNC109 - Telegram's long-poll timeout, not ours
        allowed_updates: Sequence[str] = ALLOWED_UPDATES,
        limit: int = 100,
    ) -> list[Json]:
        await self._start()
        kwargs: Json = {
            "limit": limit,
            "timeout": timeout,
            "allowed_updates": list(allowed_updates),
        }
        if offset is not None:
            kwargs["offset"] = offset
        with _translated():
            # Raw JSON, not ``Bot.get_updates``: ptb parses the whole batch into objects, and
            # one update it cannot parse would fail every poll (the offset never moves past
            # it). Our own parser ignores what it does not understand. (``_RAW``: why the
            # method's name is in lower case.)
            updates = await self._bot.do_api_request(
                _RAW["getUpdates"], api_kwargs=kwargs, read_timeout=timeout + _LONG_POLL_MARGIN
            )
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
        await self._start()
        params: Json = {"chat_id": chat_id, "text": text}
        optional = {
            "entities": _entities(entities),
            "reply_markup": _markup(reply_markup),
            "message_thread_id": message_thread_id,
            "reply_parameters": _reply(reply_to_message_id),
        }
        params.update((key, value) for key, value in optional.items() if value is not None)
        with _translated():
            # Raw JSON back: parsing the reply into a ``Message`` only to dump it again cost
            # a tenth of a reply's CPU (bench/telegram_e2e.py).
            message = await self._bot.do_api_request(_RAW["sendMessage"], api_kwargs=params)
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
        if markup is not None and not isinstance(markup, telegram.InlineKeyboardMarkup):
            raise BadRequest("Bad Request: only an inline keyboard can be set by an edit")
        await self._start()
        with _translated():
            await self._bot.edit_message_text(
                text,
                chat_id=chat_id,
                message_id=message_id,
                entities=_entities(entities),
                reply_markup=markup,
            )

    async def delete_message(self, chat_id: int, message_id: int) -> None:
        await self._start()
        with _translated():
            await self._bot.delete_message(chat_id, message_id)

    async def answer_callback_query(
        self, callback_query_id: str, *, text: str | None = None, show_alert: bool = False
    ) -> None:
        await self._start()
        with _translated():
            await self._bot.answer_callback_query(
                callback_query_id, text=text, show_alert=show_alert or None
            )

    async def send_chat_action(
        self, chat_id: int, action: str = "typing", *, message_thread_id: int | None = None
    ) -> None:
        await self._start()
        with _translated():
            await self._bot.send_chat_action(chat_id, action, message_thread_id=message_thread_id)

    async def set_my_commands(self, commands: Sequence[tuple[str, str]]) -> None:
        await self._start()
        with _translated():
            await self._bot.set_my_commands(
                [telegram.BotCommand(command, description) for command, description in commands]
            )

    async def set_webhook(
        self, url: str, *, secret_token: str, allowed_updates: Sequence[str] = ALLOWED_UPDATES
    ) -> None:
        await self._start()
        with _translated():
            await self._bot.set_webhook(
                url, secret_token=secret_token, allowed_updates=list(allowed_updates)
            )

    async def delete_webhook(self) -> None:
        await self._start()
        with _translated():
            await self._bot.delete_webhook()

    async def get_file(self, file_id: str) -> Json:
        await self._start()
        with _translated():
            file = await self._bot.get_file(file_id)
        data = _plain(file)
        # ptb turns file_path into a download URL; the protocol wants Telegram's path.
        path = data.get("file_path")
        if isinstance(path, str) and path.startswith(self._file_prefix):
            data["file_path"] = path.removeprefix(self._file_prefix)
        return data

    async def download_file(self, file_path: str, destination: Path) -> None:
        await self._start()
        with _translated():
            data = await self._bot.request.retrieve(self._file_prefix + file_path.lstrip("/"))
        await asyncio.to_thread(_write, Path(destination), data)

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
        await self._start()
        with _translated():
            message = await self._bot.send_document(
                chat_id,
                telegram.InputFile(data, filename=filename),
                caption=caption,
                message_thread_id=message_thread_id,
                reply_markup=_markup(reply_markup),  # type: ignore[arg-type]
            )
        return _plain(message)

    async def send_voice(
        self,
        chat_id: int,
        data: bytes,
        *,
        caption: str | None = None,
        message_thread_id: int | None = None,
    ) -> Json:
        await self._start()
        with _translated():
            message = await self._bot.send_voice(
                chat_id,
                telegram.InputFile(data, filename="reply.ogg"),
                caption=caption,
                message_thread_id=message_thread_id,
            )
        return _plain(message)

    async def send_message_draft(
        self,
        chat_id: int,
        draft_id: int,
        text: str,
        *,
        entities: Sequence[Json] | None = None,
        message_thread_id: int | None = None,
    ) -> None:
        await self._start()
        with _translated():
            await self._bot.send_message_draft(
                chat_id,
                draft_id,
                text,
                message_thread_id=message_thread_id,
                entities=_entities(entities),
            )

    async def close(self) -> None:
        """Close the HTTP clients; safe to call twice and without a first call."""
        self._ready = False
        with contextlib.suppress(Exception):
            await self._bot.shutdown()
        for request in self._requests:
            await request.shutdown()
