"""Background work (notifications, async task results) reaches a conversation as a tool
result the agent seems to have asked for: a synthetic assistant row with one completed call."""

from __future__ import annotations

import uuid
from collections.abc import Callable

from sqlalchemy.engine import Connection

from engine.session.context.transcript import FrameTranscript
from engine.store.history import History
from engine.store.rows import AssistantRecord, FrameRow, NewToolCall

READ_NOTIFICATION_TOOL = "read_notification"
NOTIFICATION_REASONING = (
    "The system signaled pending notifications. Let me read them and surface anything "
    "relevant to the user."
)


async def store_tool_result(
    history: History,
    frame: FrameRow,
    transcript: FrameTranscript,
    tool_name: str,
    payload: str,
    *,
    reasoning: str,
    also: Callable[[Connection], None] | None = None,
) -> None:
    """One commit: the assistant row and its ``tool_name`` call, ``done`` with ``payload``
    (and ``also``: the sender's record that it was delivered)."""
    call = NewToolCall(
        f"{tool_name}_{uuid.uuid4().hex[:12]}",
        tool_name,
        "{}",
        status="done",
        result=payload,
    )
    record = AssistantRecord(content="", reasoning_content=reasoning, is_synthetic=True)
    with_row = None if also is None else (lambda conn, _row_id: also(conn))
    row = await history.append_assistant(frame.id, record, [call], also=with_row)
    transcript.add(row)
