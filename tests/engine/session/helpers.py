"""Small tools and probes for turn-engine scenarios."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar, TypeVar

from engine.tools.protocols import ToolCategory, ToolContext


class BlockingTool:
    """Waits until released (or cancelled); records what happened."""

    name = "wait_here"
    description = "Blocks until released."
    parameters: ClassVar[dict[str, Any]] = {"type": "object", "properties": {}}
    category = ToolCategory.INTROSPECTION
    root_agent_only = sub_agents_only = interactive_only = False

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.release = asyncio.Event()
        self.cancelled = False
        self.runs = 0

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> str:
        self.runs += 1
        self.started.set()
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        return "released"


class EchoTool:
    name = "echo"
    description = "Returns its text, repeated."
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"text": {"type": "string"}, "times": {"type": "integer"}},
        "required": ["text"],
    }
    category = ToolCategory.INTROSPECTION
    root_agent_only = sub_agents_only = interactive_only = False

    def __init__(self, name: str = "echo") -> None:
        self.name = name
        self.calls: list[dict[str, Any]] = []
        self.contexts: list[ToolContext] = []

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> str:
        self.calls.append(args)
        self.contexts.append(ctx)
        return args["text"] * args.get("times", 1)


def tool_messages(messages: list[dict[str, Any]]) -> list[str]:
    return [m["content"] for m in messages if m["role"] == "tool"]


def roles(messages: list[dict[str, Any]]) -> list[str]:
    return [m["role"] for m in messages]


E = TypeVar("E")


async def start_until(
    work: Callable[[Callable[[Any], None]], Awaitable[Any]], kind: type[E], events: list[Any]
) -> tuple[asyncio.Task[Any], E]:
    """Start ``work(emit)`` as a task and wait until it emits a ``kind`` event (it waits)."""
    seen = asyncio.Event()

    def emit(event: Any) -> None:
        events.append(event)
        if isinstance(event, kind):
            seen.set()

    task = asyncio.create_task(work(emit))
    await asyncio.wait_for(seen.wait(), 5)
    [first] = [e for e in events if isinstance(e, kind)][:1]
    return task, first
