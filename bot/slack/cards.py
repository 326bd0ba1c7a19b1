"""Approval cards and questions in Slack: Block Kit messages with buttons, kept open in
the delivery layer's cards (``platform_cards``, ``bot.platform.open_cards``), updated
once with their outcome (``chat.update``, the buttons gone).

A button's ``action_id`` names the call durably (``card:<tool call id>:<choice>``,
``ask:<tool call id>``) and its ``value`` repeats it, so a card shown before a restart
still works after it; a modal's ``callback_id`` does too (``reason:<id>``,
``answer:<id>``), with the card's channel and ts in its ``private_metadata``.
"""

from __future__ import annotations

import json
from typing import Any

from bot.delivery import CardRow, CardStore
from bot.platform.cards import (
    CHOICE_LABELS,
    CHOICES,
    CardContent,
    Choice,
    outcome_line,
)
from bot.platform.controls import ControlId
from bot.platform.open_cards import OpenCards, Words
from bot.slack.incoming import is_message_id, parse_source
from bot.slack.mrkdwn import code_block, escape, escape_within, to_mrkdwn
from bot.slack.sending import SlackSender, mrkdwn_parts
from engine.hub import ChatHub

__all__ = [
    "ANSWER_LABEL",
    "SlackCards",
    "card_blocks",
    "card_text",
    "modal",
    "parse_metadata",
]

ANSWER_LABEL = "✍️ Answer"
#: Block Kit: a section's text, a modal's title.
SECTION_LIMIT = 3000
#: A context block's text element (the outcome line under a closed card).
CONTEXT_LIMIT = 2000
_STYLES: dict[Choice, str] = {"approve": "primary", "reject": "danger"}
_MODAL_TEXT = 1000

Json = dict[str, Any]


def parse_metadata(data: object) -> tuple[str, str] | None:
    """A modal's ``private_metadata``: the card's channel and ts; ``None`` for junk."""
    if not isinstance(data, str) or len(data) > 200:
        return None
    try:
        where = json.loads(data)
    except ValueError:
        return None
    if not isinstance(where, dict):
        return None
    channel, ts = where.get("c"), where.get("m")
    return (channel, ts) if is_message_id(channel, ts) else None


def card_text(shown: CardContent, limit: int = SECTION_LIMIT) -> str:
    """The card as mrkdwn within ``limit``: the title, the tool, who may decide, the call
    in a code block (its beginning, said so, when it does not fit)."""
    lines = [
        f"*{escape(shown.title)}*",
        f"Tool: `{escape(shown.tool[:100])}` · Agent: `{escape(shown.agent[:100])}`",
    ]
    if shown.depth > 0:
        lines[-1] += f" (sub-agent, depth {shown.depth})"
    if shown.deciders:
        lines.append(f"_👤 {escape(shown.deciders[:200])}_")
    if shown.label == "Diff" and shown.path:
        new = " (new file)" if shown.new_file else ""
        lines.append(f"File: `{escape(shown.path[:200])}`{new}")
    workdir = f"Working directory: `{escape(shown.workdir[:200])}`" if shown.workdir else ""
    head = "\n".join(lines) + f"\n{shown.label}:\n"

    def assemble(content: str, note: str) -> str:
        tail = "\n".join(part for part in (workdir, note) if part)
        return head + code_block(content) + (f"\n{tail}" if tail else "")

    whole = assemble(shown.content, "")
    if len(whole) <= limit:
        return whole
    note = "⚠️ Cut: showing only the beginning (the inbox page shows it all)."
    room = limit - len(assemble("…", note))
    content = shown.content
    while content and len(assemble(content + "\n…", note)) > limit:  # escapes grow it
        content = content[: max(0, min(len(content) - 1, room))]
        room -= max(1, room // 10)
    return assemble(content.rstrip() + "\n…", note)[:limit]


def _section(text: str) -> Json:
    return {"type": "section", "text": {"type": "mrkdwn", "text": text[:SECTION_LIMIT]}}


def _button(action: ControlId, label: str, style: str | None = None) -> Json:
    button: Json = {
        "type": "button",
        "action_id": str(action),
        "value": str(action),
        "text": {"type": "plain_text", "text": label, "emoji": True},
    }
    if style:
        button["style"] = style
    return button


def card_blocks(card: CardRow) -> list[Json]:
    """A card's text and its buttons: ✅ ❌ ⏱ 🔄 for an approval, ✍️ for a question."""
    key = card.tool_call_id
    if card.kind == "approval":
        buttons = [
            _button(ControlId("card", key, choice), CHOICE_LABELS[choice], _STYLES.get(choice))
            for choice in CHOICES
        ]
    else:
        buttons = [_button(ControlId("ask", key), ANSWER_LABEL, "primary")]
    return [
        _section(card.text),
        {"type": "actions", "block_id": f"card:{key}", "elements": buttons},
    ]


def resolved_blocks(card: CardRow, outcome: str, by: str | None, note: str | None) -> list[Json]:
    verb, suffix = outcome_line(outcome)
    line = f"*{verb}*" + (f" by {escape_within(by, 200)}" if by else "") + suffix
    if note:
        line += f": {escape_within(note, CONTEXT_LIMIT - len(line) - 2)}"
    context = {"type": "context", "elements": [{"type": "mrkdwn", "text": line}]}
    return [_section(card.text), context]


def _summary(card: CardRow) -> str:
    """The notification's text (a card's blocks show; this is what a phone pops up)."""
    return "🔐 Approval needed" if card.kind == "approval" else "❓ A question for you"


#: Said under a question too long for its card.
QUESTION_CUT = "⚠️ Cut: the inbox page shows the whole question."
#: A last paragraph this short is kept under a cut question: what is asked is usually there.
ASKED_CHARS = 500


def question_text(question: str) -> str:
    """The question as mrkdwn within a section; a long one cut where its Markdown may be
    cut (a code block closed), its last paragraph kept (until 2026-12-07 it was cut at a
    character count: the code block left open, an escape halved, the question itself
    gone; found by review)."""
    head = "*❓ Question*\n\n"
    body = to_mrkdwn(question)
    room = SECTION_LIMIT - len(head)
    if len(body) <= room:
        return head + body
    last = question.rstrip().rsplit("\n\n", 1)[-1]
    asked = to_mrkdwn(last) if len(last) <= ASKED_CHARS and "```" not in last else ""
    tail = "\n…\n" + (f"{asked}\n" if asked else "") + QUESTION_CUT
    return head + mrkdwn_parts(question, room - len(tail))[0] + tail


def modal(action: ControlId, channel: str, ts: str) -> Json:
    """The reason (optional) for ❌, or the answer to a question, asked in a modal."""
    answer = action.kind == "answer"
    return {
        "type": "modal",
        "callback_id": str(action),
        "private_metadata": json.dumps({"c": channel, "m": ts}),
        "title": {"type": "plain_text", "text": "Answer" if answer else "Reject"},
        "submit": {"type": "plain_text", "text": "Send" if answer else "Reject"},
        "close": {"type": "plain_text", "text": "Cancel"},
        "blocks": [
            {
                "type": "input",
                "block_id": "text",
                "optional": not answer,
                "label": {"type": "plain_text", "text": "Your answer" if answer else "Reason"},
                "element": {
                    "type": "plain_text_input",
                    "action_id": "text",
                    "multiline": True,
                    "max_length": _MODAL_TEXT,
                },
            }
        ],
    }


def modal_text(view: Json) -> str:
    """The text typed into a submitted modal (empty when none)."""
    values = ((view.get("state") or {}).get("values") or {}).get("text") or {}
    value = (values.get("text") or {}).get("value")
    return value[:_MODAL_TEXT] if isinstance(value, str) else ""


class SlackFace:
    """Slack's look of a card: Block Kit in the card's thread, updated to its outcome."""

    def __init__(self, sender: SlackSender) -> None:
        self._sender = sender

    def conversation(self, source: str) -> str:
        return parse_source(source).channel

    def card_words(self, shown: CardContent, tool_call_id: int) -> Words:
        return Words(card_text(shown))

    def question_words(self, question: str) -> Words:
        return Words(question_text(question))

    def attachment(self, shown: CardContent, tool_call_id: int, text: str) -> None:
        return None  # the inbox page shows a cut call in full

    async def post(self, card: CardRow, attachment: Any) -> str | None:
        place = parse_source(card.source)
        return await self._sender.post_now(place, _summary(card), card_blocks(card))

    async def closed(self, card: CardRow, outcome: str, by: str | None, note: str | None) -> None:
        assert card.message_id is not None
        verb, _suffix = outcome_line(outcome)
        blocks = resolved_blocks(card, outcome, by, note)
        await self._sender.edit(card.conversation, card.message_id, verb, blocks)


class SlackCards(OpenCards):
    """The open cards (``OpenCards``), rendered in Block Kit."""

    def __init__(self, hub: ChatHub, store: CardStore, sender: SlackSender) -> None:
        super().__init__(hub, store, SlackFace(sender))
