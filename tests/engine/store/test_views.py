"""Read-only session views: the session list and the flattened transcript of one session."""

from __future__ import annotations

from typing import Any

import pytest

from engine.store import Store
from engine.store.rows import AssistantRecord, FrameRow, NewToolCall
from engine.store.views import SessionViews


@pytest.fixture
def views(store: Store) -> SessionViews:
    return SessionViews(store.db)


def kinds(detail: dict[str, Any]) -> list[str]:
    return [m["kind"] for m in detail["messages"]]


async def sub_agent(store: Store, parent: FrameRow, tool_call_id: int, agent_id: str) -> FrameRow:
    return await store.sessions.push_frame(
        parent.session_id,
        agent_id=agent_id,
        depth=parent.depth + 1,
        parent_tool_call_id=tool_call_id,
        agent_prompt=f"prompt for {agent_id}",
    )


async def test_sessions_are_listed_newest_first_by_page_and_source(
    store: Store, views: SessionViews
) -> None:
    tic = [
        (await store.sessions.create("tic", is_interactive=False, is_ephemeral=True)).id
        for _ in range(5)
    ]
    other = [(await store.sessions.create("telegram:1")).id for _ in range(2)]

    first = await views.list_sessions(source="tic", page=1, per_page=2)
    assert (first["total"], first["page"], first["per_page"]) == (5, 1, 2)
    assert [item["id"] for item in first["items"]] == [tic[4], tic[3]]
    second = await views.list_sessions(source="tic", page=2, per_page=2)
    assert [item["id"] for item in second["items"]] == [tic[2], tic[1]]
    last = await views.list_sessions(source="tic", page=3, per_page=2)
    assert [item["id"] for item in last["items"]] == [tic[0]]
    beyond = await views.list_sessions(source="tic", page=4, per_page=2)
    assert (beyond["items"], beyond["total"]) == ([], 5)

    everything = await views.list_sessions()
    assert everything["total"] == 7
    assert [item["id"] for item in everything["items"]] == sorted(tic + other, reverse=True)
    assert await views.list_sessions(source="nobody") == {
        "items": [],
        "total": 0,
        "page": 1,
        "per_page": 20,
    }

    item = first["items"][0]
    session = await store.sessions.get(tic[4])
    assert session is not None
    assert item == {
        "id": tic[4],
        "source": "tic",
        "agent_id": "main",
        "is_ephemeral": True,
        "is_interactive": False,
        "context_label": None,
        "created_at": session.created_at.isoformat(),
        "message_count": 0,
        "last_message_at": None,
    }


async def test_message_counts_cover_every_frame_and_skip_failed_rows(
    store: Store, views: SessionViews
) -> None:
    busy = await store.sessions.create("telegram:1", context_label="CronJob: digest")
    quiet = await store.sessions.create("telegram:1")
    root = await store.sessions.root_frame(busy.id)
    await store.history.append_message(root.id, "user", "summarise my inbox")
    ask = await store.history.append_assistant(
        root.id, AssistantRecord(""), [NewToolCall("c1", "agent_mail", "{}")]
    )
    child = await sub_agent(store, root, ask.tool_calls[0].id, "mail")
    await store.history.append_message(child.id, "agent", "read the inbox")
    newest_ok = await store.history.append_assistant(child.id, AssistantRecord("3 new mails"))
    orphan = await store.history.append_message(root.id, "user", "never answered")
    await store.history.mark_failed(orphan.id)

    listed = await views.list_sessions(source="telegram:1")
    by_id = {item["id"]: item for item in listed["items"]}
    assert by_id[busy.id]["message_count"] == 4
    assert by_id[busy.id]["last_message_at"] == newest_ok.created_at.isoformat()
    assert by_id[busy.id]["context_label"] == "CronJob: digest"
    assert (by_id[quiet.id]["message_count"], by_id[quiet.id]["last_message_at"]) == (0, None)


async def test_a_session_without_messages_has_an_empty_transcript(
    store: Store, views: SessionViews
) -> None:
    session = await store.sessions.create(
        "tic", agent_id="coder", is_interactive=False, is_ephemeral=True, context_label="tic"
    )

    assert await views.session_detail(session.id) == {
        "session": {
            "id": session.id,
            "source": "tic",
            "agent_id": "coder",
            "is_interactive": False,
            "is_ephemeral": True,
            "context_label": "tic",
            "created_at": session.created_at.isoformat(),
        },
        "messages": [],
    }


async def test_an_unknown_session_has_no_detail(store: Store, views: SessionViews) -> None:
    await store.sessions.create("tic")
    assert await views.session_detail(999_999) is None


async def test_the_transcript_flattens_tools_and_sub_agents_in_order(
    store: Store, views: SessionViews
) -> None:
    session = await store.sessions.create("tic", is_interactive=False, is_ephemeral=True)
    root = await store.sessions.root_frame(session.id)
    attachment = {"name": "notes.txt", "mime": "text/plain", "path": "/tmp/notes.txt"}
    user = await store.history.append_message(
        root.id, "user", "tick", is_synthetic=True, metadata={"attachments": [attachment]}
    )
    thinking = await store.history.append_assistant(
        root.id,
        AssistantRecord(
            "Reading, then asking the researcher.",
            reasoning_content="two things to do",
            model="primary",
            input_tokens=100,
            output_tokens=20,
        ),
        [
            NewToolCall("call_read", "read_file", '{"path": "notes.txt"}'),
            NewToolCall("call_agent", "agent_researcher", '{"task": "look it up"}'),
        ],
    )
    read, delegate = thinking.tool_calls
    await store.history.set_tool_status(read.id, "failed", "no such file")
    child = await sub_agent(store, root, delegate.id, "researcher")
    prompt = await store.history.append_message(child.id, "agent", "look it up")
    child_answer = await store.history.append_assistant(
        child.id, AssistantRecord("found it", model="cheap", input_tokens=10, output_tokens=2)
    )
    await store.sessions.terminate_frame(child.id)
    await store.history.set_tool_status(delegate.id, "done", "found it")
    final = await store.history.append_assistant(
        root.id, AssistantRecord("All done.", input_tokens=150, output_tokens=5)
    )

    detail = await views.session_detail(session.id)
    assert detail is not None
    assert kinds(detail) == [
        "user",
        "thinking",
        "tool",
        "tool",
        "agent",
        "assistant",
        "agent_end",
        "assistant",
    ]
    messages = detail["messages"]
    assert messages[0] == {
        "kind": "user",
        "id": user.id,
        "content": "tick",
        "is_synthetic": True,
        "status": "ok",
        "created_at": user.created_at.isoformat(),
        "attachments": [attachment],
    }
    assert messages[1] == {
        "kind": "thinking",
        "id": thinking.id,
        "content": "Reading, then asking the researcher.",
        "reasoning": "two things to do",
        "created_at": thinking.created_at.isoformat(),
        "input_tokens": 100,
        "output_tokens": 20,
        "model": "primary",
        "is_synthetic": False,
        "depth": 0,
    }
    assert messages[2] == {
        "kind": "tool",
        "id": read.id,
        "name": "read_file",
        "arguments": {"path": "notes.txt"},
        "status": "error",
        "result": "no such file",
        "depth": 0,
    }
    assert (messages[3]["id"], messages[3]["status"], messages[3]["result"]) == (
        delegate.id,
        "done",
        "found it",
    )
    assert messages[4] == {
        "kind": "agent",
        "agent_id": "researcher",
        "depth": 1,
        "content": "look it up",
        "created_at": prompt.created_at.isoformat(),
    }
    assert messages[5]["id"] == child_answer.id
    assert (messages[5]["content"], messages[5]["model"], messages[5]["depth"]) == (
        "found it",
        "cheap",
        1,
    )
    assert messages[5]["reasoning"] is None
    assert messages[6] == {"kind": "agent_end", "agent_id": "researcher", "depth": 1}
    assert (messages[7]["id"], messages[7]["content"], messages[7]["depth"]) == (
        final.id,
        "All done.",
        0,
    )


async def test_open_nested_and_promptless_frames_get_the_right_markers(
    store: Store, views: SessionViews
) -> None:
    session = await store.sessions.create("telegram:1")
    root = await store.sessions.root_frame(session.id)
    orphan = await store.history.append_message(root.id, "user", "hello?")
    await store.history.mark_failed(orphan.id)
    await store.history.append_message(root.id, "user", "plan a trip")
    outer_call = await store.history.append_assistant(
        root.id, AssistantRecord(""), [NewToolCall("c1", "agent_planner", "{}")]
    )
    planner = await sub_agent(store, root, outer_call.tool_calls[0].id, "planner")
    await store.history.append_message(planner.id, "agent", "plan a trip")
    inner_call = await store.history.append_assistant(
        planner.id, AssistantRecord(""), [NewToolCall("c2", "agent_booker", "{}")]
    )
    booker = await sub_agent(store, planner, inner_call.tool_calls[0].id, "booker")
    # No "agent" row: the marker falls back to the frame's prompt.
    await store.history.append_assistant(booker.id, AssistantRecord("booked"))
    await store.sessions.terminate_frame(booker.id)
    await store.sessions.terminate_frame(planner.id)
    second = await store.history.append_assistant(
        root.id, AssistantRecord(""), [NewToolCall("c3", "agent_writer", "{}")]
    )
    writer = await sub_agent(store, root, second.tool_calls[0].id, "writer")
    await store.history.append_message(writer.id, "agent", "write it up")  # still running

    detail = await views.session_detail(session.id)
    assert detail is not None
    assert [(m["kind"], m.get("agent_id"), m.get("depth")) for m in detail["messages"]] == [
        ("user", None, None),
        ("user", None, None),
        ("thinking", None, 0),
        ("tool", None, 0),
        ("agent", "planner", 1),
        ("thinking", None, 1),
        ("tool", None, 1),
        ("agent", "booker", 2),
        ("assistant", None, 2),
        ("agent_end", "booker", 2),
        ("agent_end", "planner", 1),
        ("thinking", None, 0),
        ("tool", None, 0),
        ("agent", "writer", 1),
    ]
    messages = detail["messages"]
    assert [m["status"] for m in messages[:2]] == ["failed", "ok"]
    assert messages[0]["attachments"] == []
    assert messages[7]["content"] == "prompt for booker"
    assert messages[7]["created_at"] == booker.created_at.isoformat()
    assert [m["status"] for m in messages if m["kind"] == "tool"] == [
        "running",
        "running",
        "running",
    ]


async def test_a_sub_agent_frame_without_rows_still_shows_after_its_tool_call(
    store: Store, views: SessionViews
) -> None:
    session = await store.sessions.create("telegram:1")
    root = await store.sessions.root_frame(session.id)
    call = await store.history.append_assistant(
        root.id, AssistantRecord(""), [NewToolCall("c1", "agent_helper", "{}")]
    )
    helper = await sub_agent(store, root, call.tool_calls[0].id, "helper")
    await store.sessions.terminate_frame(helper.id)
    await store.history.append_assistant(root.id, AssistantRecord("gave up"))

    detail = await views.session_detail(session.id)
    assert detail is not None
    assert kinds(detail) == ["thinking", "tool", "agent", "agent_end", "assistant"]
    assert detail["messages"][2]["content"] == "prompt for helper"


async def test_tool_arguments_that_are_not_a_json_object_are_kept_raw(
    store: Store, views: SessionViews
) -> None:
    session = await store.sessions.create("telegram:1")
    root = await store.sessions.root_frame(session.id)
    await store.history.append_assistant(
        root.id,
        AssistantRecord(""),
        [
            NewToolCall("c1", "ok", '{"a": [1, 2]}'),
            NewToolCall("c2", "broken", '{"a": 1'),
            NewToolCall("c3", "list", "[1, 2]"),
            NewToolCall("c4", "empty", ""),
        ],
    )

    detail = await views.session_detail(session.id)
    assert detail is not None
    assert [m["arguments"] for m in detail["messages"] if m["kind"] == "tool"] == [
        {"a": [1, 2]},
        '{"a": 1',
        "[1, 2]",
        {},
    ]


@pytest.mark.parametrize(
    ("page", "per_page", "message"),
    [(0, 20, "page"), (-1, 20, "page"), (1, 0, "per_page"), (1, 201, "per_page")],
)
async def test_bad_paging_is_refused(
    views: SessionViews, page: int, per_page: int, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        await views.list_sessions(page=page, per_page=per_page)


async def test_the_largest_page_size_is_accepted(store: Store, views: SessionViews) -> None:
    await store.sessions.create("tic")
    listed = await views.list_sessions(per_page=200)
    assert (listed["total"], len(listed["items"]), listed["per_page"]) == (1, 1, 200)
