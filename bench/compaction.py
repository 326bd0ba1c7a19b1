"""Context compaction: prompt size of a 200-message history before and after.

The history is stored in a real SQLite file: 90 turns, 20 of them with a tool round
(an assistant row whose call carries its result), 200 rows in all, of realistic length.
The "before" prompt is what the handler sends today (agent prompt, history bounded by
``max_history_messages``, dynamic tail); the "after" prompt is the same request with the
summary written by a scripted model (~1,500 characters) and only the rows after the
boundary (``keep_recent`` = 20). Goal: the prompt shrinks by more than 80%.

    python bench/compaction.py [--keep-recent 20] [--summary-chars 1500]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bot.settings import load_settings
from engine.config import AppConfig, EngineConfig
from engine.core import Engine
from engine.llm import Message, ModelRegistry, ScriptedModel, text
from engine.session import (
    CompactionConfig,
    Compactor,
    FrameTranscript,
    SystemParts,
    estimate_tokens,
    load_context,
    message_chars,
)
from engine.store import AssistantRecord, NewToolCall, SummaryStore

GOAL_PCT = 80.0
THRESHOLD = 30_000  # tokens; the history below is ~40k by the estimate
TURNS, TOOL_TURNS = 90, 20  # 70 x (user, answer) + 20 x (user, call+result, answer) = 200
WORDS = tuple(
    " ".join(
        (
            "the deploy config staging server database migration backup cron schedule user",
            "report invoice budget flight hotel itinerary python script error log retry",
            "timeout docker compose volume network port nginx certificate renew token api",
            "endpoint json field value test failing passing branch commit review memory",
            "cache latency query index table column customer order shipment warehouse",
            "meeting agenda notes summary",
        )
    ).split(" ")
)


def prose(rng: random.Random, low: int, high: int) -> str:
    target = rng.randint(low, high)
    words: list[str] = []
    size = 0
    while size < target:
        word = rng.choice(WORDS)
        words.append(word)
        size += len(word) + 1
    sentence = " ".join(words)
    return sentence[0].upper() + sentence[1:] + "."


def make_summary(chars: int) -> str:
    head = "## Active Task\nFinish the staging deploy checklist.\n## Goal\n"
    return (head + prose(random.Random(1), chars - len(head), chars - len(head)))[:chars]


async def build_history(engine: Engine, frame_id: int, rng: random.Random) -> int:
    history = engine.store.history
    tool_turns = set(rng.sample(range(TURNS), TOOL_TURNS))
    for n in range(TURNS):
        await history.append_message(frame_id, "user", prose(rng, 80, 400))
        if n in tool_turns:
            call = NewToolCall(
                f"call_{n}",
                rng.choice(["read_file", "execute_cmd", "web_fetch"]),
                f'{{"path": "deploy/{n}.yaml"}}',
                status="done",
                result=prose(rng, 500, 3_000),
            )
            record = AssistantRecord(content="")
            await history.append_assistant(frame_id, record, [call])
        answer = AssistantRecord(content=prose(rng, 400, 1_500))
        await history.append_assistant(frame_id, answer)
    return len(await history.load(frame_id))


def size(messages: list[Message]) -> tuple[int, int]:
    return sum(message_chars(m) for m in messages), estimate_tokens(messages)


def transcript_of(rows, limits: EngineConfig) -> FrameTranscript:
    transcript = FrameTranscript(
        max_messages=limits.max_history_messages,
        max_tool_result_chars=limits.max_tool_result_chars,
    )
    transcript.load(rows)
    return transcript


async def run(keep_recent: int, summary_chars: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        settings = load_settings(
            database_url=f"sqlite+aiosqlite:///{Path(tmp) / 'chathub.db'}",
            chathub_workspace=Path(tmp) / "workspace",
            chathub_timezone="UTC",
            _env_file=None,
        )
        summary_text = make_summary(summary_chars)
        model = ScriptedModel([text(summary_text)], name="summariser")
        engine = await Engine.open(
            AppConfig(settings=settings, models=()), models=ModelRegistry([model])
        )
        try:
            store, limits = engine.store, engine.limits
            session = await store.sessions.create("bench")
            frame = await store.sessions.root_frame(session.id)
            stored = await build_history(engine, frame.id, random.Random(42))
            parts = SystemParts(static=engine.agents["main"].prompt)

            rows = await store.history.load(frame.id, limit=limits.max_history_messages)
            before = engine.builder.build(parts, transcript_of(rows, limits), scratchpad={})

            summaries = SummaryStore(store.db)
            config = CompactionConfig(
                enabled=True, threshold_tokens=THRESHOLD, keep_recent=keep_recent
            )
            compactor = Compactor(engine.models, summaries, store.history, engine.bus, config)
            last_tokens = None  # a scripted history has no usage: the estimate decides
            started = time.perf_counter()
            result = await compactor.compact(session, frame, last_input_tokens=last_tokens)
            elapsed_ms = (time.perf_counter() - started) * 1_000
            assert result is not None, "the threshold was not reached"

            summary, newer = await load_context(
                store.history, summaries, frame.id, limit=limits.max_history_messages
            )
            assert summary is not None
            after = engine.builder.build(
                parts, transcript_of(newer, limits), scratchpad={}, summary=summary.content
            )
            summariser_prompt = len(model.requests[0][0][0]["content"])
        finally:
            await engine.close()

    chars_before, tokens_before = size(before)
    chars_after, tokens_after = size(after)
    reduction = 100.0 * (1 - chars_after / chars_before)
    history_reduction = 100.0 * (1 - result.chars_after / result.chars_before)
    verdict = "MET" if reduction > GOAL_PCT else "NOT MET"
    print(f"history: {stored} stored rows ({TURNS} turns, {TOOL_TURNS} with a tool round)")
    print(
        f"compaction: {result.rows_summarised} rows summarised up to #{result.covers_up_to_message_id}, "
        f"{result.rows_kept} kept raw (keep_recent={keep_recent}), triggered by "
        f"{result.triggered_by_tokens} input tokens; summary {len(summary.content)} chars; "
        f"summariser prompt {summariser_prompt} chars; {elapsed_ms:.1f} ms with a zero-latency model"
    )
    print(f"{'':26}{'messages':>10}{'chars':>10}{'~tokens':>10}")
    print(f"{'prompt before':26}{len(before):>10}{chars_before:>10}{tokens_before:>10}")
    print(f"{'prompt after':26}{len(after):>10}{chars_after:>10}{tokens_after:>10}")
    print(
        f"history part only: {result.chars_before} -> {result.chars_after} chars "
        f"({history_reduction:.1f}% smaller)"
    )
    print(f"whole prompt reduction: {reduction:.1f}%   goal: > {GOAL_PCT:.0f}%   -> {verdict}")
    return reduction


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep-recent", type=int, default=CompactionConfig().keep_recent)
    parser.add_argument("--summary-chars", type=int, default=1_500)
    args = parser.parse_args()
    asyncio.run(run(args.keep_recent, args.summary_chars))


if __name__ == "__main__":
    main()
