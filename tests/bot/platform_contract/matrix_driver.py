"""Matrix as a person uses it: Alice's direct room with the bot on a real Synapse.

Alice writes in her direct room (a ``/command`` is a message starting with ``/``, as in
Element); an approval card is decided by reacting to it (✅, ⏱, 🔄), rejected by
replying to it with the reason (or reacting ❌ without one), and a question answered by
replying to it. What she sees is the bot's messages with their edits applied, as her
client shows them. Nothing here reaches into the adapter: only the homeserver and the
hub's public surface.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from bot.serve import Service
from tests.bot.matrix.conftest import Accounts, bot_messages, joined
from tests.bot.matrix.homeserver import Person
from tests.bot.platform_contract.driver import Prompt, StopAsking, restart_with_cards
from tests.bot.telegram_contract.conftest import eventually, stop

__all__ = ["MatrixDriver"]

APPROVAL_MARK = "Approval needed"
QUESTION_MARK = "❓ Question"
_REACTIONS = {"15m": "⏱️", "session": "🔄"}


class MatrixDriver:
    """Alice in her direct room with the bot."""

    name = "matrix"

    def __init__(
        self,
        accounts: Accounts,
        start_service: Callable[[], Awaitable[Service]],
        workspace: Path,
    ) -> None:
        self.accounts = accounts
        self.alice: Person = accounts.alice
        self._start_service = start_service
        self.workspace = workspace
        self.service: Service
        self.room = ""
        self.source = ""
        self._approvals_seen: set[str] = set()
        self._questions_seen: set[str] = set()

    async def start(self) -> None:
        self.service = await self._start_service()
        if not self.room:
            from bot.matrix.incoming import source_of

            self.room = self.alice.create_room(invite=[self.accounts.bot.user_id], direct=True)
            self.source = source_of(self.room)
            await eventually(lambda: joined(self.alice, self.room, self.accounts.bot.user_id), 15)

    async def say(self, text: str) -> None:
        self.alice.say(self.room, text)

    async def reply_to(self, text: str) -> str:
        before = len(self._messages())
        await self.say(text)
        reply = await eventually(lambda: self._messages()[before:], 10)
        return _shown(reply[0])

    async def expect(self, needle: str) -> str:
        return await eventually(lambda: next((t for t in self.shown() if needle in t), None), 10)

    async def expect_message(self, text: str) -> None:
        await eventually(lambda: text in self.shown(), 10)

    def shown(self) -> list[str]:
        return [_shown(m) for m in self._messages()]

    async def approval(self) -> Prompt:
        card = await eventually(lambda: self._next(APPROVAL_MARK, self._approvals_seen), 10)
        return Prompt(_shown(card), handle=card)

    def approvals_shown(self) -> int:
        return sum(APPROVAL_MARK in t for t in self.shown())

    def questions_shown(self) -> int:
        return sum(QUESTION_MARK in t for t in self.shown())

    async def approve(self, card: Prompt) -> None:
        self.alice.react(self.room, card.handle["event_id"], "✅")

    async def approve_and_stop_asking(self, card: Prompt, *, for_: StopAsking) -> None:
        self.alice.react(self.room, card.handle["event_id"], _REACTIONS[for_])

    async def reject(self, card: Prompt, reason: str = "") -> None:
        """A reply to the card is its reason; without one, ❌."""
        if reason:
            self.alice.reply(self.room, card.handle["event_id"], reason)
        else:
            self.alice.react(self.room, card.handle["event_id"], "❌")

    async def question(self) -> Prompt:
        question = await eventually(lambda: self._next(QUESTION_MARK, self._questions_seen), 10)
        return Prompt(_shown(question), handle=question)

    async def answer(self, question: Prompt, text: str) -> None:
        self.alice.reply(self.room, question.handle["event_id"], text)

    async def expect_stopped(self) -> None:
        await eventually(lambda: any("Stopped" in t for t in self.shown()), 10)

    async def idle(self) -> None:
        hub = self.service.hub
        assert hub is not None and self.service.matrix is not None
        await eventually(lambda: not hub.is_processing(self.source), 10)
        await self.idle_adapter()

    async def restart(self) -> None:
        """Once the open cards are recorded; then the service stops and starts again over
        the same database (``restart_with_cards``)."""

        async def start() -> Service:
            await self.start()
            return self.service

        self.service = await restart_with_cards(
            self.service, "matrix", self.source, start, self._forget
        )
        await self.idle_adapter()

    def _forget(self) -> None:
        self._approvals_seen.clear()
        self._questions_seen.clear()

    async def idle_adapter(self) -> None:
        assert self.service.matrix is not None and self.service.matrix.adapter is not None
        await self.service.matrix.adapter.drain()

    async def close(self) -> None:
        await stop(self.service)

    # -- Matrix's own view ------------------------------------------------------------------

    def _messages(self) -> list[dict[str, Any]]:
        return bot_messages(self.alice, self.room, self.accounts.bot.user_id)

    def _next(self, mark: str, seen: set[str]) -> dict[str, Any] | None:
        for message in self._messages():
            if mark in _shown(message) and message["event_id"] not in seen:
                seen.add(message["event_id"])
                return message
        return None


def _shown(message: dict[str, Any]) -> str:
    return str(message["content"].get("body", ""))
