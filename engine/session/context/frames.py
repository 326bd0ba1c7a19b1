"""A session's frames as its handler holds them: the root row, and each frame's transcript
read from the database once (the turn then keeps it in step, write-through)."""

from __future__ import annotations

from collections.abc import Mapping

from engine.config import EngineConfig
from engine.session.context.compaction import Compactor, load_context
from engine.session.context.transcript import FrameTranscript
from engine.store import Store
from engine.store.rows import FrameRow


class SessionFrames:
    __slots__ = (
        "_compactor",
        "_limits",
        "_root",
        "_session_id",
        "_store",
        "_summaries",
        "_transcripts",
    )

    def __init__(
        self, session_id: int, store: Store, compactor: Compactor, limits: EngineConfig
    ) -> None:
        self._session_id = session_id
        self._store = store
        self._compactor = compactor
        self._limits = limits
        self._root: FrameRow | None = None
        self._transcripts: dict[int, FrameTranscript] = {}
        self._summaries: dict[int, str | None] = {}

    @property
    def summaries(self) -> Mapping[int, str | None]:
        """Each loaded frame's compaction summary (what its history starts after)."""
        return self._summaries

    async def root(self) -> FrameRow:
        if self._root is None:
            self._root = await self._store.sessions.root_frame(self._session_id)
        return self._root

    async def transcript(self, frame: FrameRow) -> FrameTranscript:
        transcript = self._transcripts.get(frame.id)
        if transcript is None:
            transcript = await self._load(frame)
            self._transcripts[frame.id] = transcript
        return transcript

    def forget(self, frame_id: int) -> None:
        """The frame ended or was compacted: a later ``transcript`` reads the database."""
        self._transcripts.pop(frame_id, None)

    async def _load(self, frame: FrameRow) -> FrameTranscript:
        limits = self._limits
        transcript = FrameTranscript(
            max_messages=limits.max_history_messages,
            max_tool_result_chars=limits.max_tool_result_chars,
        )
        history = self._store.history
        if self._compactor.config.enabled:  # the newest summary, then only newer rows
            summary, rows = await load_context(
                history, self._compactor.summaries, frame.id, limit=limits.max_history_messages
            )
            self._summaries[frame.id] = summary.content if summary else None
        else:  # compaction off: max_history_messages bounds the history
            rows = await history.load(frame.id, limit=limits.max_history_messages)
        transcript.load(rows)
        return transcript
