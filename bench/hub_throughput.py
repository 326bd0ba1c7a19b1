"""ChatHub throughput, latency and memory per idle source, with a zero-latency model.

``--sources`` sources (default 1,000) each send ``--messages`` messages (default 5) as
fast as the hub acknowledges them; every source runs concurrently. Every message is
stored durably (``queued_messages``, then ``chat_history``) in a real SQLite file (WAL);
the model answers at once with text and tools never ask (``AllowAll``), so what is
measured is the hub and the engine.

Messages sent while a source's turn runs are injected into it at its next round boundary,
so there are fewer turns (``Done`` events) than messages: both rates are reported.

Latency is from the ``send_message`` call to the ``Done`` that answered the message: each
``UserMessage`` echo marks the oldest unanswered message of its source as taken into the
running turn, and the turn's ``Done`` answers every message it took.

Memory per idle source: resident set size before the sources exist, and after all are
answered, evicted (``hub.evict_idle(now=far future)``) and ``gc.collect()``; the
difference divided by the number of sources. RSS also holds allocator slack and SQLite's
page cache, so this is an upper bound.

    python bench/hub_throughput.py [--sources 1000] [--messages 5]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import resource
import sys
import tempfile
import time
from array import array
from collections import defaultdict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bot.settings import load_settings
from engine.bus import Lagged
from engine.config import AppConfig, EngineConfig, HubConfig
from engine.core import Engine
from engine.hub import ChatHub, SourceEvents
from engine.llm import LlmResponse, Message, ModelRegistry, ScriptedModel, ToolSchema, Usage
from engine.session import AllowAll, Done, Error, UserMessage

GOAL_TURNS_PER_S = 300
GOAL_BYTES_PER_IDLE_SOURCE = 10 * 1024
FAR_FUTURE = 1e12
WARMUP_SOURCES = 20


class InstantModel(ScriptedModel):
    """Answers every request at once with text; records nothing."""

    def __init__(self) -> None:
        super().__init__(name="instant", record=False)
        self.calls = 0

    async def complete(
        self, messages: Sequence[Message], tools: Sequence[ToolSchema], *, on_delta: Any = None
    ) -> LlmResponse:
        self.calls += 1
        if on_delta is not None:
            on_delta("ok")
        return LlmResponse(content="ok", usage=Usage(10, 1), model=self.name)


def rss_bytes() -> int:
    """Current resident set size (``VmRSS``); the peak from getrusage without /proc."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class Tracker:
    """Follows the hub's events: Done count, per-message latency, errors."""

    def __init__(self) -> None:
        self.sent: dict[str, deque[float]] = defaultdict(deque)  # send times, unanswered
        self.taken: dict[str, list[float]] = defaultdict(list)  # in the running turn
        self.answered: dict[str, asyncio.Event] = defaultdict(asyncio.Event)
        self.latencies = array("d")  # no object per sample: the heap count stays fair
        self.turns = 0
        self.errors: list[str] = []
        self.lagged = 0
        self.target = 0
        self.all_answered = asyncio.Event()
        self.last_done = 0.0

    def expect(self, messages: int) -> None:
        """Start a measurement: ``messages`` more answers are awaited."""
        del self.latencies[:]
        self.turns = 0
        self.target = messages
        self.all_answered.clear()

    def forget(self) -> None:
        self.sent.clear()
        self.taken.clear()
        self.answered.clear()
        del self.latencies[:]

    async def follow(self, events: SourceEvents) -> None:
        async for item in events:
            if isinstance(item, Lagged):
                self.lagged += item.missed
                continue
            event, source = item.event, item.source
            if isinstance(event, UserMessage):
                self.taken[source].append(self.sent[source].popleft())
            elif isinstance(event, Done):
                now = time.perf_counter()
                self.turns += 1
                self.last_done = now
                self.latencies.extend(now - sent for sent in self.taken.pop(source, ()))
                if not self.sent[source]:
                    self.answered[source].set()
                if len(self.latencies) >= self.target:
                    self.all_answered.set()
            elif isinstance(event, Error):
                self.errors.append(f"{source}: {event.message}")


@dataclass
class Result:
    label: str
    sources: int
    messages: int
    answered: int = 0
    turns: int = 0
    model_calls: int = 0
    acked_s: float = 0.0
    elapsed_s: float = 0.0
    latencies_ms: array[float] = field(default_factory=lambda: array("d"))
    live_answered: int = 0
    evicted: int = 0
    live_after: int = 0
    rss_before: int = 0
    rss_live: int = 0
    rss_after: int = 0
    blocks_before: int = 0
    blocks_after: int = 0
    errors: list[str] = field(default_factory=list)
    lagged: int = 0

    @property
    def total(self) -> int:
        return self.sources * self.messages

    def percentile(self, p: float) -> float:
        data = sorted(self.latencies_ms) or [0.0]
        return data[min(len(data) - 1, int(len(data) * p))]


async def scenario(
    label: str, sources: int, messages: int, paced: bool, timeout_s: float
) -> Result:
    """One fresh engine and hub; ``paced``: a source sends its next message once answered."""
    result = Result(label, sources, messages)
    with tempfile.TemporaryDirectory() as tmp:
        settings = load_settings(
            database_url=f"sqlite:///{tmp}/bench.db",
            chathub_workspace=Path(tmp) / "ws",
            chathub_timezone="UTC",
            _env_file=None,
        )
        config = AppConfig(settings=settings, models=(), engine=EngineConfig())
        model = InstantModel()
        engine = await Engine.open(config, models=ModelRegistry([model]), policy=AllowAll())
        hub = ChatHub(engine, HubConfig())
        await hub.start()
        tracker = Tracker()
        # Per message a UserMessage and at most a TextDelta and a Done: room for all of them.
        events = hub.events(capacity=(sources + WARMUP_SOURCES) * messages * 3 + 1024)
        follower = asyncio.create_task(tracker.follow(events))

        async def talk(source: str) -> None:
            for i in range(messages):
                tracker.answered[source].clear()
                tracker.sent[source].append(time.perf_counter())
                await hub.send_message(source, f"message {i} from {source}")
                if paced:
                    await tracker.answered[source].wait()

        async def burst(names: list[str], total: int) -> tuple[float, float]:
            tracker.expect(total)
            started = time.perf_counter()
            await asyncio.gather(*(talk(name) for name in names))
            acked = time.perf_counter() - started
            try:
                await asyncio.wait_for(tracker.all_answered.wait(), timeout_s)
            except TimeoutError:
                print(f"TIMEOUT ({label}): {len(tracker.latencies)} of {total} answered")
            return acked, tracker.last_done - started

        # Warm-up: code paths, statement caches and the SQLite cache are not per source.
        warm = [f"warmup:{n}" for n in range(WARMUP_SOURCES)]
        await burst(warm, len(warm) * messages)
        hub.evict_idle(now=FAR_FUTURE)
        gc.collect()
        result.rss_before = rss_bytes()
        result.blocks_before = sys.getallocatedblocks()
        calls_before = model.calls

        result.acked_s, result.elapsed_s = await burst(
            [f"bench:{n}" for n in range(sources)], result.total
        )
        result.answered = len(tracker.latencies)
        result.turns = tracker.turns
        result.model_calls = model.calls - calls_before
        result.latencies_ms = array("d", (x * 1000 for x in tracker.latencies))

        result.live_answered = hub.live_sources
        result.rss_live = rss_bytes()
        result.evicted = hub.evict_idle(now=FAR_FUTURE)
        tracker.forget()  # the bench's own per-source bookkeeping is not the hub's
        gc.collect()
        result.rss_after = rss_bytes()
        result.blocks_after = sys.getallocatedblocks()
        result.live_after = hub.live_sources
        result.errors, result.lagged = tracker.errors, tracker.lagged

        events.close()
        follower.cancel()
        await hub.close()
        await engine.close()
    return result


def report(results: list[Result]) -> None:
    first = results[0]
    print(
        f"ChatHub: {first.sources} sources x {first.messages} messages, zero-latency model, "
        "SQLite file (WAL), AllowAll"
    )

    def rate(r: Result, n: int) -> float:
        return n / r.elapsed_s if r.elapsed_s > 0 else 0.0

    def kb_per_source(r: Result) -> float:
        return (r.rss_after - r.rss_before) / r.sources / 1024

    def mib(n: int) -> str:
        return f"{n / 2**20:.1f} MiB"

    rows: list[tuple[str, Callable[[Result], str], str]] = [
        ("messages sent / answered", lambda r: f"{r.total} / {r.answered}", ""),
        ("turns (Done events)", lambda r: f"{r.turns}", ""),
        ("messages per turn", lambda r: f"{r.total / max(r.turns, 1):.2f}", ""),
        ("model calls", lambda r: f"{r.model_calls}", ""),
        ("all acknowledged after", lambda r: f"{r.acked_s:.2f} s", ""),
        ("all answered after", lambda r: f"{r.elapsed_s:.2f} s", ""),
        ("messages/s", lambda r: f"{rate(r, r.answered):.0f}", ""),
        ("durable turns/s", lambda r: f"{rate(r, r.turns):.0f}", f">= {GOAL_TURNS_PER_S}"),
        ("latency p50 (send -> Done)", lambda r: f"{r.percentile(0.5):.1f} ms", ""),
        ("latency p99 (send -> Done)", lambda r: f"{r.percentile(0.99):.1f} ms", ""),
        ("latency max", lambda r: f"{r.percentile(1.0):.1f} ms", ""),
        ("live sources answered", lambda r: f"{r.live_answered}", ""),
        ("evicted / live after", lambda r: f"{r.evicted} / {r.live_after}", ""),
        ("RSS before sources", lambda r: mib(r.rss_before), ""),
        ("RSS all answered (live)", lambda r: mib(r.rss_live), ""),
        ("RSS after eviction + gc", lambda r: mib(r.rss_after), ""),
        ("RSS per idle source", lambda r: f"{kb_per_source(r):.2f} KB", "<= 10 KB"),
        (
            "heap blocks per idle source",
            lambda r: f"{(r.blocks_after - r.blocks_before) / r.sources:.1f}",
            "",
        ),
        ("errors / lagged events", lambda r: f"{len(r.errors)} / {r.lagged}", ""),
    ]
    width = 18
    print(f"{'measure':<28} | " + " | ".join(f"{r.label:>{width}}" for r in results) + " | goal")
    print("-" * (34 + (width + 3) * len(results) + 8))
    for name, value, goal in rows:
        cells = " | ".join(f"{value(r):>{width}}" for r in results)
        print(f"{name:<28} | {cells} | {goal}")
    for r in results:
        ok_turns = rate(r, r.turns) >= GOAL_TURNS_PER_S
        ok_mem = kb_per_source(r) * 1024 <= GOAL_BYTES_PER_IDLE_SOURCE
        note = " (messages merge into turns here; see messages/s)" if r.label == "burst" else ""
        print(
            f"{r.label}: turns/s goal {'met' if ok_turns else 'MISSED'}{note}, "
            f"memory goal {'met' if ok_mem else 'MISSED'}"
        )
        for error in r.errors[:5]:
            print(f"  error: {error}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sources", type=int, default=1000)
    parser.add_argument("--messages", type=int, default=5, help="messages per source")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds to wait")
    args = parser.parse_args()
    results = []
    for label, paced in (("burst", False), ("paced", True)):
        results.append(
            asyncio.run(scenario(label, args.sources, args.messages, paced, args.timeout))
        )
    report(results)


if __name__ == "__main__":
    main()
