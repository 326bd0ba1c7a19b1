"""Slack as a person uses it: DMs into the fake Slack, what the bot posted back.

Alice writes to the bot in her DM; a ``/command`` is Slack's slash command
(``/chathub stop``: Slack itself would not send a message that starts with ``/``), its
answer the line only she sees; cards are clicked (``block_actions``) and a reason or an
answer goes through the modal the click opens, as in the Slack app. Nothing here reaches
into the adapter: only the fake's records and the hub's public surface.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

from bot.serve import Service
from bot.slack.incoming import unescape
from tests.bot.platform_contract.driver import Prompt, StopAsking, restart_with_cards
from tests.bot.slack.conftest import ALICE
from tests.bot.telegram_contract.conftest import eventually, stop
from tests.fakes.slack_server import FakeSlackServer, Message

__all__ = ["SlackDriver"]

APPROVAL_MARK = "Approval needed"
QUESTION_MARK = "❓"


class SlackDriver:
    """Alice in her DM with the bot."""

    name = "slack"

    def __init__(
        self,
        fake: FakeSlackServer,
        start_service: Callable[[], Awaitable[Service]],
        workspace: Path,
    ) -> None:
        self.fake = fake
        self._start_service = start_service
        self.workspace = workspace
        self.service: Service
        self.channel = fake.dm_channel(ALICE)
        self.source = f"slack:{self.channel}"
        self._approvals_seen: set[str] = set()
        self._questions_seen: set[str] = set()

    async def start(self) -> None:
        self.service = await self._start_service()

    async def say(self, text: str) -> None:
        if text.startswith("/"):
            await self._interact(lambda: self.fake.slash(self.channel, ALICE, "/chathub", text[1:]))
        else:
            self.fake.dm(ALICE, text)

    async def reply_to(self, text: str) -> str:
        """The reply, its commands named as the contract names them: Slack's answers
        write ``/chathub stop`` for ``/stop`` (the only slash command Slack takes)."""
        before = len(self._messages())
        await self.say(text)
        reply = await eventually(lambda: self._messages()[before:])
        return _shown(reply[0]).replace("/chathub ", "/")

    async def expect(self, needle: str) -> str:
        return await eventually(lambda: next((t for t in self.shown() if needle in t), None))

    async def expect_message(self, text: str) -> None:
        await eventually(lambda: text in self.shown())

    def shown(self) -> list[str]:
        return [_shown(m) for m in self._messages()]

    async def approval(self) -> Prompt:
        card = await eventually(lambda: self._next(APPROVAL_MARK, self._approvals_seen))
        return Prompt(_shown(card), handle=card)

    def approvals_shown(self) -> int:
        return sum(APPROVAL_MARK in t for t in self.shown())

    def questions_shown(self) -> int:
        return sum(t.startswith("*" + QUESTION_MARK) for t in self.shown())

    async def approve(self, card: Prompt) -> None:
        await self._click(card, "approve")

    async def approve_and_stop_asking(self, card: Prompt, *, for_: StopAsking) -> None:
        await self._click(card, "bypass_15m" if for_ == "15m" else "bypass_session")

    async def reject(self, card: Prompt, reason: str = "") -> None:
        """❌ opens a modal; its reason (empty: none) is submitted."""
        before = len(self.fake.views)
        await self._click(card, "reject")
        view = await eventually(lambda: self.fake.views[before:])
        await self._interact(lambda: self.fake.submit_view(view[0], ALICE, {"text": reason}))

    async def question(self) -> Prompt:
        question = await eventually(lambda: self._next(QUESTION_MARK, self._questions_seen))
        return Prompt(_shown(question), handle=question)

    async def answer(self, question: Prompt, text: str) -> None:
        """✍️ Answer opens a modal; the answer is submitted from it."""
        message: Message = question.handle
        before = len(self.fake.views)
        await self._interact(lambda: self.fake.click(message, ALICE, message.action_ids[0]))
        view = await eventually(lambda: self.fake.views[before:])
        await self._interact(lambda: self.fake.submit_view(view[0], ALICE, {"text": text}))

    async def expect_stopped(self) -> None:
        await eventually(lambda: any("Stopped" in t for t in self.shown()))

    async def idle(self) -> None:
        hub = self.service.hub
        assert hub is not None and self.service.slack is not None
        await eventually(lambda: not hub.is_processing(self.source))
        await self.idle_adapter()

    async def restart(self) -> None:
        """Once the open cards are recorded; then the service stops and starts again over
        the same database (``restart_with_cards``)."""

        async def start() -> Service:
            await self.start()
            return self.service

        self.service = await restart_with_cards(
            self.service, "slack", self.source, start, self._forget
        )
        await self.idle_adapter()

    def _forget(self) -> None:
        self._approvals_seen.clear()
        self._questions_seen.clear()

    async def idle_adapter(self) -> None:
        assert self.service.slack is not None and self.service.slack.adapter is not None
        await self.service.slack.adapter.drain()

    async def close(self) -> None:
        await stop(self.service)

    # -- Slack's own view -------------------------------------------------------------------

    def _messages(self) -> list[Message]:
        """The bot's messages in the DM and the lines only Alice saw there, in order."""
        posted = self.fake.messages(self.channel, include_deleted=False)
        private = self.fake.ephemerals(ALICE, self.channel)
        return sorted([*posted, *private], key=lambda m: m.created)

    async def _click(self, card: Prompt, choice: str) -> None:
        message: Message = card.handle
        current = self.fake.message(self.channel, message.ts)
        action = next(a for a in current.action_ids if a.endswith(choice))
        await self._interact(lambda: self.fake.click(current, ALICE, action))

    async def _interact(self, act: Callable[[], object]) -> None:
        """A click, a modal or a slash command, as Alice does it: Slack refuses one while the
        app is between Socket Mode connections (its client reconnects when its pings go
        unanswered a while, as on a loaded machine), and she does it again once it is back."""
        while True:
            await eventually(lambda: self.fake.ready_connections or None)
            try:
                act()
                return
            except RuntimeError as refused:
                if "no Socket Mode connection" not in str(refused):
                    raise

    def _next(self, mark: str, seen: set[str]) -> Message | None:
        for message in self._messages():
            if mark in _shown(message) and message.ts not in seen:
                seen.add(message.ts)
                return message
        return None


def _shown(message: Message) -> str:
    """What a person reads: a card's section text (its blocks), else the message's text."""
    sections = [
        b["text"]["text"] for b in message.blocks if b.get("type") == "section" and b.get("text")
    ]
    contexts = [
        e.get("text", "")
        for b in message.blocks
        if b.get("type") == "context"
        for e in b.get("elements", [])
    ]
    shown = "\n".join([*sections, *contexts]) if sections else message.text
    return unescape(shown)  # Slack shows &lt; as <
