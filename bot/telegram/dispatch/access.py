"""Telegram's side of access control: its pairing store behind ``AccessStore``.

``bot/platform/access.py`` keys people by opaque strings; Telegram's store keys them by
integer ids. ``PairingStore`` converts at this edge; ``PairedIds`` shows the paired set
with Telegram's ids.
"""

from __future__ import annotations

from collections.abc import Iterator

from bot.platform.access import Access
from bot.platform.protocols import PairingCode
from bot.telegram.store import PairingRow, TelegramStore

__all__ = ["PairedIds", "PairingStore"]


class PairingStore:
    """``AccessStore`` over ``TelegramStore``'s paired users and pairing codes."""

    def __init__(self, store: TelegramStore) -> None:
        self._store = store

    async def paired_users(self) -> set[str]:
        return {str(user_id) for user_id in await self._store.paired_users()}

    async def pair(self, user_id: str, name: str, paired_by: str | None) -> None:
        # The owner who paired them may be another platform's (a Slack id is no number):
        # Telegram's table keeps a Telegram id, or 0 for one it cannot hold.
        by = int(paired_by) if paired_by is not None and _is_telegram_id(paired_by) else 0
        await self._store.pair(int(user_id), name, by)

    async def unpair(self, user_id: str) -> bool:
        # Another platform's member (a Slack or Matrix id) is none of Telegram's: int()
        # raised here, first on the desk, and they stayed paired (found by review).
        return _is_telegram_id(user_id) and await self._store.unpair(int(user_id))

    async def issue_code(
        self, user_id: str, chat: str, name: str
    ) -> tuple[PairingCode | None, bool]:
        row, new = await self._store.issue_code(int(user_id), int(chat), name)
        return (None if row is None else _code(row)), new

    async def redeem(self, code: str) -> PairingCode | None:
        row = await self._store.redeem(code)
        return None if row is None else _code(row)


def _is_telegram_id(text: str) -> bool:
    digits = text.removeprefix("-")
    return digits.isascii() and digits.isdigit() and len(digits) <= 19


def _code(row: PairingRow) -> PairingCode:
    return PairingCode(row.code, str(row.user_id), str(row.chat_id), row.name)


class PairedIds:
    """The paired users as Telegram ids: a view over the platform layer's string keys."""

    def __init__(self, access: Access) -> None:
        self._access = access

    def add(self, user_id: int) -> None:
        self._access.paired.add(str(user_id))

    def discard(self, user_id: int) -> None:
        self._access.paired.discard(str(user_id))

    def __contains__(self, user_id: object) -> bool:
        return str(user_id) in self._access.paired

    def __iter__(self) -> Iterator[int]:
        return (int(key) for key in self._access.paired)

    def __len__(self) -> int:
        return len(self._access.paired)
