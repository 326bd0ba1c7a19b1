"""When a session's root frame compacts: at a turn start, when the last answer's context
was too big, and on ``/compact``. The summarising itself is ``compaction.py``."""

from __future__ import annotations

import logging

from engine.session.context.compaction import CompactionError, CompactionResult, Compactor
from engine.session.context.frames import SessionFrames
from engine.session.context.transcript import FrameTranscript
from engine.store.rows import FrameRow, SessionRow

log = logging.getLogger(__name__)


class CompactionTrigger:
    __slots__ = ("_compactor", "_frames", "_last_input_tokens", "_session")

    def __init__(self, session: SessionRow, compactor: Compactor, frames: SessionFrames) -> None:
        self._session = session
        self._compactor = compactor
        self._frames = frames
        #: The last root answer's input tokens; ``None``: unknown, the estimate decides.
        self._last_input_tokens: int | None = None

    def answered(self, input_tokens: int | None) -> None:
        """A root answer: its input tokens tell the next turn how big the context is."""
        self._last_input_tokens = input_tokens

    async def before_turn(self, frame: FrameRow, transcript: FrameTranscript) -> FrameTranscript:
        """Compact when the last answer's context was too big; the transcript to use."""
        if frame.depth != 0 or not self._compactor.applies_to(self._session, frame):
            return transcript
        try:
            done = await self._compactor.compact(
                self._session, frame, last_input_tokens=self._last_input_tokens
            )
        except CompactionError as exc:
            log.warning("compaction skipped for session %s: %s", self._session.id, exc)
            return transcript
        except Exception:  # a summariser's bug must not fail every turn (found by review)
            log.exception("compaction failed for session %s; skipped", self._session.id)
            return transcript
        if done is None:
            return transcript
        self._compacted(frame)
        return await self._frames.transcript(frame)

    async def force(self, frame: FrameRow) -> CompactionResult | None:
        """``/compact``: summarise now, whatever the size; ``None`` when too little to do."""
        result = await self._compactor.compact(self._session, frame, force=True)
        if result is not None:
            self._compacted(frame)
        return result

    def _compacted(self, frame: FrameRow) -> None:
        self._frames.forget(frame.id)  # reloaded as the summary and the rows after it
        self._last_input_tokens = None  # stale now; the estimate takes over
