"""A person's message handed to the hub: stored, and its platform event marked handled, in
one commit (a crash leaves both or neither), by every platform the same way."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from bot.delivery import EventAlreadyHandled
from bot.delivery.store import mark_handled_in
from engine.hub import ChatHub, HubError, SendOptions

__all__ = ["HandedOver", "hand_over"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class HandedOver:
    #: The hub's refusal, as the sentence to say (too long, a source it refuses).
    refusal: str | None = None
    #: Taken by an earlier hand-over (a replay, another process): nothing more to do.
    before: bool = False


async def hand_over(
    hub: ChatHub, platform: str, key: str, source: str, text: str, metadata: dict[str, Any]
) -> HandedOver:
    try:
        await hub.send_message(
            source,
            text,
            SendOptions(metadata=metadata),
            also=lambda conn: mark_handled_in(conn, platform, key),
            redelivered_if_lost=True,
        )
    except HubError as exc:
        return HandedOver(refusal=f"⚠️ {exc}")
    except EventAlreadyHandled:
        log.info("%s event %s was handled already", platform, key)
        return HandedOver(before=True)
    return HandedOver()
