"""How a job's run asks: a call outside its grants becomes a card in the job's chat.

The run's session emits ``ApprovalRequired`` as an interactive turn does; ``RunCards``
(the run's ``emit``) shows it in the job's chat, marked with the job's title
(``ChatHub.visiting``: recorded with the approval, so the card's button works there,
also after a restart), and gives it until the job's limit, counted from when the call
first asked (stored: a resumed run keeps the time already waited). Then the call is
rejected with a reason the model reads, and the card says so.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import datetime, timedelta

from engine.approval import OPERATOR
from engine.hub import REJECT, ChatHub
from engine.session import (
    ApprovalRequired,
    ToolCancelled,
    ToolDone,
    ToolError,
    ToolRejected,
    ToolStart,
    TurnEvent,
)
from engine.store import InboxError, InboxStore, utcnow

__all__ = ["CARD_STOPPED", "RunCards", "wait_ran_out"]

log = logging.getLogger(__name__)

#: The outcomes of a card closed without a decision (``bot.platform.cards``' lines).
TIMED_OUT = "timed_out"
CARD_STOPPED = "stopped"
#: The longest wait between tries of a rejection at a job's limit that failed.
REJECT_RETRY_MAX_S = 60.0


def wait_ran_out(wait: timedelta) -> str:
    """The reason the model reads for a call nobody decided within the job's limit."""
    minutes = max(1, round(wait.total_seconds() / 60))
    return (
        f"Nobody approved this call within {minutes} minute(s) of being asked, so it did "
        "not run. Do not try it again in this run; say in your answer that it needs the "
        "user's approval, or a grant on the job."
    )


class RunCards:
    """The ``emit`` of one job run: its gated calls as cards in ``chat``."""

    def __init__(
        self,
        hub: ChatHub,
        inbox: InboxStore,
        *,
        chat: str,
        title: str,
        wait: timedelta,
        sleep: Callable[[float], Awaitable[None]],
    ) -> None:
        """``wait`` counts from when the call first asked, as the approval row records it
        (the database's clock, ``utcnow``); ``sleep`` is injectable for tests."""
        self._hub = hub
        self._inbox = inbox
        self._chat = chat
        self._title = title
        self._wait = wait
        self._sleep = sleep
        #: The calls waiting for a decision in the chat, each with its deadline's task.
        self._waits: dict[int, asyncio.Task[None]] = {}
        self._closing: set[asyncio.Task[None]] = set()

    def __call__(self, event: TurnEvent) -> None:
        if isinstance(event, ApprovalRequired):
            if event.tool_call_id not in self._waits:
                asked = replace(event, asked_by=self._title)
                self._waits[event.tool_call_id] = asyncio.create_task(self._ask(asked))
        elif isinstance(event, ToolCancelled):
            self._end(event.tool_call_id, close=True)
        elif isinstance(event, ToolStart | ToolDone | ToolError | ToolRejected):
            self._end(event.tool_call_id, close=False)  # decided: its card closed with it

    async def close(self) -> None:
        """The run ended: cards still open close as stopped (their calls cannot run now)."""
        for call_id in list(self._waits):
            self._end(call_id, close=True)
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)

    def leave_open(self) -> None:
        """The process stops mid-run: its waits end here, its cards stay open (the run is
        taken again after the restart and asks with them)."""
        for task in self._waits.values():
            task.cancel()
        self._waits.clear()

    def _end(self, call_id: int, *, close: bool) -> None:
        task = self._waits.pop(call_id, None)
        if task is None:
            return
        task.cancel()
        if close:
            closing = asyncio.create_task(
                self._hub.visiting.close(self._chat, call_id, CARD_STOPPED)
            )
            self._closing.add(closing)
            closing.add_done_callback(self._closing.discard)

    async def _ask(self, event: ApprovalRequired) -> None:
        try:
            await self._show(event)
            now = utcnow()
            asked_at = await self._asked_at(event.tool_call_id, now)
            left = (asked_at + self._wait - now).total_seconds()
            if left > 0:
                await self._sleep(left)
            await self._reject(event.tool_call_id)
            self._waits.pop(event.tool_call_id, None)
            await self._hub.visiting.close(self._chat, event.tool_call_id, TIMED_OUT)
        except InboxError:
            self._waits.pop(event.tool_call_id, None)  # decided meanwhile: nothing to do
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("job card for call %s failed", event.tool_call_id)

    async def _asked_at(self, call_id: int, now: datetime) -> datetime:
        """When the call first asked (a run taken again after a restart waits for what is
        left); ``now`` when that cannot be read: the wait still ends at the job's limit
        (one failed read, the database away a moment, left the run waiting for good and
        every fire after it skipped; found by review on 2026-12-06)."""
        try:
            record = await self._inbox.get(call_id)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.warning("reading when job call %s asked failed; waiting from now", call_id)
            return now
        return record.requested_at if record is not None else now

    async def _reject(self, call_id: int) -> None:
        """The call rejected at the job's limit, tried again until it is (``InboxError``:
        decided meanwhile). One failure (the database away a moment) left the run waiting
        for good, and every fire after it was skipped, told to no one (found by review)."""
        for attempt in itertools.count():
            try:
                await self._hub.decide(
                    call_id,
                    REJECT,
                    decider=OPERATOR,
                    note=wait_ran_out(self._wait),
                    # From no chat: a call whose card could not be shown is no chat's call.
                    source=None,
                )
                return
            except (InboxError, asyncio.CancelledError):
                raise
            except Exception:
                delay = min(2.0**attempt, REJECT_RETRY_MAX_S)
                log.warning(
                    "rejecting job call %s at its limit failed; again in %.0f s",
                    call_id,
                    delay,
                    exc_info=True,
                )
                await self._sleep(delay)

    async def _show(self, event: ApprovalRequired) -> None:
        """The card in the chat; one that cannot be shown still ends at the job's limit
        (the call waits in the inbox meanwhile): the run waited for good, and every fire
        after it was skipped (found by review)."""
        try:
            await self._hub.visiting.show(self._chat, event)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception(
                "the card for job call %s could not be shown; the inbox shows it, and it is "
                "rejected at the job's limit",
                event.tool_call_id,
            )
