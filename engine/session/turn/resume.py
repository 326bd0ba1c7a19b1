"""Resuming after a crash or a decision taken while no turn waited: open calls re-run
from intent, interrupted parallel batches reaped, each child's outcome cascaded up."""

from __future__ import annotations

from collections.abc import Sequence

from engine.session.context.frame_envs import FrameEnvs
from engine.session.context.messages import SystemParts
from engine.session.context.prompts import SessionPrompts
from engine.session.context.transcript import FrameTranscript
from engine.session.outcomes import Cancelled, Exhausted, Failed, Final, TurnResult
from engine.session.turn.cancel import CancelScope, TurnCancelled
from engine.session.turn.conclusion import TurnConclusion
from engine.session.turn.emitter import TurnEmitter
from engine.session.turn.llm_round import TurnFailed
from engine.session.turn.loop import run_agent_turn
from engine.session.turn.tool_call import CallFlow, end_round, handle_tool_call
from engine.session.turn.turn_env import TurnEnv
from engine.store import Store
from engine.store.rows import FrameRow, ToolCallRow
from engine.tools.protocols import Tool

REAPED_NOTE = (
    "this sub-agent was interrupted by a restart while it ran in parallel with "
    "others; its work was lost. Run it again if it is still needed."
)
ENDED_CHILD_NOTE = (
    "the service restarted as this sub-agent ended, and it left no answer; it may have "
    "done part of its task. Check before retrying."
)


async def resume_pending_tools(env: TurnEnv, calls: Sequence[ToolCallRow]) -> CallFlow:
    """Re-gate and re-run calls a crash left ``running``/``pending`` (re-run from intent).

    Each row is re-read first: a question answered while no turn waited was completed
    in the database behind this handler's transcript, and must not be asked again. A
    call that had been launched (not safe to repeat, and started) is not run again: the
    model is told it was interrupted and may or may not have had its effect. Nor is a
    sub-agent call whose child frame had ended: its answer is the call's result.
    """
    tools_known = False
    for index, call in enumerate(calls):
        stored = await env.store.history.get_tool_call(call.id)
        if stored is not None and stored.status != call.status:
            call.status, call.result = stored.status, stored.result
            env.transcript.tool_call_changed(call)
        if call.status not in ("running", "pending"):
            continue
        if env.scope.cancelled:
            await env.recorder.not_run(calls[index:])
            return CallFlow.CANCELLED
        if stored is not None and stored.launched_at is not None:
            await env.recorder.interrupted(call)
            continue
        child = await env.store.sessions.ended_child(env.frame.session_id, call.id)
        if child is not None:
            # Killed between the child frame's end and the call's result (two commits;
            # a batch's results wait for its last child): until 2026-12-07 the sub-agent
            # ran again from scratch, its tools (a mail sent) twice (found by review).
            await _record_ended_child(env, call, child)
            continue
        if not tools_known and env.refresh_tools is not None:
            # The tools the session had activated (an MCP server's): a call of theirs
            # approved after a restart failed as an unknown tool until 2026-12-06.
            try:  # an MCP server starting: /stop does not wait for its handshake
                await env.scope.run(env.refresh_tools(env))
            except TurnCancelled:
                await env.recorder.not_run(calls[index:])
                return CallFlow.CANCELLED
            tools_known = True
        if await handle_tool_call(env, call, None, resumed=True) is CallFlow.CANCELLED:
            await end_round(env, call, calls[index + 1 :])
            return CallFlow.CANCELLED
    return CallFlow.CONTINUE


async def _record_ended_child(env: TurnEnv, call: ToolCallRow, child: FrameRow) -> None:
    """An ended child's answer as its spawning call's result; none: the call failed."""
    env.emitter.tool_start(call.id, call.name, call.arguments or "")
    last = await env.store.history.load(child.id, limit=1)
    if last and last[0].role == "assistant" and not last[0].tool_calls:
        await env.recorder.completed(call, last[0].content)
    else:  # it failed, ran out of rounds or was stopped: its tools may have run
        await env.recorder.failed(call, ENDED_CHILD_NOTE)


class TurnResume:
    """Continues a session's interrupted turn without a new user message."""

    __slots__ = ("_conclusion", "_envs", "_prompts", "_session_id", "_store")

    def __init__(
        self,
        session_id: int,
        store: Store,
        envs: FrameEnvs,
        prompts: SessionPrompts,
        conclusion: TurnConclusion,
    ) -> None:
        self._session_id = session_id
        self._store = store
        self._envs = envs
        self._prompts = prompts
        self._conclusion = conclusion

    async def resume(
        self,
        emitter: TurnEmitter,
        root_parts: SystemParts,
        interface_tools: Sequence[Tool],
        scope: CancelScope,
    ) -> TurnResult | None:
        """Finish the deepest active frame, then each parent up to the root; ``None``:
        nothing was interrupted."""
        frames = await self._reap_parallel_batches(emitter, scope)
        if not frames:
            return None
        frame = frames[-1]
        env = await self._envs.for_frame(frame, emitter, interface_tools, scope)
        outcome = await self._outcome_of(env, root_parts, seed=True)
        while outcome is not None and frame.parent_tool_call_id is not None:
            parent = frames[frames.index(frame) - 1]
            parent_env = await self._envs.for_frame(parent, emitter, interface_tools, scope)
            flow = await self._propagate(parent_env, frame, outcome)
            frame, env = parent, parent_env
            if flow is CallFlow.CANCELLED:
                outcome = Cancelled()
                break
            outcome = await self._outcome_of(env, root_parts, seed=False)
        if outcome is None:
            return None
        return await self._conclusion.conclude(outcome, env, None, False)

    async def _outcome_of(
        self, env: TurnEnv, root_parts: SystemParts, *, seed: bool
    ) -> TurnResult | None:
        """``_continue_frame``; every model failing is the frame's ``Failed``: a child's is
        its parent's failed call, as in a live turn (until 2026-12-06 it ended the turn
        at the child's level, and the next start resumed the failed child again; found
        by review)."""
        try:
            return await self._continue_frame(env, root_parts, seed=seed)
        except TurnFailed as exc:
            return Failed(str(exc), away=exc.away)

    async def _continue_frame(
        self, env: TurnEnv, root_parts: SystemParts, *, seed: bool
    ) -> TurnResult | None:
        """Finish ``env.frame``'s turn: open calls, then the model unless it already answered."""
        open_calls = env.transcript.open_tool_calls()
        if await resume_pending_tools(env, open_calls) is CallFlow.CANCELLED:
            return Cancelled()
        last = env.transcript.last_row()
        if last is None:
            if env.frame.depth == 0 or not env.frame.agent_prompt:
                return None
            # Killed between opening the child's frame and storing its prompt (two
            # commits): the prompt the frame keeps is stored now. Until 2026-12-06 the
            # resume gave up on the empty frame at every start (found by review).
            last = await self._store.history.append_message(
                env.frame.id, "agent", env.frame.agent_prompt
            )
            env.transcript.add(last)
        if seed and not open_calls and last.role == "assistant" and not last.tool_calls:
            if env.frame.depth == 0:
                return None  # the root already answered: nothing was interrupted
            # A child answered but the answer never reached its parent: no new model call.
            return Final(last.content, last.id, last.input_tokens, last.output_tokens, False, ())
        parts = self._prompts.for_frame(env.frame, root_parts)
        return await run_agent_turn(env, self._prompts.requests(parts), None)

    async def _propagate(
        self, parent_env: TurnEnv, child: FrameRow, outcome: TurnResult
    ) -> CallFlow:
        """Record a child frame's outcome as its parent's tool result; end the child frame."""
        call = _find_open_call(parent_env.transcript, child.parent_tool_call_id)
        if call is None:
            call = await self._store.history.get_tool_call(child.parent_tool_call_id or 0)
        flow = CallFlow.CONTINUE
        if call is not None and call.status in ("running", "pending"):
            match outcome:
                case Final(content):
                    await parent_env.recorder.completed(call, content)
                case Exhausted(rounds):
                    await parent_env.recorder.failed(
                        call, f"sub-agent stopped after {rounds} tool rounds without an answer"
                    )
                case Failed(message):
                    await parent_env.recorder.failed(call, f"sub-agent failed: {message}")
                case _:
                    await parent_env.recorder.cancelled(call)
                    flow = CallFlow.CANCELLED
        elif isinstance(outcome, Cancelled):
            flow = CallFlow.CANCELLED
        if flow is CallFlow.CANCELLED:  # the parent's round stops here too
            await parent_env.recorder.not_run(parent_env.transcript.open_tool_calls())
        await self._store.sessions.terminate_frame(child.id)
        return flow

    async def _reap_parallel_batches(
        self, emitter: TurnEmitter, scope: CancelScope
    ) -> list[FrameRow]:
        """Two active frames at one depth are an interrupted parallel batch: fail and end them.

        The linear cascade needs one active frame per depth. Every frame from the batch's
        depth down is ended and the spawning calls fail, so the parent, left with fully
        resolved calls, is resumed by the normal cascade.
        """
        sessions = self._store.sessions
        frames = await sessions.active_frames(self._session_id)
        depths = [f.depth for f in frames]
        batch_depth = min((d for d in depths if depths.count(d) > 1), default=None)
        if batch_depth is None:
            return frames
        kept = [f for f in frames if f.depth < batch_depth]
        parent = kept[-1]
        parent_env = await self._envs.for_frame(parent, emitter, (), scope)
        for frame in frames[len(kept) :]:
            call = _find_open_call(parent_env.transcript, frame.parent_tool_call_id)
            if call is not None:
                await parent_env.recorder.failed(call, REAPED_NOTE)
            await sessions.terminate_frame(frame.id)
        return kept


def _find_open_call(transcript: FrameTranscript, call_id: int | None) -> ToolCallRow | None:
    return next((c for c in transcript.open_tool_calls() if c.id == call_id), None)
