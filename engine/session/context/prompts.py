"""Context building for a session: each level's system parts, and the request builder a
turn's rounds call (``MessageBuilder`` over the frame's transcript, scratchpad, summary)."""

from __future__ import annotations

from collections.abc import Mapping

from engine.agents.catalog import AgentCatalog, AgentDefinition
from engine.llm.types import Message
from engine.session.context.messages import MessageBuilder, SystemParts
from engine.session.context.scratchpad import SessionScratchpad
from engine.session.turn.loop import RequestBuilder
from engine.session.turn.turn_env import TurnEnv
from engine.store.rows import FrameRow


class SessionPrompts:
    __slots__ = ("_agent", "_agents", "_builder", "_scratchpad", "_summaries")

    def __init__(
        self,
        agent: AgentDefinition,
        agents: AgentCatalog,
        builder: MessageBuilder,
        scratchpad: SessionScratchpad,
        summaries: Mapping[int, str | None],
    ) -> None:
        self._agent = agent
        self._agents = agents
        self._builder = builder
        self._scratchpad = scratchpad
        self._summaries = summaries

    def root(self, static: str | None, dynamic: str | None, reminder: str | None) -> SystemParts:
        """The session agent's prompt with the front end's extras."""
        prompt = self._agent.prompt if not static else f"{self._agent.prompt}\n\n{static}"
        return SystemParts(static=prompt, dynamic_extra=dynamic, reminder=reminder)

    def child(self, frame: FrameRow) -> SystemParts:
        """A sub-agent's frame: its task agent's prompt alone."""
        agent = self._agents.get(frame.agent_id) or self._agent
        return SystemParts(static=agent.prompt, dynamic_extra=None, reminder=None)

    def for_frame(self, frame: FrameRow, root: SystemParts) -> SystemParts:
        return root if frame.depth == 0 else self.child(frame)

    def requests(self, parts: SystemParts) -> RequestBuilder:
        builder = self._builder
        notes = self._scratchpad
        summaries = self._summaries

        def build(env: TurnEnv, cache_hints: bool) -> list[Message]:
            return builder.build(
                parts,
                env.transcript,
                scratchpad=notes.cached(),
                cache_hints=cache_hints,
                summary=summaries.get(env.frame.id),
            )

        return build
