"""The rendered conversation of one stack frame, kept in step with the database.

Loaded once per handler, then updated write-through by the turn (the handler's lock makes
it the only writer of its frames), so a model step renders only the current turn's rows:
the cost of a step does not grow with history length.

Rows are grouped in blocks, a block per turn. A block starts at a user/agent row that
follows an assistant row, or at a notification brought in (``starts_turn``); consecutive
user/agent rows share a block and are merged into one ``user`` message.
Closed blocks are rendered once, with previous-turn tool results over the limit hidden;
the open block is rendered fresh on every step.
"""

from __future__ import annotations

import json
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from engine.llm.types import Message
from engine.store.rows import MessageRow, ToolCallRow

#: The key of a user message's metadata that holds what its sender carried with it: text
#: that stands before the message in the session's history (an API client's earlier
#: messages the session never held; ``bot/completions``).
CARRIED_KEY = "carried"

INTERRUPTED = (
    "Error: tool call was interrupted (connection lost before user approval). "
    "Please retry the operation."
)


@dataclass(slots=True)
class _Block:
    rows: list[MessageRow] = field(default_factory=list)
    rendered: list[Message] = field(default_factory=list)

    @property
    def has_assistant(self) -> bool:
        return any(row.role == "assistant" for row in self.rows)


class FrameTranscript:
    def __init__(self, *, max_messages: int, max_tool_result_chars: int | None) -> None:
        self._max_messages = max_messages
        self._hide_over = max_tool_result_chars
        self._closed: deque[_Block] = deque()
        self._closed_rows = 0
        self._closed_flat: deque[Message] = deque()  # the closed blocks' messages, in order
        self._open = _Block()
        self.loaded = False

    def load(self, rows: list[MessageRow]) -> None:
        """Seed from stored rows (oldest first); a leading partial turn is dropped."""
        start = next((i for i, r in enumerate(rows) if starts_turn(r)), len(rows))
        for row in rows[start:]:
            self.add(row)
        self.loaded = True

    def add(self, row: MessageRow, *, within_turn: bool = False) -> None:
        """``within_turn``: a message taken into the running turn at a round boundary; it
        joins the turn's block (a new block would hide the results the turn just read)."""
        if not within_turn and self._opens_turn(row):
            self._close_open_block()
        self._open.rows.append(row)
        self._keep_within_window()

    def _opens_turn(self, row: MessageRow) -> bool:
        """Whether ``row`` closes the open block: a message after the turn's rows, or a
        notification after a turn that ended (one left with a call open, a crash's, is
        resumed from the open block: a notification that came first hid its calls)."""
        if not self._open.has_assistant:
            return False
        if row.role != "assistant":
            return True
        return row.is_synthetic and not self.open_tool_calls()

    def last_row(self) -> MessageRow | None:
        if self._open.rows:
            return self._open.rows[-1]
        return self._closed[-1].rows[-1] if self._closed else None

    def drop_last(self, row_id: int) -> None:
        """Forget a trailing row that was just marked ``failed``."""
        if self._open.rows and self._open.rows[-1].id == row_id:
            self._open.rows.pop()

    def open_input_tokens(self) -> int | None:
        """The largest context the open turn's rounds were sent (their input tokens)."""
        counts = [r.input_tokens for r in self._open.rows if r.input_tokens is not None]
        return max(counts) if counts else None

    def open_tool_calls(self) -> list[ToolCallRow]:
        return [
            call
            for row in self._open.rows
            for call in row.tool_calls
            if call.status in ("running", "pending")
        ]

    def tool_call_changed(self, call: ToolCallRow) -> None:
        """Re-render closed blocks if ``call`` lives in one (only after crash recovery)."""
        if any(row.id == call.message_id for row in self._open.rows):
            return  # the open block is rendered fresh anyway
        for block in reversed(self._closed):
            if any(row.id == call.message_id for row in block.rows):
                block.rendered = _render(block.rows, self._hide_over)
                self._reflatten()
                return

    def messages(self) -> list[Message]:
        """History messages: the closed blocks as rendered, then the open block fresh."""
        return [*self._closed_flat, *_render(self._open.rows, None)]

    def _close_open_block(self) -> None:
        block = self._open
        block.rendered = _render(block.rows, self._hide_over)
        self._closed.append(block)
        self._closed_rows += len(block.rows)
        self._closed_flat.extend(block.rendered)
        self._open = _Block()

    def _keep_within_window(self) -> None:
        """Whole old turns are dropped while the closed turns and the open one hold more
        rows than the window (until 2026-12-06 the turn just closed counted twice, and a
        finished turn longer than half the window was dropped; found by review)."""
        while self._closed and self._closed_rows + len(self._open.rows) > self._max_messages:
            oldest = self._closed.popleft()
            self._closed_rows -= len(oldest.rows)
            for _ in oldest.rendered:  # they lead the flat list: drop just those
                self._closed_flat.popleft()

    def _reflatten(self) -> None:
        self._closed_flat = deque(message for block in self._closed for message in block.rendered)


def starts_turn(row: MessageRow) -> bool:
    """Whether ``row`` can open a turn: a user/agent message, or a notification (a synthetic
    assistant row stored outside any turn; until 2026-12-06 a chat that only received
    notifications was one turn forever: never windowed, never compacted, read back empty;
    found by review)."""
    return row.role != "assistant" or row.is_synthetic


def _render(rows: list[MessageRow], hide_over: int | None) -> list[Message]:
    out: list[Message] = []
    user_parts: list[str] = []
    for row in rows:
        if row.role != "assistant":
            user_parts.append(_user_text(row))
            continue
        if user_parts:
            out.append({"role": "user", "content": "\n\n".join(user_parts)})
            user_parts = []
        out.extend(_render_assistant(row, hide_over))
    if user_parts:
        out.append({"role": "user", "content": "\n\n".join(user_parts)})
    return out


def _user_text(row: MessageRow) -> str:
    text = with_carried(row)
    attachments = (row.metadata or {}).get("attachments")
    if not attachments:
        return text
    return f"{text}\n\n{attachments_block(attachments)}" if text else attachments_block(attachments)


def with_carried(row: MessageRow) -> str:
    """The row's content after what its sender carried with it (``CARRIED_KEY``): kept
    out of the content, which is what was said, yet the session's history as much, so
    every later turn reads it (until 2026-12-07 only the turn of the message did; found
    by review)."""
    carried = (row.metadata or {}).get(CARRIED_KEY)
    if not isinstance(carried, str) or not carried:
        return row.content
    return f"{carried}\n\n{row.content}" if row.content else carried


def attachments_block(attachments: list[dict[str, Any]]) -> str:
    """Generated on the fly from message metadata; never stored in the content."""
    lines = ["[SYSTEM INFO] The user attached files, saved in the workspace:"]
    for item in attachments:
        details = [str(item[k]) for k in ("mime_type", "size") if item.get(k) is not None]
        if isinstance(item.get("duration_s"), int):
            details.insert(1 if item.get("mime_type") else 0, f"{item['duration_s']} s")
        suffix = f" ({', '.join(details)})" if details else ""
        lines.append(f"- {item.get('path', '?')}{suffix}")
    return "\n".join(lines)


def _render_assistant(row: MessageRow, hide_over: int | None) -> list[Message]:
    message: Message = {"role": "assistant", "content": row.content or None}
    if row.reasoning_content:
        message["reasoning_content"] = row.reasoning_content
    if not row.tool_calls:
        if message["content"] is None:
            message["content"] = ""
        return [message]
    message["tool_calls"] = [
        {
            "id": call.llm_call_id,
            "type": "function",
            "function": {"name": call.name, "arguments": _json_or_empty(call.arguments)},
        }
        for call in row.tool_calls
    ]
    results = [
        {
            "role": "tool",
            "tool_call_id": call.llm_call_id,
            "content": _tool_content(call, hide_over),
        }
        for call in row.tool_calls
    ]
    return [message, *results]


def _json_or_empty(arguments: str | None) -> str:
    # Some servers re-parse echoed arguments; malformed ones (already reported to the
    # model as a tool error) would make the whole request fail.
    if not arguments:
        return "{}"
    try:
        json.loads(arguments)
    except (ValueError, RecursionError):  # RecursionError: nested past the parser's depth
        return "{}"
    return arguments


def _tool_content(call: ToolCallRow, hide_over: int | None) -> str:
    if call.status in ("running", "pending"):
        return INTERRUPTED
    result = call.result or ""
    content = f"Error: {result}" if call.status == "failed" else result
    if hide_over is not None and len(content) > hide_over:
        return (
            f"[Tool response for `{call.name}` hidden: response was {len(content)} chars, "
            f"exceeding the {hide_over}-char limit. Call the tool again if you need this "
            "information.]"
        )
    return content
