"""Approval cards and questions in Discord: Markdown messages with buttons, kept open in
the delivery layer's cards (``platform_cards``), closed once with their outcome.

A button's ``custom_id`` names the call durably (``card:<tool call id>:<choice>``,
``ask:<tool call id>``), so a card shown before a restart still works after it; a modal's
does too (``reason:<id>``, ``answer:<id>``). A card is recorded before it is sent (a tap
on it works as soon as it shows) and closed once: whoever closes it first edits it.
"""

from __future__ import annotations

import logging
import re

from bot.delivery import CardRow, CardStore
from bot.discord.incoming import target_of
from bot.discord.sending import MESSAGE_LIMIT, Buttons, DiscordSender, in_messages
from bot.platform.cards import (
    CHOICE_LABELS,
    CardContent,
    Choice,
    outcome_line,
)
from bot.platform.chunks import in_code_block
from bot.platform.controls import ControlId
from bot.platform.open_cards import OpenCards, Words
from engine.hub import ChatHub

__all__ = [
    "ANSWER_LABEL",
    "DiscordCards",
    "card_text",
    "full_call",
]

log = logging.getLogger(__name__)

ANSWER_LABEL = "✍️ Answer"
_STYLES: dict[Choice, int] = {"approve": 3, "reject": 4, "bypass_15m": 2, "bypass_session": 2}


def card_buttons(tool_call_id: int) -> Buttons:
    """✅ / ❌ on the first row, ⏱ 15 min / 🔄 Session on the second."""

    def button(choice: Choice) -> dict[str, object]:
        return {
            "custom_id": str(ControlId("card", tool_call_id, choice)),
            "label": CHOICE_LABELS[choice],
            "style": _STYLES[choice],
        }

    return [[button("approve"), button("reject")], [button("bypass_15m"), button("bypass_session")]]


def question_buttons(tool_call_id: int) -> Buttons:
    return [[{"custom_id": str(ControlId("ask", tool_call_id)), "label": ANSWER_LABEL, "style": 1}]]


_ZWSP = "\u200b"


def _span(text: str) -> str:
    """``text`` as inline code that no backtick in it can end (a path or an agent's name
    is the model's: one with a backtick ended the span, and what followed was drawn as
    Markdown on the card; found by review on 2026-12-07)."""
    if "`" not in text:
        return f"`{text}`"
    return f"`` {re.sub(r'`(?=`)', '`' + _ZWSP, text)} ``"


def card_text(shown: CardContent, limit: int = MESSAGE_LIMIT) -> str:
    """The card as Markdown within ``limit``: the title, the tool, who may decide, the
    call in a code block (its beginning, said so, when it does not fit)."""
    lines = [
        f"**{shown.title}**",
        f"Tool: {_span(shown.tool[:100])} · Agent: {_span(shown.agent[:100])}",
    ]
    if shown.depth > 0:
        lines[-1] += f" (sub-agent, depth {shown.depth})"
    if shown.deciders:
        lines.append(f"*👤 {shown.deciders[:200]}*")
    if shown.label == "Diff" and shown.path:
        lines.append(f"File: {_span(shown.path[:200])}{' (new file)' if shown.new_file else ''}")
    workdir = f"Working directory: {_span(shown.workdir[:200])}" if shown.workdir else ""
    head = "\n".join(lines) + f"\n{shown.label}:\n"
    # Discord ends a block at the first ```, whatever fence opened it: until 2026-12-07 a
    # longer fence was relied on, and a command holding ``` was drawn as Markdown after
    # it, where a ||spoiler|| could hide its end from the approver (found by review).
    code = in_code_block(shown.content)

    def assemble(content: str, note: str) -> str:
        tail = "\n".join(part for part in (workdir, note) if part)
        block = f"```{shown.language}\n{content}\n```"
        return head + block + (f"\n{tail}" if tail else "")

    whole = assemble(code, "")
    if len(whole) <= limit:
        return whole
    note = "⚠️ Cut: showing only the beginning."
    room = limit - len(assemble("…", note))
    return assemble(code[: max(0, room - 1)].rstrip() + "\n…", note)[:limit]


def _whole(shown: CardContent) -> int:
    """The card's length were nothing cut (``card_text`` without its limit)."""
    return len(card_text(shown, limit=10**9))


def full_call(shown: CardContent, tool_call_id: int) -> tuple[str, bytes]:
    """The call's content in full as a file: a command as text, a diff, JSON."""
    extension = {"Command": "txt", "Diff": "diff"}.get(shown.label, "json")
    return f"approval-{tool_call_id}.{extension}", shown.content.encode("utf-8")


def resolved_text(text: str, outcome: str, by: str | None, note: str | None = None) -> str:
    """The card after it was decided: its text and one outcome line, within the limit."""
    verb, suffix = outcome_line(outcome)
    line = f"**{verb}**" + (f" by {by}" if by else "") + suffix
    if note:
        line += f": {note}"
    line = line[: MESSAGE_LIMIT // 2]
    room = MESSAGE_LIMIT - len(line) - 2
    if len(text) <= room:
        return f"{text}\n\n{line}"
    # Cut where Markdown is whole: a code block is closed, and the outcome is not shown as
    # code (it was until 2026-12-06; found by review).
    body = (in_messages(text, room - 2) or [""])[0]
    return f"{body}\n…\n\n{line}"


def question_text(question: str) -> str:
    head = "**❓ Question**\n\n"
    chunks = in_messages(question, MESSAGE_LIMIT - len(head) - 1) or [""]
    return head + chunks[0] + ("…" if len(chunks) > 1 else "")


class DiscordFace:
    """Discord's look of a card: a message with buttons, edited to its outcome."""

    def __init__(self, sender: DiscordSender) -> None:
        self._sender = sender

    def conversation(self, source: str) -> str:
        return target_of(source)

    def card_words(self, shown: CardContent, tool_call_id: int) -> Words:
        return Words(card_text(shown))

    def question_words(self, question: str) -> Words:
        return Words(question_text(question))

    def attachment(
        self, shown: CardContent, tool_call_id: int, text: str
    ) -> tuple[str, bytes] | None:
        """Cut to fit: the call in full rides along as a file, as on Telegram."""
        return full_call(shown, tool_call_id) if len(text) < _whole(shown) else None

    async def post(self, card: CardRow, attachment: tuple[str, bytes] | None) -> str | None:
        buttons = card_buttons if card.kind == "approval" else question_buttons
        sent = await self._sender.send_now(
            card.conversation,
            card.text,
            buttons(card.tool_call_id),
            attachment,
            nonce=f"card-{card.tool_call_id}",  # posted again after an outage: once
        )
        return None if sent is None else str(sent.id)

    async def closed(self, card: CardRow, outcome: str, by: str | None, note: str | None) -> None:
        assert card.message_id is not None
        text = resolved_text(card.text, outcome, by, note)
        await self._sender.edit(card.conversation, card.message_id, text, None)


class DiscordCards(OpenCards):
    """The open cards (``OpenCards``), rendered for Discord."""

    def __init__(self, hub: ChatHub, store: CardStore, sender: DiscordSender) -> None:
        super().__init__(hub, store, DiscordFace(sender))
