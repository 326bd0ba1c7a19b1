"""``TelegramAdapter``: Telegram updates into the hub, hub events back into chats.

Framework-neutral: it talks to Telegram only through ``BotApi`` (either binding), stores
what must survive a restart in ``TelegramStore``, and sends through ``Outbound``.
"""

from __future__ import annotations

import asyncio
import logging
import re
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from sqlalchemy.engine import Connection

from bot.platform.commands import Command, CommandContext, CommandRegistry, shared_commands
from bot.telegram.api import BotApi, Json, TelegramError, is_not_modified
from bot.telegram.cards import (
    approval_card,
    parse_callback,
    question_text,
    resolved_card,
)
from bot.telegram.jobs import JobsPanel, parse_job_callback
from bot.telegram.lanes import Lanes
from bot.telegram.outbound import Outbound
from bot.telegram.render import progress_text, render_markdown
from bot.telegram.store import CardRow, OutboxRow, TelegramStore, enqueue_in, mark_handled_in
from bot.telegram.updates import Callback, Ignored, Message, fits_db_id, parse_update
from engine.approval.broker import SHORT_BYPASS_SECONDS
from engine.approval.deciders import Decider
from engine.bus.broadcast import Lagged
from engine.hub import (
    ChatHub,
    DecisionMade,
    FailureNotice,
    HubError,
    HubEvent,
    NewSession,
    SendOptions,
)
from engine.session import events as ev
from engine.store.history import AlsoWithKey, AlsoWithRow
from engine.store.inbox import SENDER_KEY, InboxError, NotPermitted

__all__ = ["TelegramAdapter", "TelegramConfig"]

log = logging.getLogger(__name__)

EXPIRED = "This button has expired."
# What a person sees when handling their update failed: never the exception, an id the
# log line (with the traceback) carries too.
UNREADABLE_MESSAGE = "I cannot read this kind of message yet; please send text, a photo or a file."
SORRY_MESSAGE = "Sorry, something went wrong while handling your message (error {error})."
SORRY_TAP = "Sorry, something went wrong while handling your tap (error {error})."
REASON_PROMPT = "Reply to this message with a reason within {seconds} s, or tap ❌ again."
_SAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")


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
    reject_window_s: float = 60.0
    pairing_reminder_s: float = 600.0
    max_download_bytes: int = 20 * 1024 * 1024
    #: Show the answer while it is written: a draft in private chats, an edited message
    #: in groups (``TELEGRAM_STREAMING``).
    streaming: bool = False
    stream_interval_s: float = 1.0


@dataclass(eq=False)
class _ChatView:
    """What one source's chat shows while a turn runs."""

    chat_id: int
    thread_id: int | None
    progress_id: int | None = None
    progress_lines: list[str] = field(default_factory=list)
    progress_shown: str = ""
    progress_at: float = 0.0
    typing: asyncio.Task[None] | None = None
    stream_text: str = ""
    stream_at: float = 0.0
    stream_message_id: int | None = None
    drafts: int = 0


@dataclass(frozen=True, slots=True)
class _Rejecting:
    deadline: float
    user_name: str
    decider: Decider


class _OneAnswer:
    """The answer to one callback query: the first call sends it, later calls do nothing.

    Telegram keeps a button spinning until the query is answered, and accepts one answer.
    """

    def __init__(self, send: Callable[[str, str | None], Awaitable[None]], callback_id: str):
        self._send = send
        self._callback_id = callback_id
        self.sent = False

    async def __call__(self, text: str | None) -> bool:
        """Answer with ``text`` unless answered already; True when this call answered."""
        if self.sent:
            return False
        self.sent = True  # before the request: a failing one is not sent twice
        await self._send(self._callback_id, text)
        return True


class TelegramAdapter:
    def __init__(
        self,
        hub: ChatHub,
        api: BotApi,
        store: TelegramStore,
        outbound: Outbound,
        config: TelegramConfig,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        jobs: JobsPanel | None = None,
    ) -> None:
        self.hub = hub
        self.api = api
        self.store = store
        self.outbound = outbound
        self.config = config
        self._clock = clock
        self._sleep = sleep
        self._jobs = jobs
        self.commands = self._commands()
        self.bot_id: int | None = None
        self.bot_username: str | None = None
        self._paired: set[int] = set()
        self._views: dict[str, _ChatView] = {}
        self._rejecting: dict[int, _Rejecting] = {}
        # Open cards by source, mirrored from the store: a message checks them without a read.
        self._open: dict[str, dict[int, CardRow]] = {}
        self._reminded: dict[int, float] = {}
        self._incoming: Lanes[int, Json] = Lanes(self._handle_in_lane, "tg-in")
        self._outgoing: Lanes[str, HubEvent] = Lanes(self._render, "tg-out")
        self._tasks: set[asyncio.Task[Any]] = set()
        # Outbox rows stored with an answer (by ``_answer_unit``), sent when its Done arrives.
        self._recorded_finals: dict[int, list[OutboxRow]] = {}
        hub.on_answer("telegram:", self._answer_unit)
        # A failed turn's notice rows (by ``_failure_unit``), sent when its FailureNotice comes.
        self._recorded_notices: dict[str, list[OutboxRow]] = {}
        hub.on_failure("telegram:", self._failure_unit)

    # -- life cycle ----------------------------------------------------------------------

    async def start(self) -> None:
        """Local state and the hub subscription; no Telegram call, so nothing here waits
        for Telegram (a Telegram outage at start must not hold up the hub).

        Called before the hub recovers, so answers to resumed turns reach their chats. The
        caller makes the start-up calls (``bot/telegram/startup.py``: getMe — which sets
        ``bot_id``/``bot_username`` — and setMyCommands, retried) before any update is
        handed over. Deliveries recorded but unsent become due at once and are sent by
        ``Redelivery``; answers stored without outbox rows are delivered in the background.
        """
        self._paired = await self.store.paired_users()
        for card in await self.store.open_cards():
            self._open.setdefault(card.source, {})[card.tool_call_id] = card
        events = self.hub.events()
        self._spawn(self._pump(events))
        await self.outbound.recover()
        finals = await self.store.undelivered_finals()

        async def deliver_finals() -> None:
            for source, message_id, content in finals:
                try:
                    await self._deliver_final(self._view(source), message_id, content)
                except Exception:  # the database is away: found again at the next start
                    log.exception("delivering the stored answer %s failed", message_id)

        if finals:
            self._spawn(deliver_finals())

    async def close(self) -> None:
        for view in self._views.values():
            if view.typing is not None:
                view.typing.cancel()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._incoming.close()
        await self._outgoing.close()
        await self.outbound.flush()

    def submit(self, update: Json) -> None:
        """Handle a stored update: in order within its chat, concurrently across chats."""
        key = _chat_key(update)
        self._incoming.submit(key, update)

    async def drain(self) -> None:
        """Wait until every submitted update and every received event was handled."""
        await self._incoming.join()
        await self._outgoing.join()

    # -- incoming ------------------------------------------------------------------------

    async def _handle_in_lane(self, _key: int, update: Json) -> None:
        marked = False
        try:
            marked = await self.handle(update)
        finally:
            update_id = update.get("update_id")
            if isinstance(update_id, int) and not marked:
                await self.store.mark_handled(update_id)

    async def handle(self, update: Json) -> bool:
        """Act on one update; True when it was marked handled along the way.

        Junk never gets this far (``parse_update`` checks every field). A failure of our
        own is logged with a short error id, and the sender is told that id in one plain
        sentence: never the exception.
        """
        incoming = parse_update(update)
        match incoming:
            case Ignored(reason=reason):
                log.info("ignored update %s: %s", incoming.update_id, reason)
            case Message(edited=True):
                log.info("ignored an edited message in chat %s", incoming.chat_id)
            case Message():
                return await self._on_message_guarded(incoming)
            case Callback():
                await self._on_callback(incoming)
        return False

    async def _on_message_guarded(self, m: Message) -> bool:
        try:
            return await self._on_message(m)
        except Exception:
            error = _report_failure(f"message {m.message_id} in chat {m.chat_id}")
            if self.is_allowed(m.user_id):  # a stranger learns nothing but the pairing code
                await self._say(m.chat_id, m.thread_id, SORRY_MESSAGE.format(error=error))
            return False

    def decider(self, user_id: int | None) -> Decider:
        """Who taps a card or replies to it, for the ``APPROVERS`` rule."""
        if user_id is None:
            return Decider(None)
        owner = user_id == self.config.approving_owner
        return Decider(str(user_id), is_owner=owner, is_allowed=self.is_allowed(user_id))

    def is_allowed(self, user_id: int | None) -> bool:
        if user_id is None:  # a callback without a sender (and owner_id may be None too)
            return False
        return (
            user_id in self.config.allowed_user_ids
            or user_id == self.config.owner_id
            or user_id in self._paired
        )

    async def _on_message(self, m: Message) -> bool:
        if m.is_group and not self._addressed(m):
            return False
        if not self.is_allowed(m.user_id):
            if not m.is_group:
                await self._offer_pairing(m)
            return False
        command = m.command(self.bot_username)
        if command is not None:
            await self._command(m, *command)
            return False
        if await self._answer_card(m):
            return False
        if m.notice is not None:  # a voice note: not handled yet, and said so once
            await self._say(m.chat_id, m.thread_id, m.notice)
            return False
        lines = [m.text, *m.described]
        if m.location is not None:
            lat, lon = m.location
            lines.append(f"📍 Location: {lat:.6f}, {lon:.6f}")
        text = "\n".join(line for line in lines if line)
        attachments, problems = await self._download(m)
        if problems:  # one warning per message, whatever went wrong with its files
            await self._say(m.chat_id, m.thread_id, "⚠️ " + " ".join(problems))
        if not text.strip() and not attachments:
            if not problems:
                await self._say(m.chat_id, m.thread_id, UNREADABLE_MESSAGE)
            return False
        metadata: dict[str, Any] = {
            "telegram_message_id": m.message_id,
            # Who asked: with APPROVERS requester+owner they may decide what this turn gates.
            SENDER_KEY: {"id": str(m.user_id), "name": m.user_name},
        }
        if attachments:
            metadata["attachments"] = attachments
        options = SendOptions(metadata=metadata)
        update_id = m.update_id
        try:
            # Stored and marked handled in one commit: a crash leaves both or neither (and
            # an update left unhandled is handed over again at the next start).
            await self.hub.send_message(
                m.source,
                text,
                options,
                also=lambda conn: mark_handled_in(conn, update_id),
                redelivered_if_lost=True,
            )
        except HubError as exc:
            await self._say(m.chat_id, m.thread_id, f"⚠️ {exc}")
            return False
        self._start_typing(m.source, m.chat_id, m.thread_id)
        return True

    def _addressed(self, m: Message) -> bool:
        """In groups the bot answers only when mentioned, replied to, or commanded."""
        if self.bot_id is not None and m.reply_to_user_id == self.bot_id:
            return True
        if m.text.startswith("/"):
            return m.command(self.bot_username) is not None
        for entity in m.entities:
            kind = entity.get("type")
            if kind == "text_mention" and (entity.get("user") or {}).get("id") == self.bot_id:
                return True
            if kind == "mention" and self.bot_username:
                mention = _utf16_slice(m.text, entity.get("offset", 0), entity.get("length", 0))
                if mention.lower() == f"@{self.bot_username.lower()}":
                    return True
        return False

    async def _offer_pairing(self, m: Message) -> None:
        row, new = await self.store.issue_code(m.user_id, m.chat_id, m.user_name)
        now = self._clock()
        if not new and now - self._reminded.get(m.user_id, -1e18) < self.config.pairing_reminder_s:
            return  # rate-limited: one reminder per window
        self._reminded[m.user_id] = now
        if row is None:
            await self._say(m.chat_id, None, "I am not taking new people right now; try later.")
            return
        await self._say(
            m.chat_id,
            None,
            f"Hi {m.user_name}! I only talk to people my owner approved.\n"
            f"Your pairing code is {row.code} (valid 24 hours). "
            f"Ask the owner to send /pair {row.code}.",
        )
        if new and self.config.owner_id is not None:
            await self._say(
                self.config.owner_id,
                None,
                f"{m.user_name} (id {m.user_id}) asks to talk to me. Approve with /pair {row.code}",
            )

    def _commands(self) -> CommandRegistry:
        """The shared commands and Telegram's own (``/jobs`` with buttons, pairing)."""
        registry = CommandRegistry()
        for command in shared_commands(lambda: registry.help_text()):
            registry.register(command)
        registry.register(Command("jobs", "Scheduled jobs of this chat", self._show_jobs))
        registry.register(Command("pair", "Let a user in", self._pair, "<code>", owner_only=True))
        registry.register(
            Command("unpair", "Revoke a user", self._unpair, "<user_id>", owner_only=True)
        )
        return registry

    async def _command(self, m: Message, name: str, arg: str) -> None:
        # Pairing is Telegram's own: the owner is TELEGRAM_OWNER_ID, never a fallback.
        is_owner = self.config.owner_id is not None and m.user_id == self.config.owner_id
        context = CommandContext(self.hub, m.source, arg, str(m.user_id), is_owner)
        reply = await self.commands.run(name, context)
        if reply:
            await self._say(m.chat_id, m.thread_id, reply)

    async def _show_jobs(self, c: CommandContext) -> str | None:
        if self._jobs is None:
            return "No scheduled jobs."
        chat_id, thread_id = _parse_source(c.source)
        text, keyboard = await self._jobs.render(c.source)
        await self.outbound.send_text(chat_id, text, reply_markup=keyboard, thread_id=thread_id)
        return None

    async def _pair(self, c: CommandContext) -> str:
        owner = int(c.user_id or 0)
        row = await self.store.redeem(c.argument)
        if row is None:
            return "No pending pairing with that code (wrong, used or expired)."
        await self.store.pair(row.user_id, row.name, owner)
        self._paired.add(row.user_id)
        await self._say(row.chat_id, None, "👋 Welcome! You can talk to me now.")
        return f"Paired {row.name} (id {row.user_id})."

    async def _unpair(self, c: CommandContext) -> str:
        user_id = _id_argument(c.argument.strip())
        if user_id is None:
            return "Usage: /unpair <user_id>"
        removed = await self.store.unpair(user_id)
        self._paired.discard(user_id)
        return f"Unpaired {user_id}." if removed else f"{user_id} was not paired."

    async def _answer_card(self, m: Message) -> bool:
        """A reply to a question (or any message while one is open) answers it; a reply
        to an approval card in its reject window is the reason."""
        cards = list(self._open.get(m.source, {}).values())
        if not cards:
            return False
        if m.reply_to_message_id is not None:
            for card in cards:
                if card.message_id == m.reply_to_message_id:
                    if card.kind == "question":
                        return await self._answer_question(m, card)
                    if card.tool_call_id in self._rejecting:
                        await self._reject(
                            m.source, card, m.user_name, m.text, self.decider(m.user_id)
                        )
                        return True
        questions = [c for c in cards if c.kind == "question"]
        if questions and not m.text.startswith("/"):
            return await self._answer_question(m, questions[-1])
        return False

    async def _answer_question(self, m: Message, card: CardRow) -> bool:
        try:
            await self.hub.resolve_question(m.source, card.tool_call_id, m.text)
        except (InboxError, HubError) as exc:
            log.info("question %s not answerable: %s", card.tool_call_id, exc)
            await self._close_quietly(card, "expired")
            return False
        await self._close_quietly(card, "answered")
        self._start_typing(m.source, m.chat_id, m.thread_id)
        return True

    # -- callbacks -----------------------------------------------------------------------

    async def _on_callback(self, c: Callback) -> None:
        """Exactly one answerCallbackQuery per query, whatever its data and whatever fails.

        Every path answers through ``answer`` (which sends once); a path that has not
        answered when it ends or fails is answered here, so no button is left spinning.
        """
        answer = _OneAnswer(self._answer_callback, c.callback_id)
        try:
            if c.data.startswith("jb1:"):
                await self._on_jobs_callback(c, answer)
            else:
                await self._on_card_callback(c, answer)
        except Exception:
            error = _report_failure(f"callback {c.callback_id} ({c.data[:64]!r})")
            sorry = SORRY_TAP.format(error=error)
            told = await answer(sorry)
            if not told and c.chat_id is not None and self.is_allowed(c.user_id):
                await self._say(c.chat_id, c.thread_id, sorry)  # the tap was answered already
        finally:
            await answer(None)

    async def _on_card_callback(self, c: Callback, answer: _OneAnswer) -> None:
        action = parse_callback(c.data)  # None for ids no card can have (past 64 bits)
        card = await self.store.card(action.tool_call_id) if action else None
        valid = (
            action is not None
            and card is not None
            and card.kind == "approval"
            and card.state == "open"
            and card.chat_id == c.chat_id
            and (card.message_id is None or card.message_id == c.message_id)
        )
        if not valid or card is None or action is None:
            await answer(EXPIRED)
            return
        if not self.is_allowed(c.user_id):
            await answer("You are not allowed to decide here.")
            return
        decider = self.decider(c.user_id)
        refused = await self.hub.decision_refusal(card.tool_call_id, decider)
        if refused is not None:  # the card stays as it is, for those who may decide
            await answer(refused)
            return
        await answer(None)  # at once: the spinner stops
        source = card.source
        try:
            match action.action:
                case "approve":
                    await self.hub.approve(source, card.tool_call_id, decider=decider)
                case "bypass_15m":
                    await self.hub.approve(
                        source,
                        card.tool_call_id,
                        bypass_secs=SHORT_BYPASS_SECONDS,
                        bypass_scope="all",
                        decider=decider,
                    )
                case "bypass_session":
                    await self.hub.approve(
                        source, card.tool_call_id, bypass_scope="all", decider=decider
                    )
                case _:
                    if card.tool_call_id in self._rejecting:
                        await self._reject(source, card, c.user_name, "", decider)
                        return
                    await self._open_reject_window(card, c.user_name, decider)
                    return
        except NotPermitted as exc:  # cannot follow the check above; the card stays open
            log.warning("decision on %s refused: %s", card.tool_call_id, exc)
            return
        except (InboxError, HubError) as exc:
            log.info("decision on %s refused: %s", card.tool_call_id, exc)
            await self._close(card, "expired", "expired")
            return
        await self._close(card, action.action, "resolved", by=c.user_name)

    async def _on_jobs_callback(self, c: Callback, answer: _OneAnswer) -> None:
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
        if not self.is_allowed(c.user_id):
            await answer("You are not allowed to decide here.")
            return
        outcome = await self._jobs.act(source, action)  # only this chat's jobs
        await answer(outcome)
        text, keyboard = await self._jobs.render(source)
        await self._edit(c.chat_id, c.message_id, text, [], keyboard)

    async def _open_reject_window(self, card: CardRow, user_name: str, decider: Decider) -> None:
        seconds = int(self.config.reject_window_s)
        self._rejecting[card.tool_call_id] = _Rejecting(self._clock() + seconds, user_name, decider)
        keyboard = {
            "inline_keyboard": [
                [
                    {
                        "text": "❌ Reject without a reason",
                        "callback_data": f"ap1:{card.tool_call_id}:r",
                    }
                ]
            ]
        }
        text = f"{card.text}\n\n{REASON_PROMPT.format(seconds=seconds)}"
        await self._edit(card.chat_id, card.message_id, text, card.entities or [], keyboard)
        self._spawn(self._reject_after_window(card, user_name, decider))

    async def _reject_after_window(self, card: CardRow, user_name: str, decider: Decider) -> None:
        await self._sleep(self.config.reject_window_s)
        if card.tool_call_id in self._rejecting:
            await self._reject(card.source, card, user_name, "", decider)

    async def _reject(
        self, source: str, card: CardRow, user_name: str, note: str, decider: Decider
    ) -> None:
        refused = await self.hub.decision_refusal(card.tool_call_id, decider)
        if refused is not None:  # a reason from someone else: the window stays open
            await self._say(card.chat_id, _parse_source(card.source)[1], f"⚠️ {refused}")
            return
        self._rejecting.pop(card.tool_call_id, None)
        try:
            await self.hub.reject(source, card.tool_call_id, note, decider=decider)
        except NotPermitted as exc:  # cannot follow the check above
            log.warning("rejection of %s by %s refused: %s", card.tool_call_id, user_name, exc)
            return
        except (InboxError, HubError) as exc:
            log.info("rejection of %s refused: %s", card.tool_call_id, exc)
            await self._close(card, "expired", "expired")
            return
        await self._close(card, "reject", "resolved", by=user_name, note=note or None)

    async def _close(
        self,
        card: CardRow,
        outcome: str,
        state: str,
        *,
        by: str | None = None,
        note: str | None = None,
    ) -> None:
        """Show the outcome on the card once (whoever closes it first edits it)."""
        if not await self._close_quietly(card, state):
            return
        self._rejecting.pop(card.tool_call_id, None)
        if card.message_id is None:
            return
        text, entities = resolved_card(card.text, card.entities or [], outcome, by, note=note)
        await self._edit(card.chat_id, card.message_id, text, entities, None)

    # -- outgoing ------------------------------------------------------------------------

    async def _pump(self, events: Any) -> None:
        async for item in events:
            if isinstance(item, Lagged):
                log.warning("telegram adapter lagged behind the hub by %d event(s)", item.missed)
                continue
            if item.source.startswith("telegram:"):
                self._outgoing.submit(item.source, item)

    async def _render(self, source: str, item: HubEvent) -> None:
        view = self._view(source)
        event = item.event
        match event:
            case ev.TextDelta(text=delta, depth=0) if self.config.streaming:
                view.stream_text += delta
                await self._show_stream(view, force=False)
            case ev.Thinking(depth=0):
                view.stream_text = ""  # that text led to tool calls; the answer comes later
            case ev.ToolStart(name=name, arguments=arguments, depth=depth):
                view.progress_lines.append(f"{'  ' * depth}⚙ {name} {_preview(arguments)}")
                await self._show_progress(view, force=False)
            case ev.ToolDone(name=name, depth=depth):
                self._mark_progress(view, depth, name, "✓")
                await self._close_by_id(source, event.tool_call_id, "approve", "ran")
                await self._show_progress(view, force=False)
            case ev.ToolError(name=name, depth=depth):
                self._mark_progress(view, depth, name, "✗")
                await self._close_by_id(source, event.tool_call_id, "approve", "ran")
                await self._show_progress(view, force=False)
            case ev.ToolRejected(name=name, depth=depth):
                self._mark_progress(view, depth, name, "⊘")
                await self._close_by_id(source, event.tool_call_id, "reject", "rejected")
            case ev.ToolCancelled(name=name, depth=depth):
                self._mark_progress(view, depth, name, "⊘")
                await self._close_by_id(source, event.tool_call_id, "cancelled", "cancelled")
            case ev.ApprovalRequired():
                await self._send_card(source, view, event)
            case ev.Question():
                await self._send_question(source, view, event)
            case ev.Done(content=content, message_id=message_id):
                self._stop_typing(view)
                await self._end_stream(view)
                await self._deliver_final(view, message_id, content)
                # The last marks on the progress line after the answer: the person waits
                # for the answer, not for a cosmetic edit above it.
                await self._show_progress(view, force=True)
                self._reset_progress(view)
            case ev.Error():
                self._stop_typing(view)
                await self._end_stream(view)
                await self._show_progress(view, force=True)
                self._reset_progress(view)
                await self._deliver_notice(view, event)
            case DecisionMade(tool_call_id=call_id, outcome=outcome, by=by, note=note):
                await self._close_by_id(source, call_id, outcome, "resolved", by=by, note=note)
            case NewSession():
                self._reset_progress(view)
                await self._say(view.chat_id, view.thread_id, "🆕 New conversation started.")

    async def _show_stream(self, view: _ChatView, *, force: bool) -> None:
        """The answer so far: a draft in private chats, an edited message elsewhere."""
        now = self._clock()
        text = view.stream_text.strip()
        if not text or (not force and now - view.stream_at < self.config.stream_interval_s):
            return
        view.stream_at = now
        text = text[:4000]
        try:
            if view.chat_id > 0:
                if view.drafts == 0:
                    view.drafts = int(now * 1000) % 2_000_000_000 + 1
                await self.outbound.call(
                    view.chat_id,
                    lambda: self.api.send_message_draft(
                        view.chat_id, view.drafts, text, message_thread_id=view.thread_id
                    ),
                )
            elif view.stream_message_id is None:
                sent = await self.outbound.send_text(view.chat_id, text, thread_id=view.thread_id)
                view.stream_message_id = sent.get("message_id")
            else:
                await self._edit(view.chat_id, view.stream_message_id, text, [], None)
        except TelegramError as exc:
            log.info("streaming to chat %s failed: %s", view.chat_id, exc)

    async def _end_stream(self, view: _ChatView) -> None:
        """The final answer replaces the streamed one (a draft simply ends)."""
        if view.stream_message_id is not None:
            message_id = view.stream_message_id
            try:
                await self.outbound.call(
                    view.chat_id, lambda: self.api.delete_message(view.chat_id, message_id)
                )
            except TelegramError as exc:
                log.info("could not delete the streamed message: %s", exc)
        view.stream_text, view.stream_message_id, view.drafts = "", None, 0

    def _answer_unit(self, source: str, content: str) -> AlsoWithRow:
        """The answer's outbox rows, written in the transaction that stores the answer."""
        view = self._view(source)
        payloads = _final_payloads(view, content)

        def record(conn: Connection, message_id: int) -> None:
            rows = [
                enqueue_in(conn, view.chat_id, _final_key(message_id, index), payload)
                for index, payload in enumerate(payloads)
            ]
            self._recorded_finals[message_id] = [row for row in rows if row is not None]

        return record

    def _failure_unit(self, source: str, notice: str) -> AlsoWithKey:
        """A failed turn's notice in the outbox, written in the transaction ending the turn."""
        view = self._view(source)
        payloads = _final_payloads(view, f"⚠️ {notice}")

        def record(conn: Connection, key: str) -> None:
            rows = [
                enqueue_in(conn, view.chat_id, f"{key}:{index}", payload)
                for index, payload in enumerate(payloads)
            ]
            self._recorded_notices[key] = [row for row in rows if row is not None]

        return record

    async def _deliver_notice(self, view: _ChatView, event: ev.Error) -> None:
        """A notice stored with its failed turn is sent from the outbox (once, a restart
        included); any other error is said directly."""
        key = event.key if isinstance(event, FailureNotice) else None
        recorded = self._recorded_notices.pop(key, None) if key is not None else None
        if recorded is None:
            await self._say(view.chat_id, view.thread_id, f"⚠️ {event.message}")
            return
        for row in recorded:
            await self.outbound.deliver_row(row)

    async def _deliver_final(self, view: _ChatView, message_id: int, content: str) -> None:
        recorded = self._recorded_finals.pop(message_id, None)
        if recorded is not None:  # stored with the answer: only the sending is left
            for row in recorded:
                await self.outbound.deliver_row(row)
            return
        for index, payload in enumerate(_final_payloads(view, content)):
            await self.outbound.deliver(view.chat_id, _final_key(message_id, index), payload)

    async def _send_card(self, source: str, view: _ChatView, event: ev.ApprovalRequired) -> None:
        existing = await self.store.card(event.tool_call_id)
        if existing is not None and existing.state == "open" and existing.message_id is not None:
            return  # asked again after a restart: the card already shown still works
        card = approval_card(event, deciders=await self.hub.who_may_decide(event.tool_call_id))
        row = CardRow(
            event.tool_call_id,
            "approval",
            source,
            view.chat_id,
            None,  # recorded before sending: a tap on a card we never recorded still works
            card.text,
            card.entities,
            "open",
        )
        await self._save_card(row)
        sent = await self.outbound.send_text(
            view.chat_id,
            card.text,
            entities=card.entities,
            reply_markup=card.reply_markup,
            thread_id=view.thread_id,
        )
        await self._save_card(replace(row, message_id=sent.get("message_id")))
        if card.document is not None:
            filename, data = card.document
            await self.outbound.call(
                view.chat_id,
                lambda: self.api.send_document(
                    view.chat_id,
                    filename,
                    data,
                    caption="The full arguments of the call above.",
                    message_thread_id=view.thread_id,
                ),
            )

    async def _send_question(self, source: str, view: _ChatView, event: ev.Question) -> None:
        text, entities = question_text(event.question)
        card = CardRow(
            event.request_id, "question", source, view.chat_id, None, text, entities, "open"
        )
        # Open before it is sent: an answer typed the moment the question shows must find it.
        await self._save_card(card)
        try:
            sent = await self.outbound.send_text(
                view.chat_id,
                text,
                entities=entities,
                reply_markup={"force_reply": True, "input_field_placeholder": "Your answer"},
                thread_id=view.thread_id,
            )
        except TelegramError:
            await self._close_quietly(card, "expired")  # never shown: nothing may answer it
            raise
        if card.tool_call_id in self._open.get(source, {}):  # not answered meanwhile
            await self._save_card(replace(card, message_id=sent.get("message_id")))

    async def _save_card(self, card: CardRow) -> None:
        await self.store.save_card(card)
        self._open.setdefault(card.source, {})[card.tool_call_id] = card

    async def _close_quietly(self, card: CardRow, state: str) -> bool:
        """Close in the store and in memory; False when it was closed already."""
        cards = self._open.get(card.source, {})
        cards.pop(card.tool_call_id, None)
        if not cards:
            self._open.pop(card.source, None)
        return await self.store.close_card(card.tool_call_id, state)

    async def _close_by_id(
        self,
        source: str,
        tool_call_id: int,
        outcome: str,
        state: str,
        *,
        by: str | None = None,
        note: str | None = None,
    ) -> None:
        card = self._open.get(source, {}).get(tool_call_id)  # no read per tool event
        if card is not None:
            await self._close(card, outcome, state, by=by, note=note or None)

    def _mark_progress(self, view: _ChatView, depth: int, name: str, mark: str) -> None:
        prefix = f"{'  ' * depth}⚙ {name}"
        for i in range(len(view.progress_lines) - 1, -1, -1):
            line = view.progress_lines[i]
            if line.startswith(prefix) and not line.endswith(("✓", "✗", "⊘")):
                view.progress_lines[i] = f"{line} {mark}"
                return

    async def _show_progress(self, view: _ChatView, *, force: bool) -> None:
        """One message edited in place, at most every ``progress_interval_s``."""
        if not view.progress_lines:
            return
        text = progress_text(view.progress_lines)
        if text == view.progress_shown:
            return
        now = self._clock()
        if view.progress_id is None:
            sent = await self.outbound.send_text(view.chat_id, text, thread_id=view.thread_id)
            view.progress_id = sent.get("message_id")
        elif force or now - view.progress_at >= self.config.progress_interval_s:
            await self._edit(view.chat_id, view.progress_id, text, [], None)
        else:
            return
        view.progress_shown, view.progress_at = text, now

    def _reset_progress(self, view: _ChatView) -> None:
        view.progress_id, view.progress_lines, view.progress_shown = None, [], ""

    async def _edit(
        self,
        chat_id: int,
        message_id: int | None,
        text: str,
        entities: list[Json],
        reply_markup: Json | None,
    ) -> None:
        if message_id is None:
            return
        try:
            await self.outbound.edit(
                chat_id,
                message_id,
                lambda: self.api.edit_message_text(
                    chat_id,
                    message_id,
                    text,
                    entities=entities or None,
                    reply_markup=reply_markup,  # none: Telegram drops the buttons
                ),
            )
        except TelegramError as exc:
            if not is_not_modified(exc):
                log.warning("editing message %s in chat %s failed: %s", message_id, chat_id, exc)

    async def _say(self, chat_id: int, thread_id: int | None, text: str) -> None:
        for chunk in render_markdown(text) or ():
            try:
                await self.outbound.send_text(
                    chat_id, chunk.text, entities=chunk.entities, thread_id=thread_id
                )
            except TelegramError as exc:
                log.warning("sending to chat %s failed: %s", chat_id, exc)
                return

    async def _answer_callback(self, callback_id: str, text: str | None) -> None:
        try:
            await self.api.answer_callback_query(callback_id, text=text)
        except TelegramError as exc:
            log.info("answering callback %s failed: %s", callback_id, exc)

    def _view(self, source: str) -> _ChatView:
        view = self._views.get(source)
        if view is None:
            chat_id, thread_id = _parse_source(source)
            view = self._views[source] = _ChatView(chat_id, thread_id)
        return view

    def _start_typing(self, source: str, chat_id: int, thread_id: int | None) -> None:
        view = self._view(source)
        if view.typing is None or view.typing.done():
            view.typing = self._spawn(self._keep_typing(source, view))

    def _stop_typing(self, view: _ChatView) -> None:
        if view.typing is not None:
            view.typing.cancel()
            view.typing = None

    async def _keep_typing(self, source: str, view: _ChatView) -> None:
        await self._sleep(self.config.typing_delay_s)
        while self.hub.is_processing(source):
            try:
                await self.api.send_chat_action(
                    view.chat_id, "typing", message_thread_id=view.thread_id
                )
            except TelegramError as exc:
                log.debug("typing indicator failed: %s", exc)
            await self._sleep(self.config.typing_interval_s)

    async def _download(self, m: Message) -> tuple[list[Json], list[str]]:
        """The message's files saved in the workspace, and a sentence for each one that
        could not be (too large, or the download failed)."""
        attachments: list[Json] = []
        problems: list[str] = []
        folder = Path("uploads") / "telegram" / str(m.chat_id)
        limit = self.config.max_download_bytes
        for ref in m.files:
            too_large = f"{ref.name} is too large to download (the limit is {_mb(limit)})."
            if ref.size is not None and ref.size > limit:
                problems.append(too_large)
                continue
            name = _SAFE_NAME.sub("_", f"{ref.unique_id}_{ref.name}")[:150]
            relative = folder / name
            try:
                info = await self.api.get_file(ref.file_id)
                size = info.get("file_size")  # the message may not have said (or lied)
                if isinstance(size, int) and size > limit:
                    problems.append(too_large)
                    continue
                await self.api.download_file(info["file_path"], self.config.workspace / relative)
            except (TelegramError, KeyError, OSError) as exc:
                log.warning("download of %s failed: %s", ref.file_id, exc)
                problems.append(f"I could not download {ref.name}.")
                continue
            attachment: Json = {
                "path": relative.as_posix(),
                "name": ref.name,
                "kind": ref.kind,
                "mime_type": ref.mime_type,
                "size": (self.config.workspace / relative).stat().st_size,
            }
            if ref.duration is not None:
                attachment["duration_s"] = ref.duration
            attachments.append(attachment)
        return attachments, problems

    def _spawn(self, work: Any) -> asyncio.Task[Any]:
        task = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task


def _mb(size: int) -> str:
    return f"{size / (1024 * 1024):g} MB"


def _report_failure(what: str) -> str:
    """Log the exception being handled under a fresh short id; returns the id.

    The person affected is told the id, never the exception: they can quote it, and the
    log line with the traceback is found by it.
    """
    error = secrets.token_hex(3)
    log.exception("%s failed (error %s)", what, error)
    return error


def _id_argument(text: str) -> int | None:
    """A command's numeric argument, or ``None``: ASCII digits (``str.isdigit`` accepts
    "²", which ``int`` refuses), an optional minus, and a number the database can hold."""
    digits = text.removeprefix("-")
    if not digits.isascii() or not digits.isdigit() or len(digits) > 19:
        return None
    number = int(text)
    return number if fits_db_id(number) else None


def _chat_key(update: Json) -> int:
    for kind in ("message", "edited_message"):
        chat = (update.get(kind) or {}).get("chat") if isinstance(update.get(kind), dict) else None
        if isinstance(chat, dict) and isinstance(chat.get("id"), int):
            return chat["id"]
    query = update.get("callback_query")
    if isinstance(query, dict) and isinstance(query.get("message"), dict):
        chat = query["message"].get("chat")
        if isinstance(chat, dict) and isinstance(chat.get("id"), int):
            return chat["id"]
    return 0


def _final_key(message_id: int, index: int) -> str:
    """An answer's chunk in the outbox (``undelivered_finals`` looks for chunk 0)."""
    return f"final:{message_id}:{index}"


def _final_payloads(view: _ChatView, content: str) -> list[Json]:
    return [
        {"text": chunk.text, "entities": chunk.entities, "thread_id": view.thread_id}
        for chunk in render_markdown(content)
    ]


def _parse_source(source: str) -> tuple[int, int | None]:
    parts = source.split(":")
    return int(parts[1]), int(parts[2]) if len(parts) > 2 else None


def _utf16_slice(text: str, offset: int, length: int) -> str:
    data = text.encode("utf-16-le")
    return data[offset * 2 : (offset + length) * 2].decode("utf-16-le", errors="ignore")


def _preview(arguments: str, limit: int = 60) -> str:
    flat = " ".join(arguments.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
