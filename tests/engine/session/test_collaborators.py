"""Rules of the handler's collaborators, each on its own (no engine, no database)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, cast

import pytest

from engine.agents.catalog import AgentCatalog, AgentDefinition
from engine.config import EngineConfig
from engine.session.context.compaction import Compactor
from engine.session.context.compaction_trigger import CompactionTrigger
from engine.session.context.frames import SessionFrames
from engine.session.context.messages import MessageBuilder, SystemParts
from engine.session.context.prompts import SessionPrompts
from engine.session.context.scratchpad import SessionScratchpad
from engine.session.context.toolsets import LevelTools
from engine.session.context.transcript import FrameTranscript
from engine.session.turn.cancel import TurnScopes
from engine.session.turn.orphans import drop_unanswered
from engine.store.rows import FrameRow, MessageRow, SessionRow
from engine.tools.builtins.subagents import SUBTASK_TOOL
from engine.tools.registry import ToolRegistry
from tests.engine.session.helpers import EchoTool

NOW = datetime(2026, 1, 1, tzinfo=UTC)
MAIN = AgentDefinition("main", "chat", "You are main.")
RESEARCHER = AgentDefinition("researcher", "task", "You research.", tools=("read",))


def session(*, interactive: bool = True, ephemeral: bool = False) -> SessionRow:
    return SessionRow(7, "telegram:1", "main", interactive, ephemeral, None, None, NOW)


def frame(depth: int = 0, agent_id: str = "main", frame_id: int = 1) -> FrameRow:
    parent = None if depth == 0 else 40 + depth
    return FrameRow(frame_id, 7, agent_id, None, depth, parent, None, NOW)


def row(row_id: int, role: Any) -> MessageRow:
    return MessageRow(row_id, 1, role, f"row {row_id}", "ok", False, None, None, NOW)


def catalog() -> AgentCatalog:
    return AgentCatalog({"main": MAIN, "researcher": RESEARCHER})


# --- TurnScopes: each call's own scope --------------------------------------------------


def test_a_stop_after_a_turn_never_stops_the_next() -> None:
    scopes = TurnScopes()
    first = scopes.fresh()
    scopes.cancel()
    second = scopes.fresh()
    assert first.cancelled and not second.cancelled
    scopes.cancel()
    assert second.cancelled


# --- LevelTools: a level's tools --------------------------------------------------------


def level_tools(*, interactive: bool = True) -> LevelTools:
    base = ToolRegistry([EchoTool("read"), EchoTool("write"), EchoTool(SUBTASK_TOOL)])
    return LevelTools(session(interactive=interactive), base, catalog(), EngineConfig(), None)


def test_a_conversation_root_spawns_no_subtask_a_background_root_does() -> None:
    assert SUBTASK_TOOL not in level_tools(interactive=True).for_frame(frame(), ())
    assert SUBTASK_TOOL in level_tools(interactive=False).for_frame(frame(), ())


def test_a_task_agent_keeps_its_tools_and_the_per_level_ones() -> None:
    tools = level_tools().for_frame(frame(depth=1, agent_id="researcher"), ())
    assert tools.names == ["read", SUBTASK_TOOL]


def test_no_subtask_at_the_depth_limit() -> None:
    limit = EngineConfig().max_agent_depth
    tools = level_tools().for_frame(frame(depth=limit, agent_id="main"), ())
    assert SUBTASK_TOOL not in tools


def test_interface_tools_are_the_roots_only_and_never_clash() -> None:
    tools = level_tools()
    assert "send_file" in tools.for_frame(frame(), [EchoTool("send_file")])
    assert "send_file" not in tools.for_frame(frame(depth=1), [EchoTool("send_file")])
    with pytest.raises(ValueError, match="already registered"):
        tools.for_frame(frame(), [EchoTool("read")])


def test_a_roots_tools_are_built_once_until_what_they_come_from_changes() -> None:
    base = ToolRegistry([EchoTool("read")])
    tools = LevelTools(session(), base, catalog(), EngineConfig(), None)
    send_file = EchoTool("send_file")
    first = tools.for_frame(frame(), [send_file])
    assert tools.for_frame(frame(), [send_file]) is first
    assert first.schemas() is first.schemas()  # the model's list, built once as well
    # Another front end's tool, a tool registered since, another agent: built anew.
    other = tools.for_frame(frame(), [EchoTool("send_file")])
    assert other is not first
    base.register(EchoTool("write"))
    assert "write" in tools.for_frame(frame(), [send_file])
    assert "write" not in first  # a view once built is never changed
    assert tools.for_frame(frame(agent_id="researcher"), [send_file]) is not first


def test_a_sub_agents_tools_are_built_at_each_turn() -> None:
    tools = level_tools()
    researcher = frame(depth=1, agent_id="researcher")
    assert tools.for_frame(researcher, ()) is not tools.for_frame(researcher, ())


def test_a_registry_s_schemas_follow_its_registrations() -> None:
    registry = ToolRegistry([EchoTool("read")])
    assert [s["function"]["name"] for s in registry.schemas()] == ["read"]
    registry.register(EchoTool("write"))
    assert [s["function"]["name"] for s in registry.schemas()] == ["read", "write"]


def test_without_tool_groups_the_tool_set_is_fixed_for_the_turn() -> None:
    tools = level_tools()
    assert tools.refresher(tools.for_frame(frame(), ())) is None


# --- SessionPrompts: each level's system parts ------------------------------------------


def prompts() -> SessionPrompts:
    return SessionPrompts(
        MAIN,
        catalog(),
        cast(MessageBuilder, None),
        cast(SessionScratchpad, None),
        {},
    )


def test_the_root_prompt_is_the_agent_prompt_with_the_front_ends_extras() -> None:
    assert prompts().root(None, "dyn", "remind") == SystemParts("You are main.", "dyn", "remind")
    assert prompts().root("extra", None, None).static == "You are main.\n\nextra"


def test_a_child_frame_gets_its_task_agents_prompt_alone() -> None:
    root = prompts().root("extra", "dyn", "remind")
    assert prompts().for_frame(frame(), root) is root
    child = prompts().for_frame(frame(depth=1, agent_id="researcher"), root)
    assert child == SystemParts("You research.", None, None)
    unknown = prompts().for_frame(frame(depth=1, agent_id="gone"), root)
    assert unknown.static == "You are main."


# --- orphans: unanswered rows leave the context -----------------------------------------


def test_only_the_trailing_unanswered_rows_are_dropped_and_marked_failed() -> None:
    transcript = FrameTranscript(max_messages=100, max_tool_result_chars=None)
    rows = [row(1, "user"), row(2, "assistant"), row(3, "user"), row(4, "agent")]
    transcript.load(rows)
    dropped = drop_unanswered(transcript)
    assert [r.id for r in dropped] == [4, 3]
    assert [r.status for r in rows] == ["ok", "ok", "failed", "failed"]
    last = transcript.last_row()
    assert last is not None and last.id == 2
    assert drop_unanswered(transcript) == []


# --- CompactionTrigger: when the root compacts ------------------------------------------


class FakeCompactor:
    def __init__(self, *, compacts: bool) -> None:
        self.compacts = compacts
        self.seen_tokens: list[int | None] = []

    def applies_to(self, session: SessionRow, frame: FrameRow | None = None) -> bool:
        return not session.is_ephemeral

    async def compact(
        self, session: SessionRow, frame: FrameRow, *, last_input_tokens: int | None = None
    ) -> object | None:
        self.seen_tokens.append(last_input_tokens)
        return object() if self.compacts else None


class FakeFrames:
    def __init__(self) -> None:
        self.forgotten: list[int] = []
        self.reloaded = FrameTranscript(max_messages=10, max_tool_result_chars=None)

    def forget(self, frame_id: int) -> None:
        self.forgotten.append(frame_id)

    async def transcript(self, frame: FrameRow) -> FrameTranscript:
        return self.reloaded


def trigger(compactor: FakeCompactor, frames: FakeFrames, **kind: bool) -> CompactionTrigger:
    return CompactionTrigger(
        session(**kind), cast(Compactor, compactor), cast(SessionFrames, frames)
    )


async def test_the_last_answers_tokens_decide_then_go_stale_after_compacting() -> None:
    compactor, frames = FakeCompactor(compacts=True), FakeFrames()
    compaction = trigger(compactor, frames)
    current = FrameTranscript(max_messages=10, max_tool_result_chars=None)
    compaction.answered(1234)
    assert await compaction.before_turn(frame(), current) is frames.reloaded
    assert frames.forgotten == [1]
    await compaction.before_turn(frame(), current)
    assert compactor.seen_tokens == [1234, None]  # the estimate takes over


async def test_no_compaction_keeps_the_transcript_and_the_tokens() -> None:
    compactor, frames = FakeCompactor(compacts=False), FakeFrames()
    compaction = trigger(compactor, frames)
    current = FrameTranscript(max_messages=10, max_tool_result_chars=None)
    compaction.answered(99)
    assert await compaction.before_turn(frame(), current) is current
    await compaction.before_turn(frame(), current)
    assert compactor.seen_tokens == [99, 99] and frames.forgotten == []


async def test_sub_agent_frames_and_ephemeral_sessions_never_compact() -> None:
    compactor, frames = FakeCompactor(compacts=True), FakeFrames()
    current = FrameTranscript(max_messages=10, max_tool_result_chars=None)
    assert await trigger(compactor, frames).before_turn(frame(depth=1), current) is current
    ephemeral = trigger(compactor, frames, ephemeral=True)
    assert await ephemeral.before_turn(frame(), current) is current
    assert compactor.seen_tokens == []
