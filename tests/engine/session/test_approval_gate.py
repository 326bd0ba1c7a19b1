"""The approval gate in the turn: rules decide, a human approves or rejects, even after a restart."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from engine.approval.broker import BypassRequest
from engine.approval.deciders import OPERATOR
from engine.core import Engine
from engine.llm.scripted import text, tool_call
from engine.llm.types import LlmResponse
from engine.session import events as ev
from engine.session.outcomes import CANCELLED_ERROR, Cancelled, Final, background_error
from engine.session.turn.gate import AUTO_DENIED
from engine.session.turn.outcome_recorder import NOT_RUN_NOTE
from engine.store.inbox import MAX_NOTE_CHARS, InboxError
from tests.engine.session.helpers import start_until, tool_messages


@pytest.fixture
async def engine(open_engine) -> Engine:
    return await open_engine()


def shell(command: str, call_id: str = "c1"):
    return tool_call("execute_cmd", json.dumps({"command": command}), call_id)


async def started_turn(
    handler, message: str, events: list
) -> tuple[asyncio.Task, ev.ApprovalRequired]:
    """Start a turn and wait until it asks for approval."""
    return await start_until(
        lambda emit: handler.handle_message(message, emit=emit), ev.ApprovalRequired, events
    )


async def status_of(engine: Engine, tool_call_id: int) -> str:
    call = await engine.store.history.get_tool_call(tool_call_id)
    assert call is not None
    return call.status


# -- live decisions --------------------------------------------------------------------


async def test_a_risky_command_waits_and_runs_once_approved(engine: Engine, model, tmp_path):
    model.add(shell("echo hi > out.txt"), text("Done."))
    handler = await engine.new_session("console")
    events: list = []
    turn, request = await started_turn(handler, "write hi", events)

    assert request.name == "execute_cmd" and request.arguments == {"command": "echo hi > out.txt"}
    assert request.preview is not None and request.preview.kind == "command"
    assert request.preview.command == "echo hi > out.txt"
    assert request.preview.workdir == str(engine.workspace.root)
    assert await status_of(engine, request.tool_call_id) == "pending"
    assert not (tmp_path / "workspace" / "out.txt").exists()  # nothing ran yet

    decided = await engine.approve(
        request.tool_call_id, session_id=handler.session.id, decider=OPERATOR
    )

    assert decided.resolution.live and decided.resumed is None
    result = await asyncio.wait_for(turn, 5)
    assert isinstance(result, Final) and result.content == "Done."
    assert (tmp_path / "workspace" / "out.txt").read_text() == "hi\n"
    assert await status_of(engine, request.tool_call_id) == "done"
    assert await engine.pending_approvals() == []


async def test_a_file_write_shows_old_and_new_content(engine: Engine, model, tmp_path):
    (tmp_path / "workspace" / "notes.md").write_text("old line\n")
    edit = {"path": "notes.md", "old": "old line", "new": "new line"}
    model.add(tool_call("edit_file", json.dumps(edit), "c1"), text("Edited."))
    handler = await engine.new_session("console")
    turn, request = await started_turn(handler, "edit it", [])

    preview = request.preview
    assert preview is not None and preview.kind == "file" and preview.path == "notes.md"
    assert (preview.old_content, preview.new_content) == ("old line\n", "new line\n")
    await engine.approve(request.tool_call_id, decider=OPERATOR)
    assert isinstance(await asyncio.wait_for(turn, 5), Final)
    assert (tmp_path / "workspace" / "notes.md").read_text() == "new line\n"


async def test_a_rejection_reaches_the_model_with_the_reason(engine: Engine, model, tmp_path):
    model.add(shell("rm -rf data"), text("Understood, I left it."))
    handler = await engine.new_session("console")
    events: list = []
    turn, request = await started_turn(handler, "clean up", events)

    await engine.reject(request.tool_call_id, "  keep the data  ", decider=OPERATOR)

    assert isinstance(await asyncio.wait_for(turn, 5), Final)
    assert tool_messages(model.requests[1][0]) == [
        "User rejected this tool call. Reason: keep the data"
    ]
    assert await status_of(engine, request.tool_call_id) == "rejected"
    assert any(isinstance(e, ev.ToolRejected) for e in events)


async def test_a_rejection_without_a_note_says_so_plainly(engine: Engine, model):
    model.add(shell("rm x"), text("ok"))
    handler = await engine.new_session("console")
    turn, request = await started_turn(handler, "go", [])
    await engine.reject(request.tool_call_id, decider=OPERATOR)
    await asyncio.wait_for(turn, 5)
    assert tool_messages(model.requests[1][0]) == ["User rejected this tool call."]


@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("write_file", {"path": "private/payroll.txt", "content": "x"}),
        ("edit_file", {"path": "private/payroll.txt", "old": "alice", "new": "carol"}),
    ],
)
async def test_a_write_card_shows_nothing_of_a_file_the_rules_deny_reading(
    engine: Engine, model, tmp_path, name: str, args: dict[str, Any]
):
    """``deny @fs_read private/*``: a write there only asks, and its card showed the whole
    file to the chat (a group, the API's stream) before anyone decided (found by review).
    The inbox's view of the waiting call shows nothing of it either."""
    (tmp_path / "workspace" / "private").mkdir()
    (tmp_path / "workspace" / "private" / "payroll.txt").write_text("alice 9000\n")
    await engine.policy.rule_store.add_rule(
        "@fs_read", "deny", path_pattern="private/*", priority=5
    )
    engine.policy.invalidate()
    model.add(tool_call(name, json.dumps(args), "c1"), text("Left it."))
    handler = await engine.new_session("console")
    turn, request = await started_turn(handler, "change it", [])

    assert request.preview is None  # the card shows the call's own arguments
    [waiting] = await engine.pending_approvals()
    assert await engine.preview_pending(waiting) is None
    await engine.reject(request.tool_call_id, decider=OPERATOR)
    await asyncio.wait_for(turn, 5)


async def test_allowed_and_denied_calls_never_ask(engine: Engine, model, tmp_path):
    secret = tmp_path / "workspace" / "secrets"
    secret.mkdir()
    (secret / "key").write_text("hunter2")
    (tmp_path / "workspace" / "link").symlink_to(secret / "key")
    model.add(
        tool_call("update_scratchpad", '{"key": "k", "value": "v"}', "c1"),
        tool_call("read_file", '{"path": "link"}', "c2"),
        text("Could not read it."),
    )
    handler = await engine.new_session("console")
    events: list = []
    result = await handler.handle_message("read the key", emit=events.append)

    assert isinstance(result, Final)
    assert not any(isinstance(e, ev.ApprovalRequired) for e in events)
    scratch, denied = tool_messages(model.requests[2][0])
    assert scratch.startswith("saved") or "k" in scratch
    assert denied.startswith("Tool call denied by the approval rules")
    assert "hunter2" not in json.dumps(model.requests[2][0])


async def test_an_unattended_session_rejects_at_once(engine: Engine, model):
    model.add(shell("make deploy"), text("Skipped: it needs approval."))
    handler = await engine.new_session("tic", is_interactive=False, auto_deny_approvals=True)
    events: list = []
    result = await handler.handle_message("tick", emit=events.append)
    assert isinstance(result, Final)
    assert tool_messages(model.requests[1][0]) == [AUTO_DENIED]
    assert not any(isinstance(e, ev.ApprovalRequired) for e in events)


async def test_pending_approvals_are_listed_for_the_adapters(engine: Engine, model):
    model.add(shell("ls -la"), text("ok"))
    handler = await engine.new_session("telegram:42", context_label="Chat with Ada")
    turn, request = await started_turn(handler, "list", [])

    [item] = await engine.pending_approvals()
    assert item.tool_call_id == request.tool_call_id
    assert (item.session_id, item.name, item.agent_id, item.source, item.context_label) == (
        handler.session.id,
        "execute_cmd",
        "main",
        "telegram:42",
        "Chat with Ada",
    )
    assert json.loads(item.arguments or "") == {"command": "ls -la"}
    assert item.requested_at.tzinfo is not None  # the age is now - requested_at
    assert await engine.pending_approvals(session_id=handler.session.id + 1) == []
    await engine.approve(request.tool_call_id, decider=OPERATOR)
    await asyncio.wait_for(turn, 5)


async def test_approving_with_a_bypass_stops_the_asking_for_that_session(engine: Engine, model):
    model.add(shell("echo 1", "c1"), shell("echo 2", "c2"), text("Both ran."))
    handler = await engine.new_session("console")
    events: list = []
    turn, request = await started_turn(handler, "run both", events)

    await engine.approve(request.tool_call_id, BypassRequest("all", seconds=900), decider=OPERATOR)

    assert isinstance(await asyncio.wait_for(turn, 5), Final)
    assert len([e for e in events if isinstance(e, ev.ApprovalRequired)]) == 1
    assert tool_messages(model.requests[2][0]) == ["1\n[exit code 0]", "2\n[exit code 0]"]


async def test_a_members_bypass_in_a_group_covers_only_their_own_calls(
    engine: Engine, model
) -> None:
    """``APPROVERS=requester+owner``: Alice, not the owner, lets the group's calls run
    without asking; Bob's call later still asks (Alice's tap let it run unasked, though
    only Bob or the owner may approve it), and Alice's own next call does not."""
    from engine.approval.deciders import Decider

    handler = await engine.new_session("telegram:-100")
    alice = {"sender": {"id": "111", "name": "Alice"}}
    bob = {"sender": {"id": "222", "name": "Bob"}}
    model.add(shell("echo alice", "a1"), text("Done."))
    events: list = []
    turn, request = await start_until(
        lambda emit: handler.handle_message("alice asks", metadata=alice, emit=emit),
        ev.ApprovalRequired,
        events,
    )
    await engine.approve(
        request.tool_call_id,
        BypassRequest("all", seconds=None),
        decider=Decider("111", is_allowed=True),
    )
    assert isinstance(await asyncio.wait_for(turn, 5), Final)

    model.add(shell("echo bob", "b1"))
    events = []
    turn, request = await start_until(
        lambda emit: handler.handle_message("bob asks", metadata=bob, emit=emit),
        ev.ApprovalRequired,
        events,
    )
    model.add(text("Not run."))
    await engine.reject(request.tool_call_id, decider=OPERATOR)
    await asyncio.wait_for(turn, 5)

    model.add(shell("echo alice again", "a2"), text("Ran."))
    events = []
    assert isinstance(
        await asyncio.wait_for(
            handler.handle_message("alice again", metadata=alice, emit=events.append), 5
        ),
        Final,
    )
    assert not [e for e in events if isinstance(e, ev.ApprovalRequired)]


async def test_stop_cancels_a_pending_approval(engine: Engine, model):
    model.add(shell("sleep 1"))
    handler = await engine.new_session("cron", is_interactive=False)
    turn, request = await started_turn(handler, "job", [])

    assert engine.cancel_session(handler.session.id)
    result = await asyncio.wait_for(turn, 5)

    assert isinstance(result, Cancelled) and background_error(result) == CANCELLED_ERROR
    assert await status_of(engine, request.tool_call_id) == "cancelled"
    assert await engine.pending_approvals() == []
    with pytest.raises(InboxError) as err:
        await engine.approve(request.tool_call_id, decider=OPERATOR)
    assert err.value.code == "resolved"


# -- after a restart ------------------------------------------------------------------


async def test_an_approval_made_after_a_restart_runs_the_call_and_finishes_the_turn(
    open_engine, model, tmp_path
):
    first = await open_engine()
    model.add(shell("echo once >> runs.log"))
    handler = await first.new_session("console")
    turn, request = await started_turn(handler, "log a run", [])
    first.approvals.close_session(handler.session.id)  # the process goes away
    assert isinstance(await asyncio.wait_for(turn, 5), Cancelled)
    await first.close()

    second = await open_engine()
    [item] = await second.pending_approvals()
    assert item.tool_call_id == request.tool_call_id
    model.add(text("Logged."))
    events: list = []

    decided = await second.approve(request.tool_call_id, emit=events.append, decider=OPERATOR)

    assert not decided.resolution.live and decided.resumed is not None
    result = await asyncio.wait_for(decided.resumed, 5)
    assert isinstance(result, Final) and result.content == "Logged."
    assert (tmp_path / "workspace" / "runs.log").read_text() == "once\n"
    assert await status_of(second, request.tool_call_id) == "done"
    assert not any(isinstance(e, ev.ApprovalRequired) for e in events)  # not asked twice
    assert await second.interrupted_sessions() == []


async def test_a_rounds_later_calls_run_after_its_waiting_channel_closed_and_it_was_decided(
    open_engine, model, tmp_path
):
    """The surface went away while the first call waited (the terminal's input ended, a
    fleet handed the chat over): the round's later calls were closed as "stopped by the
    user" and never ran after the approval (found by review)."""
    engine = await open_engine()
    both = LlmResponse(
        content="",
        tool_calls=(
            *shell("echo a >> a.log", "c1").tool_calls,
            *shell("echo b >> b.log", "c2").tool_calls,
        ),
    )
    model.add(both)
    handler = await engine.new_session("console")
    turn, first = await started_turn(handler, "do a then b", [])
    engine.approvals.close_session(handler.session.id)
    await asyncio.wait_for(turn, 5)
    events: list = []

    decided = await engine.approve(first.tool_call_id, emit=events.append, decider=OPERATOR)
    second = await until_asked(events)  # the later call is asked for, as a resume asks
    model.add(text("Both done."))
    await engine.approve(second.tool_call_id, decider=OPERATOR)

    assert isinstance(await asyncio.wait_for(decided.resumed, 5), Final)
    assert (tmp_path / "workspace" / "b.log").read_text() == "b\n"
    assert NOT_RUN_NOTE not in tool_messages(model.requests[-1][0])


async def test_a_sub_agents_call_decided_after_its_channel_closed_runs_and_so_does_the_rest(
    open_engine, model, tmp_path
):
    """The sub-agent's frame was ended and its spawning call closed as "cancelled by the
    user (/stop)": the approval given afterwards ran nothing (found by review)."""
    engine = await open_engine()
    task = tool_call("execute_subtask", '{"agent_id": "generalist", "prompt": "write a"}', "t1")
    model.add(
        LlmResponse(
            content="", tool_calls=(*task.tool_calls, *shell("echo b >> b.log", "c2").tool_calls)
        )
    )
    model.add(shell("echo a >> a.log", "a1"))  # the sub-agent's call: it asks
    handler = await engine.new_session("cron", is_interactive=False)
    turn, first = await started_turn(handler, "write a through a helper, then b", [])
    engine.approvals.close_session(handler.session.id)
    await asyncio.wait_for(turn, 5)
    model.add(text("a written."), text("Both done."))
    events: list = []

    decided = await engine.approve(first.tool_call_id, emit=events.append, decider=OPERATOR)
    later = await until_asked(events)  # the round's later call, as a resume asks
    await engine.approve(later.tool_call_id, decider=OPERATOR)

    result = await asyncio.wait_for(decided.resumed, 5)
    assert isinstance(result, Final) and result.content == "Both done."
    workspace = tmp_path / "workspace"
    assert (workspace / "a.log").read_text() == "a\n" and (workspace / "b.log").read_text() == "b\n"


async def until_asked(events: list) -> ev.ApprovalRequired:
    for _ in range(500):
        asked = [e for e in events if isinstance(e, ev.ApprovalRequired)]
        if asked:
            return asked[-1]
        await asyncio.sleep(0.01)
    raise AssertionError(f"never asked: {events}")


async def asked_then_restarted(
    open_engine, model, command: str, message: str
) -> tuple[Engine, Any, ev.ApprovalRequired]:  # type: ignore[no-untyped-def]
    """A turn that asked for ``command``, its process gone before anyone decided: the
    engine opened again on the same database, the session, the request."""
    first = await open_engine()
    model.add(shell(command))
    handler = await first.new_session("console")
    turn, request = await started_turn(handler, message, [])
    first.approvals.close_session(handler.session.id)  # the process goes away
    await asyncio.wait_for(turn, 5)
    await first.close()
    return await open_engine(), handler, request


async def test_a_rejection_made_after_a_restart_reaches_the_model(open_engine, model):
    second, _handler, request = await asked_then_restarted(
        open_engine, model, "shutdown now", "turn it off"
    )
    model.add(text("I will not shut it down."))
    decided = await second.reject(request.tool_call_id, "not today", decider=OPERATOR)
    assert isinstance(await asyncio.wait_for(decided.resumed, 5), Final)
    assert tool_messages(model.requests[-1][0]) == [
        "User rejected this tool call. Reason: not today"
    ]


@pytest.mark.parametrize("since", ["a bypass", "an allow rule"])
async def test_a_rejection_made_after_a_restart_stands_whatever_was_allowed_since(
    open_engine, model, tmp_path, since: str
):
    """The resumed call asked the rules first and read the human's decision only when
    they said "ask": a bypass from another card of the session, or an allow rule added
    since, ran the command the human had just rejected (found by review)."""
    second, handler, request = await asked_then_restarted(
        open_engine, model, "echo ran > ran.txt", "do it"
    )
    if since == "a bypass":
        second.approvals.bypasses.grant(handler.session.id, "all")
    else:
        await second.policy.rules()  # seeded
        await second.policy.rule_store.add_rule("execute_cmd", "allow", priority=1)
        second.policy.invalidate()
    model.add(text("Not run."))
    decided = await second.reject(request.tool_call_id, "never run this", decider=OPERATOR)
    await asyncio.wait_for(decided.resumed, 5)

    assert not (tmp_path / "workspace" / "ran.txt").exists()
    assert await status_of(second, request.tool_call_id) == "rejected"
    assert tool_messages(model.requests[-1][0]) == [
        "User rejected this tool call. Reason: never run this"
    ]


async def test_the_gate_judges_the_path_the_tool_writes_after_the_grants_changed(
    engine: Engine, model, tmp_path
):
    """A job's run began in ``reports`` and its owner took the grants back: the gate read
    ``memory/log.md`` from the workspace (a seeded rule lets memory be written) while the
    tool wrote ``reports/memory/log.md``, unasked (found by review)."""
    (tmp_path / "workspace" / "reports").mkdir(parents=True)
    grants = {"allow_fs_writes": ["reports"], "working_directory": "reports"}
    handler = await engine.new_session(
        "cron", is_interactive=False, run_context=grants, auto_deny_approvals=True
    )
    await engine.store.sessions.set_run_context(handler.session.id, None)  # 🔒 in /jobs
    model.add(
        tool_call("write_file", json.dumps({"path": "memory/log.md", "content": "x"}), "c1"),
        text("done"),
    )
    await asyncio.wait_for(handler.handle_message("go", is_synthetic=True), 5)
    assert not (tmp_path / "workspace" / "reports" / "memory" / "log.md").exists()
    assert tool_messages(model.requests[-1][0]) == [AUTO_DENIED]


async def test_a_grant_given_during_a_run_begun_without_any_reaches_it(
    engine: Engine, model, tmp_path
):
    """ "🔄 Session" on a job run's card grants the job the tool, its running session too:
    a run begun without grants never read them again, and asked again (found by review)."""
    handler = await engine.new_session("cron", is_interactive=False, auto_deny_approvals=True)
    await engine.store.sessions.set_run_context(
        handler.session.id, {"allow_tools": ["execute_cmd"]}
    )
    model.add(shell("echo hi > granted.txt"), text("done"))
    await asyncio.wait_for(handler.handle_message("go", is_synthetic=True), 5)
    assert (tmp_path / "workspace" / "granted.txt").exists()


async def test_a_restart_resume_asks_again_and_the_answer_completes_it(open_engine, model):
    second, handler, request = await asked_then_restarted(open_engine, model, "echo again", "go")
    assert await second.interrupted_sessions() == [handler.session.id]
    model.add(text("Ran it."))
    resumed, _ = await start_until(
        lambda emit: second.resume(handler.session.id, emit=emit), ev.ApprovalRequired, []
    )
    decided = await second.approve(request.tool_call_id, decider=OPERATOR)
    assert decided.resolution.live
    assert isinstance(await asyncio.wait_for(resumed, 5), Final)


# -- bad input ------------------------------------------------------------------------


async def test_decisions_on_ids_that_cannot_apply_are_refused_and_change_nothing(
    engine: Engine, model
):
    model.add(shell("echo a"), text("ok"))
    handler = await engine.new_session("console")
    other = await engine.new_session("telegram:7")
    turn, request = await started_turn(handler, "go", [])
    call_id = request.tool_call_id

    for attempt, code in [
        (engine.approve(999_999, decider=OPERATOR), "not_found"),
        (engine.reject(999_999, "no", decider=OPERATOR), "not_found"),
        (engine.approve(call_id, session_id=other.session.id, decider=OPERATOR), "other_session"),
        (
            engine.reject(call_id, "x", session_id=other.session.id, decider=OPERATOR),
            "other_session",
        ),
    ]:
        with pytest.raises(InboxError) as err:
            await attempt
        assert err.value.code == code, str(err.value)
    assert await status_of(engine, call_id) == "pending"
    assert (await engine.store.inbox.get(call_id)).decision is None

    with pytest.raises(ValueError, match="scope"):
        await engine.approve(call_id, BypassRequest("everything"), decider=OPERATOR)
    assert (await engine.store.inbox.get(call_id)).decision is None

    await engine.approve(call_id, decider=OPERATOR)
    await asyncio.wait_for(turn, 5)
    for attempt in (
        engine.approve(call_id, decider=OPERATOR),
        engine.reject(call_id, "late", decider=OPERATOR),
    ):
        with pytest.raises(InboxError) as err:
            await attempt
        assert err.value.code == "resolved"
    assert await status_of(engine, call_id) == "done"


async def test_a_huge_reject_note_is_stored_truncated(engine: Engine, model):
    model.add(shell("echo a"), text("ok"))
    handler = await engine.new_session("console")
    turn, request = await started_turn(handler, "go", [])
    await engine.reject(request.tool_call_id, "n" * 100_000, decider=OPERATOR)
    await asyncio.wait_for(turn, 5)
    record = await engine.store.inbox.get(request.tool_call_id)
    assert record is not None and record.note is not None
    assert len(record.note) < MAX_NOTE_CHARS + 100 and "more characters cut" in record.note
    [seen] = tool_messages(model.requests[1][0])
    assert len(seen) < MAX_NOTE_CHARS + 200


@pytest.mark.parametrize("name", ["approve", "bypass_approvals", "approve_tool_call"])
async def test_the_model_cannot_call_an_approval_or_bypass(engine: Engine, model, name):
    model.add(tool_call(name, '{"tool_call_id": 1}', "c1"), text("ok"))
    handler = await engine.new_session("console")
    await handler.handle_message("approve yourself")
    [seen] = tool_messages(model.requests[1][0])
    assert "unknown tool" in seen.lower()
    assert engine.approvals.bypasses.active(handler.session.id) == []


async def test_a_turn_failing_later_leaves_a_call_waiting_for_a_decision_to_it(
    engine: Engine, model
):
    """A failed turn ends its open calls (the next message ran them), but not one a
    person is still asked about: its card decides it, or the next turn asks again (found
    by review of that fix on 2026-12-07)."""
    model.add(tool_call("execute_cmd", json.dumps({"command": "echo hi"}), "c1"))
    handler = await engine.new_session("console")
    turn, request = await started_turn(handler, "run it", [])
    engine.approvals.close_session(handler.session.id)  # nobody can answer now: it waits
    await asyncio.wait_for(turn, 5)

    root = await engine.store.sessions.root_frame(handler.session.id)
    await engine.store.history.fail_unanswered(root.id)  # a later turn of it failed

    call = await engine.store.history.get_tool_call(request.tool_call_id)
    assert call is not None and call.status == "pending"
    [waiting] = await engine.pending_approvals()
    assert waiting.tool_call_id == request.tool_call_id
