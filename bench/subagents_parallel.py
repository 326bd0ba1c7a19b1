"""Four sub-agents in one step, each with 200 ms of model latency: do they overlap?

Goal (printed, not asserted): the batch finishes in under 400 ms (sequential would be
over 800 ms). The model sleeps 200 ms for every sub-agent request and answers the root
at once.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from bot.settings import load_settings
from engine.config import AppConfig, EngineConfig
from engine.core import Engine
from engine.llm import LlmResponse, ModelRegistry, ToolCallRequest
from engine.session import AllowAll

LATENCY_S = 0.2


class SlowChildren:
    name = "bench"
    cache_hints = False

    def __init__(self, children: int) -> None:
        self.children = children

    async def complete(self, messages: Any, tools: Any, *, on_delta: Any = None) -> LlmResponse:
        system = str(messages[0]["content"])
        if "sub-agent" in system:
            await asyncio.sleep(LATENCY_S)
            return LlmResponse(content="child done")
        if any(m["role"] == "tool" for m in messages):
            return LlmResponse(content="all done")
        calls = tuple(
            ToolCallRequest(
                f"c{i}",
                "execute_subtask",
                json.dumps({"agent_id": "generalist", "prompt": f"task {i}"}),
            )
            for i in range(self.children)
        )
        return LlmResponse(content="", tool_calls=calls)

    async def aclose(self) -> None:
        return None


async def measure(children: int, parallel: int, rounds: int) -> list[float]:
    with tempfile.TemporaryDirectory() as tmp:
        settings = load_settings(
            database_url=f"sqlite:///{tmp}/bench.db",
            chathub_workspace=Path(tmp) / "ws",
            chathub_timezone="UTC",
            _env_file=None,
        )
        limits = EngineConfig(max_parallel_subagents=parallel)
        engine = await Engine.open(
            AppConfig(settings=settings, models=(), engine=limits),
            models=ModelRegistry([SlowChildren(children)]),
            policy=AllowAll(),
        )
        try:
            samples = []
            for _ in range(rounds):
                handler = await engine.new_session("bench", is_interactive=False)
                started = time.perf_counter()
                await handler.handle_message("go")
                samples.append(time.perf_counter() - started)
            return samples
        finally:
            await engine.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--children", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    print(f"{args.children} sub-agents, {LATENCY_S * 1000:.0f} ms model latency each")
    print(f"{'max_parallel_subagents':>24} | {'median ms':>10} | {'max ms':>8} | goal")
    for parallel in (args.children, 1):
        samples = sorted(asyncio.run(measure(args.children, parallel, args.rounds)))
        median = samples[len(samples) // 2] * 1000
        goal = "< 400 ms" if parallel > 1 else "(sequential, for comparison)"
        verdict = ("met" if median < 400 else "MISSED") if parallel > 1 else ""
        print(f"{parallel:>24} | {median:>10.1f} | {samples[-1] * 1000:>8.1f} | {goal} {verdict}")


if __name__ == "__main__":
    main()
