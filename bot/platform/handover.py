"""A person's message handed to the hub: stored, and its platform event marked handled, in
one commit (a crash leaves both or neither), by every platform the same way."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy.engine import Connection

from bot.delivery import EventAlreadyHandled
from bot.delivery.store import mark_handled_in
from engine.hub import AS_A_FILE, ChatHub, HubError, SendOptions

__all__ = ["HandedOver", "hand_over", "hand_over_edit", "hand_over_withdrawal", "marking"]

log = logging.getLogger(__name__)


def marking(platform: str, key: str) -> Callable[[Connection], None]:
    """The platform event ``key`` marked handled, in the unit of work that acts on it (its
    message queued, the question it answers answered): ``EventAlreadyHandled`` rolls that
    back when it was handled before."""
    return lambda conn: mark_handled_in(conn, platform, key)


@dataclass(frozen=True, slots=True)
class HandedOver:
    #: The hub's refusal, as the sentence to say (too long, a source it refuses).
    refusal: str | None = None
    #: Taken by an earlier hand-over (a replay, another process): nothing more to do.
    before: bool = False


#: The advice for a message over the hub's limit on a platform whose files are not read
#: (Slack's, Matrix's): "send it as a file" led to "I cannot read files" (until 2026-12-07;
#: found by review).
IN_PARTS = "Send it in shorter messages."


async def hand_over(
    hub: ChatHub,
    platform: str,
    key: str,
    source: str,
    text: str,
    metadata: dict[str, Any],
    *,
    reads_files: bool = True,
) -> HandedOver:
    try:
        await hub.send_message(
            source,
            text,
            SendOptions(metadata=metadata),
            also=marking(platform, key),
            redelivered_if_lost=True,
        )
    except HubError as exc:
        refusal = str(exc) if reads_files else str(exc).replace(AS_A_FILE, IN_PARTS)
        return HandedOver(refusal=f"⚠️ {refusal}")
    except EventAlreadyHandled:
        log.info("%s event %s was handled already", platform, key)
        return HandedOver(before=True)
    return HandedOver()


async def hand_over_edit(
    hub: ChatHub,
    source: str,
    key: str,
    value: Any,
    text: str,
    *,
    by: str | None = None,
    threads: bool = False,
) -> None:
    """A person's correction of a message of theirs, for the hub to take if the message
    still waits for its turn (``ChatHub.amend``: its metadata's ``key`` is ``value``). It
    says nothing in the chat, taken or not: an edit refused (past the length) may be of a
    message for no one (until 2026-12-07 the bot spoke of it; found by review)."""
    try:
        amended = await hub.amend(source, key, value, text, by=by, threads=threads)
    except HubError as exc:
        log.info("an edit of %s in %s not taken: %s", value, source, exc)
        return
    log.info(
        "%s in %s edited %s", value, source, "while it waited" if amended else "after it was read"
    )


async def hand_over_withdrawal(
    hub: ChatHub,
    source: str,
    key: str,
    value: Any,
    *,
    by: str | None = None,
    threads: bool = False,
) -> None:
    """A person's deletion of a message of theirs that still waits for its turn: it is not
    read (``ChatHub.withdraw``). Nothing is said in the chat; one read already keeps its
    answer."""
    withdrawn = await hub.withdraw(source, key, value, by=by, threads=threads)
    log.info(
        "%s in %s deleted %s",
        value,
        source,
        "while it waited" if withdrawn else "after it was read",
    )
