"""A sub-agent call's child frame: a task agent run inline one frame deeper, under the
caller's lock and cancel scope (``SubAgentRunner``). Which calls spawn one, and batches
of them, are ``subagents.py``."""

from __future__ import annotations

from engine.agents.catalog import AgentCatalog
from engine.failpoints import failpoint
from engine.session.context.frame_envs import FrameEnvs
from engine.session.context.frames import SessionFrames
from engine.session.context.prompts import SessionPrompts
from engine.session.outcomes import Cancelled, Exhausted, Failed, Final, TurnResult
from engine.session.turn.dispatch import Completed, DispatchResult, Interrupted, Suspended
from engine.session.turn.dispatch import Failed as DispatchFailed
from engine.session.turn.llm_round import TurnFailed
from engine.session.turn.loop import run_agent_turn
from engine.session.turn.turn_env import TurnEnv
from engine.store import Store
from engine.store.rows import FrameRow, ToolCallRow


class SubAgentFrames:
    __slots__ = ("_agents", "_envs", "_frames", "_max_depth", "_prompts", "_session_id", "_store")

    def __init__(
        self,
        session_id: int,
        store: Store,
        agents: AgentCatalog,
        max_depth: int,
        envs: FrameEnvs,
        frames: SessionFrames,
        prompts: SessionPrompts,
    ) -> None:
        self._session_id = session_id
        self._store = store
        self._agents = agents
        self._max_depth = max_depth
        self._envs = envs
        self._frames = frames
        self._prompts = prompts

    async def run_sub_agent(
        self, env: TurnEnv, call: ToolCallRow, agent_id: str, prompt: str
    ) -> DispatchResult:
        """Run task agent ``agent_id`` on ``prompt``; its answer is ``call``'s result."""
        refusal = self._refusal(env.frame, agent_id, prompt)
        if refusal is not None:
            return refusal
        child = await self._open_frame(env.frame, call, agent_id, prompt)
        child_env = await self._envs.for_frame(child, env.emitter, (), env.scope)
        child_env.emitter.agent_start(agent_id, prompt, child.depth)
        requests = self._prompts.requests(self._prompts.child(child))
        try:  # awaited here, not in a helper: every await level is resumed at each commit
            outcome: TurnResult = await run_agent_turn(child_env, requests, None)
        except TurnFailed as exc:
            outcome = Failed(str(exc))
        if isinstance(outcome, Cancelled) and not env.scope.cancelled:
            # Its waiting channel closed, nobody stopped it: it goes on at the resume
            # (closed as stopped, its approved call never ran until 2026-12-06; review).
            return Suspended()
        await self._close_frame(child)
        return _result(child_env, agent_id, outcome)

    def _refusal(self, frame: FrameRow, agent_id: str, prompt: str) -> DispatchFailed | None:
        """Why this call may not run a sub-agent (the model reads it), or ``None``."""
        agent = self._agents.get(agent_id)
        depth = frame.depth + 1
        task_agents = ", ".join(a.id for a in self._agents.task_agents()) or "none"
        if agent is None:
            return DispatchFailed(f"unknown agent {agent_id!r}; task agents: {task_agents}")
        if agent.kind != "task":
            return DispatchFailed(
                f"{agent_id!r} is a {agent.kind} agent, not a task agent; use one of: {task_agents}"
            )
        if agent_id == frame.agent_id:
            return DispatchFailed(f"agent {agent_id!r} cannot hand a task to itself")
        if depth > self._max_depth:
            return DispatchFailed(
                f"sub-agents may nest {self._max_depth} levels deep; this would be "
                f"level {depth}. Do the task yourself."
            )
        if not prompt.strip():
            return DispatchFailed("the task prompt is empty")
        return None

    async def _open_frame(
        self, parent: FrameRow, call: ToolCallRow, agent_id: str, prompt: str
    ) -> FrameRow:
        """The child frame, its prompt stored as its ``agent`` row."""
        child = await self._store.sessions.push_frame(
            self._session_id,
            agent_id=agent_id,
            depth=parent.depth + 1,
            parent_tool_call_id=call.id,
            agent_prompt=prompt,
        )
        await self._store.history.append_message(child.id, "agent", prompt)
        return child

    async def _close_frame(self, child: FrameRow) -> None:
        await self._store.sessions.terminate_frame(child.id)
        failpoint("after_child_frame_ended")  # the parent's call result is the next commit
        self._frames.forget(child.id)


def _result(child_env: TurnEnv, agent_id: str, outcome: TurnResult) -> DispatchResult:
    """The child's outcome as the spawning call's result; ``AgentEnd`` tells the adapter."""
    emitter, depth = child_env.emitter, child_env.frame.depth
    match outcome:
        case Final(content=content):
            emitter.agent_end(agent_id, "done", depth)
            return Completed(content)
        case Cancelled():
            emitter.agent_end(agent_id, "cancelled", depth)
            return Interrupted()
        case Exhausted(rounds):
            emitter.agent_end(agent_id, "failed", depth)
            return DispatchFailed(
                f"sub-agent {agent_id} stopped after {rounds} tool rounds without an answer"
            )
        case Failed(message):
            emitter.agent_end(agent_id, "failed", depth)
            return DispatchFailed(f"sub-agent {agent_id} failed: {message}")
    return DispatchFailed(f"sub-agent {agent_id} ended without an answer")
