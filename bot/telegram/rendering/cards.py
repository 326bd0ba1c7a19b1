"""Approval cards, their callback data, and clarification questions, rendered for Telegram.

What a card shows and what its choices mean is ``bot/platform/cards.py``; here it becomes
Telegram text plus Bot API entity dicts (offsets in UTF-16 code units) and an inline
keyboard. Buttons carry ``ap1:<tool_call_id>:<a|r|t|s>`` (read back by
``dispatch/approvals.py``); questions are answered by replying with text, so they have no
callbacks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from bot.platform.cards import CHOICE_LABELS, CardContent, Choice, card_content, outcome_line
from bot.telegram.rendering.render import TELEGRAM_LIMIT, render_markdown, utf16_len
from engine.session import ApprovalRequired

__all__ = [
    "ACTION_CODES",
    "CALLBACK_PREFIX",
    "MAX_CALLBACK_BYTES",
    "MAX_TOOL_CALL_ID",
    "Action",
    "Card",
    "Outcome",
    "approval_card",
    "approval_keyboard",
    "card_of",
    "format_callback",
    "question_text",
    "reject_window_keyboard",
    "resolved_card",
]

Action = Choice
Outcome = Literal["approve", "reject", "bypass_15m", "bypass_session", "cancelled", "expired"]

CALLBACK_PREFIX = "ap1"
MAX_CALLBACK_BYTES = 64  # Telegram's limit for callback_data
#: A question's card, as an approval card's (3,500): room is left for its outcome line.
QUESTION_CHARS = 3500
ACTION_CODES: dict[str, str] = {
    "approve": "a",
    "reject": "r",
    "bypass_15m": "t",
    "bypass_session": "s",
}
#: Tool-call ids are signed 64-bit database ids: a button beyond that names no card.
MAX_TOOL_CALL_ID = 2**63 - 1
_NAME_MAX = 100  # tool and agent names longer than this are cut in the header


@dataclass(frozen=True, slots=True)
class Card:
    """An approval card: send ``text``/``entities`` with ``reply_markup``; when
    ``document`` is set (``(filename, data)``) send it too: the text only shows part."""

    text: str
    entities: list[dict[str, Any]]
    reply_markup: dict[str, Any]
    document: tuple[str, bytes] | None = None


# --- callback data -------------------------------------------------------------------


def format_callback(tool_call_id: int, action: Action) -> str:
    """``ap1:<tool_call_id>:<code>``; raises ``ValueError`` for a bad id or action."""
    if (
        isinstance(tool_call_id, bool)
        or not isinstance(tool_call_id, int)
        or not 0 < tool_call_id <= MAX_TOOL_CALL_ID
    ):
        raise ValueError(f"tool_call_id must be a positive 64-bit int, got {tool_call_id!r}")
    if action not in ACTION_CODES:
        raise ValueError(f"unknown action {action!r}")
    return f"{CALLBACK_PREFIX}:{tool_call_id}:{ACTION_CODES[action]}"


def approval_keyboard(tool_call_id: int) -> dict[str, Any]:
    """The card's inline keyboard: Approve / Reject, then 15 min / Session bypasses."""

    def button(action: Action) -> dict[str, str]:
        label = CHOICE_LABELS[action]
        return {"text": label, "callback_data": format_callback(tool_call_id, action)}

    return {
        "inline_keyboard": [
            [button("approve"), button("reject")],
            [button("bypass_15m"), button("bypass_session")],
        ]
    }


def reject_window_keyboard(tool_call_id: int) -> dict[str, Any]:
    """While a reason may be given: one button to reject without one."""
    data = format_callback(tool_call_id, "reject")
    return {"inline_keyboard": [[{"text": "❌ Reject without a reason", "callback_data": data}]]}


# --- text building -------------------------------------------------------------------


class _Text:
    """Appends text pieces and records entities with UTF-16 offsets."""

    def __init__(self) -> None:
        self._parts: list[str] = []
        self._offset = 0
        self.entities: list[dict[str, Any]] = []

    @property
    def length(self) -> int:
        return self._offset

    def add(self, text: str, kind: str | None = None, **extra: Any) -> _Text:
        size = utf16_len(text)
        if kind is not None and size > 0:
            entity: dict[str, Any] = {"type": kind, "offset": self._offset, "length": size}
            entity.update({k: v for k, v in extra.items() if v is not None})
            self.entities.append(entity)
        self._parts.append(text)
        self._offset += size
        return self

    def text(self) -> str:
        return "".join(self._parts)


# --- approval card -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Body:
    """What the card shows below the header: ``content`` in a ``pre`` block."""

    label: str  # "Command", "Diff", "Arguments"
    content: str
    language: str
    extension: str
    before: tuple[tuple[str, str | None], ...] = ()  # (text, entity type) pieces
    after: tuple[tuple[str, str | None], ...] = ()


def approval_card(
    event: ApprovalRequired, *, max_chars: int = 3500, deciders: str | None = None
) -> Card:
    """The approval card for ``event``; ``max_chars`` bounds the text (UTF-16 units).

    ``deciders`` is the line saying who may decide (``APPROVERS``). When the content does
    not fit, the text shows its beginning, says that it is cut, and ``document`` carries
    the full content.
    """
    return card_of(card_content(event, deciders), event.tool_call_id, max_chars=max_chars)


def card_of(content: CardContent, tool_call_id: int, *, max_chars: int = 3500) -> Card:
    """The approval card showing ``content`` for the call ``tool_call_id``."""
    max_chars = min(max_chars, TELEGRAM_LIMIT)
    body = _body(content)
    header = _header(content)

    full = _assemble(header, body, body.content, note=None)
    if full.length <= max_chars:
        return Card(full.text(), full.entities, approval_keyboard(tool_call_id))

    filename = f"approval-{tool_call_id}.{body.extension}"
    total_lines = len(body.content.splitlines()) or 1
    noun = body.label.lower()

    def note(excerpt: str) -> str:
        if not excerpt:
            return f"⚠️ The {noun} is too long to show here; it is in full in {filename}."
        shown = len(excerpt.splitlines())
        if body.content.startswith(excerpt + "\n"):  # whole lines
            cut = f"showing the first {shown} of {total_lines} lines"
        else:
            cut = "showing only the beginning"
        return f"⚠️ Cut: {cut}. The full {noun} is in {filename}."

    budget = max_chars - _assemble(header, body, "", note=note("")).length
    while True:
        excerpt = _head(body.content, budget)
        card = _assemble(header, body, excerpt, note=note(excerpt))
        if card.length <= max_chars or not excerpt:
            break
        budget -= card.length - max_chars  # the note is longer than the one assumed
    return Card(
        card.text(),
        card.entities,
        approval_keyboard(tool_call_id),
        (filename, _document(body)),
    )


def _document(body: _Body) -> bytes:
    """The full content; a command byte for byte, a diff or JSON as a text file."""
    data = body.content if body.extension == "txt" else body.content + "\n"
    return data.encode("utf-8")


def _header(shown: CardContent) -> _Text:
    out = _Text()
    out.add(_cut_units(shown.title, 2 * _NAME_MAX, "…"), "bold").add("\n")
    out.add("Tool: ").add(_cut_units(shown.tool, _NAME_MAX, "…"), "code").add("\n")
    out.add("Agent: ").add(_cut_units(shown.agent, _NAME_MAX, "…"), "code")
    if shown.depth > 0:
        out.add(f" (sub-agent, depth {shown.depth})")
    if shown.deciders:
        out.add("\n").add(f"👤 {_cut_units(shown.deciders, 2 * _NAME_MAX, '…')}", "italic")
    return out


def _body(shown: CardContent) -> _Body:
    if shown.label == "Command":
        after = (("Working directory: ", None), (shown.workdir, "code")) if shown.workdir else ()
        return _Body(shown.label, shown.content, shown.language, "txt", after=after)
    if shown.label == "Diff":
        before: list[tuple[str, str | None]] = [("File: ", None), (shown.path or "?", "code")]
        if shown.new_file:
            before.append((" (new file)", None))
        return _Body(shown.label, shown.content, shown.language, "diff", before=tuple(before))
    return _Body(shown.label, shown.content, shown.language, "json")


def _assemble(header: _Text, body: _Body, content: str, *, note: str | None) -> _Text:
    out = _Text()
    out.add(header.text())
    out.entities.extend(dict(e) for e in header.entities)
    out.add("\n")
    for text, kind in body.before:
        out.add(text, kind)
    if body.before:
        out.add("\n")
    out.add("\n")
    if note is not None:
        out.add(note, "italic").add("\n")
    if content:
        out.add(f"{body.label}:\n")
        out.add(content, "pre", language=body.language)
    elif note is None:
        out.add(f"{body.label}: (empty)")
    else:
        out.add(f"{body.label}: see the attached file.")
    if body.after:
        out.add("\n")
        for text, kind in body.after:
            out.add(text, kind)
    return out


def _head(content: str, budget: int) -> str:
    """The longest run of whole leading lines of ``content`` within ``budget`` units.

    A first line longer than the budget is cut mid-line (the card says it is cut).
    """
    if budget <= 0:
        return ""
    shown: list[str] = []
    used = 0
    for line in content.splitlines():
        cost = utf16_len(line) + (1 if shown else 0)
        if used + cost > budget:
            if not shown:
                return _cut_units(line, budget)
            break
        shown.append(line)
        used += cost
    return "\n".join(shown)


def _cut_units(text: str, budget: int, mark: str = "") -> str:
    """``text`` cut to ``budget`` UTF-16 units, ``mark`` included, when it is longer."""
    if utf16_len(text) <= budget:
        return text
    budget -= utf16_len(mark)
    used = 0
    for i, ch in enumerate(text):
        used += 2 if ord(ch) > 0xFFFF else 1
        if used > budget:
            return text[:i] + mark
    return text + mark


# --- after resolution ----------------------------------------------------------------


def resolved_card(
    original_text: str,
    original_entities: Sequence[dict[str, Any]] | None,
    outcome: str,
    by: str | None,
    *,
    note: str | None = None,
) -> tuple[str, list[dict[str, Any]]]:
    """The card after resolution: the original text plus one outcome line.

    ``outcome`` is an action (``approve``, ``reject``, ``bypass_15m``,
    ``bypass_session``) or ``cancelled`` / ``expired``; ``by`` names who decided and
    ``note`` (a rejection reason) follows a colon. Send it without buttons.
    """
    verb, suffix = outcome_line(outcome)
    line = _Text().add("\n\n").add(verb, "bold").add(f" by {by}" if by else "").add(suffix)
    # The outcome always shows: a card as long as a message is cut to make room (a long
    # question's closing edit was refused as too long, and it looked open for good).
    room = TELEGRAM_LIMIT - line.length
    shown = _cut_units(original_text, room, "…")
    cut = utf16_len(shown) - (1 if shown != original_text else 0)
    out = _Text()
    out.add(shown)
    for entity in original_entities or ():
        if entity["offset"] < cut:
            length = min(entity["length"], cut - entity["offset"])
            out.entities.append({**entity, "length": length})
    out.add("\n\n")
    out.add(verb, "bold")
    if by:
        out.add(f" by {by}")
    out.add(suffix)
    if note:
        room = TELEGRAM_LIMIT - out.length - 2
        if room > 0:
            out.add(": ").add(_cut_units(note, room))
    return out.text(), out.entities


# --- questions -----------------------------------------------------------------------


def question_text(question: str) -> tuple[str, list[dict[str, Any]]]:
    """A clarification question: a bold ``❓ Question`` header, then the question.

    The question is Markdown (it comes from the model); what does not fit one message is
    left out, ending with ``…``.
    """
    out = _Text()
    out.add("❓ Question", "bold").add("\n\n")
    room = QUESTION_CHARS - out.length - 1
    chunks = render_markdown(question, limit=room)
    if not chunks:
        return out.text().rstrip(), list(out.entities)
    base = out.length
    out.add(chunks[0].text)
    out.entities.extend({**e, "offset": e["offset"] + base} for e in chunks[0].entities)
    if len(chunks) > 1:
        out.add("…")
    return out.text(), out.entities
