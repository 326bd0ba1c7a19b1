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
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Literal

from bot.delivery import CardRow, CardStore
from bot.discord.incoming import target_of
from bot.discord.sending import MESSAGE_LIMIT, Buttons, DiscordSender
from bot.platform.cards import (
    CHOICE_LABELS,
    CHOICES,
    CardContent,
    Choice,
    card_content,
    outcome_line,
)
from bot.platform.chunks import split_markdown
from engine.hub import ChatHub
from engine.session import ApprovalRequired, Question

__all__ = [
    "ANSWER_LABEL",
    "CustomId",
    "DiscordCards",
    "card_text",
    "full_call",
    "parse_custom_id",
]

log = logging.getLogger(__name__)

ANSWER_LABEL = "✍️ Answer"
#: A tool call id is a positive 64-bit integer; nothing larger is looked up.
_MAX_ID = 2**63 - 1
_CUSTOM_ID = re.compile(r"^(card|ask|reason|answer):([1-9][0-9]{0,18})(?::([a-z0-9_]{1,20}))?$")
_STYLES: dict[Choice, int] = {"approve": 3, "reject": 4, "bypass_15m": 2, "bypass_session": 2}

Kind = Literal["card", "ask", "reason", "answer"]


@dataclass(frozen=True, slots=True)
class CustomId:
    kind: Kind
    tool_call_id: int
    choice: Choice | None = None

    def __str__(self) -> str:
        tail = f":{self.choice}" if self.choice else ""
        return f"{self.kind}:{self.tool_call_id}{tail}"


def parse_custom_id(data: object) -> CustomId | None:
    """Our button or modal behind ``data``; ``None`` for junk (never raises)."""
    if not isinstance(data, str) or len(data) > 100:
        return None
    match = _CUSTOM_ID.match(data)
    if match is None:
        return None
    kind, raw_id, choice = match.groups()
    tool_call_id = int(raw_id)
    if tool_call_id > _MAX_ID:
        return None
    if kind == "card":
        if choice not in CHOICES:
            return None
        return CustomId("card", tool_call_id, choice)
    if choice is not None:
        return None
    return CustomId(kind, tool_call_id)


def card_buttons(tool_call_id: int) -> Buttons:
    """✅ / ❌ on the first row, ⏱ 15 min / 🔄 Session on the second."""

    def button(choice: Choice) -> dict[str, object]:
        return {
            "custom_id": str(CustomId("card", tool_call_id, choice)),
            "label": CHOICE_LABELS[choice],
            "style": _STYLES[choice],
        }

    return [[button("approve"), button("reject")], [button("bypass_15m"), button("bypass_session")]]


def question_buttons(tool_call_id: int) -> Buttons:
    return [[{"custom_id": str(CustomId("ask", tool_call_id)), "label": ANSWER_LABEL, "style": 1}]]


def _fence(content: str) -> str:
    """A code fence longer than any run of backticks in ``content``."""
    longest = max((len(run) for run in re.findall(r"`+", content)), default=0)
    return "`" * max(3, longest + 1)


def card_text(shown: CardContent, limit: int = MESSAGE_LIMIT) -> str:
    """The card as Markdown within ``limit``: the title, the tool, who may decide, the
    call in a code block (its beginning, said so, when it does not fit)."""
    lines = [f"**{shown.title}**", f"Tool: `{shown.tool[:100]}` · Agent: `{shown.agent[:100]}`"]
    if shown.depth > 0:
        lines[-1] += f" (sub-agent, depth {shown.depth})"
    if shown.deciders:
        lines.append(f"*👤 {shown.deciders[:200]}*")
    if shown.label == "Diff" and shown.path:
        lines.append(f"File: `{shown.path[:200]}`{' (new file)' if shown.new_file else ''}")
    workdir = f"Working directory: `{shown.workdir[:200]}`" if shown.workdir else ""
    head = "\n".join(lines) + f"\n{shown.label}:\n"
    fence = _fence(shown.content)

    def assemble(content: str, note: str) -> str:
        tail = "\n".join(part for part in (workdir, note) if part)
        block = f"{fence}{shown.language}\n{content}\n{fence}"
        return head + block + (f"\n{tail}" if tail else "")

    whole = assemble(shown.content, "")
    if len(whole) <= limit:
        return whole
    note = "⚠️ Cut: showing only the beginning."
    room = limit - len(assemble("…", note))
    return assemble(shown.content[: max(0, room - 1)].rstrip() + "\n…", note)[:limit]


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
    body = text if len(text) <= room else text[: room - 1] + "…"
    return f"{body}\n\n{line}"


def question_text(question: str) -> str:
    head = "**❓ Question**\n\n"
    chunks = split_markdown(question, MESSAGE_LIMIT - len(head) - 1) or [""]
    return head + chunks[0] + ("…" if len(chunks) > 1 else "")


class DiscordCards:
    """The open cards by source (a mirror of the store), shown and closed here."""

    def __init__(self, hub: ChatHub, store: CardStore, sender: DiscordSender) -> None:
        self._hub = hub
        self.store = store
        self._sender = sender
        self._open: dict[str, dict[int, CardRow]] = {}

    async def load(self) -> None:
        for card in await self.store.open():
            self._open.setdefault(card.source, {})[card.tool_call_id] = card

    def open_in(self, source: str) -> list[CardRow]:
        return list(self._open.get(source, {}).values())

    async def stored(self, tool_call_id: int) -> CardRow | None:
        return await self.store.get(tool_call_id)

    # -- showing --------------------------------------------------------------------------

    async def send_card(self, source: str, event: ApprovalRequired) -> None:
        if await self._shown(event.tool_call_id):
            return  # asked again after a restart (or decided meanwhile): that card stands
        deciders = await self._hub.who_may_decide(event.tool_call_id)
        shown = card_content(event, deciders)
        text = card_text(shown)
        # Cut to fit: the call in full rides along as a file, as on Telegram.
        document = full_call(shown, event.tool_call_id) if len(text) < _whole(shown) else None
        await self._show(source, event.tool_call_id, "approval", text, card_buttons, document)

    async def send_question(self, source: str, event: Question) -> None:
        if await self._shown(event.request_id):
            return
        text = question_text(event.question)
        await self._show(source, event.request_id, "question", text, question_buttons)

    async def _show(
        self,
        source: str,
        key: int,
        kind: str,
        text: str,
        buttons: Callable[[int], Buttons],
        document: tuple[str, bytes] | None = None,
    ) -> None:
        channel = target_of(source)
        row = CardRow(key, kind, source, channel, None, text, None, "open")
        await self._save(row)  # recorded before it is sent: a tap on it finds it
        sent = await self._sender.send(channel, text, buttons(key), document)
        if sent is None:
            await self.close_quietly(row, "expired")  # never shown: nothing may answer it
            return
        if key in self._open.get(source, {}):  # not decided meanwhile
            await self._save(replace(row, message_id=str(sent.id)))

    async def _shown(self, key: int) -> bool:
        existing = await self.stored(key)
        return (
            existing is not None and existing.message_id is not None and existing.state != "expired"
        )

    async def _save(self, card: CardRow) -> None:
        await self.store.save(card)
        self._open.setdefault(card.source, {})[card.tool_call_id] = card

    # -- closing --------------------------------------------------------------------------

    async def close_quietly(self, card: CardRow, state: str) -> bool:
        cards = self._open.get(card.source, {})
        cards.pop(card.tool_call_id, None)
        if not cards:
            self._open.pop(card.source, None)
        return await self.store.close(card.tool_call_id, state)

    async def close(
        self,
        card: CardRow,
        outcome: str,
        state: str,
        *,
        by: str | None = None,
        note: str | None = None,
    ) -> None:
        """Show the outcome on the card once, without its buttons."""
        if not await self.close_quietly(card, state):
            return
        if card.message_id is not None:
            text = resolved_text(card.text, outcome, by, note)
            await self._sender.edit(card.conversation, card.message_id, text, None)

    async def close_by_id(
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
            await self.close(card, outcome, state, by=by, note=note or None)
