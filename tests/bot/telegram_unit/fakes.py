"""In-memory stand-ins for the Telegram core's seams: a scripted ``BotApi`` and virtual time.

Nothing here waits on the wall clock. ``FakeTime`` is a monotonic clock plus a ``sleep`` that
records each requested delay; in ``auto`` mode a sleep advances the clock at once, otherwise it
blocks until the test calls ``advance`` past its deadline (for interleaving concurrent tasks).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bot.telegram.sending.api import ALLOWED_UPDATES, Json
from bot.telegram.store import TelegramStore
from tests.clock import FakeTime


@dataclass
class Call:
    method: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    at: float


@dataclass
class FakeBotApi:
    """Records every call (with the fake time it happened at) and raises scripted errors.

    ``fail(method, *errors)`` queues errors that method raises, one per call, before it
    succeeds again. ``get_updates`` serves ``updates_script`` (each item a batch or an
    exception to raise); once the script is exhausted it sets ``drained`` and blocks forever,
    so a test can cancel the poller's task at that point.
    """

    clock: FakeTime = field(default_factory=FakeTime)
    calls: list[Call] = field(default_factory=list)
    log: list[tuple[Any, ...]] = field(default_factory=list)
    errors: dict[str, list[BaseException]] = field(default_factory=dict)
    updates_script: list[list[Json] | BaseException] = field(default_factory=list)
    drained: asyncio.Event = field(default_factory=asyncio.Event)
    _next_message_id: int = 100

    def fail(self, method: str, *errors: BaseException) -> None:
        self.errors.setdefault(method, []).extend(errors)

    def calls_to(self, method: str) -> list[Call]:
        return [c for c in self.calls if c.method == method]

    def _record(self, method: str, *args: Any, **kwargs: Any) -> None:
        self.calls.append(Call(method, args, kwargs, self.clock()))
        queued = self.errors.get(method)
        if queued:
            raise queued.pop(0)

    async def get_me(self) -> Json:
        self._record("get_me")
        return {"id": 1, "is_bot": True, "username": "chathub_test_bot"}

    async def get_updates(
        self,
        offset: int | None,
        *,
        timeout: int,  # noqa: ASYNC109 — mirrors the Protocol
        allowed_updates: Sequence[str] = ALLOWED_UPDATES,
        limit: int = 100,
    ) -> list[Json]:
        self.log.append(("get_updates", offset))
        self.calls.append(
            Call(
                "get_updates",
                (offset,),
                {"timeout": timeout, "allowed_updates": allowed_updates, "limit": limit},
                self.clock(),
            )
        )
        if not self.updates_script:
            self.drained.set()
            await asyncio.Event().wait()  # until the poller's task is cancelled
        item = self.updates_script.pop(0)
        if isinstance(item, BaseException):
            raise item
        return item

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
        self._record(
            "send_message",
            chat_id,
            text,
            entities=entities,
            reply_markup=reply_markup,
            message_thread_id=message_thread_id,
            reply_to_message_id=reply_to_message_id,
        )
        self._next_message_id += 1
        return {"message_id": self._next_message_id, "chat": {"id": chat_id}, "text": text}

    async def edit_message_text(
        self,
        chat_id: int,
        message_id: int,
        text: str,
        *,
        entities: Sequence[Json] | None = None,
        reply_markup: Json | None = None,
    ) -> None:
        self._record(
            "edit_message_text",
            chat_id,
            message_id,
            text,
            entities=entities,
            reply_markup=reply_markup,
        )

    async def delete_message(self, chat_id: int, message_id: int) -> None:
        self._record("delete_message", chat_id, message_id)

    async def answer_callback_query(
        self, callback_query_id: str, *, text: str | None = None, show_alert: bool = False
    ) -> None:
        self._record("answer_callback_query", callback_query_id, text=text, show_alert=show_alert)

    async def send_chat_action(
        self, chat_id: int, action: str = "typing", *, message_thread_id: int | None = None
    ) -> None:
        self._record("send_chat_action", chat_id, action, message_thread_id=message_thread_id)

    async def set_my_commands(self, commands: Sequence[tuple[str, str]]) -> None:
        self._record("set_my_commands", list(commands))

    async def set_webhook(
        self, url: str, *, secret_token: str, allowed_updates: Sequence[str] = ALLOWED_UPDATES
    ) -> None:
        self._record("set_webhook", url, secret_token=secret_token)

    async def delete_webhook(self) -> None:
        self.log.append(("delete_webhook",))
        self._record("delete_webhook")

    async def get_file(self, file_id: str) -> Json:
        self._record("get_file", file_id)
        return {"file_id": file_id, "file_unique_id": file_id, "file_path": f"docs/{file_id}"}

    async def download_file(self, file_path: str, destination: Path) -> None:
        self._record("download_file", file_path, destination)

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
        self._record("send_document", chat_id, filename, data, caption=caption)
        self._next_message_id += 1
        return {"message_id": self._next_message_id, "chat": {"id": chat_id}}

    async def send_message_draft(
        self,
        chat_id: int,
        draft_id: int,
        text: str,
        *,
        entities: Sequence[Json] | None = None,
        message_thread_id: int | None = None,
    ) -> None:
        self._record("send_message_draft", chat_id, draft_id, text, entities=entities)

    async def close(self) -> None:
        self._record("close")


class RecordingStore:
    """A ``TelegramStore`` that also writes its update bookkeeping into the fake's call log,
    so a test can assert the order of ``record_updates`` and ``get_updates``."""

    def __init__(self, inner: TelegramStore, log: list[tuple[Any, ...]]) -> None:
        self.inner = inner
        self.log = log

    async def record_updates(self, updates: Sequence[Json]) -> list[Json]:
        fresh = await self.inner.record_updates(updates)
        self.log.append(("record_updates", [u.get("update_id") for u in updates]))
        return fresh

    async def accept_polled(self, updates: Sequence[Json]) -> Callable[[], Awaitable[None]]:
        durable = await self.inner.accept_polled(updates)
        ids = [u.get("update_id") for u in updates]

        async def logged() -> None:
            await durable()
            self.log.append(("stored", ids))

        return logged

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class RecordingSink:
    def __init__(self, log: list[tuple[Any, ...]] | None = None) -> None:
        self.submitted: list[Json] = []
        self.log = log

    def submit(self, update: Json) -> None:
        self.submitted.append(update)
        if self.log is not None:
            self.log.append(("submit", update.get("update_id")))

    @property
    def ids(self) -> list[Any]:
        return [u.get("update_id") for u in self.submitted]
