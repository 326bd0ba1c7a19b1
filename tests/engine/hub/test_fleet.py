"""Several hubs on one database, each one "process" of a fleet: every message is answered
exactly once and in order, work spreads, a dead process's sources are taken over, a
process that lost its lease commits nothing more, and ``/stop`` reaches the owner."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from engine.approval.deciders import OPERATOR
from engine.config import AppConfig, EngineConfig, HubConfig, load_settings
from engine.core import Engine
from engine.hub import APPROVE, ChatHub
from engine.hub.fleet.ownership import FleetConfig, lease_name, pick
from engine.hub.turns.inbox import queue_message
from engine.hub.turns.sources import SourceState
from engine.hub.types import Notification, SendOptions
from engine.llm.registry import ModelRegistry
from engine.llm.scripted import ScriptedModel, text, tool_call
from engine.llm.types import LlmResponse
from engine.session.turn.gate import AllowAll
from engine.store.fencing import Fenced, fenced
from engine.store.leases import Leases, lease_fence
from engine.store.notify import LocalNotifier, Resync
from engine.store.schema import (
    chat_history,
    chat_sessions,
    chat_sessions_stack,
    leases,
    queued_messages,
)
from tests.engine.hub.conftest import last_user_text
from tests.pg import BACKENDS, database_url

TTL = 2.0  # seconds of database clock: take-over tests wait for real expiry (1 s lapsed
# in CI runs on a loaded 2-core machine: a stall past it lost a member its chats)


class Echo(ScriptedModel):
    """Answers ``echo: <last user text>``; ``gate`` (when set) holds every answer."""

    def __init__(self) -> None:
        super().__init__(name="primary")
        self.gate: asyncio.Event | None = None
        self.started = asyncio.Event()
        self.calls = 0

    async def complete(self, messages, tools, *, on_delta=None):  # type: ignore[override]
        self.started.set()
        self.calls += 1
        if self.gate is not None:
            await self.gate.wait()
        if not self.pending:
            self.add(lambda msgs: LlmResponse(content=f"echo: {last_user_text(msgs)}"))
        return await super().complete(messages, tools, on_delta=on_delta)


@dataclass
class Member:
    name: str
    engine: Engine
    hub: ChatHub
    model: Echo


@pytest.fixture(params=BACKENDS)
async def url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    async with database_url(request.param, tmp_path, migrated=True) as url:
        yield url


@contextlib.asynccontextmanager
async def member(
    url: str,
    tmp_path: Path,
    name: str,
    notifier: LocalNotifier | None,
    ttl: float = 10.0,
    *,
    rules: bool = False,
) -> AsyncIterator[Member]:
    """A fleet member: its own engine and hub over ``url`` (``rules``: the default approval
    rules, so ``execute_cmd`` asks; else every call runs)."""
    settings = load_settings(
        database_url=url,
        chathub_workspace=tmp_path / f"workspace-{name}",
        chathub_timezone="UTC",
        _env_file=None,
    )
    config = AppConfig(settings=settings, models=(), engine=EngineConfig(max_tool_rounds=2))
    model = Echo()
    policy = None if rules else AllowAll()
    engine = await Engine.open(config, models=ModelRegistry([model]), policy=policy)
    fleet = FleetConfig(owner=name, lease_ttl_s=ttl, scan_interval_s=0.2)
    hub = ChatHub(engine, HubConfig(idle_evict_s=60), fleet=fleet, notifier=notifier)
    await hub.start()
    try:
        yield Member(name, engine, hub, model)
    finally:
        await hub.close()
        await engine.close()


@dataclass
class Dead:
    """A fleet member "a" that is never started: it renews what it claims only until
    ``kill`` (as ``kill -9`` would), then holds it until the lease runs out."""

    engine: Engine
    hub: ChatHub
    model: Echo
    renewing: asyncio.Task[None]

    async def kill(self) -> None:
        """From here on nothing is renewed (a slow machine must not lapse it earlier)."""
        self.renewing.cancel()
        await asyncio.gather(self.renewing, return_exceptions=True)


@contextlib.asynccontextmanager
async def dead_member(url: str, workspace: Path, *, rules: bool = False) -> AsyncIterator[Dead]:
    settings = load_settings(
        database_url=url, chathub_workspace=workspace, chathub_timezone="UTC", _env_file=None
    )
    model = Echo()
    engine = await Engine.open(
        AppConfig(settings=settings, models=(), engine=EngineConfig(max_tool_rounds=2)),
        models=ModelRegistry([model]),
        policy=None if rules else AllowAll(),
    )
    fleet = FleetConfig(owner="a", lease_ttl_s=TTL, scan_interval_s=60)
    hub = ChatHub(engine, HubConfig(), fleet=fleet)
    assert hub.fleet is not None
    renewing = asyncio.create_task(hub.fleet.ownership.keep(lambda _lost: None))
    dead = Dead(engine, hub, model, renewing)
    try:
        yield dead
    finally:
        await dead.kill()
        await hub.close()
        await engine.close()


def answers(conn: sa.Connection) -> dict[str, list[str]]:
    """Each source's root-frame assistant answers, in order."""
    h, stack, s = chat_history, chat_sessions_stack, chat_sessions
    rows = conn.execute(
        sa.select(s.c.source, h.c.content)
        .join(stack, stack.c.id == h.c.session_stack_id)
        .join(s, s.c.id == stack.c.session_id)
        .where(h.c.role == "assistant", stack.c.depth == 0)
        .order_by(h.c.id)
    )
    out: dict[str, list[str]] = {}
    for source, content in rows:
        if content:  # (a tool round's assistant row has none)
            out.setdefault(source, []).append(content)
    return out


def transcripts(conn: sa.Connection) -> dict[str, list[tuple[str, str]]]:
    """Each source's root-frame user messages and answers, in order: ``(role, content)``."""
    h, stack, s = chat_history, chat_sessions_stack, chat_sessions
    rows = conn.execute(
        sa.select(s.c.source, h.c.role, h.c.content)
        .join(stack, stack.c.id == h.c.session_stack_id)
        .join(s, s.c.id == stack.c.session_id)
        .where(h.c.role.in_(("user", "assistant")), stack.c.depth == 0)
        .order_by(h.c.id)
    )
    out: dict[str, list[tuple[str, str]]] = {}
    for source, role, content in rows:
        if content:  # (a tool round's assistant row has none)
            out.setdefault(source, []).append((role, content))
    return out


def echo_turns(transcript: list[tuple[str, str]]) -> list[tuple[list[str], str]]:
    """The transcript as turns: the user messages each answer took, and the answer.

    A message that reaches the owner before the turn ahead of it has begun its first round
    is taken into that turn (steering, as in one process): the model sees both as one user
    message, so one answer echoes both. A user message left unanswered shows as a last
    turn with no answer (``""``); an answer doubled, as a turn with no user message.
    """
    turns: list[tuple[list[str], str]] = []
    asked: list[str] = []
    for role, content in transcript:
        if role == "user":
            asked.append(content)
        else:
            turns.append((asked, content))
            asked = []
    if asked:
        turns.append((asked, ""))
    return turns


def queued_sources(conn: sa.Connection) -> list[str]:
    return list(conn.execute(sa.select(queued_messages.c.source)).scalars())


async def until(check: Callable[[], Awaitable[bool]], within: float = 15.0) -> None:
    """Poll the database (other "processes" and the lease clock write it) until ``check``."""
    for _ in range(int(within / 0.02)):
        if await check():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"not within {within} s")


async def test_messages_through_any_process_are_answered_once_in_order_and_spread(
    url: str, tmp_path: Path
) -> None:
    notifier = LocalNotifier("shared")  # one process here: the fleet's NOTIFY stand-in
    async with (
        member(url, tmp_path, "a", notifier) as a,
        member(url, tmp_path, "b", notifier) as b,
        member(url, tmp_path, "c", notifier) as c,
    ):
        for m in (a, b, c):
            await m.hub.fleet.ownership.refresh_members()  # type: ignore[union-attr]
        sources = [f"telegram:{n}" for n in range(12)]
        sent = {s: [f"{s} message {k}" for k in range(3)] for s in sources}
        for k in range(3):
            for n, source in enumerate(sources):
                via = (a, b, c)[(n + k) % 3]  # every source's messages through all three
                await via.hub.send_message(source, sent[source][k])

        def stored(got: dict[str, list[tuple[str, str]]], source: str) -> list[str]:
            return [content for role, content in got.get(source, []) if role == "user"]

        async def all_answered() -> bool:  # every message stored, every source answered last
            got = await a.engine.store.db.run(transcripts)
            return all(len(stored(got, s)) >= 3 and got[s][-1][0] == "assistant" for s in sources)

        try:
            await until(all_answered)
        except AssertionError as error:  # what was missing, and where the work stood
            error.add_note(f"transcripts: {await a.engine.store.db.run(transcripts)}")
            error.add_note(f"queued: {await a.engine.store.db.run(queued_sources)}")
            error.add_note(f"held: { {m.name: m.hub.fleet.ownership.owned() for m in (a, b, c)} }")  # type: ignore[union-attr]
            raise
        await asyncio.sleep(0.3)  # nothing more comes
        got = await a.engine.store.db.run(transcripts)
        assert {s: stored(got, s) for s in sources} == sent  # each once, in order
        for source in sources:  # each answered once, by the turn that took it
            for asked, answer in echo_turns(got[source]):
                assert asked and answer == "echo: " + "\n\n".join(asked), got[source]
        worked = {m.name: m.model.calls for m in (a, b, c)}
        assert all(calls > 0 for calls in worked.values()), worked  # spread over all three
        chosen = {pick(s, ("a", "b", "c")) for s in sources}
        assert chosen == {"a", "b", "c"}


async def test_a_home_set_through_one_process_is_the_home_of_the_others(
    url: str, tmp_path: Path
) -> None:
    """``/sethome`` taken by one process was stored and known there only: the tic of any
    other went on telling the old home until it restarted (found by review on
    2026-12-07)."""
    notifier = LocalNotifier("shared")
    async with (
        member(url, tmp_path, "a", notifier) as a,
        member(url, tmp_path, "b", notifier) as b,
    ):
        assert a.hub.home == b.hub.home == "console"
        await a.hub.set_home("telegram:42")
        deadline = asyncio.get_running_loop().time() + 10
        while b.hub.home != "telegram:42":
            assert asyncio.get_running_loop().time() < deadline, b.hub.home
            await asyncio.sleep(0.01)


async def test_two_pulls_at_once_of_a_source_taken_anew_run_its_message_once(
    url: str, tmp_path: Path
) -> None:
    """A notice and a scan reach a source nobody holds at the same moment: one turn."""
    async with member(url, tmp_path, "a", None) as a:
        assert a.hub.fleet is not None
        source = "telegram:11"
        state = await a.hub._sources.state(source)
        await queue_message(a.engine.store, source, state.session_id, "once", SendOptions(), None)
        a.hub._sources.forget(source)  # queued as by another process: not seen here yet
        # The interleaving that ran one row twice: the second claim's answer comes back
        # while the first pull, its source's state made, reads the queue.
        leases, queue = a.hub.fleet.ownership._leases, a.engine.store.queue
        acquire, pending = leases.acquire, queue.pending
        reading, claims = asyncio.Event(), 0

        async def acquire_second_late(*args: object, **kwargs: object) -> object:
            nonlocal claims
            claims += 1
            lease = await acquire(*args, **kwargs)  # type: ignore[arg-type]
            if claims == 2:
                await reading.wait()
            return lease

        async def pending_signalled(source: str) -> object:
            reading.set()
            return await pending(source)

        leases.acquire = acquire_second_late  # type: ignore[method-assign]
        queue.pending = pending_signalled  # type: ignore[method-assign]
        pulled = await asyncio.gather(a.hub.fleet.pull(source), a.hub.fleet.pull(source))
        assert sum(pulled) == 1

        async def answered() -> bool:
            return bool((await a.engine.store.db.run(answers)).get(source))

        await until(answered)
        await asyncio.sleep(0.3)  # a second turn would have answered by now
        assert (await a.engine.store.db.run(answers))[source] == ["echo: once"]
        assert a.model.calls == 1


async def test_a_dead_processs_queued_and_interrupted_work_is_taken_over(
    url: str, tmp_path: Path
) -> None:
    """``a`` holds a source mid-turn and stops renewing (its lease expires, as after
    kill -9); ``b`` takes the source over, resumes the turn and answers the queue once."""
    async with (
        member(url, tmp_path, "b", None, ttl=TTL) as b,
        dead_member(url, tmp_path / "w-dead") as a,
    ):
        model, hub = a.model, a.hub
        model.gate = asyncio.Event()  # its answers never come
        assert hub.fleet is not None
        await hub.fleet.ownership.claim("telegram:9")
        await hub.send_message("telegram:9", "first")
        await asyncio.wait_for(model.started.wait(), 5)  # its turn is in the model call
        await hub.send_message("telegram:9", "second")  # queued behind it
        await a.kill()  # "kill -9": nothing renewed any more; its turn hangs where it was

        async def answered() -> bool:
            got = await b.engine.store.db.run(answers)
            return len(got.get("telegram:9", [])) >= 2

        await until(answered)
        await asyncio.sleep(0.3)
        assert (await b.engine.store.db.run(answers))["telegram:9"] == [
            "echo: first",
            "echo: second",
        ]
        assert b.hub.fleet is not None and b.hub.fleet.takeovers >= 1


async def test_a_process_that_lost_its_lease_commits_nothing_more(url: str, tmp_path: Path) -> None:
    """SIGSTOP past the lease: the turn's answer comes back after another process took the
    source; its transaction fails behind the fence and nothing of it is stored."""
    async with member(url, tmp_path, "a", None, ttl=TTL) as a:
        assert a.hub.fleet is not None
        a.model.gate = asyncio.Event()
        await a.hub.fleet.ownership.claim("telegram:5")
        await a.hub.send_message("telegram:5", "hello")
        await asyncio.wait_for(a.model.started.wait(), 5)
        # Paused: the lease expires and another process takes it.
        a.hub.fleet.ownership.renew_sources = _never_renew  # type: ignore[method-assign]
        other = Leases(a.engine.store.db)

        async def taken() -> bool:
            return await other.acquire(lease_name("telegram:5"), "z", TTL) is not None

        await until(taken)
        a.model.gate.set()  # "SIGCONT": the answer arrives, too late
        await asyncio.sleep(0.5)
        got = await a.engine.store.db.run(answers)
        assert got.get("telegram:5", []) == []


async def _never_renew() -> list[str]:
    return []


async def test_the_fence_rolls_back_a_transaction_once_the_lease_is_gone(
    url: str, tmp_path: Path
) -> None:
    async with member(url, tmp_path, "a", None) as a:
        db = a.engine.store.db
        held = Leases(db)
        lease = await held.acquire("source:x", "a", 30)
        assert lease is not None

        def write(conn: sa.Connection) -> None:
            conn.execute(sa.text("UPDATE leases SET owner = owner WHERE name = 'source:x'"))
            conn.execute(
                chat_sessions.insert().values(
                    source="fenced",
                    agent_id="main",
                    is_interactive=True,
                    is_ephemeral=False,
                    created_at=sa.func.now(),
                )
            )

        with fenced(lease_fence(lease)):
            await db.run(write)  # held: commits
        await held.release(lease)
        with fenced(lease_fence(lease)), pytest.raises(Fenced):
            await db.run(write)
        count = await db.run(
            lambda c: c.execute(
                sa.select(sa.func.count())
                .select_from(chat_sessions)
                .where(chat_sessions.c.source == "fenced")
            ).scalar()
        )
        assert count == 1
        assert await db.run(lambda c: c.execute(sa.select(leases.c.epoch)).scalar()) == 1


async def long_turn_at(a: Member, source: str) -> None:
    """A turn of ``source`` running at ``a``, its model held until the test lets it go."""
    assert a.hub.fleet is not None
    a.model.gate = asyncio.Event()
    await a.hub.fleet.ownership.claim(source)
    await a.hub.send_message(source, "a long job")
    await asyncio.wait_for(a.model.started.wait(), 5)
    assert a.hub.is_processing(source)


async def stopped_without_an_answer(a: Member, source: str) -> None:
    """The turn at ``a`` ends, and its model, let go after, answers nothing more."""

    async def stopped() -> bool:
        return not a.hub.is_processing(source)

    await until(stopped, within=5)
    assert a.model.gate is not None
    a.model.gate.set()
    await asyncio.sleep(0.2)
    assert (await a.engine.store.db.run(answers)).get(source, []) == []


async def test_stop_reaches_the_process_running_the_turn(url: str, tmp_path: Path) -> None:
    notifier = LocalNotifier("shared")
    async with member(url, tmp_path, "a", notifier) as a, member(url, tmp_path, "b", notifier) as b:
        await long_turn_at(a, "telegram:3")
        assert not b.hub.is_processing("telegram:3") and await b.hub.is_busy("telegram:3")
        await b.hub.cancel("telegram:3")  # /stop arrives at the other process
        await stopped_without_an_answer(a, "telegram:3")


async def test_a_session_cancelled_at_another_process_stops_where_it_runs(
    url: str, tmp_path: Path
) -> None:
    """``cancel_session`` at b (the API, a job's stop) of a session whose turn runs at a:
    a's turn ends; a session no process runs is left as it is."""
    notifier = LocalNotifier("shared")
    async with member(url, tmp_path, "a", notifier) as a, member(url, tmp_path, "b", notifier) as b:
        await long_turn_at(a, "telegram:4")
        session_id = await a.hub.current_session("telegram:4")
        assert session_id is not None

        await b.hub.cancel_session(987654)  # no such session: nothing to stop anywhere
        assert a.hub.is_processing("telegram:4")
        await b.hub.cancel_session(session_id)
        await stopped_without_an_answer(a, "telegram:4")


async def test_a_decision_from_the_inbox_at_another_process_wakes_the_waiting_turn(
    url: str, tmp_path: Path
) -> None:
    """No chat named (the web inbox at b): b finds the call's chat from its row and the
    turn waiting at a runs it."""
    notifier = LocalNotifier("shared")
    async with (
        member(url, tmp_path, "a", notifier, rules=True) as a,
        member(url, tmp_path, "b", notifier, rules=True) as b,
    ):
        assert a.hub.fleet is not None
        a.model.add(tool_call("execute_cmd", '{"command": "echo run >> runs.log"}', "c1"))
        a.model.add(text("Ran it."))
        await a.hub.fleet.ownership.claim("telegram:6")
        await a.hub.send_message("telegram:6", "run it")
        call = await pending_call(a.engine)
        await b.hub.decide(call, APPROVE, decider=OPERATOR, by="the web inbox")

        async def answered() -> bool:
            return (await a.engine.store.db.run(answers)).get("telegram:6") == ["Ran it."]

        await until(answered)
        assert ran(tmp_path / "workspace-a") == ["run"] and b.model.calls == 0


async def pending_call(engine: Engine) -> int:
    """The first approval the engine waits for (waiting for it to be asked)."""
    return await _first_pending(engine.pending_approvals, "no approval was asked for")


async def pending_question(engine: Engine) -> int:
    """The first question the engine waits for an answer to."""
    return await _first_pending(engine.pending_questions, "no question was asked")


async def _first_pending(read: Callable[[], Awaitable[list[Any]]], missing: str) -> int:
    for _ in range(500):
        if pending := await read():
            return int(pending[0].tool_call_id)
        await asyncio.sleep(0.01)
    raise AssertionError(missing)


def last_tool_result(messages: list[dict[str, object]]) -> str:
    return next(str(m["content"]) for m in reversed(messages) if m["role"] == "tool")


def ran(workspace: Path) -> list[str]:
    path = workspace / "runs.log"
    return path.read_text().splitlines() if path.exists() else []


async def test_an_approval_pressed_on_another_process_wakes_the_waiting_turn(
    url: str, tmp_path: Path
) -> None:
    notifier = LocalNotifier("shared")
    async with (
        member(url, tmp_path, "a", notifier, rules=True) as a,
        member(url, tmp_path, "b", notifier, rules=True) as b,
    ):
        assert a.hub.fleet is not None
        a.model.add(tool_call("execute_cmd", '{"command": "echo run >> runs.log"}', "c1"))
        a.model.add(text("Ran it."))
        await a.hub.fleet.ownership.claim("telegram:7")
        await a.hub.send_message("telegram:7", "run it")
        call = await pending_call(a.engine)
        await b.hub.decide(call, APPROVE, decider=OPERATOR, source="telegram:7")  # the button, at b

        async def answered() -> bool:
            return (await a.engine.store.db.run(answers)).get("telegram:7") == ["Ran it."]

        await until(answered)
        assert ran(tmp_path / "workspace-a") == ["run"] and ran(tmp_path / "workspace-b") == []
        assert b.model.calls == 0


@pytest.mark.parametrize("kept", ["idle", "busy"])
async def test_a_tap_at_a_process_that_worked_the_chat_before_a_new_elsewhere_decides(
    url: str, tmp_path: Path, kept: str
) -> None:
    """a worked the chat and let it go, keeping what it knew of it; /new at b moved the
    chat to a fresh session, whose turn asks. The tap reaching a was decided against the
    session a remembered and refused as another session's call: the card showed expired
    and b's turn waited for good (found by review on 2026-12-06). ``busy``: an earlier
    tenure's turn still waits at a (the first fix missed it)."""
    notifier = LocalNotifier("shared")
    source = "telegram:77"
    async with (
        member(url, tmp_path, "a", notifier, rules=True) as a,
        member(url, tmp_path, "b", notifier, rules=True) as b,
    ):
        assert a.hub.fleet is not None and b.hub.fleet is not None
        await a.hub.fleet.ownership.claim(source)
        await a.hub.send_message(source, "hello")

        async def let_go() -> bool:
            said = (await a.engine.store.db.run(answers)).get(source)
            return said == ["echo: hello"] and not a.hub.fleet.owns(source)  # type: ignore[union-attr]

        await until(let_go)
        before = await a.hub.session_id(source)
        waiting = asyncio.create_task(asyncio.Event().wait())
        if kept == "busy":
            state = a.hub._sources.get(source)
            assert state is not None
            state.turn = waiting  # as a turn of the earlier tenure waiting for a human
        fresh = await asyncio.wait_for(b.hub.clear(source), 10)
        assert await a.hub.session_id(source) == fresh != before
        b.model.add(tool_call("execute_cmd", '{"command": "echo run >> runs.log"}', "c1"))
        b.model.add(text("Ran it."))
        await b.hub.fleet.ownership.claim(source)
        await b.hub.send_message(source, "run it")
        call = await pending_call(b.engine)
        await a.hub.decide(call, APPROVE, decider=OPERATOR, source=source)  # the tap, at a

        async def ran_it() -> bool:
            return "Ran it." in (await b.engine.store.db.run(answers)).get(source, [])

        await until(ran_it)
        assert ran(tmp_path / "workspace-b") == ["run"]
        waiting.cancel()


async def test_a_question_answered_on_another_process_wakes_the_waiting_turn(
    url: str, tmp_path: Path
) -> None:
    notifier = LocalNotifier("shared")
    async with (
        member(url, tmp_path, "a", notifier) as a,
        member(url, tmp_path, "b", notifier) as b,
    ):
        assert a.hub.fleet is not None
        a.model.add(tool_call("ask_user_clarification", '{"question": "Which colour?"}', "q1"))
        a.model.add(lambda msgs: LlmResponse(content=f"Painted {last_tool_result(msgs)}."))
        await a.hub.fleet.ownership.claim("telegram:9")
        await a.hub.send_message("telegram:9", "paint it")
        question = await pending_question(a.engine)
        decided = await b.hub.answer(question, "blue", source="telegram:9")  # typed at b
        assert decided.resumed is None  # b resumes nothing: a's turn waits for it

        async def answered() -> bool:
            return (await a.engine.store.db.run(answers)).get("telegram:9") == ["Painted blue."]

        await until(answered)
        assert b.model.calls == 0 and a.model.calls == 2


async def test_a_question_of_a_dead_process_is_answered_and_its_turn_goes_on_elsewhere(
    url: str, tmp_path: Path
) -> None:
    async with (
        member(url, tmp_path, "b", None, ttl=TTL) as b,
        dead_member(url, tmp_path / "workspace-b") as a,
    ):
        dead, hub = a.engine, a.hub
        a.model.add(tool_call("ask_user_clarification", '{"question": "Which colour?"}', "q1"))
        assert hub.fleet is not None
        await hub.fleet.ownership.claim("telegram:10")
        await hub.send_message("telegram:10", "paint it")
        question = await pending_question(dead)
        await a.kill()  # "kill -9" of a: its lease runs out, never renewed
        await asyncio.sleep(TTL)
        b.model.add(lambda msgs: LlmResponse(content=f"Painted {last_tool_result(msgs)}."))
        await b.hub.answer(question, "green", source="telegram:10")

        async def answered() -> bool:
            return (await b.engine.store.db.run(answers)).get("telegram:10") == ["Painted green."]

        await until(answered)
        assert b.model.calls == 1


async def test_an_approval_card_of_a_dead_process_is_approved_and_runs_once_elsewhere(
    url: str, tmp_path: Path
) -> None:
    async with (
        member(url, tmp_path, "b", None, ttl=TTL, rules=True) as b,
        # One workspace, as in compose.yaml.
        dead_member(url, tmp_path / "workspace-b", rules=True) as a,
    ):
        dead, hub = a.engine, a.hub
        a.model.add(tool_call("execute_cmd", '{"command": "echo run >> runs.log"}', "c1"))
        assert hub.fleet is not None
        await hub.fleet.ownership.claim("telegram:8")
        await hub.send_message("telegram:8", "run it")
        call = await pending_call(dead)
        # "kill -9" of a: never renewed; b gets its (old) button once a's lease is gone.
        await a.kill()
        await asyncio.sleep(TTL)
        b.model.add(text("Ran it."))
        await b.hub.decide(call, APPROVE, decider=OPERATOR, source="telegram:8")

        async def answered() -> bool:
            return (await b.engine.store.db.run(answers)).get("telegram:8") == ["Ran it."]

        await until(answered)
        assert ran(tmp_path / "workspace-b") == ["run"]  # once, by b


async def test_a_cron_result_for_a_chat_worked_elsewhere_waits_for_it_and_runs_behind_its_fence(
    url: str, tmp_path: Path
) -> None:
    """A notification fired in b for a chat whose turn runs in a: b waits until a lets the
    chat go, then delivers it there; one answer each, in order."""
    notifier = LocalNotifier("shared")
    async with member(url, tmp_path, "a", notifier) as a, member(url, tmp_path, "b", notifier) as b:
        assert a.hub.fleet is not None and b.hub.fleet is not None
        a.model.gate = asyncio.Event()
        await a.hub.fleet.ownership.claim("telegram:4")
        await a.hub.send_message("telegram:4", "first")
        await asyncio.wait_for(a.model.started.wait(), 5)
        b.model.add(text("Your report is ready."))
        b.hub.notify(Notification("cron", "job_done", "report ready", target="telegram:4"))
        await asyncio.sleep(0.5)
        assert b.model.calls == 0  # it waits: the chat is a's
        a.model.gate.set()

        async def both() -> bool:
            return len((await a.engine.store.db.run(answers)).get("telegram:4", [])) >= 2

        await until(both)
        assert (await a.engine.store.db.run(answers))["telegram:4"] == [
            "echo: first",
            "Your report is ready.",
        ]
        fleet_b = b.hub.fleet

        async def let_go() -> bool:  # delivered and idle: the next process may take it
            return not fleet_b.owns("telegram:4")

        await until(let_go)


async def test_a_notice_whose_delivery_failed_lets_its_chat_go(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """a's delivery of a notice fails (the database away for a moment): a lets the chat go
    all the same, so b's next result for it is told (a held it until someone wrote to the
    chat; found by review)."""
    from engine.session.handler import ChatSessionHandler

    notifier = LocalNotifier("shared")
    async with member(url, tmp_path, "a", notifier) as a, member(url, tmp_path, "b", notifier) as b:
        assert a.hub.fleet is not None and b.hub.fleet is not None
        await a.engine.store.sessions.for_source("telegram:4")  # a known target
        original = ChatSessionHandler.deliver_notifications
        failures = [RuntimeError("database gone")]

        async def fails_once(self: ChatSessionHandler, *args: Any, **kwargs: Any) -> Any:
            if failures:
                raise failures.pop()
            return await original(self, *args, **kwargs)

        monkeypatch.setattr(ChatSessionHandler, "deliver_notifications", fails_once)
        a.hub.notify(Notification("tic", "reminder", "first notice", target="telegram:4"))

        async def failed() -> bool:
            return not failures

        await until(failed)
        b.model.add(text("Your report is ready."))
        b.hub.notify(Notification("cron", "job_done", "report ready", target="telegram:4"))

        async def told() -> bool:
            answered = (await a.engine.store.db.run(answers)).get("telegram:4", [])
            return "Your report is ready." in answered

        await until(told)


def user_rows(conn: sa.Connection, source: str) -> list[tuple[int, str]]:
    """``source``'s user messages as stored: ``(session id, content)``, in order."""
    h, stack, s = chat_history, chat_sessions_stack, chat_sessions
    rows = conn.execute(
        sa.select(s.c.id, h.c.content)
        .join(stack, stack.c.id == h.c.session_stack_id)
        .join(s, s.c.id == stack.c.session_id)
        .where(h.c.role == "user", stack.c.depth == 0, s.c.source == source)
        .order_by(h.c.id)
    )
    return [(session_id, content) for session_id, content in rows]


async def test_new_at_another_process_moves_the_chat_on_and_loses_no_message(
    url: str, tmp_path: Path
) -> None:
    """/new reaches b while a runs the chat's turn: a's turn stops, and the next message
    is answered in the new session (a went on in the old one and dropped it as queued for
    a session since replaced)."""
    notifier = LocalNotifier("shared")
    async with member(url, tmp_path, "a", notifier) as a, member(url, tmp_path, "b", notifier) as b:
        for m in (a, b):
            await m.hub.fleet.ownership.refresh_members()  # type: ignore[union-attr]
        source = "telegram:21"
        await long_turn_at(a, source)
        fresh = await asyncio.wait_for(b.hub.clear(source), 10)
        await b.hub.send_message(source, "after new")
        assert a.model.gate is not None
        a.model.gate.set()

        async def answered() -> bool:
            got = await a.engine.store.db.run(answers)
            return "echo: after new" in got.get(source, [])

        await until(answered)
        await asyncio.sleep(0.3)  # nothing more comes
        assert (await a.engine.store.db.run(answers))[source] == ["echo: after new"]
        stored = await a.engine.store.db.run(user_rows, source)
        assert stored[-1] == (fresh, "after new")


async def test_a_turn_fenced_out_is_resumed_first_when_its_process_takes_the_chat_again(
    url: str, tmp_path: Path
) -> None:
    """a was paused past its lease, nobody took the chat, and a row came in meanwhile: a's
    answer is fenced out; when a takes the chat again it answers the cut turn first, then
    the new message (it ran the new one as a turn of its own and marked the first failed)."""
    async with member(url, tmp_path, "a", None, ttl=TTL) as a:
        fleet = a.hub.fleet
        assert fleet is not None
        source = "telegram:22"
        renew = fleet.ownership.renew_sources
        fleet.ownership.renew_sources = _never_renew  # type: ignore[method-assign]
        a.model.gate = asyncio.Event()
        await fleet.ownership.claim(source)
        await a.hub.send_message(source, "first")
        await asyncio.wait_for(a.model.started.wait(), 5)
        other = Leases(a.engine.store.db)

        async def lapsed() -> bool:
            return await other.holder(lease_name(source)) is None

        await until(lapsed)
        state = await a.hub._sources.state(source)
        store = a.engine.store
        await queue_message(store, source, state.session_id, "second", SendOptions(), None)
        fleet.ownership.renew_sources = renew  # type: ignore[method-assign]
        a.model.gate.set()  # "SIGCONT": the answer to "first" comes back, fenced out

        async def both() -> bool:
            return len((await store.db.run(answers)).get(source, [])) >= 2

        await until(both)
        assert (await store.db.run(transcripts))[source] == [
            ("user", "first"),
            ("assistant", "echo: first"),
            ("user", "second"),
            ("assistant", "echo: second"),
        ]


async def test_a_decision_recorded_while_the_consumer_winds_down_resumes_its_turn(
    url: str, tmp_path: Path
) -> None:
    """A decision for the chat comes while its consumer, done, is letting the chat go: the
    consumer resumes the turn before it ends (it ended, and the chat stayed held, with
    nothing resumed, until the next message)."""
    async with member(url, tmp_path, "a", None) as a:
        fleet = a.hub.fleet
        assert fleet is not None
        source = "telegram:23"
        await fleet.ownership.claim(source)
        queue = a.engine.store.queue
        pending = queue.pending
        in_idle, go = asyncio.Event(), asyncio.Event()
        reads = 0

        async def slow_second_read(of: str) -> Any:
            nonlocal reads
            reads += 1
            rows = await pending(of)
            if of == source and reads >= 2:  # the consumer's last look before letting go
                in_idle.set()
                await go.wait()
            return rows

        queue.pending = slow_second_read  # type: ignore[method-assign]
        await a.hub.send_message(source, "hi")
        await asyncio.wait_for(in_idle.wait(), 5)
        state = await a.hub._sources.state(source)
        assert state.consumer is not None and state.turn is None
        resumed = a.model.calls
        await fleet.decided(source, 12345)  # a decision no turn here waits for
        assert state.resume_first
        go.set()

        async def settled() -> bool:
            return not state.resume_first and not fleet.owns(source)

        await until(settled, within=5)
        assert a.model.calls == resumed  # nothing was cut: the resume found nothing to do


async def test_a_result_fired_at_the_owner_during_its_turn_is_delivered_behind_the_fence(
    url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A cron result for a chat whose turn runs here waits for the turn, then is
    delivered: the consumer, done, does not let the chat go under it (its answer was
    fenced out, and the turn was resumed with a model call more)."""
    async with member(url, tmp_path, "a", None) as a:
        assert a.hub.fleet is not None
        source = "telegram:24"
        a.model.gate = asyncio.Event()
        await a.hub.fleet.ownership.claim(source)
        await a.hub.send_message(source, "first")
        await asyncio.wait_for(a.model.started.wait(), 5)
        a.hub.notify(Notification("cron", "job_done", "report ready", target=source))
        await asyncio.sleep(0.5)  # the delivery holds the chat and waits for the turn
        a.model.add(text("echo: first"))
        a.model.add(text("Your report is ready."))
        a.model.gate.set()

        async def both() -> bool:
            return len((await a.engine.store.db.run(answers)).get(source, [])) >= 2

        await until(both)
        await asyncio.sleep(0.3)  # nothing more comes
        assert (await a.engine.store.db.run(answers))[source] == [
            "echo: first",
            "Your report is ready.",
        ]
        assert a.model.calls == 2
        assert "no longer ours" not in caplog.text  # nothing of it was fenced out


async def test_a_turn_that_fails_after_its_lease_is_gone_records_no_failure(
    url: str, tmp_path: Path
) -> None:
    """a's turn raises after another process took the chat (paused past its lease, the
    database's answer lost): its failure is not recorded either (its message marked failed
    and a notice sent while the new owner resumes the same turn)."""
    async with member(url, tmp_path, "a", None, ttl=TTL) as a:
        fleet = a.hub.fleet
        assert fleet is not None
        source = "telegram:25"
        a.model.gate = asyncio.Event()
        await fleet.ownership.claim(source)
        await a.hub.send_message(source, "hello")
        await asyncio.wait_for(a.model.started.wait(), 5)
        fleet.ownership.renew_sources = _never_renew  # type: ignore[method-assign]
        other = Leases(a.engine.store.db)

        async def taken() -> bool:
            return await other.acquire(lease_name(source), "z", 30) is not None

        await until(taken)
        history = a.engine.store.history

        async def lost_answer(*_args: Any, **_kwargs: Any) -> Any:
            raise RuntimeError("the database's answer was lost")

        history.append_assistant = lost_answer  # type: ignore[method-assign]
        a.model.gate.set()

        async def stopped() -> bool:
            return not a.hub.is_processing(source)

        await until(stopped, within=5)
        await asyncio.sleep(0.2)
        statuses = await a.engine.store.db.run(
            lambda c: list(c.execute(sa.select(chat_history.c.status)).scalars())
        )
        assert "failed" not in statuses
        assert not fleet.owns(source)


async def test_a_resume_asked_at_another_process_waits_for_the_running_turn(
    url: str, tmp_path: Path
) -> None:
    """The web chat's "resume" reaches b while a runs the chat's turn: b waits until a lets
    the chat go and finds nothing cut (it ran the model beside a's turn: two answers)."""
    notifier = LocalNotifier("shared")
    async with member(url, tmp_path, "a", notifier) as a, member(url, tmp_path, "b", notifier) as b:
        source = "web:1"
        await long_turn_at(a, source)
        resuming = asyncio.create_task(b.hub.resume(source))
        await asyncio.sleep(0.3)
        assert not resuming.done()  # the chat is a's while its turn runs
        assert a.model.gate is not None
        a.model.gate.set()
        assert await asyncio.wait_for(resuming, 10) is None  # nothing was cut
        assert b.model.calls == 0
        assert (await a.engine.store.db.run(answers))[source] == ["echo: a long job"]


async def test_work_that_fails_while_holding_a_chat_lets_it_go(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A task's result another worker told first (``AlreadyTold``) raised in ``holding``:
    the process kept the chat's lease with nothing running, and another process's result
    for the chat waited until its user wrote (found by review)."""
    from engine.session.handler import ChatSessionHandler

    class ToldFirst(Exception):
        pass

    notifier = LocalNotifier("shared")
    async with member(url, tmp_path, "a", notifier) as a, member(url, tmp_path, "b", notifier) as b:
        source = "telegram:4"
        session_id = await a.hub.session_id(source)

        async def told_first(self: ChatSessionHandler, *args: Any, **kwargs: Any) -> Any:
            raise ToldFirst("run(s) [1] were told already")

        monkeypatch.setattr(ChatSessionHandler, "inject_tool_result", told_first)
        with pytest.raises(ToldFirst):
            await a.hub.inject(session_id, "task_completed", "{}", "a task ended")
        monkeypatch.undo()
        await report_told(b, a, source)


async def _no_scan() -> int:
    return 0


async def report_told(fired_at: Any, read_in: Any, source: str) -> None:
    """A cron result fired at ``fired_at`` for ``source`` reaches its chat, read in
    ``read_in``'s database (within 8 s)."""
    fired_at.model.add(text("Your report is ready."))
    fired_at.hub.notify(Notification("cron", "job_done", "report ready", target=source))

    async def told() -> bool:
        return "Your report is ready." in (await read_in.engine.store.db.run(answers)).get(
            source, []
        )

    await until(told, within=8)


@contextlib.asynccontextmanager
async def left_cut(
    url: str, tmp_path: Path, source: str, b: Any, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[None]:
    """``source``'s owner killed mid-turn on "hello?"; ``b`` scans not (its hold wins the
    race for the chat) until the block ends."""
    async with dead_member(url, tmp_path / "w-dead") as a:
        assert a.hub.fleet is not None and b.hub.fleet is not None
        a.model.gate = asyncio.Event()
        await a.hub.fleet.ownership.claim(source)
        await a.hub.send_message(source, "hello?")
        await asyncio.wait_for(a.model.started.wait(), 5)
        monkeypatch.setattr(b.hub.fleet, "scan", _no_scan)
        await a.kill()
        try:
            yield
        finally:
            monkeypatch.undo()


async def test_a_result_for_a_chat_a_dead_owner_left_cut_lets_the_chat_go(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The result's hold took the chat before any scan did: the cut turn was marked to
    resume, but nothing resumed it, and the chat stayed held with nothing running (found
    by review). Its consumer resumes it after the held work."""
    notifier = LocalNotifier("shared")
    source = "telegram:32"
    async with member(url, tmp_path, "b", notifier, ttl=TTL) as b:
        async with left_cut(url, tmp_path, source, b, monkeypatch):
            await report_told(b, b, source)

        async def let_go() -> bool:
            return not b.hub.fleet.owns(source)  # type: ignore[union-attr]

        await until(let_go, within=8)


async def test_new_on_a_chat_a_dead_owner_left_cut_lets_the_chat_go(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same with /new: the chat stayed held by b with nothing running, and a result
    fired at another process never arrived (found by review)."""
    notifier = LocalNotifier("shared")
    source = "telegram:31"
    async with member(url, tmp_path, "b", notifier, ttl=TTL) as b:
        async with left_cut(url, tmp_path, source, b, monkeypatch):
            await asyncio.wait_for(b.hub.clear(source), 10)  # /new, at b
            # at once, and without a model call for the turn it abandons (a first fix
            # resumed it before: a paid call, and a hang when it waited for a human)
            assert b.model.calls == 0
        async with member(url, tmp_path, "c", notifier, ttl=TTL) as c:
            await report_told(c, b, source)


# -- a chat taken anew while an earlier tenure's turn still runs or waits here -----------------


async def _no_scan() -> int:
    return 0


async def test_a_turn_fenced_after_its_chat_was_taken_anew_leaves_the_new_lease(
    url: str, tmp_path: Path
) -> None:
    """The old turn's fence stop came after the message that took the chat anew had its
    new lease, before the claim retired the old state: it forgot the new lease, and that
    message was never answered (a race seen under load on 2026-12-06)."""
    source = "telegram:48"
    async with member(url, tmp_path, "a", None, ttl=TTL) as a:
        fleet = a.hub.fleet
        assert fleet is not None
        await fleet.ownership.claim(source)
        old = SourceState(source, 1, epoch=fleet.ownership.epoch(source))
        await lose(a, source)
        leases = Leases(a.engine.store.db)
        taken = await leases.acquire(lease_name(source), "b", TTL)  # b works it meanwhile
        assert taken is not None and await leases.release(taken)
        assert await fleet.ownership.claim(source)  # taken anew: another epoch
        assert fleet.ownership.epoch(source) != old.epoch
        fleet.fenced_out(old)
        assert fleet.owns(source)
        fleet.fenced_out(SourceState(source, 1, epoch=fleet.ownership.epoch(source)))
        assert not fleet.owns(source)  # its own tenure's fence: let go, as before


async def lose(m: Member, source: str) -> None:
    """``m``'s renewal of ``source`` fails once (the database away a moment): it stops
    working the chat at once, and the lease lapses in the database."""
    fleet = m.hub.fleet
    assert fleet is not None
    ownership = fleet.ownership
    renew = ownership.renew_sources

    async def losing() -> list[str]:
        ownership.forget(source)
        return [source]

    ownership.renew_sources = losing  # type: ignore[method-assign]
    try:
        await until(lambda: _now(not fleet.owns(source)))
    finally:
        ownership.renew_sources = renew  # type: ignore[method-assign]
    other = Leases(m.engine.store.db)

    async def lapsed() -> bool:
        return await other.holder(lease_name(source)) is None

    await until(lapsed)


async def _now(value: bool) -> bool:
    return value


async def test_a_chat_taken_again_answers_though_its_old_turn_waited_for_a_decision_given_elsewhere(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """a's turn waits for an approval when a loses the chat; the button is pressed at b,
    which takes the chat over, runs the call once and answers, then lets the chat go. The
    next message reaches a: it was queued behind a's old turn, waiting for a decision that
    never reached a, and never answered (found by review)."""
    source = "telegram:46"
    assert pick(source, ("a", "b")) == "a"  # the next message goes to a
    async with (
        member(url, tmp_path, "a", None, ttl=TTL, rules=True) as a,
        member(url, tmp_path, "b", None, ttl=TTL, rules=True) as b,
    ):
        assert a.hub.fleet is not None and b.hub.fleet is not None
        for m in (a, b):  # nobody takes the chat but as the test says
            monkeypatch.setattr(m.hub.fleet, "scan", _no_scan)
            await m.hub.fleet.ownership.refresh_members()
        a.model.add(tool_call("execute_cmd", '{"command": "echo run >> runs.log"}', "c1"))
        await a.hub.fleet.ownership.claim(source)
        await a.hub.send_message(source, "run it")
        call = await pending_call(a.engine)

        await lose(a, source)
        b.model.add(text("Ran it."))
        await b.hub.decide(call, APPROVE, decider=OPERATOR, source=source)

        async def taken_over() -> bool:
            return (await b.engine.store.db.run(answers)).get(source) == ["Ran it."]

        await until(taken_over)
        await until(lambda: _now(not b.hub.fleet.owns(source)))  # type: ignore[union-attr]
        assert ran(tmp_path / "workspace-b") == ["run"]

        # From here the fleet scans as it does: a stall of a loaded machine past the 1 s
        # lease (a CI run) lost a the chat again, and nobody took it up.
        monkeypatch.undo()
        await a.hub.send_message(source, "hello again")  # a takes the chat anew

        async def answered() -> bool:
            return "echo: hello again" in (await a.engine.store.db.run(answers)).get(source, [])

        await until(answered)
        assert ran(tmp_path / "workspace-a") == []  # the call ran once, at b


@pytest.mark.parametrize(
    ("source", "picked"), [("telegram:47", "a"), ("telegram:40", "b")], ids=["a-picked", "b-picked"]
)
async def test_a_message_after_a_new_given_elsewhere_is_answered_in_the_fresh_session(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str, picked: str
) -> None:
    """a's turn is in its model call when a loses the chat; /new at b moves the chat to a
    fresh session and lets it go; the next message reaches a, whose old turn still winds
    down (the chat a's to take, or b's). It was queued for the old session and dropped
    (found by review)."""
    assert pick(source, ("a", "b")) == picked
    async with (
        member(url, tmp_path, "a", None, ttl=TTL) as a,
        member(url, tmp_path, "b", None, ttl=TTL) as b,
    ):
        assert a.hub.fleet is not None and b.hub.fleet is not None
        scans = {}
        for m in (a, b):
            scans[m.name] = m.hub.fleet.scan
            monkeypatch.setattr(m.hub.fleet, "scan", _no_scan)
            await m.hub.fleet.ownership.refresh_members()
        a.model.gate = asyncio.Event()
        await a.hub.fleet.ownership.claim(source)
        await a.hub.send_message(source, "first")
        await asyncio.wait_for(a.model.started.wait(), 5)

        await lose(a, source)
        fresh = await asyncio.wait_for(b.hub.clear(source), 10)  # /new, at b
        assert not b.hub.fleet.owns(source)

        await a.hub.send_message(source, "after new")
        a.model.gate.set()  # a's old turn ends, its answer fenced out
        for m in (a, b):
            monkeypatch.setattr(m.hub.fleet, "scan", scans[m.name])

        async def answered() -> bool:
            return "echo: after new" in (await a.engine.store.db.run(answers)).get(source, [])

        await until(answered)
        stored = await a.engine.store.db.run(user_rows, source)
        assert stored[-1] == (fresh, "after new")


async def test_a_chat_claimed_again_at_a_new_epoch_does_not_run_what_the_other_owner_ran(
    url: str, tmp_path: Path
) -> None:
    """a paused (its renewal not run) while b took the chat over, answered what a had in
    hand and let go; a message reached a, which claimed the chat again at a new epoch as
    if it were a renewal: its inbox kept what b answered, and the next turn stored and
    answered it again (found by review on 2026-12-07)."""
    source = "telegram:87"  # b's by rendezvous: b's scan takes it at once
    async with member(url, tmp_path, "a", None) as a, member(url, tmp_path, "b", None) as b:
        fleet = a.hub.fleet
        assert fleet is not None and b.hub.fleet is not None
        for m in (a, b):
            await m.hub.fleet.ownership.refresh_members()  # type: ignore[union-attr]
        assert await fleet.claim(source)
        a.model.gate = asyncio.Event()  # a's answers hang (a paused: SIGSTOP)
        await a.hub.send_message(source, "first")
        await asyncio.wait_for(a.model.started.wait(), 5)
        await a.hub.send_message(source, "second")  # in a's inbox, behind the turn
        # a is paused: its renewals and scans stop, its source lease runs out.
        for task in (fleet._keeping, fleet._running):
            assert task is not None
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        epoch_a = fleet.ownership.epoch(source)
        await a.engine.store.db.run(
            lambda conn: conn.execute(
                leases.update()
                .where(leases.c.name == lease_name(source))
                .values(expires_at=leases.c.expires_at - 1000)
            )
        )

        # b takes the chat over (its scan), resumes "first", answers "second", lets go.
        async def b_answered_and_let_go() -> bool:
            got = (await b.engine.store.db.run(transcripts)).get(source, [])
            holder = await Leases(b.engine.store.db).holder(lease_name(source))
            queued = await b.engine.store.queue.pending(source)
            users = [c for r, c in got if r == "user"]
            return (
                users == ["first", "second"]
                and got[-1][0] == "assistant"
                and (holder is None and not queued)
            )

        await until(b_answered_and_let_go)
        # a goes on before its renewal loop notices: a message reaches a, which claims
        # the chat (again, as it thinks) and runs it.
        await a.hub.send_message(source, "third")
        assert fleet.ownership.epoch(source) != epoch_a  # another tenure
        a.model.gate.set()

        async def third_answered() -> bool:
            got = (await a.engine.store.db.run(transcripts)).get(source, [])
            return "third" in [c for r, c in got if r == "user"] and got[-1][0] == "assistant"

        await until(third_answered)  # a second "second" would have run before it
        got = (await a.engine.store.db.run(transcripts))[source]
        assert [c for r, c in got if r == "user"] == ["first", "second", "third"], got


async def test_a_pull_whose_read_comes_back_late_pushes_no_consumed_row_again(
    url: str, tmp_path: Path
) -> None:
    """Two pulls of one source, the first one's queue read late: the other pull pushed
    the row, its turn consumed it and dropped it from ``seen``, and the late read pushed
    it again: stored and answered twice (found by review on 2026-12-07). One pull of a
    source runs at a time."""
    async with member(url, tmp_path, "a", None) as a:
        fleet = a.hub.fleet
        assert fleet is not None
        source = "telegram:77"
        a.model.gate = asyncio.Event()
        state = await a.hub._sources.state(source)
        await queue_message(a.engine.store, source, state.session_id, "first", SendOptions(), None)
        queue = a.engine.store.queue
        pending, stalled = queue.pending, [True]
        read, go = asyncio.Event(), asyncio.Event()

        async def slow_first_read(src: str) -> Any:
            rows = await pending(src)
            if stalled.pop() if stalled else False:  # a busy pool, a slow round trip
                read.set()
                await go.wait()
            return rows

        queue.pending = slow_first_read  # type: ignore[method-assign]
        late = asyncio.create_task(fleet.pull(source))  # a WORK notice's pull
        await asyncio.wait_for(read.wait(), 5)
        other = asyncio.create_task(fleet.pull(source))  # a scan's, at the same moment
        sending: asyncio.Task[Any] | None = None
        for _ in range(50):  # without one pull at a time it runs through at once
            if other.done():
                await asyncio.wait_for(a.model.started.wait(), 5)  # "first" consumed
                # accepted here: its pull reads [second] and drops "first" from ``seen``
                sending = asyncio.create_task(a.hub.send_message(source, "second"))
                await asyncio.wait({sending}, timeout=2)
                break
            await asyncio.sleep(0.01)
        go.set()
        await asyncio.gather(late, other)
        await (sending if sending is not None else a.hub.send_message(source, "second"))
        a.model.gate.set()

        async def answered() -> bool:
            got = (await a.engine.store.db.run(transcripts)).get(source, [])
            return "second" in [c for r, c in got if r == "user"] and got[-1][0] == "assistant"

        await until(answered)  # a second "first" would have run before it
        got = (await a.engine.store.db.run(transcripts))[source]
        assert [content for role, content in got if role == "user"] == ["first", "second"]


async def test_a_decision_missed_by_the_owners_listener_is_delivered_after_its_resync(
    url: str, tmp_path: Path
) -> None:
    """b recorded an approval for a call whose turn waits at a, and told a while a's
    listener was away: the resync that followed read the queues, never the decisions,
    and the turn waited for good, holding the chat (found by review on 2026-12-07)."""
    # Two notifiers: what b publishes while a's listener is down never reaches a.
    heard_by_a, heard_by_b = LocalNotifier("a"), LocalNotifier("b")
    async with (
        member(url, tmp_path, "a", heard_by_a, rules=True) as a,
        member(url, tmp_path, "b", heard_by_b, rules=True) as b,
    ):
        assert a.hub.fleet is not None
        a.model.add(tool_call("execute_cmd", '{"command": "echo run >> runs.log"}', "c1"))
        a.model.add(text("Ran it."))
        await a.hub.fleet.ownership.claim("telegram:7")
        await a.hub.send_message("telegram:7", "run it")
        call = await pending_call(a.engine)
        await b.hub.decide(call, APPROVE, decider=OPERATOR, source="telegram:7")  # at b
        # a's listening connection is back: its subscribers are told to re-read the tables
        heard_by_a.resync()

        async def answered() -> bool:
            return (await a.engine.store.db.run(answers)).get("telegram:7") == ["Ran it."]

        await until(answered, within=5.0)


async def test_a_message_at_a_stale_holder_after_new_elsewhere_is_answered_in_the_fresh_session(
    url: str, tmp_path: Path
) -> None:
    """a held the chat (as far as it knew) but was paused past its lease; b took it, gave
    /new and let go. A message reaching a was queued for a's old session before the claim
    found the new epoch, then removed as its session's: acknowledged, never answered
    (found by review of that day's fleet change on 2026-12-07)."""
    source = "telegram:87"
    async with member(url, tmp_path, "a", None) as a, member(url, tmp_path, "b", None) as b:
        fleet = a.hub.fleet
        assert fleet is not None and b.hub.fleet is not None
        for m in (a, b):
            await m.hub.fleet.ownership.refresh_members()  # type: ignore[union-attr]
        assert await fleet.claim(source)
        a.model.gate = asyncio.Event()  # a hangs (SIGSTOP)
        await a.hub.send_message(source, "first")
        await asyncio.wait_for(a.model.started.wait(), 5)
        for task in (fleet._keeping, fleet._running):  # a's renewals and scans stop
            assert task is not None
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        await a.engine.store.db.run(
            lambda conn: conn.execute(
                leases.update()
                .where(leases.c.name == lease_name(source))
                .values(expires_at=leases.c.expires_at - 1000)
            )
        )
        fresh = await asyncio.wait_for(b.hub.clear(source), 10)  # /new at b

        async def b_let_go() -> bool:
            return await Leases(b.engine.store.db).holder(lease_name(source)) is None

        await until(b_let_go)
        assert fleet.ownership.owns(source)  # a still thinks it holds the chat
        queued = await a.hub.send_message(source, "third")  # acknowledged as taken
        assert queued is not None
        a.model.gate.set()

        async def answered() -> bool:
            rows = await a.engine.store.db.run(user_rows, source)
            return (fresh, "third") in rows

        try:
            await until(answered, within=6.0)
        except AssertionError:
            rows = await a.engine.store.db.run(user_rows, source)
            pending = await a.engine.store.queue.pending(source)
            raise AssertionError(
                f"'third' never answered in the fresh session {fresh}: user rows {rows}, "
                f"still queued {[(r.session_id, r.content) for r in pending]}"
            ) from None


async def test_a_decision_missed_while_away_is_delivered_even_if_the_resyncs_scan_fails(
    url: str, tmp_path: Path
) -> None:
    """The resync delivered the waiting calls' decisions after its scan: the database
    answering badly just after the listener came back made the scan raise, and the
    decision was never delivered (found by review of that change on 2026-12-07)."""
    heard_by_a, heard_by_b = LocalNotifier("a"), LocalNotifier("b")
    async with (
        member(url, tmp_path, "a", heard_by_a, rules=True) as a,
        member(url, tmp_path, "b", heard_by_b, rules=True) as b,
    ):
        fleet = a.hub.fleet
        assert fleet is not None
        a.model.add(tool_call("execute_cmd", '{"command": "echo run >> runs.log"}', "c1"))
        a.model.add(text("Ran it."))
        await fleet.ownership.claim("telegram:7")
        await a.hub.send_message("telegram:7", "run it")
        call = await pending_call(a.engine)
        await b.hub.decide(call, APPROVE, decider=OPERATOR, source="telegram:7")  # at b
        scan, failing = fleet.scan, [True]

        async def scan_failing() -> int:
            if failing[0]:
                raise OSError("connection reset by peer")  # the database, just back
            return await scan()

        on_notice, handled = fleet._on_notice, asyncio.Event()

        async def watched(item):  # type: ignore[no-untyped-def]
            try:
                await on_notice(item)
            finally:
                if isinstance(item, Resync):
                    handled.set()

        fleet.scan = scan_failing  # type: ignore[method-assign]
        fleet._on_notice = watched  # type: ignore[method-assign]
        heard_by_a.resync()  # a's listening connection is back
        await asyncio.wait_for(handled.wait(), 5)
        failing[0] = False  # the database answers again from here on

        async def answered() -> bool:
            return (await a.engine.store.db.run(answers)).get("telegram:7") == ["Ran it."]

        await until(answered, within=5.0)
