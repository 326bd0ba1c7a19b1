"""The seam the platform contract runs through: what a person does and sees on one platform.

A scenario talks to a ``PlatformDriver`` only; each driver reaches its platform from the
outside (Telegram: updates into the fake Bot API and what it records; the terminal: lines
typed and the text printed), never through the adapter's insides.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from bot.serve import Service

__all__ = ["PlatformDriver", "Prompt", "StopAsking"]

#: How long an approval stops the asking: 15 minutes, or the rest of the session.
StopAsking = Literal["15m", "session"]


@dataclass(frozen=True, slots=True)
class Prompt:
    """An approval card or a question as the platform shows it."""

    text: str
    #: The driver's handle on it (a Telegram message, a terminal output offset).
    handle: Any = None


class PlatformDriver(Protocol):
    """One person in one private conversation with the bot, on one platform."""

    #: ``telegram-ptb``, ``telegram-aiogram``, ``terminal``, ``webchat``.
    name: str
    #: The hub source of the conversation (``telegram:111``, ``console``).
    source: str
    #: The running service (its engine and hub) a scenario sets tools and rules up on.
    service: Service
    workspace: Path

    async def say(self, text: str) -> None:
        """Send ``text`` as a message (a ``/command`` too: the platform parses it)."""

    async def reply_to(self, text: str) -> str:
        """Send ``text`` and return the bot's reply (the next message; in the terminal what
        it prints until it prompts for the next line)."""

    async def expect(self, needle: str) -> str:
        """Wait until something shown contains ``needle``; returns that message (or line)."""

    async def expect_message(self, text: str) -> None:
        """Wait until a whole message (a whole line in the terminal) is ``text``."""

    def shown(self) -> list[str]:
        """Everything shown so far, one item per message (per line in the terminal)."""

    async def approval(self) -> Prompt:
        """Wait for the next approval card not yet returned."""

    def approvals_shown(self) -> int:
        """How many approval cards the person sees (the terminal: since it started)."""

    async def approve(self, card: Prompt) -> None: ...

    async def approve_and_stop_asking(self, card: Prompt, *, for_: StopAsking) -> None:
        """Approve, and let later calls run without asking for 15 minutes or the session."""

    async def reject(self, card: Prompt, reason: str = "") -> None:
        """Reject, with ``reason`` for the model when given."""

    async def question(self) -> Prompt:
        """Wait for the next clarification question not yet returned."""

    def questions_shown(self) -> int:
        """How many questions the person sees (the terminal: since it started)."""

    async def answer(self, question: Prompt, text: str) -> None: ...

    async def expect_stopped(self) -> None:
        """Wait until the platform shows that the running turn was stopped."""

    async def idle(self) -> None:
        """After a turn the person started: wait until it is over and all it said shown."""

    async def restart(self) -> None:
        """Stop the service and start it again over the same database."""

    async def close(self) -> None: ...


async def restart_with_cards(
    service: Service, platform: str, source: str, start: Any, forget: Any
) -> Service:
    """A platform's restart: once its open cards in ``source`` are recorded with their
    message ids, the service stops (``forget``: the driver forgets the prompts it saw),
    ``start()`` starts it again over the same database, and this returns once every call
    that waited before waits again."""
    from bot.delivery import CardStore
    from tests.bot.telegram_contract.conftest import eventually, eventually_true, stop

    assert service.engine is not None
    store = CardStore(service.engine.store.db, platform)

    async def all_recorded() -> bool:
        return all(card.message_id is not None for card in await store.open(source))

    await eventually_true(all_recorded)
    waiting = [card.tool_call_id for card in await store.open(source)]
    await stop(service)
    forget()
    restarted: Service = await start()
    assert restarted.engine is not None
    approvals = restarted.engine.approvals
    await eventually(lambda: all(approvals.is_waiting(call) for call in waiting))
    return restarted
