"""How a turn ends for the user: a root answer emits ``Done`` and is published on the
bus; anything else leaves an error notice and takes the unanswered rows out of the context."""

from __future__ import annotations

from datetime import UTC, datetime

from engine.bus.chat import ChatEvent, ChatEventBus
from engine.failpoints import failpoint
from engine.session.context.compaction_trigger import CompactionTrigger
from engine.session.events import Done
from engine.session.outcomes import Cancelled, Exhausted, Failed, Final, TurnResult
from engine.session.turn.orphans import drop_unanswered, fail_orphans
from engine.session.turn.turn_env import TurnEnv
from engine.store.history import History
from engine.store.rows import FrameRow, MessageRow, SessionRow

CANCELLED_MESSAGE = "Interrupted by user."


class TurnConclusion:
    __slots__ = ("_bus", "_compaction", "_history", "_session")

    def __init__(
        self,
        session: SessionRow,
        history: History,
        bus: ChatEventBus,
        compaction: CompactionTrigger,
    ) -> None:
        self._session = session
        self._history = history
        self._bus = bus
        self._compaction = compaction

    async def conclude(
        self, outcome: TurnResult, env: TurnEnv, user_row: MessageRow | None, is_synthetic: bool
    ) -> TurnResult:
        """Tell the user how ``outcome`` ended the turn at ``env``'s level; ``outcome``."""
        match outcome:
            case Final():
                if env.frame.depth == 0:
                    self._compaction.answered(outcome.input_tokens)
                env.emitter.done(_done_event(outcome))
                self._publish(env.frame, user_row, outcome, is_synthetic)
            case Cancelled():
                await fail_orphans(self._history, env.transcript)  # /stop: never resumed
                env.emitter.error(CANCELLED_MESSAGE)
            case Failed(message):
                self._context_seen(env)
                await self._fail_turn(env, message)  # the notice commits with the failed mark
                env.emitter.error(message)
            case Exhausted(rounds):
                self._context_seen(env)
                notice = (
                    f"Stopped after {rounds} tool rounds without a final answer. "
                    "Send a message to continue."
                )
                await self._fail_turn(env, notice)  # ended, told once: never resumed
                env.emitter.error(notice)
        return outcome

    def _context_seen(self, env: TurnEnv) -> None:
        """A root turn that ended without an answer still says how big its context grew,
        so the next turn compacts it (until 2026-12-06 only an answer did: after a turn
        that overflowed, every later one was sent as big and failed too; found by review)."""
        if env.frame.depth == 0 and (tokens := env.transcript.open_input_tokens()) is not None:
            self._compaction.answered(tokens)

    async def _fail_turn(self, env: TurnEnv, notice: str) -> None:
        """A failure the user is told about: its unanswered rows are marked ``failed`` in the
        commit that records the caller's delivery of ``notice`` (the emitter's
        ``failure_unit``), so a crash neither resumes the turn nor loses or repeats the notice.
        """
        unit = env.emitter.failure_unit(notice)
        await self._history.fail_unanswered(env.frame.id, also=unit)
        failpoint("after_failed_turn")
        drop_unanswered(env.transcript)  # marked in the database just above

    def _publish(
        self, frame: FrameRow, user_row: MessageRow | None, final: Final, is_synthetic: bool
    ) -> None:
        """Only a root Final publishes (a resume has no new user row); rows are committed."""
        s = self._session
        now = datetime.now(UTC)
        common = {
            "session_id": s.id,
            "stack_id": frame.id,
            "is_interactive": s.is_interactive,
            "is_ephemeral": s.is_ephemeral,
        }
        if user_row is not None:
            self._bus.user_message(
                ChatEvent(
                    message_id=user_row.id,
                    role="user",
                    content=user_row.content,
                    is_synthetic=is_synthetic,
                    created_at=now,
                    **common,
                )
            )
        self._bus.assistant_response(
            ChatEvent(
                message_id=final.message_id,
                role="assistant",
                content=final.content,
                is_synthetic=False,
                tool_calls=final.tool_calls,
                created_at=now,
                **common,
            )
        )


def _done_event(final: Final) -> Done:
    return Done(
        content=final.content,
        message_id=final.message_id,
        input_tokens=final.input_tokens,
        output_tokens=final.output_tokens,
        truncated=final.truncated,
        tool_calls=final.tool_calls,
    )
