"""Which files of chathub one Telegram message enters, measured by running it.

An in-process ``Service`` (the python-telegram-bot binding, a scripted model) against the
fake Bot API. After a warm-up, a profiler records every function entered in the project's
own files while one message travels:

- a plain reply: from the update leaving the fake until the reply's ``sendMessage``;
- an approval tap: from the ✅ ``callback_query`` leaving the fake until it is answered
  (``answerCallbackQuery``) and the decision reached the engine.

A file counts when one of its functions is called, not when a coroutine of it is taken up
again after an await (the profiler reports both as a call: the lane and the adapter
awaiting a tap's handler would count at every step of it). Besides, the message's own work
is told apart: its task from the first entry of the platform's code on, the tasks it
starts and the database thread's units, not the next long poll or a timer meanwhile.

It prints the files in the order they were first entered, their layer, how often the
path crossed between ``bot/`` and ``engine/``, and the count (issue 33's bar: a reply at
most 20 files, a tap at most 6, reading the hub's turn and the tap as the route a
front end walks; the engine's own turn is listed apart).

    .venv/bin/python -P bench/message_path.py
"""

from __future__ import annotations

import asyncio
import dis
import functools
import inspect
import itertools
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import CodeType, FrameType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bot.delivery import Pacing  # noqa: E402
from bot.serve import Service  # noqa: E402
from bot.settings import load_settings  # noqa: E402
from bot.telegram.bindings.factory import make_bot_api  # noqa: E402
from engine.config import AppConfig, EngineConfig, HubConfig  # noqa: E402
from engine.llm import (  # noqa: E402
    ModelRegistry,
    ScriptedModel,
    text,
    tool_call,
)
from tests.fakes.telegram_server import FakeTelegramServer  # noqa: E402

TOKEN = "123456:BENCH"
CHAT = 4242
#: The engine's own turn (the session's rounds, the model, the tools, the store), listed
#: apart from the route a front end walks to and from the hub.
ENGINE_TURN = (
    "engine/session/",
    "engine/llm/",
    "engine/tools/",
    "engine/approval/",
    "engine/store/",
    "engine/bus/",
    "engine/mcp/",
    "engine/core.py",
    "engine/failpoints.py",
    "engine/agents/",
    "engine/config.py",
)


#: Code objects of coroutines and generators: a "call" of one is also its resumption.
_SUSPENDABLE = inspect.CO_COROUTINE | inspect.CO_GENERATOR | inspect.CO_ASYNC_GENERATOR


@functools.cache
def _start_offset(code: CodeType) -> int:
    """Where a fresh frame of ``code`` starts running (its first ``RESUME``)."""
    return next((i.offset for i in dis.get_instructions(code) if i.opname == "RESUME"), 0)


def resumed(frame: FrameType) -> bool:
    """A coroutine or generator taken up again after an await or a yield, not entered:
    the profiler reports both as a call, and the awaiting chain (the lane, the adapter)
    would count as entered at every step the message's work takes."""
    code = frame.f_code
    return bool(code.co_flags & _SUSPENDABLE) and frame.f_lasti > _start_offset(code)


class Entered:
    """The project's files entered while recording, in order of the first entry.

    ``causal``: the files entered by the message's own work (its task from the first
    entry of ``origin`` on, the tasks it started, and the database thread's units), apart
    from what runs meanwhile for other reasons (the next long poll, timers, sweeps)."""

    def __init__(self) -> None:
        self.files: dict[str, None] = {}
        self.sequence: list[str] = []
        self.causal: dict[str, None] = {}
        self.causal_sequence: list[str] = []
        self.recording = False
        self.origin: str | None = None
        self._path_tasks: set[asyncio.Task[Any]] = set()
        self._parents: dict[asyncio.Task[Any], asyncio.Task[Any] | None] = {}
        self._main = threading.main_thread()

    def install(self, loop: asyncio.AbstractEventLoop) -> None:
        """Remember which task started which (the message's work spreads over tasks)."""

        def factory(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> Any:
            task = asyncio.Task(coro, loop=loop, **kwargs)
            if self.recording:
                self._parents[task] = asyncio.current_task(loop)
            return task

        loop.set_task_factory(factory)

    def _on_path(self) -> bool:
        if threading.current_thread() is not self._main:
            return True  # the database's units, run for the tasks that wait for them
        try:
            task = asyncio.current_task()
        except RuntimeError:
            return False
        seen = task
        while seen is not None:
            if seen in self._path_tasks:
                return True
            seen = self._parents.get(seen)
        return False

    def profile(self, frame: FrameType, event: str, _arg: Any) -> None:
        if not self.recording or event != "call" or resumed(frame):
            return
        path = frame.f_code.co_filename
        if not path.startswith(str(ROOT)) or "/.venv/" in path or "/tests/" in path:
            return
        relative = path[len(str(ROOT)) + 1 :]
        if relative.startswith("bench/"):
            return
        self.files.setdefault(relative, None)
        if not self.sequence or self.sequence[-1] != relative:
            self.sequence.append(relative)
        if relative == self.origin and threading.current_thread() is self._main:
            task = asyncio.current_task()
            if task is not None:
                self._path_tasks.add(task)
        if self._path_tasks and self._on_path():
            self.causal.setdefault(relative, None)
            if not self.causal_sequence or self.causal_sequence[-1] != relative:
                self.causal_sequence.append(relative)

    def start(self, origin: str | None = None) -> None:
        self.files.clear()
        self.sequence.clear()
        self.causal.clear()
        self.causal_sequence.clear()
        self._path_tasks.clear()
        self._parents.clear()
        self.origin = origin
        sys.setprofile(self.profile)
        threading.setprofile(self.profile)
        self.recording = True

    def stop(self) -> None:
        self.recording = False
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]


def crossings(sequence: list[str]) -> int:
    """Moves between ``bot/`` and ``engine/`` along the path."""
    layers = [s.split("/", 1)[0] for s in sequence if s.split("/", 1)[0] in ("bot", "engine")]
    return sum(1 for a, b in itertools.pairwise(layers) if a != b)


async def until(check: Callable[[], bool], within_s: float = 10.0) -> None:
    deadline = time.monotonic() + within_s
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError("the message did not arrive")
        await asyncio.sleep(0.001)


def span(sequence: list[str], first: str, last: str, *, to_last: bool = False) -> list[str]:
    """The files entered from the first entry of ``first`` to the first entry of ``last``
    after it (``to_last``: its last entry), in order of first entry."""
    if first not in sequence:
        return []
    start = sequence.index(first)
    ends = [i for i in range(start, len(sequence)) if sequence[i] == last] or [len(sequence) - 1]
    end = ends[-1] if to_last else ends[0]
    return list(dict.fromkeys(sequence[start : end + 1]))


def on_path(entered: Entered) -> list[str]:
    """The route's files of the message's own work, printed."""
    route = [f for f in entered.causal if not f.startswith(ENGINE_TURN)]
    for f in route:
        print(f"    {f}")
    return route


def report(title: str, entered: Entered) -> tuple[int, int]:
    files = list(entered.files)
    route = [f for f in files if not f.startswith(ENGINE_TURN)]
    turn = [f for f in files if f.startswith(ENGINE_TURN)]
    print(f"\n{title}: {len(files)} files in all; the route (hub and front end): {len(route)}")
    for f in route:
        print(f"  {f}")
    if turn:
        print(f"  the engine's turn, apart: {len(turn)} files ({', '.join(turn)})")
    print(f"  crossings between bot/ and engine/: {crossings(entered.sequence)}")
    return len(files), len(route)


async def main() -> int:
    fake = FakeTelegramServer().start()
    model = ScriptedModel()
    with tempfile.TemporaryDirectory() as tmp:
        settings = load_settings(
            database_url=f"sqlite+aiosqlite:///{tmp}/chathub.db",
            chathub_workspace=Path(tmp) / "workspace",
            chathub_timezone="UTC",
            telegram_bot_token=TOKEN,
            telegram_api_url=fake.base_url,
            telegram_allowed_user_ids=str(CHAT),
            memory_enabled=False,
            _env_file=None,
        )
        config = AppConfig(settings=settings, models=(), engine=EngineConfig(), hub=HubConfig())
        service = Service(
            config,
            models=ModelRegistry([model]),
            api=make_bot_api("ptb", TOKEN, fake.base_url),
            pacing=Pacing.unpaced(),
            http=False,
        )
        await service.start()
        entered = Entered()
        entered.install(asyncio.get_running_loop())
        try:
            for round_ in range(3):  # the last one is measured
                model.add(text(f"answer {round_}"))
                sent = len(fake.messages(CHAT))
                if round_ == 2:
                    entered.start(origin="bot/telegram/inbound/poller.py")
                fake.user_message(CHAT, CHAT, f"hello {round_}")
                await until(lambda n=sent: len(fake.messages(CHAT)) > n)
                entered.stop()
            reply = report("One plain reply (update to sendMessage)", entered)
            poller_to_send = span(
                entered.sequence,
                "bot/telegram/inbound/poller.py",
                "bot/telegram/bindings/ptb.py",
                to_last=True,
            )
            print(f"  from the poller to the reply's send: {len(poller_to_send)} files")
            reply_path = on_path(entered)
            print(
                f"  the message's own work (its tasks and database units, not what ran "
                f"meanwhile): {len(reply_path)} files on the route"
            )

            marker = "tap-bench"
            for round_ in range(3):
                command = f'{{"command": "echo {marker}{round_}"}}'
                model.add(tool_call("execute_cmd", command, f"c{round_}"), text(f"ran {round_}"))
                fake.user_message(CHAT, CHAT, f"run it {round_}")
                card = None

                def shown(r: int = round_) -> bool:
                    nonlocal card
                    for m in reversed(fake.messages(CHAT)):
                        for row in (m.reply_markup or {}).get("inline_keyboard") or []:
                            for button in row:
                                data = button.get("callback_data") or ""
                                if (
                                    data.startswith("ap1:")
                                    and data.endswith(":a")
                                    and (f"{marker}{r}" in (m.text or ""))
                                ):
                                    card = (m.message_id, data)
                                    return True
                    return False

                await until(shown)
                assert card is not None
                answered = len(fake.callback_answers)
                if round_ == 2:
                    entered.start(origin="bot/telegram/dispatch/callbacks.py")
                fake.callback(CHAT, CHAT, card[0], card[1])
                await until(lambda n=answered: len(fake.callback_answers) > n)
                entered.stop()
                await until(
                    lambda r=round_: any((m.text or "") == f"ran {r}" for m in fake.messages(CHAT))
                )
            tap = report("One approval tap (callback_query to answerCallbackQuery)", entered)
            to_broker = span(
                entered.sequence, "bot/telegram/dispatch/callbacks.py", "engine/approval/broker.py"
            )
            print(
                f"  from the platform's callback to the broker: {len(to_broker)} files "
                f"({', '.join(to_broker)})"
            )
            tap_path = span(
                entered.causal_sequence,
                "bot/telegram/dispatch/callbacks.py",
                "engine/approval/broker.py",
            )
            print(
                f"  the tap's own work, callback to broker: {len(tap_path)} files "
                f"({', '.join(tap_path)})"
            )
        finally:
            entered.stop()
            await service.stop()
            fake.stop()
    print(
        f"\nreply: {reply[1]} files on the route ({reply[0]} with the engine's turn); "
        f"tap: {tap[1]} ({tap[0]})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
