"""Clicks, modal submits and slash commands, after bolt acknowledged them.

The adapter acknowledges every interaction at once (within Slack's 3 seconds, a forged
or stale one too) and hands it here. A card's ✅ / ⏱ / 🔄 decide, and the card is updated
(``chat.update``) with the outcome; ❌ opens a modal for the reason (optional), a
question's ✍️ Answer a modal for the answer (``views.open``, within the click's trigger
window). A button is judged by what the store says of its card (open, in this channel,
on this message), never by the message that carried it, so a card shown before a restart
works after it, once. Refusals are ephemeral: only the person who clicked sees them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

from bot.delivery import CardRow
from bot.platform.access import ASKED_ALREADY, Access
from bot.platform.cards import EXPIRED, NOT_ALLOWED, decide
from bot.platform.commands import ABOUT_A_CONVERSATION
from bot.platform.controls import ControlId, parse_control
from bot.platform.failures import SORRY_TAP, report_failure
from bot.platform.open_cards import tapped
from bot.slack.cards import SlackCards, modal, modal_text, parse_metadata
from bot.slack.incoming import is_message_id, source_of, unescape
from bot.slack.messages import NOT_PAIRED, MessageHandler, SlackMe
from bot.slack.mrkdwn import to_mrkdwn
from bot.slack.sending import MESSAGE_LIMIT, mrkdwn_parts
from engine.hub import ChatHub

__all__ = ["NOT_HERE", "NOT_OUR_DM", "Interactions"]

log = logging.getLogger(__name__)

NOT_HERE = "I do not work in this workspace."
NOT_OUR_DM = (
    "I am not in this conversation: send /chathub in our direct messages, or in a channel I am in."
)
#: How long a decision waits for the decider's name (``users.info``, once per person):
#: asked before the decision, a quick tool's end closed the card first, without it.
NAME_WAIT_S = 1.0
#: Slack gives a slash command no thread: those about a conversation
#: (``ABOUT_A_CONVERSATION``) are written in the thread instead.
IN_THE_THREAD = (
    "In a channel each thread is its own conversation: write `@chathub /{name}` in the "
    "thread it is about."
)
#: A slash command's response URL takes five answers.
MAX_RESPONSES = 5
#: Tells the person who clicked (or ran a command) something only they see.
Respond = Callable[[str], Awaitable[None]]
Json = dict[str, Any]


class Interactions:
    def __init__(
        self,
        hub: ChatHub,
        me: SlackMe,
        access: Access,
        cards: SlackCards,
        messages: MessageHandler,
        open_view: Callable[[str, Json], Awaitable[bool]],
    ) -> None:
        self._hub = hub
        self._me = me
        self._access = access
        self._cards = cards
        self._messages = messages
        self._open_view = open_view

    def _ours(self, team: object) -> bool:
        return team is None or self._me.team_id is None or team == self._me.team_id

    # -- buttons --------------------------------------------------------------------------

    async def click(self, body: Json, respond: Respond) -> None:
        """A ``block_actions`` payload; every refusal answered, a failure of ours too."""
        try:
            await self._click(body, respond)
        except Exception:
            error = report_failure(log, "a Slack button")
            await respond(SORRY_TAP.format(error=error))

    async def _click(self, body: Json, respond: Respond) -> None:
        if not self._ours((body.get("team") or {}).get("id")):
            await respond(NOT_HERE)
            return
        actions = body.get("actions") or [{}]
        action = actions[0] if isinstance(actions[0], dict) else {}
        parsed = parse_control(action.get("action_id"))
        container = body.get("container") or {}
        channel, shown_at = container.get("channel_id"), container.get("message_ts")
        if (
            parsed is None
            or parsed.kind not in ("card", "ask")
            or action.get("value") != str(parsed)  # forged or foreign
            or not is_message_id(channel, shown_at)
        ):
            await respond(EXPIRED)
            return
        user = str((body.get("user") or {}).get("id") or "")
        card = await self._cards.held(parsed.tool_call_id)
        kind = "approval" if parsed.kind == "card" else "question"
        card = tapped(card, kind, channel, shown_at)
        if card is None:
            await respond(EXPIRED)
            return
        if not self._access.is_allowed(user):
            await respond(NOT_ALLOWED)
            return
        trigger = str(body.get("trigger_id") or "")
        if parsed.kind == "ask":
            await self._ask(
                trigger, ControlId("answer", card.tool_call_id), card, shown_at, respond
            )
            return
        decider = self._access.decider(user)
        refused = await self._hub.decision_refusal(card.tool_call_id, decider)
        if refused is not None:  # the card stays as it is, for those who may decide
            await respond(refused)
            return
        if parsed.choice == "reject":
            await self._ask(
                trigger, ControlId("reason", card.tool_call_id), card, shown_at, respond
            )
            return
        assert parsed.choice is not None
        name = await self._name_soon(user)
        result = await decide(self._hub, card.source, card.tool_call_id, parsed.choice, decider)
        await self._after(card, result, parsed.choice, name, respond)

    async def _ask(
        self, trigger: str, action: ControlId, card: CardRow, shown_at: str, respond: Respond
    ) -> None:
        """The form for ``action``, naming the card's message (its row may not have the
        message's ts yet: the click can come before the send's answer is recorded)."""
        if not await self._open_view(trigger, modal(action, card.conversation, shown_at)):
            await respond("I could not open the form; please click again.")

    async def _name_soon(self, user: str) -> str | Callable[[], Awaitable[str]]:
        """The decider's name, known before the decision (the card names who decided,
        and the tool's end can close it first); how to ask later if Slack is slow."""
        try:
            return await asyncio.wait_for(self._messages.name_of(user), NAME_WAIT_S)
        except TimeoutError:
            return partial(self._messages.name_of, user)

    async def _after(
        self,
        card: CardRow,
        result: str,
        outcome: str,
        name: str | Callable[[], Awaitable[str]],
        respond: Respond,
        note: str = "",
    ) -> None:
        if not await self._cards.after_tap(card, result, outcome, name, note):
            await respond(NOT_ALLOWED)

    # -- modals ---------------------------------------------------------------------------

    async def submit(
        self, body: Json, view: Json, tell: Callable[[str, str], Awaitable[None]]
    ) -> None:
        """A ``view_submission`` (the modal already closed by its ack); refusals are told
        to the user (``tell(user, text)``)."""
        user = str((body.get("user") or {}).get("id") or "")
        try:
            await self._submit(body, view, user, tell)
        except Exception:
            error = report_failure(log, "a Slack modal")
            await tell(user, SORRY_TAP.format(error=error))

    async def _submit(
        self, body: Json, view: Json, user: str, tell: Callable[[str, str], Awaitable[None]]
    ) -> None:
        if not self._ours((body.get("team") or {}).get("id")):
            return
        parsed = parse_control(view.get("callback_id"))
        where = parse_metadata(view.get("private_metadata"))
        if parsed is None or parsed.kind not in ("reason", "answer") or where is None:
            await tell(user, EXPIRED)
            return
        channel, shown_at = where
        card = await self._cards.held(parsed.tool_call_id)
        kind = "approval" if parsed.kind == "reason" else "question"
        card = tapped(card, kind, channel, shown_at)
        if card is None:
            await tell(user, EXPIRED)
            return
        if not self._access.is_allowed(user):
            await tell(user, NOT_ALLOWED)
            return
        text = modal_text(view)
        if parsed.kind == "answer":
            await self._answer(card, text, user, tell)
            return
        decider = self._access.decider(user)
        refused = await self._hub.decision_refusal(card.tool_call_id, decider)
        if refused is not None:
            await tell(user, refused)
            return
        name = await self._name_soon(user)
        result = await decide(self._hub, card.source, card.tool_call_id, "reject", decider, text)

        async def told(line: str) -> None:
            await tell(user, line)

        await self._after(card, result, "reject", name, told, text)

    async def _answer(
        self, card: CardRow, text: str, user: str, tell: Callable[[str, str], Awaitable[None]]
    ) -> None:
        if not text.strip():
            await tell(user, "An answer needs some text.")
            return
        refused = await self._hub.answer_refusal(card.tool_call_id, self._access.decider(user))
        if refused is not None:  # another member's: the question waits for who asked
            await tell(user, refused)
            return
        await self._cards.answer(card, text, by=await self._messages.name_of(user))

    # -- slash commands -------------------------------------------------------------------

    async def command(self, body: Json, respond: Respond) -> None:
        """``/chathub <command> [argument]``: the command's reply only its user sees."""
        try:
            await self._command(body, respond)
        except Exception:
            error = report_failure(log, "a Slack slash command")
            await respond(SORRY_TAP.format(error=error))

    async def _command(self, body: Json, respond: Respond) -> None:
        if not self._ours(body.get("team_id")):
            await respond(NOT_HERE)
            return
        user = str(body.get("user_id") or "")
        channel = body.get("channel_id")
        # Slack runs a command in any conversation: a DM between two people is none of
        # the bot's (until 2026-12-07 taken for the person's DM with it: "/chathub new"
        # answered nothing, "sethome" sent every notification where Slack refuses the bot;
        # found by review).
        dm = isinstance(channel, str) and channel.startswith("D")
        if dm and await self._messages.direct_with(user) not in (channel, None):
            await respond(NOT_OUR_DM)  # (not knowing, Slack away: taken as theirs)
            return
        if not self._access.is_allowed(user):
            # In their DM a stranger's command is their request, as a message there is (it
            # told them to send a direct message, in one, until 2026-12-06; found by review).
            if not dm or not await self._messages.offer_pairing(user, channel, respond):
                await respond(ASKED_ALREADY if dm else NOT_PAIRED)
            return
        if not isinstance(channel, str) or not is_message_id(channel, "0.0"):
            await respond(EXPIRED)
            return
        # Escaped as a message's text is ("Tom &amp; Jerry"; until 2026-12-06 taken as it came).
        words = unescape(str(body.get("text") or "")).strip().split(None, 1)
        name = words[0].lstrip("/").lower() if words else "help"
        argument = words[1] if len(words) > 1 else ""
        if name in ABOUT_A_CONVERSATION and not channel.startswith("D"):
            await respond(to_mrkdwn(IN_THE_THREAD.format(name=name)))
            return
        # Slack gives a command no thread: it acts on the DM, or on the channel itself.
        reply = await self._messages.run_command(source_of(channel), name, argument, user)
        # In parts, as a message is (until 2026-12-06 a long /memory was cut at 4,000).
        parts = mrkdwn_parts(reply or "")
        if len(parts) > MAX_RESPONSES:
            parts = [
                *parts[: MAX_RESPONSES - 1],
                parts[MAX_RESPONSES - 1][: MESSAGE_LIMIT - 2] + " …",
            ]
        for part in parts:
            await respond(part)
