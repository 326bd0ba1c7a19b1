"""Context compaction: the boundary, the trigger, and a compaction over a real store."""

from __future__ import annotations

import asyncio
import random
from datetime import UTC, datetime
from typing import Any

import pytest

from engine.bus.chat import CompactionDone
from engine.core import Engine
from engine.llm.registry import ModelRegistry
from engine.llm.scripted import ScriptedModel, text
from engine.llm.types import LlmRequestError, LlmServerError
from engine.session.context.compaction import (
    CompactionConfig,
    CompactionError,
    Compactor,
    choose_boundary,
    estimate_tokens,
    load_context,
    rows_after,
)
from engine.session.context.messages import SystemParts
from engine.session.context.transcript import FrameTranscript
from engine.store.rows import (
    AssistantRecord,
    FrameRow,
    MessageRow,
    NewToolCall,
    SessionRow,
    ToolCallRow,
)
from engine.store.summaries import SummaryStore

NOW = datetime(2025, 1, 1, tzinfo=UTC)
SUMMARY = "## Active Task\nPlan the trip to Lisbon.\n## Critical Context\nBudget 900 EUR."


# -- synthetic rows -------------------------------------------------------------------


def row(id_: int, role: str, *, calls: int = 0, open_call: bool = False) -> MessageRow:
    tool_calls = [
        ToolCallRow(
            id=id_ * 10 + n,
            message_id=id_,
            llm_call_id=f"c{id_}_{n}",
            name="read_file",
            arguments='{"path": "a.txt"}',
            result="contents",
            status="running" if open_call else "done",
        )
        for n in range(calls)
    ]
    return MessageRow(
        id=id_,
        stack_id=1,
        role=role,  # type: ignore[arg-type]
        content=f"{role} {id_}",
        status="ok",
        is_synthetic=False,
        reasoning_content=None,
        metadata=None,
        created_at=NOW,
        tool_calls=tool_calls,
    )


def history(*shape: str) -> list[MessageRow]:
    """``"u"`` user, ``"g"`` agent, ``"a"`` assistant, ``"t"`` assistant with a tool call."""
    out = []
    for i, kind in enumerate(shape, start=1):
        role = {"u": "user", "g": "agent", "a": "assistant", "t": "assistant"}[kind]
        out.append(row(i, role, calls=1 if kind == "t" else 0))
    return out


def split(rows: list[MessageRow], boundary: int) -> tuple[list[MessageRow], list[MessageRow]]:
    return [r for r in rows if r.id <= boundary], [r for r in rows if r.id > boundary]


# -- the boundary ---------------------------------------------------------------------


def test_the_boundary_keeps_keep_recent_rows_starting_at_a_user_row():
    rows = history(*"ua" * 10)
    boundary = choose_boundary(rows, 4)
    assert boundary == 16
    summarised, kept = split(rows, boundary)
    assert len(kept) == 4 and kept[0].role == "user" and summarised[-1].role == "assistant"


def test_the_boundary_moves_earlier_rather_than_start_inside_a_turn():
    rows = history(*"ua" * 10)
    _, kept = split(rows, choose_boundary(rows, 3) or 0)
    assert len(kept) == 4 and kept[0].role == "user"


def test_a_tool_round_is_never_split_from_its_turn():
    # turn 1: u a | turn 2: u t t a (calls and results on the t rows) | turn 3: u a
    rows = history("u", "a", "u", "t", "t", "a", "u", "a")
    for keep in range(3, 7):  # a naive cut would fall inside turn 2
        boundary = choose_boundary(rows, keep)
        assert boundary == 2
        _, kept = split(rows, boundary)
        assert [r.role for r in kept[:4]] == ["user", "assistant", "assistant", "assistant"]
        assert kept[1].tool_calls and kept[2].tool_calls


def test_queued_user_rows_of_one_turn_stay_together():
    rows = history("u", "a", "u", "u", "g", "t", "a", "u", "a")
    assert choose_boundary(rows, 6) == 2
    assert choose_boundary(rows, 2) == 7


def test_nothing_to_compact_returns_none():
    assert choose_boundary([], 2) is None
    assert choose_boundary(history("u", "a"), 2) is None
    assert choose_boundary(history("u", "a", "u", "a"), 4) is None
    # One long turn: no turn start leaves enough rows raw.
    assert choose_boundary(history("u", "t", "t", "t", "t", "a"), 2) is None
    # Only a leading partial turn before the kept part.
    assert choose_boundary(history("a", "u", "a"), 2) == 1


def test_keep_recent_zero_may_summarise_every_closed_turn():
    assert choose_boundary(history("u", "a", "u", "a"), 0) == 4
    assert choose_boundary(history("u", "a", "u"), 0) == 2


def test_an_interrupted_call_is_never_summarised():
    rows = [*history("u", "a"), row(3, "user"), row(4, "assistant", calls=1, open_call=True)]
    rows += [row(5, "user"), row(6, "assistant")]
    assert choose_boundary(rows, 0) == 2


def test_boundary_invariants_over_random_histories():
    rng = random.Random(7)
    for _ in range(300):
        shape = []
        for _turn in range(rng.randint(1, 12)):
            shape += ["u"] * rng.randint(1, 2) + ["t"] * rng.randint(0, 3) + ["a"]
        rows = history(*shape)
        keep = rng.randint(0, 10)
        boundary = choose_boundary(rows, keep)
        if boundary is None:
            continue
        summarised, kept = split(rows, boundary)
        assert len(kept) >= keep
        assert summarised and summarised[-1].role == "assistant"
        assert not kept or (kept[0].role != "assistant")
        # The kept part renders as whole turns: the transcript drops nothing.
        transcript = FrameTranscript(max_messages=10_000, max_tool_result_chars=None)
        transcript.load(kept)
        calls = [m for m in transcript.messages() if m.get("tool_calls")]
        results = {m["tool_call_id"] for m in transcript.messages() if m["role"] == "tool"}
        assert {c["id"] for m in calls for c in m["tool_calls"]} == results
        assert sum(len(r.tool_calls) for r in kept) == len(results)


# -- estimate and trigger -------------------------------------------------------------


def test_estimate_counts_content_parts_reasoning_and_tool_arguments():
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": [{"type": "text", "text": "x" * 40}]},
        {"role": "user", "content": "y" * 40},
        {
            "role": "assistant",
            "content": None,
            "reasoning_content": "r" * 8,
            "tool_calls": [{"id": "c", "function": {"name": "echo", "arguments": "z" * 28}}],
        },
        {"role": "tool", "tool_call_id": "c", "content": "w" * 4},
    ]
    assert estimate_tokens(messages) == (40 + 40 + 8 + 4 + 28 + 4) // 4
    assert estimate_tokens([{"role": "user", "content": "abc"}]) == 1
    assert estimate_tokens([]) == 0


def session(*, ephemeral: bool = False) -> SessionRow:
    return SessionRow(1, "console", "main", True, ephemeral, None, None, NOW)


def compactor_with(config: CompactionConfig, models: list | None = None) -> Compactor:
    return Compactor(models or [], None, None, None, config)  # type: ignore[arg-type]


async def test_should_compact_uses_the_last_input_tokens():
    compactor = compactor_with(CompactionConfig(enabled=True, threshold_tokens=1_000))
    short = [{"role": "user", "content": "hi"}]
    assert await compactor.should_compact(session(), 1_000, short)
    assert not await compactor.should_compact(session(), 999, short)


async def test_should_compact_falls_back_to_the_estimate():
    compactor = compactor_with(CompactionConfig(enabled=True, threshold_tokens=1_000))
    long = [{"role": "user", "content": "x" * 4_000}]
    assert await compactor.should_compact(session(), None, long)
    assert await compactor.should_compact(session(), 0, long)
    assert not await compactor.should_compact(session(), None, [{"role": "user", "content": "x"}])
    # The summary already in the context counts too.
    half = [{"role": "user", "content": "x" * 2_000}]
    assert await compactor.should_compact(session(), None, half, summary="s" * 2_000)


async def test_should_compact_skips_ephemeral_sessions_and_a_disabled_config():
    long = [{"role": "user", "content": "x" * 40_000}]
    enabled = compactor_with(CompactionConfig(enabled=True, threshold_tokens=10))
    assert not await enabled.should_compact(session(ephemeral=True), 10**6, long)
    disabled = compactor_with(CompactionConfig(enabled=False, threshold_tokens=10))
    assert not await disabled.should_compact(session(), 10**6, long)


# -- over a real store ----------------------------------------------------------------


async def fill(engine: Engine, frame_id: int, turns: int, start: int = 0) -> list[MessageRow]:
    """``turns`` turns; every third one reads a file before answering."""
    history = engine.store.history
    for n in range(start, start + turns):
        await history.append_message(frame_id, "user", f"question {n}: " + "q" * 200)
        if n % 3 == 0:
            call = NewToolCall(f"call{n}", "read_file", '{"path": "notes.md"}', "done", "r" * 300)
            await history.append_assistant(frame_id, AssistantRecord(content=""), [call])
        await history.append_assistant(
            frame_id, AssistantRecord(content=f"answer {n}: " + "a" * 300, input_tokens=100 * n)
        )
    return await history.load(frame_id)


async def setup(
    engine: Engine, *, turns: int = 12, **config: Any
) -> tuple[SessionRow, FrameRow, Compactor, SummaryStore, list[MessageRow]]:
    s = await engine.store.sessions.create("console")
    frame = await engine.store.sessions.root_frame(s.id)
    rows = await fill(engine, frame.id, turns)
    summaries = SummaryStore(engine.store.db)
    settings = {"enabled": True, "threshold_tokens": 500, "keep_recent": 4, **config}
    compactor = Compactor(
        engine.models, summaries, engine.store.history, engine.bus, CompactionConfig(**settings)
    )
    return s, frame, compactor, summaries, rows


async def test_compaction_stores_the_summary_publishes_and_shrinks_the_prompt(engine, model):
    s, frame, compactor, summaries, rows = await setup(engine)
    model.add(text(SUMMARY))
    sub = engine.bus.subscribe()

    result = await compactor.compact(s, frame)

    assert result is not None
    # 12 turns; the last two (u a, u a: turn 10 has no tool call) stay raw.
    kept = [r for r in rows if r.id > result.covers_up_to_message_id]
    assert [r.role for r in kept] == ["user", "assistant", "user", "assistant"]
    assert result.rows_summarised == len(rows) - 4 and result.rows_kept == 4
    assert result.chars_after < result.chars_before / 3
    stored = await summaries.latest(frame.id)
    assert stored is not None and stored.content == SUMMARY
    assert stored.covers_up_to_message_id == kept[0].id - 1 == result.covers_up_to_message_id
    [request, tools] = model.requests[-1]
    assert tools == [] and [m["role"] for m in request] == ["user"]
    prompt = request[0]["content"]
    assert "[USER]: question 0:" in prompt and "[TOOL RESULT read_file call0]" in prompt
    assert "Tool calls: read_file" in prompt and "question 10" not in prompt

    event = await asyncio.wait_for(sub.recv(), 1)
    assert isinstance(event, CompactionDone)
    assert event.event.summary_id == stored.id and event.event.stack_id == frame.id
    assert event.event.covers_up_to_message_id == stored.covers_up_to_message_id
    assert event.event.session_id == s.id and event.event.triggered_by_tokens >= 500

    # The next context: the summary plus only the newer rows.
    summary, newer = await load_context(
        engine.store.history, summaries, frame.id, limit=engine.limits.max_history_messages
    )
    assert summary == stored and [r.id for r in newer] == [r.id for r in kept]
    transcript = FrameTranscript(max_messages=400, max_tool_result_chars=None)
    transcript.load(newer)
    messages = engine.builder.build(
        SystemParts(static="You are a test."), transcript, scratchpad={}, summary=summary.content
    )
    assert [m["role"] for m in messages] == [
        "system",
        "system",
        "user",
        "assistant",
        "user",
        "assistant",
        "system",
    ]
    assert messages[1]["content"].endswith(SUMMARY)
    body = str(messages)
    assert "question 9" not in body and "question 10" in body and "question 11" in body


async def test_a_second_compaction_updates_the_previous_summary(engine, model):
    s, frame, compactor, summaries, _ = await setup(engine)
    model.add(text(SUMMARY), text("second summary"))
    first = await compactor.compact(s, frame)
    assert first is not None
    await fill(engine, frame.id, 6, start=12)
    second = await compactor.compact(s, frame, force=True)
    assert second is not None
    assert second.covers_up_to_message_id > first.covers_up_to_message_id
    prompt = model.requests[-1][0][0]["content"]
    assert "PREVIOUS SUMMARY" in prompt and SUMMARY in prompt
    new_part = prompt.split("NEW MESSAGES SINCE THEN:")[1]
    assert "question 9:" not in new_part and "question 10:" in new_part
    newer = await rows_after(engine.store.history, frame.id, first.covers_up_to_message_id)
    assert all(r.id > first.covers_up_to_message_id for r in newer)
    assert (await summaries.latest(frame.id)).content == "second summary"  # type: ignore[union-attr]


async def test_under_the_threshold_only_a_forced_compaction_runs(engine, model):
    s, frame, compactor, summaries, _ = await setup(engine, threshold_tokens=1_000_000)
    assert await compactor.compact(s, frame) is None
    assert await compactor.compact(s, frame, last_input_tokens=999_999) is None
    assert model.requests == []
    model.add(text(SUMMARY))
    assert await compactor.compact(s, frame, force=True) is not None
    assert await summaries.latest(frame.id) is not None


async def test_the_last_input_tokens_trigger_compaction(engine, model):
    s, frame, compactor, _, _ = await setup(engine, threshold_tokens=50_000)
    model.add(text(SUMMARY))
    result = await compactor.compact(s, frame, last_input_tokens=60_000)
    assert result is not None and result.triggered_by_tokens == 60_000


async def test_a_model_failure_leaves_the_history_untouched(engine, model):
    s, frame, compactor, summaries, rows = await setup(engine)
    model.add(LlmRequestError("400 bad request", model="primary"))
    sub = engine.bus.subscribe()
    with pytest.raises(CompactionError, match=r"history is unchanged.*400 bad request"):
        await compactor.compact(s, frame, force=True)
    model.add(text("   "))
    with pytest.raises(CompactionError, match="empty summary"):
        await compactor.compact(s, frame, force=True)
    assert await summaries.latest(frame.id) is None
    assert [r.id for r in await engine.store.history.load(frame.id)] == [r.id for r in rows]
    assert sub.pending == 0


async def test_a_retriable_failure_falls_back_to_the_next_model(engine, model):
    s, frame, compactor, _, _ = await setup(engine)
    cheap = ScriptedModel([text(SUMMARY)], name="cheap")
    model.add(LlmServerError("503", model="primary"))
    compactor.models = ModelRegistry([model, cheap])
    result = await compactor.compact(s, frame, force=True)
    assert result is not None and result.model == "cheap"


async def test_the_configured_model_writes_the_summary(engine, model):
    s, frame, compactor, _, _ = await setup(engine, model="cheap")
    cheap = ScriptedModel([text(SUMMARY)], name="cheap")
    compactor.models = ModelRegistry([model, cheap])
    result = await compactor.compact(s, frame, force=True)
    assert result is not None and result.model == "cheap" and model.requests == []


async def test_skipped_for_ephemeral_sessions_sub_frames_and_short_histories(engine, model):
    s, frame, compactor, summaries, _ = await setup(engine, turns=2)
    assert await compactor.compact(s, frame, force=True) is None  # 4 rows, keep 4
    cron = await engine.store.sessions.create("cron", is_ephemeral=True, is_interactive=False)
    cron_frame = await engine.store.sessions.root_frame(cron.id)
    await fill(engine, cron_frame.id, 12)
    assert await compactor.compact(cron, cron_frame, force=True) is None
    child = FrameRow(frame.id, s.id, "main", None, 1, None, None, NOW)
    assert await compactor.compact(s, child, force=True) is None
    assert model.requests == [] and await summaries.latest(frame.id) is None


async def test_a_disabled_compactor_refuses_to_compact(engine):
    s, frame, compactor, _, _ = await setup(engine, enabled=False)
    with pytest.raises(CompactionError, match="not enabled"):
        await compactor.compact(s, frame, force=True)


async def test_rows_given_by_the_caller_are_cut_at_the_previous_summary(engine, model):
    s, frame, compactor, summaries, rows = await setup(engine)
    await summaries.add(frame.id, "old summary", rows[9].id)
    model.add(text(SUMMARY))
    result = await compactor.compact(s, frame, rows, force=True)
    assert result is not None
    prompt = model.requests[-1][0][0]["content"]
    assert "old summary" in prompt
    summarised_ids = [r.id for r in rows if rows[9].id < r.id <= result.covers_up_to_message_id]
    assert result.rows_summarised == len(summarised_ids)
