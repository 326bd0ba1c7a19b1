"""``TelegramConfig``: what the adapter is told by the service (``bot/serve.py``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bot.platform.cards import REJECT_WINDOW_S

__all__ = ["TelegramConfig"]


@dataclass(frozen=True, slots=True)
class TelegramConfig:
    allowed_user_ids: frozenset[int] = frozenset()
    owner_id: int | None = None
    workspace: Path = Path("workspace")

    @property
    def approving_owner(self) -> int | None:
        """Who decides as the owner: ``TELEGRAM_OWNER_ID``, or else the one allowed user of
        a bot that has just one (whose cron and tic cards would otherwise wait forever)."""
        if self.owner_id is not None:
            return self.owner_id
        if len(self.allowed_user_ids) == 1:
            return next(iter(self.allowed_user_ids))
        return None

    progress_interval_s: float = 2.0
    typing_interval_s: float = 4.5
    #: An answer faster than this needs no typing indicator (and sends no request).
    typing_delay_s: float = 0.4
    reject_window_s: float = REJECT_WINDOW_S
    pairing_reminder_s: float = 600.0
    max_download_bytes: int = 20 * 1024 * 1024
    #: Show the answer while it is written: a draft in private chats, an edited message
    #: in groups (``TELEGRAM_STREAMING``).
    streaming: bool = False
    stream_interval_s: float = 1.0
