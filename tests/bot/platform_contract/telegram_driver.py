"""Telegram as a person uses it: updates into the fake Bot API, what the bot sent back.

Alice writes to the bot in a private chat; cards are tapped through callback queries and
reasons and answers given as replies, as in the Telegram app. Nothing here reaches into
the adapter: only the fake's records (messages, edits) and the hub's public surface.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path

from bot.serve import Service
from bot.telegram.rendering.cards import format_callback
from bot.telegram.store import TelegramStore
from tests.bot.platform_contract.driver import Prompt, StopAsking
from tests.bot.telegram_contract.conftest import ALICE, eventually, eventually_true, stop, texts
from tests.fakes.telegram_server import FakeTelegramServer, SentMessage

__all__ = ["TelegramDriver"]

APPROVAL_MARK = "Approval needed"
QUESTION_MARK = "❓"


class TelegramDriver:
    """Alice in her private chat with the bot, over one binding (``ptb``, ``aiogram``)."""

    source = f"telegram:{ALICE}"

    def __init__(
        self,
        library: str,
        telegram: FakeTelegramServer,
        start_service: Callable[[], Awaitable[Service]],
        workspace: Path,
    ) -> None:
        self.name = f"telegram-{library}"
        self.telegram = telegram
        self._start_service = start_service
        self.workspace = workspace
        self.service: Service
        self._approvals_seen: set[int] = set()
        self._questions_seen: set[int] = set()

    async def start(self) -> None:
        self.service = await self._start_service()

    async def say(self, text: str) -> None:
        self.telegram.user_message(ALICE, ALICE, text)

    async def reply_to(self, text: str) -> str:
        before = len(self.telegram.messages(ALICE))
        await self.say(text)
        reply = await eventually(lambda: self.telegram.messages(ALICE)[before:])
        return reply[0].text or ""

    async def expect(self, needle: str) -> str:
        return await eventually(lambda: self._find(needle))

    async def expect_message(self, text: str) -> None:
        await eventually(lambda: text in self.shown())

    def shown(self) -> list[str]:
        return texts(self.telegram, ALICE)

    async def approval(self) -> Prompt:
        card = await eventually(lambda: self._next(APPROVAL_MARK, self._approvals_seen))
        return Prompt(card.text or "", handle=card)

    def approvals_shown(self) -> int:
        return sum(APPROVAL_MARK in t for t in self.shown())

    def questions_shown(self) -> int:
        return sum(QUESTION_MARK in t for t in self.shown())

    async def approve(self, card: Prompt) -> None:
        self._tap(card, "approve")

    async def approve_and_stop_asking(self, card: Prompt, *, for_: StopAsking) -> None:
        self._tap(card, "bypass_15m" if for_ == "15m" else "bypass_session")

    async def reject(self, card: Prompt, reason: str = "") -> None:
        """❌ opens the reason window; the reason is a reply to the card, none a second ❌."""
        message: SentMessage = card.handle
        self._tap(card, "reject")
        await eventually(lambda: "reason" in (self._current(message).text or ""))
        if reason:
            self.telegram.user_message(ALICE, ALICE, reason, reply_to_message_id=message.message_id)
        else:
            self._tap(card, "reject")

    async def question(self) -> Prompt:
        question = await eventually(lambda: self._next(QUESTION_MARK, self._questions_seen))
        return Prompt(question.text or "", handle=question)

    async def answer(self, question: Prompt, text: str) -> None:
        message: SentMessage = question.handle
        self.telegram.user_message(ALICE, ALICE, text, reply_to_message_id=message.message_id)

    async def expect_stopped(self) -> None:
        await eventually(lambda: any("Stopped" in t for t in self.shown()))

    async def idle(self) -> None:
        hub = self.service.hub
        await eventually(lambda: not hub.is_processing(self.source))
        await self.service.adapter.drain()

    async def restart(self) -> None:
        """Once the open cards and questions are recorded with their message ids (a crash
        before that sends them again); then the person sees the chat as it is."""
        store = TelegramStore(self.service.engine.store.db)
        await eventually_true(partial(_all_recorded, store, self.source))
        waiting = [card.tool_call_id for card in await store.cards.open(self.source)]
        await stop(self.service)
        self._approvals_seen.clear()
        self._questions_seen.clear()
        await self.start()
        await self._settle(waiting)

    async def _settle(self, calls: list[int]) -> None:
        """Until the resumed turn waits at its cards again and the adapter has shown what
        it had to. A tap before that got a second card for the decided call (the adapter
        resends a card that is no longer open): a bug of its own, not what this checks."""
        approvals = self.service.engine.approvals
        await eventually(lambda: all(approvals.is_waiting(call) for call in calls))
        await self.service.adapter.drain()

    async def close(self) -> None:
        await stop(self.service)

    # -- Telegram's own view, for the scenarios that also check what only it shows ------

    def message(self, prompt: Prompt) -> SentMessage:
        """The card or question as it is now (edits applied)."""
        return self._current(prompt.handle)

    def _tap(self, card: Prompt, action: str) -> None:
        message: SentMessage = card.handle
        self.telegram.callback(
            ALICE, ALICE, message.message_id, format_callback(call_id(message), action)
        )  # type: ignore[arg-type]

    def _current(self, message: SentMessage) -> SentMessage:
        return self.telegram.message(ALICE, message.message_id)

    def _find(self, needle: str) -> str | None:
        return next((t for t in self.shown() if needle in t), None)

    def _next(self, mark: str, seen: set[int]) -> SentMessage | None:
        for message in self.telegram.messages(ALICE):
            if mark in (message.text or "") and message.message_id not in seen:
                seen.add(message.message_id)
                return message
        return None


async def _all_recorded(store: TelegramStore, source: str) -> bool:
    """Every open card and question of ``source`` is stored with its message id."""
    return all(card.message_id is not None for card in await store.cards.open(source))


def call_id(card: SentMessage) -> int:
    """The tool call a card's buttons name."""
    data = card.reply_markup["inline_keyboard"][0][0]["callback_data"]
    return int(data.split(":")[1])
