"""What a card's controls say, durably: ``card:<tool call id>:<choice>`` for a choice,
``ask:<id>`` for a question's answer button, ``reason:<id>`` / ``answer:<id>`` for the
forms they open. A platform puts this string where its controls carry one (Discord's
``custom_id``, Slack's ``action_id`` and ``callback_id``), so a card shown before a
restart still works after it; anything else parses to ``None``, never an exception.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from bot.platform.cards import CHOICES, Choice

__all__ = ["ControlId", "Kind", "parse_control"]

Kind = Literal["card", "ask", "reason", "answer"]

#: A tool call id is a positive 64-bit integer; nothing larger is looked up.
_MAX_ID = 2**63 - 1
_CONTROL = re.compile(r"^(card|ask|reason|answer):([1-9][0-9]{0,18})(?::([a-z0-9_]{1,20}))?$")


@dataclass(frozen=True, slots=True)
class ControlId:
    kind: Kind
    tool_call_id: int
    choice: Choice | None = None

    def __str__(self) -> str:
        tail = f":{self.choice}" if self.choice else ""
        return f"{self.kind}:{self.tool_call_id}{tail}"


def parse_control(data: object) -> ControlId | None:
    """Our control behind ``data``; ``None`` for junk (never raises)."""
    if not isinstance(data, str) or len(data) > 100:
        return None
    match = _CONTROL.match(data)
    if match is None:
        return None
    kind, raw_id, choice = match.groups()
    tool_call_id = int(raw_id)
    if tool_call_id > _MAX_ID:
        return None
    if kind == "card":
        if choice not in CHOICES:
            return None
        return ControlId("card", tool_call_id, choice)
    if choice is not None:
        return None
    return ControlId(kind, tool_call_id)  # type: ignore[arg-type]
