"""The seams of ``bot/platform``: what a front end plugs in, and what it is handed.

A platform (Telegram today; the web chat and Discord next) writes its transport, its
rendering and the three things below: an adapter the service starts and stops, a sender
the outbox delivers through, and a store for paired users and pairing codes. Everything
else — commands, access, card semantics, the outbox — comes from ``bot/platform``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, TypeVar

from sqlalchemy.engine import Connection

if TYPE_CHECKING:
    from bot.platform.commands import CommandRegistry

__all__ = [
    "AccessStore",
    "Answer",
    "MessageRef",
    "OutboxSender",
    "PairingCode",
    "PlatformAdapter",
    "ShownCard",
]

#: A message a platform sent, as it names it (Telegram: the message id).
MessageRef = int | str

#: Answers one tap (``None``: no text); True when this call was the answer.
Answer = Callable[[str | None], Awaitable[bool]]

Prepared = TypeVar("Prepared")
Row = TypeVar("Row")


class PlatformAdapter(Protocol):
    """A front end as the service runs it."""

    @property
    def commands(self) -> CommandRegistry: ...

    async def start(self) -> None:
        """Local state and the hub subscription; must not wait for the platform."""

    async def close(self) -> None: ...

    async def drain(self) -> None:
        """Until everything received so far was handled (tests, shutdown)."""


@dataclass(frozen=True, slots=True)
class PairingCode:
    """A stranger's pending code: who asked, and the chat to welcome them in."""

    code: str
    user_id: str
    chat: str
    name: str


class AccessStore(Protocol):
    """Paired users and pairing codes; user ids and chats are the platform's, as strings."""

    async def paired_users(self) -> set[str]: ...

    async def pair(self, user_id: str, name: str, paired_by: str | None) -> None: ...

    async def unpair(self, user_id: str) -> bool: ...

    async def issue_code(
        self, user_id: str, chat: str, name: str
    ) -> tuple[PairingCode | None, bool]:
        """``(code, new)``: the user's pending code, a new one, or ``None`` (too many wait)."""

    async def redeem(self, code: str) -> PairingCode | None:
        """Use a pending, unexpired code once."""


class OutboxSender(Protocol[Prepared, Row]):
    """How a platform sends what the outbox hands it.

    A final reply is ``prepare``d (rendered) before its transaction, pointed at what it
    answers there (``answering``: Discord's reply to the message that asked), ``record``ed
    in it (one row per part, keys ``<key>:<part>``) and sent from those rows; ``send_durable``
    covers a reply stored without rows. ``say`` is a plain message nobody needs again.
    """

    def prepare(self, source: str, text: str) -> Prepared: ...

    def written(self, source: str, text: str) -> Prepared:
        """``text`` as messages to read, in a chat with voice on too (a notice)."""
        ...

    def answering(
        self, conn: Connection, source: str, answer_id: int, prepared: Prepared
    ) -> Prepared: ...

    def record(self, conn: Connection, source: str, key: str, prepared: Prepared) -> list[Row]: ...

    async def send_recorded(self, rows: Sequence[Row]) -> None: ...

    async def send_durable(self, source: str, key: str, prepared: Prepared) -> None: ...

    async def say(self, source: str, text: str) -> None: ...

    def progress_text(self, lines: Sequence[str]) -> str:
        """The progress message's body for ``lines`` (cut to what the platform takes)."""

    async def send_progress(self, source: str, text: str) -> MessageRef | None: ...

    async def edit_progress(self, source: str, ref: MessageRef, text: str) -> None: ...


class ShownCard(Protocol):
    """An open approval card or question as a platform keeps it."""

    @property
    def tool_call_id(self) -> int: ...

    @property
    def kind(self) -> str:
        """``approval`` or ``question``."""

    @property
    def conversation(self) -> str:
        """The chat it was shown in, as the platform names it."""

    @property
    def message_id(self) -> MessageRef | None:
        """``None`` until the platform confirmed the message."""

    @property
    def state(self) -> str:
        """``open`` until decided, answered, run, cancelled or expired."""
