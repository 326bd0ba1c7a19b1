"""Discord as a person uses it: DMs into the fake gateway, what the bot posted back.

Alice writes to the bot in her DM; cards are clicked (INTERACTION_CREATE), a reason or an
answer goes through the modal the click opens, as in the Discord app. Nothing here
reaches into the adapter: only the fake's records (messages, edits, interaction
responses) and the hub's public surface.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

from bot.serve import Service
from tests.bot.discord.conftest import ALICE
from tests.bot.platform_contract.driver import Prompt, StopAsking, restart_with_cards
from tests.bot.telegram_contract.conftest import eventually, stop
from tests.fakes.discord_server import FakeDiscordServer, SentMessage

__all__ = ["DiscordDriver"]

APPROVAL_MARK = "Approval needed"
QUESTION_MARK = "❓"


class DiscordDriver:
    """Alice in her DM with the bot."""

    name = "discord"

    def __init__(
        self,
        fake: FakeDiscordServer,
        start_service: Callable[[], Awaitable[Service]],
        workspace: Path,
    ) -> None:
        self.fake = fake
        self._start_service = start_service
        self.workspace = workspace
        self.service: Service
        self.channel = fake.dm_channel_id(ALICE)
        self.source = f"discord:{self.channel}"
        self._approvals_seen: set[str] = set()
        self._questions_seen: set[str] = set()

    async def start(self) -> None:
        self.service = await self._start_service()

    async def say(self, text: str) -> None:
        self.fake.dm(ALICE, text)

    async def reply_to(self, text: str) -> str:
        before = len(self._messages())
        await self.say(text)
        reply = await eventually(lambda: self._messages()[before:])
        return reply[0].content

    async def expect(self, needle: str) -> str:
        return await eventually(lambda: next((t for t in self.shown() if needle in t), None))

    async def expect_message(self, text: str) -> None:
        await eventually(lambda: text in self.shown())

    def shown(self) -> list[str]:
        return [m.content for m in self._messages()]

    async def approval(self) -> Prompt:
        card = await eventually(lambda: self._next(APPROVAL_MARK, self._approvals_seen))
        return Prompt(card.content, handle=card)

    def approvals_shown(self) -> int:
        return sum(APPROVAL_MARK in t for t in self.shown())

    def questions_shown(self) -> int:
        return sum(t.startswith("**" + QUESTION_MARK) for t in self.shown())

    async def approve(self, card: Prompt) -> None:
        self._click(card, "approve")

    async def approve_and_stop_asking(self, card: Prompt, *, for_: StopAsking) -> None:
        self._click(card, "bypass_15m" if for_ == "15m" else "bypass_session")

    async def reject(self, card: Prompt, reason: str = "") -> None:
        """❌ opens a modal; its reason (empty: none) is submitted from the card."""
        message: SentMessage = card.handle
        before = len(self.fake.interaction_responses)
        self._click(card, "reject")
        await self._modal_opened(before)
        self.fake.modal_submit(
            self.channel,
            ALICE,
            f"reason:{call_id(message)}",
            {"text": reason},
            message_id=message.id,
        )

    async def question(self) -> Prompt:
        question = await eventually(lambda: self._next(QUESTION_MARK, self._questions_seen))
        return Prompt(question.content, handle=question)

    async def answer(self, question: Prompt, text: str) -> None:
        """✍️ Answer opens a modal; the answer is submitted from the question."""
        message: SentMessage = question.handle
        before = len(self.fake.interaction_responses)
        self.fake.click(self.channel, message.id, ALICE, message.custom_ids[0])
        await self._modal_opened(before)
        self.fake.modal_submit(
            self.channel, ALICE, f"answer:{call_id(message)}", {"text": text}, message_id=message.id
        )

    async def expect_stopped(self) -> None:
        await eventually(lambda: any("Stopped" in t for t in self.shown()))

    async def idle(self) -> None:
        hub = self.service.hub
        assert hub is not None and self.service.discord is not None
        await eventually(lambda: not hub.is_processing(self.source))
        assert self.service.discord.adapter is not None
        await self.service.discord.adapter.drain()

    async def restart(self) -> None:
        """Once the open cards are recorded; then the service stops and starts again over
        the same database (``restart_with_cards``)."""

        async def start() -> Service:
            await self.start()
            return self.service

        self.service = await restart_with_cards(
            self.service, "discord", self.source, start, self._forget
        )
        await self.idle_adapter()

    def _forget(self) -> None:
        self._approvals_seen.clear()
        self._questions_seen.clear()

    async def idle_adapter(self) -> None:
        assert self.service.discord is not None and self.service.discord.adapter is not None
        await self.service.discord.adapter.drain()

    async def close(self) -> None:
        await stop(self.service)

    # -- Discord's own view ---------------------------------------------------------------

    def message(self, prompt: Prompt) -> SentMessage:
        return self.fake.message(self.channel, prompt.handle.id)

    def _messages(self) -> list[SentMessage]:
        return [
            m for m in self.fake.messages(self.channel, include_deleted=False) if not m.ephemeral
        ]

    def _click(self, card: Prompt, choice: str) -> None:
        message: SentMessage = card.handle
        self.fake.click(self.channel, message.id, ALICE, f"card:{call_id(message)}:{choice}")

    async def _modal_opened(self, before: int) -> None:
        await eventually(lambda: any(r.type == 9 for r in self.fake.interaction_responses[before:]))

    def _next(self, mark: str, seen: set[str]) -> SentMessage | None:
        for message in self._messages():
            if mark in message.content and message.id not in seen:
                seen.add(message.id)
                return message
        return None


def call_id(card: SentMessage) -> int:
    """The tool call a card's (or question's) buttons name."""
    return int(card.custom_ids[0].split(":")[1])
