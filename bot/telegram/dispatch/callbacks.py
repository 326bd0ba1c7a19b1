"""Telegram's callback queries: routed by the prefix of their data, answered exactly once.

Like aiogram 3's router, each kind of button registers its handler (``router.on("ap1:",
handle)``, optionally with a filter) instead of one function matching every prefix; data
no handler claims goes to the fallback. ``ap1:`` is an approval card's button
(``approvals.py``), ``jb1:`` the ``/jobs`` panel's, ``mm1:`` the ``/memory`` panel's and
``/forget_me``'s (``memory.py``); anything else has expired. Whatever the data and
whatever fails, the query gets exactly one ``answerCallbackQuery``: every path answers
through a ``OneAnswer``, and what no path answered is answered at the end, so no button
is left spinning.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from bot.platform.access import Access
from bot.platform.cards import EXPIRED, NOT_ALLOWED
from bot.platform.failures import SORRY_TAP, report_failure
from bot.platform.protocols import Answer
from bot.telegram.dispatch.approvals import ApprovalTaps
from bot.telegram.dispatch.jobs import JOBS_PREFIX, JobsPanel, ShowPage, parse_job_callback
from bot.telegram.dispatch.memory import MEMORY_PREFIX, MemoryPanel
from bot.telegram.inbound.fields import fits_db_id
from bot.telegram.inbound.updates import Callback
from bot.telegram.rendering.cards import CALLBACK_PREFIX
from bot.telegram.sending.delivery import TelegramSender

__all__ = ["CallbackRouter", "Callbacks", "OneAnswer", "TapHandler"]

log = logging.getLogger(__name__)

Tap = TypeVar("Tap")

#: Handles one tap; answers it through ``answer`` (once) when it has something to say.
TapHandler = Callable[[Tap, Answer], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class _Route(Generic[Tap]):
    prefix: str
    handler: TapHandler[Tap]
    when: Callable[[Tap], bool] | None


class CallbackRouter(Generic[Tap]):
    """Routes a tap to the first handler whose prefix (and filter) matches its data."""

    def __init__(self, fallback: TapHandler[Tap]) -> None:
        self._routes: list[_Route[Tap]] = []
        self._fallback = fallback

    def on(
        self, prefix: str, handler: TapHandler[Tap], *, when: Callable[[Tap], bool] | None = None
    ) -> None:
        if any(route.prefix == prefix and route.when is None for route in self._routes):
            raise ValueError(f"callbacks {prefix!r} are routed twice")
        self._routes.append(_Route(prefix, handler, when))

    def handler_for(self, data: str, tap: Tap) -> TapHandler[Tap]:
        for route in self._routes:
            if data.startswith(route.prefix) and (route.when is None or route.when(tap)):
                return route.handler
        return self._fallback

    async def dispatch(self, data: str, tap: Tap, answer: Answer) -> None:
        await self.handler_for(data, tap)(tap, answer)


class OneAnswer:
    """The answer to one tap: the first call sends it, later calls do nothing.

    A platform keeps a button spinning until its tap is answered, and takes one answer.
    """

    def __init__(self, send: Callable[[str | None], Awaitable[None]]) -> None:
        self._send = send
        self.sent = False

    async def __call__(self, text: str | None) -> bool:
        """Answer with ``text`` unless answered already; True when this call answered."""
        if self.sent:
            return False
        self.sent = True  # before the request: a failing one is not sent twice
        await self._send(text)
        return True


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
            await self._sender.answer_callback(c.callback_id, text, c.chat_id)

        answer = OneAnswer(send)
        try:
            await self.router.dispatch(c.data, c, answer)
        except Exception:
            error = report_failure(log, f"callback {c.callback_id} ({c.data[:64]!r})")
            sorry = SORRY_TAP.format(error=error)
            told = await answer(sorry)
            if not told and c.chat_id is not None and self._access.is_allowed(c.user_id):
                await self._sender.say_in(c.chat_id, c.thread_id, sorry)  # answered already
        finally:
            await answer(None)

    async def _on_jobs(self, c: Callback, answer: Answer) -> None:
        action = parse_job_callback(c.data)
        source = c.source
        if (
            action is None
            or (not isinstance(action, ShowPage) and not fits_db_id(action.job_id))
            or self._jobs is None
            or source is None
            or c.chat_id is None
            or c.message_id is None
        ):
            await answer(EXPIRED)
            return
        if not self._access.is_allowed(c.user_id):
            await answer(NOT_ALLOWED)
            return
        if isinstance(action, ShowPage):
            await answer(None)
            text, keyboard = await self._jobs.render(source, action.page)
        else:
            decider = self._access.decider(c.user_id)
            outcome = await self._jobs.act(source, action, decider)  # only this chat's jobs
            await answer(outcome)
            text, keyboard = await self._jobs.render(source, showing=action.job_id)
        await self._sender.edit(c.chat_id, c.message_id, text, [], keyboard)

    async def _on_memory(self, c: Callback, answer: Answer) -> None:
        if self._memory is None:
            await answer(EXPIRED)
            return
        if not self._access.is_allowed(c.user_id):
            await answer(NOT_ALLOWED)
            return
        await self._memory.on_tap(c, answer)  # whose facts: the panel checks the presser


async def _expired(_c: Callback, answer: Answer) -> None:
    await answer(EXPIRED)
