"""``TelegramConfig``: what the adapter is told by the service (``bot/serve.py``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bot.platform.cards import REJECT_WINDOW_S
from bot.telegram.dispatch.albums import ALBUM_QUIET_S

__all__ = ["TelegramConfig"]


@dataclass(frozen=True, slots=True)
class TelegramConfig:
    allowed_user_ids: frozenset[int] = frozenset()
    #: ``TELEGRAM_OWNER_ID``: pairs people; decides approvals as the owner (without it, a
    #: bot with one allowed user has that user decide as the owner: ``Access``).
    owner_id: int | None = None
    workspace: Path = Path("workspace")
    progress_interval_s: float = 2.0
    typing_interval_s: float = 4.5
    #: An answer faster than this needs no typing indicator (and sends no request).
    typing_delay_s: float = 0.4
    reject_window_s: float = REJECT_WINDOW_S
    pairing_reminder_s: float = 600.0
    max_download_bytes: int = 20 * 1024 * 1024
    #: How long after an album's latest item its next may still come (one message of all).
    album_quiet_s: float = ALBUM_QUIET_S
    #: Show the answer while it is written: a draft in private chats, an edited message
    #: in groups (``TELEGRAM_STREAMING``).
    streaming: bool = False
    #: One process: every pending outbox row is due at start. A fleet (False): only those
    #: of dead processes, found by the fleet's own loop (another live one may be sending).
    recover_outbox_at_start: bool = True
    stream_interval_s: float = 1.0
