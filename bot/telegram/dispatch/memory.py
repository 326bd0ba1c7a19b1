"""``/search``, ``/memory`` and ``/forget_me`` in Telegram: plain text, 🗑 buttons, a
confirmation button.

The words and actions are ``bot/platform/memory.py``. Everything is sent as plain text
(no entities): snippets and facts are what people wrote, never markup. Callback data
(``mm1:``, at most 64 bytes, parsed strictly) names the Telegram user whose panel it is;
a press by anyone else is answered ``NOT_YOURS`` and changes nothing, and a delete always
names the presser's own user (``FactStore.delete(user, fact)``), so no press can reach
another person's facts:

* ``mm1:d:<telegram user>:<fact id>:<page>`` deletes a fact, then shows the page again;
* ``mm1:p:<telegram user>:<page>`` turns the page;
* ``mm1:f:<telegram user>`` confirms ``/forget_me``, ``mm1:c:<telegram user>`` cancels it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Literal

from bot.platform.commands import Command, CommandContext
from bot.platform.memory import (
    FORGET_HELP,
    MEMORY_HELP,
    MEMORY_OFF,
    NOT_YOURS,
    SEARCH_HELP,
    MemoryFront,
)
from bot.platform.protocols import Answer
from bot.telegram.inbound.fields import fits_db_id
from bot.telegram.inbound.updates import Callback, parse_source
from bot.telegram.sending.api import Json, TelegramError
from bot.telegram.sending.delivery import TelegramSender
from memory.service import MemoryService

__all__ = ["BAD_BUTTON", "MEMORY_PREFIX", "MemoryPanel", "MemoryTap", "parse_memory_callback"]

log = logging.getLogger(__name__)

MEMORY_PREFIX = "mm1"
#: Facts on one page of the panel (one message: at most 4,096 characters with buttons).
PER_PAGE = 8
BUTTONS_PER_ROW = 4
BAD_BUTTON = "This button is not one of mine; send /memory again."
CANCELLED = "Nothing was deleted."

TapKind = Literal["delete", "page", "forget", "cancel"]
_KINDS: dict[str, tuple[TapKind, int]] = {  # letter -> kind, numbers after the user id
    "d": ("delete", 2),
    "p": ("page", 1),
    "f": ("forget", 0),
    "c": ("cancel", 0),
}


@dataclass(frozen=True, slots=True)
class MemoryTap:
    kind: TapKind
    #: The Telegram user whose panel or question this is.
    owner: int
    fact_id: int = 0
    page: int = 0


def parse_memory_callback(data: object) -> MemoryTap | None:
    """The tap ``data`` stands for; ``None`` for anything not made by ``MemoryPanel``."""
    if not isinstance(data, str) or len(data.encode()) > 64:
        return None
    parts = data.split(":")
    if len(parts) < 3 or parts[0] != MEMORY_PREFIX or parts[1] not in _KINDS:
        return None
    kind, count = _KINDS[parts[1]]
    if len(parts) != 3 + count:
        return None
    owner = _number(parts[2])
    numbers = [_number(part, zero=index == count - 1) for index, part in enumerate(parts[3:])]
    if owner is None or None in numbers:
        return None
    if kind == "delete":
        fact_id, page = numbers
        assert fact_id is not None and page is not None
        return MemoryTap(kind, owner, fact_id=fact_id, page=page)
    if kind == "page":
        assert numbers[0] is not None
        return MemoryTap(kind, owner, page=numbers[0])
    return MemoryTap(kind, owner)


def _number(text: str, *, zero: bool = False) -> int | None:
    """A positive id (``zero``: a page, from 0) in plain ASCII digits without a leading 0."""
    if not text.isascii() or not text.isdigit() or len(text) > 19:
        return None
    if text.startswith("0") and not (zero and text == "0"):
        return None
    value = int(text)
    return value if zero or fits_db_id(value) else None


class MemoryPanel:
    def __init__(self, memory: MemoryService | None, sender: TelegramSender) -> None:
        self.front = MemoryFront(memory)
        self._sender = sender

    def commands(self) -> list[Command]:
        return [
            Command("search", SEARCH_HELP, self._search, argument="<words>"),
            Command("memory", MEMORY_HELP, self._memory, argument="[off|on]"),
            Command("forget_me", FORGET_HELP, self._forget_me),
        ]

    # -- commands --------------------------------------------------------------------------

    async def _search(self, c: CommandContext) -> None:
        await self._send(c.source, await self.front.search(c.source, c.argument))

    async def _memory(self, c: CommandContext) -> None:
        argument = c.argument.strip().lower()
        if argument in ("off", "on"):
            text = await self.front.switch(c.source, argument, is_owner=c.is_owner)
            await self._send(c.source, text)
            return
        if argument:
            await self._send(c.source, "Usage: /memory, /memory off or /memory on.")
            return
        if c.user_id is None:
            await self._send(c.source, (await self.front.listing(c.source, None)).text)
            return
        text, keyboard = await self.render(c.source, int(c.user_id))
        await self._send(c.source, text, keyboard)

    async def _forget_me(self, c: CommandContext) -> None:
        user = await self.front.person(c.source, c.user_id)
        if c.argument.strip().lower() == "yes":
            await self._send(c.source, await self.front.forget(user, c.source))
            return
        text = await self.front.forget_prompt(user, "Are you sure?", c.source)
        keyboard = None
        if user is not None and c.user_id is not None:
            owner = int(c.user_id)
            keyboard = {
                "inline_keyboard": [
                    [
                        {"text": "🗑 Yes, forget me", "callback_data": _data("f", owner)},
                        {"text": "Cancel", "callback_data": _data("c", owner)},
                    ]
                ]
            }
        await self._send(c.source, text, keyboard)

    # -- the panel -------------------------------------------------------------------------

    async def render(
        self, source: str, telegram_user: int, page: int = 0
    ) -> tuple[str, Json | None]:
        """``telegram_user``'s facts in ``source``, one page, with a 🗑 per fact."""
        user = await self.front.person(source, str(telegram_user))
        listing = await self.front.listing(source, user, page=page, per_page=PER_PAGE)
        first = listing.page * PER_PAGE
        buttons = [
            {
                "text": f"🗑 {first + number}",
                "callback_data": _data("d", telegram_user, fact.id, listing.page),
            }
            for number, fact in enumerate(listing.facts, start=1)
        ]
        rows = [buttons[i : i + BUTTONS_PER_ROW] for i in range(0, len(buttons), BUTTONS_PER_ROW)]
        turns = []
        if listing.page > 0:
            turns.append(
                {"text": "◀", "callback_data": _data("p", telegram_user, listing.page - 1)}
            )
        if listing.page + 1 < listing.pages:
            turns.append(
                {"text": "▶", "callback_data": _data("p", telegram_user, listing.page + 1)}
            )
        if turns:
            rows.append(turns)
        return listing.text, {"inline_keyboard": rows} if rows else None

    async def on_tap(self, c: Callback, answer: Answer) -> None:
        """A press on a panel's or a confirmation's button (the presser is allowed)."""
        tap = parse_memory_callback(c.data)
        source, chat_id = c.source, c.chat_id
        if tap is None or source is None or chat_id is None or c.user_id is None:
            log.info("memory: refused callback data %r", c.data[:64])
            await answer(BAD_BUTTON)
            return
        if self.front.memory is None:
            await answer(MEMORY_OFF)
            return
        if c.user_id != tap.owner:
            await answer(NOT_YOURS)
            return
        presser = await self.front.person(source, str(c.user_id))
        assert presser is not None
        match tap.kind:
            case "delete":
                await answer(await self.front.delete_fact(presser, tap.fact_id))
                await self._show(c, *await self.render(source, c.user_id, tap.page))
            case "page":
                await answer(None)
                await self._show(c, *await self.render(source, c.user_id, tap.page))
            case "forget":
                result = await self.front.forget(presser, source)
                await answer("Forgotten.")
                await self._show(c, result, None)
            case "cancel":
                await answer(CANCELLED)
                await self._show(c, CANCELLED, None)

    async def _show(self, c: Callback, text: str, keyboard: Json | None) -> None:
        assert c.chat_id is not None
        if c.message_id is None:  # too old for Telegram to say which message: a new one
            await self._sender.send_text(
                c.chat_id, text, reply_markup=keyboard, thread_id=c.thread_id
            )
            return
        await self._sender.edit(c.chat_id, c.message_id, text, [], keyboard)

    async def _send(self, source: str, text: str, keyboard: Json | None = None) -> None:
        """Plain text: what people wrote is never read as markup."""
        chat_id, thread_id = parse_source(source)
        try:
            await self._sender.send_text(chat_id, text, reply_markup=keyboard, thread_id=thread_id)
        except TelegramError as exc:
            log.warning("sending to chat %s failed: %s", chat_id, exc)


def _data(kind: str, owner: int, *numbers: int) -> str:
    return ":".join([MEMORY_PREFIX, kind, str(owner), *(str(n) for n in numbers)])
