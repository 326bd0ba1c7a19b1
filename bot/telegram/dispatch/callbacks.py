"""Telegram's callback queries: routed by the prefix of their data, answered exactly once.

``ap1:`` is an approval card's button (``approvals.py``), ``jb1:`` the ``/jobs`` panel's,
``mm1:`` the ``/memory`` panel's and ``/forget_me``'s (``memory.py``); anything else has
expired. Whatever the data and whatever fails, the query gets exactly
one ``answerCallbackQuery``: every path answers through a ``OneAnswer``, and what no path
answered is answered at the end, so no button is left spinning.
"""

from __future__ import annotations

import logging

from bot.platform.access import Access
from bot.platform.callbacks import CallbackRouter, OneAnswer
from bot.platform.cards import EXPIRED, NOT_ALLOWED
from bot.platform.failures import SORRY_TAP, report_failure
from bot.platform.protocols import Answer
from bot.telegram.dispatch.approvals import ApprovalTaps
from bot.telegram.dispatch.jobs import JOBS_PREFIX, JobsPanel, parse_job_callback
from bot.telegram.dispatch.memory import MEMORY_PREFIX, MemoryPanel
from bot.telegram.inbound.fields import fits_db_id
from bot.telegram.inbound.updates import Callback
from bot.telegram.rendering.cards import CALLBACK_PREFIX
from bot.telegram.sending.delivery import TelegramSender

__all__ = ["Callbacks"]

log = logging.getLogger(__name__)


class Callbacks:
    def __init__(
        self,
        access: Access,
        sender: TelegramSender,
        approvals: ApprovalTaps,
        jobs: JobsPanel | None,
        memory: MemoryPanel | None = None,
    ) -> None:
        self._access = access
        self._sender = sender
        self._jobs = jobs
        self._memory = memory
        self.router: CallbackRouter[Callback] = CallbackRouter(_expired)
        self.router.on(f"{CALLBACK_PREFIX}:", approvals.on_tap)
        self.router.on(f"{JOBS_PREFIX}:", self._on_jobs)
        self.router.on(f"{MEMORY_PREFIX}:", self._on_memory)

    async def handle(self, c: Callback) -> None:
        async def send(text: str | None) -> None:
            await self._sender.answer_callback(c.callback_id, text)

        answer = OneAnswer(send)
        try:
            await self.router.dispatch(c.data, c, answer)
        except Exception:
            error = report_failure(log, f"callback {c.callback_id} ({c.data[:64]!r})")
            sorry = SORRY_TAP.format(error=error)
            told = await answer(sorry)
            if not told and c.chat_id is not None and self._access.is_allowed(c.user):
                await self._sender.say_in(c.chat_id, c.thread_id, sorry)  # answered already
        finally:
            await answer(None)

    async def _on_jobs(self, c: Callback, answer: Answer) -> None:
        action = parse_job_callback(c.data)
        source = c.source
        if (
            action is None
            or not fits_db_id(action.job_id)  # no job has it, and the lookup would overflow
            or self._jobs is None
            or source is None
            or c.chat_id is None
            or c.message_id is None
        ):
            await answer(EXPIRED)
            return
        if not self._access.is_allowed(c.user):
            await answer(NOT_ALLOWED)
            return
        outcome = await self._jobs.act(source, action)  # only this chat's jobs
        await answer(outcome)
        text, keyboard = await self._jobs.render(source)
        await self._sender.edit(c.chat_id, c.message_id, text, [], keyboard)

    async def _on_memory(self, c: Callback, answer: Answer) -> None:
        if self._memory is None:
            await answer(EXPIRED)
            return
        if not self._access.is_allowed(c.user):
            await answer(NOT_ALLOWED)
            return
        await self._memory.on_tap(c, answer)  # whose facts: the panel checks the presser


async def _expired(_c: Callback, answer: Answer) -> None:
    await answer(EXPIRED)
