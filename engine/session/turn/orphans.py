"""Orphans: trailing user/agent rows nobody answered (a /stop, a failure the user saw)
leave the context, marked ``failed``, so they are never resumed."""

from __future__ import annotations

from engine.session.context.transcript import FrameTranscript
from engine.store.history import History
from engine.store.rows import MessageRow


def drop_unanswered(transcript: FrameTranscript) -> list[MessageRow]:
    """Take the trailing user/agent rows nobody answered out of the transcript, as failed."""
    dropped = []
    while (last := transcript.last_row()) is not None and last.role != "assistant":
        last.status = "failed"
        transcript.drop_last(last.id)
        dropped.append(last)
    return dropped


async def fail_orphans(history: History, transcript: FrameTranscript) -> None:
    """Drop the unanswered rows from ``transcript`` and mark each ``failed`` in the database."""
    for row in drop_unanswered(transcript):
        await history.mark_failed(row.id)
