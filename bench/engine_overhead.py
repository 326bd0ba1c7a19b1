"""Engine overhead per model step, with a zero-latency in-process model.

Every row is committed to a real SQLite file (WAL). A "step" is one LLM round: build the
context, call the model, persist what it said; with a tool call, also run the tool and
record its outcome. The model and the tool cost nothing, so what is measured is the engine.

    python bench/engine_overhead.py [--turns 10 50 200] [--steps 300]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, ClassVar

from bot.settings import load_settings
from engine.approval import RuleStore
from engine.config import AppConfig, EngineConfig
from engine.core import Engine
from engine.llm import LlmResponse, ModelRegistry, ToolCallRequest, Usage
from engine.session import Final
from engine.tools import ToolCategory, ToolContext


class InstantModel:
    """Answers at once: a tool call while ``tool_steps`` remain, then text."""

    name = "instant"
    cache_hints = False

    def __init__(self) -> None:
        self.tool_steps = 0
        self.step_times: list[float] = []
        self._last: float | None = None

    async def complete(self, messages: Any, tools: Any, *, on_delta: Any = None) -> LlmResponse:
        now = time.perf_counter()
        if self._last is not None:
            self.step_times.append(now - self._last)
        self._last = now
        if self.tool_steps > 0:
            self.tool_steps -= 1
            return LlmResponse(
                content="",
                tool_calls=(ToolCallRequest("c", "noop", '{"x": 1}'),),
                usage=Usage(10, 5),
            )
        return LlmResponse(content="ok", usage=Usage(10, 5))

    def reset_clock(self) -> None:
        self._last = None


class NoopTool:
    name = "noop"
    description = "Does nothing."
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"x": {"type": "integer"}},
    }
    category = ToolCategory.INTROSPECTION
    root_agent_only = sub_agents_only = interactive_only = False

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> str:
        return "done"


async def measure(history_turns: int, steps: int, with_tool: bool) -> list[float]:
    with tempfile.TemporaryDirectory() as tmp:
        settings = load_settings(
            database_url=f"sqlite:///{tmp}/bench.db",
            chathub_workspace=Path(tmp) / "ws",
            chathub_timezone="UTC",
            _env_file=None,
        )
        limits = EngineConfig(max_tool_rounds=steps + 5, max_history_messages=100_000)
        model = InstantModel()
        engine = await Engine.open(
            AppConfig(settings=settings, models=(), engine=limits), models=ModelRegistry([model])
        )
        engine.tools.register(NoopTool())
        # The real gate is part of the step: rules are evaluated for every call.
        await RuleStore(engine.store.db).add_rule("noop", "allow", priority=1)
        handler = await engine.new_session("bench")
        for i in range(history_turns):  # history: each turn one tool round and an answer
            model.tool_steps = 1
            assert isinstance(await handler.handle_message(f"history {i}"), Final)
        # Measured: `steps` model steps. With tools, turns of three tool rounds and an
        # answer, timed between consecutive model calls inside a turn: each sample is one
        # full step (persist the call, run the tool, record it, rebuild the context).
        # Without tools a turn is one step, timed whole (user row, context, answer row).
        gc.collect()
        samples: list[float] = []
        while len(samples) < steps:
            if with_tool:
                model.reset_clock()
                model.step_times.clear()
                model.tool_steps = 3
                await handler.handle_message("measure")
                samples.extend(model.step_times[:3])
            else:
                started = time.perf_counter()
                await handler.handle_message("measure")
                samples.append(time.perf_counter() - started)
        await engine.close()
        return samples


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, nargs="+", default=[10, 50, 200])
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args()
    print(f"engine overhead per model step (ms), {args.steps} steps each, SQLite file, WAL")
    print(f"{'history turns':>14} | {'step':<24} | {'median':>7} | {'p90':>7} | {'p99':>7}")
    print("-" * 72)
    for turns in args.turns:
        for with_tool, label in (
            (False, "text answer (1 step/turn)"),
            (True, "tool call + record"),
        ):
            samples = sorted(await measure(turns, args.steps, with_tool))
            ms = [s * 1000 for s in samples]
            p90 = ms[int(len(ms) * 0.9)]
            p99 = ms[min(len(ms) - 1, int(len(ms) * 0.99))]
            print(
                f"{turns:>14} | {label:<24} | {statistics.median(ms):7.3f} | {p90:7.3f} | {p99:7.3f}"
            )


if __name__ == "__main__":
    asyncio.run(main())
