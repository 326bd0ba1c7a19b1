"""Sub-agents: one frame deeper, inline; batches in parallel with outcomes in call order."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace

import pytest

from engine.core import Engine
from engine.llm.scripted import text, tool_call
from engine.llm.types import LlmResponse, Message, ToolCallRequest
from engine.session import events as ev
from engine.session.outcomes import Cancelled, Final
from engine.session.protocols import Decision, GateRequest, Verdict
from tests.engine.session.helpers import tool_messages

Route = Callable[[Sequence[Message], list[str]], Awaitable[LlmResponse]]


class RoutedModel:
    """A model that answers by looking at who asks (the system prompt) and what."""

    def __init__(self, route: Route) -> None:
        self.route = route
        self.requests: list[tuple[list[Message], list[str]]] = []

    @property
    def name(self) -> str:
        return "primary"

    @property
    def cache_hints(self) -> bool:
        return False

    async def complete(self, messages, tools, *, on_delta=None) -> LlmResponse:  # type: ignore[no-untyped-def]
        names = [t["function"]["name"] for t in tools]
        self.requests.append((list(messages), names))
        return await self.route(messages, names)

    async def aclose(self) -> None:
        return None


def who(messages: Sequence[Message]) -> str:
    first = messages[0]["content"]
    prompt = first if isinstance(first, str) else json.dumps(first)
    if "research sub-agent" in prompt:
        return "researcher"
    if "You are a sub-agent" in prompt:
        return "generalist"
    return "main"


def last_user(messages: Sequence[Message]) -> str:
    return next((m["content"] for m in reversed(messages) if m["role"] == "user"), "")


def has_tool_result(messages: Sequence[Message]) -> bool:
    return any(m["role"] == "tool" for m in messages if m is not None)


def subtask(agent: str, prompt: str, call_id: str) -> ToolCallRequest:
    return ToolCallRequest(
        call_id, "execute_subtask", json.dumps({"agent_id": agent, "prompt": prompt})
    )


@pytest.fixture
def use(engine: Engine) -> Callable[[Route], RoutedModel]:
    def install(route: Route) -> RoutedModel:
        model = RoutedModel(route)
        engine.models = type(engine.models)([model])
        return model

    return install


async def background(engine: Engine):
    """Background sessions (cron, tic) hand work on with execute_subtask."""
    return await engine.new_session("cron", is_interactive=False)


async def test_a_sub_agent_runs_one_frame_deeper_and_its_answer_is_the_tool_result(
    engine: Engine, use
):
    async def route(messages, tools):
        if who(messages) == "researcher":
            return text("X is 42 (notes/x.md line 3).")
        if has_tool_result(messages):
            return text("The researcher says X is 42.")
        return tool_call(
            "execute_subtask", json.dumps({"agent_id": "researcher", "prompt": "find X"}), "s1"
        )

    model = use(route)
    handler = await background(engine)
    events: list = []
    result = await handler.handle_message("what is X?", emit=events.append)

    assert isinstance(result, Final) and result.content == "The researcher says X is 42."
    _root, child_request, _ = model.requests
    assert tool_messages(model.requests[2][0]) == ["X is 42 (notes/x.md line 3)."]
    assert last_user(child_request[0]) == "find X"
    # read-only tools for the researcher, the per-level tool once, nothing duplicated
    child_tools = child_request[1]
    assert "write_file" not in child_tools and "execute_cmd" not in child_tools
    assert {"read_file", "list_files", "execute_subtask"} <= set(child_tools)
    assert len(child_tools) == len(set(child_tools))
    starts = [e for e in events if isinstance(e, ev.AgentStart)]
    ends = [e for e in events if isinstance(e, ev.AgentEnd)]
    assert (starts[0].agent_id, starts[0].depth, ends[0].status) == ("researcher", 1, "done")
    frames = await engine.store.sessions.active_frames(handler.session.id)
    assert [f.depth for f in frames] == [0]  # the child frame ended
    detail = await engine.store.views.session_detail(handler.session.id)
    kinds = [m["kind"] for m in detail["messages"]]
    assert "agent" in kinds and "agent_end" in kinds


@pytest.mark.parametrize(
    ("agent", "expected"),
    [
        ("nobody", "unknown agent 'nobody'"),
        ("main", "'main' is a chat agent, not a task agent"),
        ("tic", "'tic' is a system agent"),
    ],
)
async def test_calls_to_agents_that_cannot_take_a_task_are_tool_errors(
    engine: Engine, use, agent, expected
):
    async def route(messages, tools):
        if has_tool_result(messages):
            return text("ok")
        return tool_call(
            "execute_subtask", json.dumps({"agent_id": agent, "prompt": "do it"}), "s1"
        )

    model = use(route)
    handler = await background(engine)
    await handler.handle_message("go")
    [result] = tool_messages(model.requests[-1][0])
    assert result.startswith("Error:") and expected in result


async def test_an_agent_cannot_call_itself_and_nesting_stops_at_the_depth_limit(
    engine: Engine, use
):
    engine.limits = replace(engine.limits, max_agent_depth=2)
    seen: list[str] = []

    async def route(messages, tools):
        me = who(messages)
        seen.append(f"{me}:{'execute_subtask' in tools}")
        if has_tool_result(messages):
            return text(f"{me} done")
        if me == "main":
            return tool_call(
                "execute_subtask", json.dumps({"agent_id": "generalist", "prompt": "a"}), "1"
            )
        if me == "generalist" and last_user(messages) == "a":
            return tool_call(
                "execute_subtask", json.dumps({"agent_id": "generalist", "prompt": "b"}), "2"
            )
        return text("unreachable")

    model = use(route)
    handler = await background(engine)
    # a fresh handler picks up the new limits
    handler = await engine.open_session(handler.session.id)
    await handler.handle_message("go")
    self_call = [r for r in model.requests if who(r[0]) == "generalist" and has_tool_result(r[0])]
    assert "cannot hand a task to itself" in tool_messages(self_call[0][0])[0]


async def test_past_the_depth_limit_the_spawning_tool_is_not_offered(engine: Engine, use):
    engine.limits = replace(engine.limits, max_agent_depth=1)

    async def route(messages, tools):
        if who(messages) == "researcher":
            assert "execute_subtask" not in tools
            return (
                tool_call(
                    "execute_subtask", json.dumps({"agent_id": "generalist", "prompt": "x"}), "2"
                )
                if not has_tool_result(messages)
                else text("deep done")
            )
        if has_tool_result(messages):
            return text("top done")
        return tool_call(
            "execute_subtask", json.dumps({"agent_id": "researcher", "prompt": "r"}), "1"
        )

    model = use(route)
    handler = await background(engine)
    handler = await engine.open_session(handler.session.id)
    await handler.handle_message("go")
    researcher_second = [r for r in model.requests if who(r[0]) == "researcher"][-1]
    assert "unknown tool 'execute_subtask'" in tool_messages(researcher_second[0])[0]


async def test_a_parallel_batch_records_outcomes_in_call_order(engine: Engine, use):
    first_may_finish = asyncio.Event()
    finished: list[str] = []

    async def route(messages, tools):
        me, task = who(messages), last_user(messages)
        if me == "main":
            if has_tool_result(messages):
                return text("both done")
            return LlmResponse(
                content="",
                tool_calls=(subtask("researcher", "slow", "a"), subtask("generalist", "fast", "b")),
            )
        if task == "slow":
            await first_may_finish.wait()
        finished.append(task)
        if task == "fast":
            first_may_finish.set()  # the second child finishes first
        return text(f"{task} result")

    model = use(route)
    handler = await background(engine)
    events: list = []
    result = await handler.handle_message("do both", emit=events.append)

    assert isinstance(result, Final)
    assert finished == ["fast", "slow"]  # ran concurrently: b was done before a
    assert tool_messages(model.requests[-1][0]) == ["slow result", "fast result"]  # call order
    done = [e.result for e in events if isinstance(e, ev.ToolDone) and e.depth == 0]
    assert done == ["slow result", "fast result"]
    starts = [e.tool_call_id for e in events if isinstance(e, ev.ToolStart) and e.depth == 0]
    assert starts == sorted(starts)


async def test_max_parallel_one_runs_a_batch_in_sequence(engine: Engine, use):
    engine.limits = replace(engine.limits, max_parallel_subagents=1)
    order: list[str] = []

    async def route(messages, tools):
        me, task = who(messages), last_user(messages)
        if me == "main":
            if has_tool_result(messages):
                return text("done")
            return LlmResponse(
                content="",
                tool_calls=(subtask("researcher", "one", "a"), subtask("generalist", "two", "b")),
            )
        order.append(f"start {task}")
        await asyncio.sleep(0)
        order.append(f"end {task}")
        return text(task)

    use(route)
    handler = await engine.open_session((await background(engine)).session.id)
    await handler.handle_message("go")
    assert order == ["start one", "end one", "start two", "end two"]


async def test_stop_stops_every_child_of_a_batch(engine: Engine, use):
    started = asyncio.Event()
    count = 0

    async def route(messages, tools):
        nonlocal count
        if who(messages) == "main":
            return LlmResponse(
                content="",
                tool_calls=(subtask("researcher", "a", "a"), subtask("generalist", "b", "b")),
            )
        count += 1
        if count == 2:
            started.set()
        await asyncio.Event().wait()  # hangs until cancelled
        raise AssertionError("not reached")

    use(route)
    handler = await background(engine)
    turn = asyncio.create_task(handler.handle_message("go"))
    await asyncio.wait_for(started.wait(), 5)
    handler.cancel()
    result = await asyncio.wait_for(turn, 5)

    assert isinstance(result, Cancelled)
    [row] = [r for r in await engine.store.history.load(1) if r.tool_calls]
    assert [c.status for c in row.tool_calls] == ["cancelled", "cancelled"]
    assert [f.depth for f in await engine.store.sessions.active_frames(handler.session.id)] == [0]


async def test_siblings_share_the_session_scratchpad(engine: Engine, use):
    async def route(messages, tools):
        me, task = who(messages), last_user(messages)
        if me == "main":
            if has_tool_result(messages):
                return text("noted")
            return LlmResponse(
                content="",
                tool_calls=(
                    subtask("generalist", "write", "a"),
                    subtask("researcher", "read", "b"),
                ),
            )
        if task == "write" and not has_tool_result(messages):
            return tool_call(
                "update_scratchpad", json.dumps({"key": "finding", "value": "42"}), "w"
            )
        return text(f"{task} ok")

    use(route)
    handler = await background(engine)
    await handler.handle_message("go")
    assert await engine.store.scratchpad.all(handler.session.id) == {"finding": "42"}


def test_task_agents_ship(engine: Engine) -> None:
    researcher, generalist = engine.agents["researcher"], engine.agents["generalist"]
    assert (researcher.kind, generalist.kind) == ("task", "task")
    assert researcher.tools is not None and "write_file" not in researcher.tools
    assert generalist.tools is None


class _SecondAsks:
    """The gate lets the batch's first sub-agent go and asks about the second."""

    async def check(self, request: GateRequest) -> Verdict:
        if request.args.get("prompt") == "second":
            return Verdict(Decision.REQUIRE, "ask")
        return Verdict(Decision.ALLOW)


async def test_a_stop_at_a_later_gate_of_a_batch_leaves_nothing_of_it_to_run(engine: Engine):
    """The sub-agent approved before the stop stayed "running", and the next message's
    resume ran it (found by review)."""
    children: list[str] = []

    async def route(messages: list[Message], tools: Sequence[object]) -> LlmResponse:
        me, task = who(messages), last_user(messages)
        if me == "main":
            if has_tool_result(messages):
                return text("main done")
            calls = (subtask("researcher", "first", "a"), subtask("generalist", "second", "b"))
            return LlmResponse(content="", tool_calls=calls)
        children.append(task)
        return text(f"{task} result")

    engine.models = type(engine.models)([RoutedModel(route)])
    engine.policy = _SecondAsks()
    handler = await engine.new_session("cron", is_interactive=False)
    asked = asyncio.Event()
    turn = asyncio.create_task(
        handler.handle_message(
            "go", emit=lambda e: asked.set() if isinstance(e, ev.ApprovalRequired) else None
        )
    )
    await asyncio.wait_for(asked.wait(), 5)
    handler.cancel()  # /stop
    assert isinstance(await asyncio.wait_for(turn, 5), Cancelled)
    root = await engine.store.sessions.root_frame(handler.session.id)
    [row] = [r for r in await engine.store.history.load(root.id) if r.tool_calls]
    assert [c.status for c in row.tool_calls] == ["cancelled", "cancelled"]

    await handler.handle_message("something else")
    assert children == []


class _OneChildRaises:
    """A batch of two sub-agents: the slow one waits in a tool; the other one's call
    breaks the rules' check once the slow one is waiting."""

    name = "primary"
    cache_hints = False

    async def complete(self, messages, tools, *, on_delta=None):  # type: ignore[no-untyped-def]
        first = messages[0]["content"]
        child = "sub-agent" in (first if isinstance(first, str) else json.dumps(first))
        if any(m["role"] == "tool" for m in messages):
            return text("done")
        if child:
            task = next(m["content"] for m in reversed(messages) if m["role"] == "user")
            return tool_call("wait_here" if "slow" in task else "echo", '{"text": "x"}', "c")

        def sub(prompt: str, call_id: str) -> ToolCallRequest:
            arguments = json.dumps({"agent_id": "generalist", "prompt": prompt})
            return ToolCallRequest(call_id, "execute_subtask", arguments)

        return LlmResponse(content="", tool_calls=(sub("slow job", "a"), sub("fast job", "b")))

    async def aclose(self) -> None:
        return None


async def test_a_batch_whose_child_raises_leaves_no_sibling_running(engine: Engine):
    """``gather`` re-raised at once and the siblings ran on after the turn ended, writing
    rows and running tools out of /stop's reach (found by review on 2026-12-07)."""
    from tests.engine.session.helpers import BlockingTool, EchoTool

    blocker = BlockingTool()

    class EchoBreaksTheRules:
        async def check(self, request: GateRequest) -> Verdict:
            if request.call.name == "echo":
                await blocker.started.wait()
                raise RuntimeError("a hiccup of the rules")
            return Verdict(Decision.ALLOW)

    engine.models = type(engine.models)([_OneChildRaises()])
    engine.policy = EchoBreaksTheRules()
    engine.tools.register(blocker)
    engine.tools.register(EchoTool())
    handler = await engine.new_session("cron", is_interactive=False)

    with pytest.raises(RuntimeError):
        await asyncio.wait_for(handler.handle_message("two jobs"), 10)

    assert blocker.cancelled  # the slow sibling ended with its batch
    blocker.release.set()
