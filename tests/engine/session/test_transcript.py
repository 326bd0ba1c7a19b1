"""The transcript renders tool results by status and keeps old turns frozen."""

from __future__ import annotations

from datetime import UTC, datetime

from engine.session.context.compaction import format_rows
from engine.session.context.transcript import CARRIED_KEY, INTERRUPTED, FrameTranscript
from engine.store.rows import MessageRow, ToolCallRow

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _user(id_: int, text: str) -> MessageRow:
    return MessageRow(id_, 1, "user", text, "ok", False, None, None, NOW)


def _assistant(id_: int, content: str, *calls: tuple[str, str, str | None]) -> MessageRow:
    row = MessageRow(id_, 1, "assistant", content, "ok", False, None, None, NOW)
    row.tool_calls = [
        ToolCallRow(id_ * 10 + i, id_, f"call{id_}_{i}", "t", "{}", result, status)  # type: ignore[arg-type]
        for i, (status, result, _) in enumerate((c[0], c[1], c[2]) for c in calls)
    ]
    return row


def test_tool_results_read_by_status():
    transcript = FrameTranscript(max_messages=100, max_tool_result_chars=None)
    transcript.load(
        [
            _user(1, "go"),
            _assistant(
                2,
                "",
                ("done", "fine", None),
                ("failed", "boom", None),
                ("rejected", "User rejected this tool call. Reason: no", None),
                ("cancelled", "Tool call cancelled", None),
                ("pending", None, None),
                ("running", None, None),
            ),
        ]
    )
    contents = [m["content"] for m in transcript.messages() if m["role"] == "tool"]
    assert contents == [
        "fine",
        "Error: boom",
        "User rejected this tool call. Reason: no",
        "Tool call cancelled",
        INTERRUPTED,
        INTERRUPTED,
    ]


def test_a_leading_partial_turn_is_dropped_when_loading_a_window():
    transcript = FrameTranscript(max_messages=100, max_tool_result_chars=None)
    transcript.load([_assistant(5, "", ("done", "x", None)), _user(6, "hi")])
    assert [m["role"] for m in transcript.messages()] == ["user"]


def test_consecutive_user_rows_merge_into_one_message():
    transcript = FrameTranscript(max_messages=100, max_tool_result_chars=None)
    transcript.load([_user(1, "a"), _user(2, "b"), _assistant(3, "c")])
    assert transcript.messages() == [
        {"role": "user", "content": "a\n\nb"},
        {"role": "assistant", "content": "c"},
    ]


def test_what_a_message_carried_stands_before_it_in_every_later_turn():
    """An API client's earlier messages the session never held, kept in the message's
    metadata: the model reads them with the message, and the summary keeps them."""
    carried = MessageRow(1, 1, "user", "what is my name?", "ok", False, None, None, NOW)
    carried.metadata = {CARRIED_KEY: "Earlier messages:\nuser: my name is Zoe"}
    transcript = FrameTranscript(max_messages=100, max_tool_result_chars=None)
    transcript.load([carried, _assistant(2, "Zoe."), _user(3, "and again?")])
    assert transcript.messages()[0] == {
        "role": "user",
        "content": "Earlier messages:\nuser: my name is Zoe\n\nwhat is my name?",
    }
    assert "my name is Zoe" in format_rows([carried])[0]


def test_a_finished_turn_that_fits_the_window_with_the_next_message_is_kept():
    """The turn just closed was counted twice: one longer than half the window was
    dropped, and the model lost the turn it had just finished (found by review)."""
    transcript = FrameTranscript(max_messages=20, max_tool_result_chars=None)
    rounds = [_assistant(i, f"round {i}", ("done", "r", None)) for i in range(2, 12)]
    transcript.load([_user(1, "refactor it"), *rounds, _assistant(12, "Refactored.")])
    transcript.add(_user(13, "now commit it"))
    contents = [m.get("content") for m in transcript.messages()]
    assert contents[0] == "refactor it" and "Refactored." in contents


def test_the_history_window_drops_whole_old_turns():
    transcript = FrameTranscript(max_messages=5, max_tool_result_chars=None)
    rows = []
    for turn in range(5):
        rows += [_user(turn * 2 + 1, f"q{turn}"), _assistant(turn * 2 + 2, f"a{turn}")]
    transcript.load(rows)
    contents = [m["content"] for m in transcript.messages()]
    assert contents[0].startswith("q") and len(contents) <= 5
    assert contents[-2:] == ["q4", "a4"]


def _notification(id_: int, payload: str) -> MessageRow:
    """A notification brought into the conversation: a synthetic assistant row whose one
    call is done with the notifications as its result."""
    row = MessageRow(id_, 1, "assistant", "", "ok", True, None, None, NOW)
    row.tool_calls = [
        ToolCallRow(id_ * 10, id_, f"read_{id_}", "read_notification", "{}", payload, "done")
    ]  # type: ignore[arg-type]
    return row


def test_a_notification_starts_a_turn_of_its_own():
    """A chat that only receives notifications (briefings nobody answers) was one turn
    forever: the window never dropped a row, the model was sent the whole history at
    every notification, and a reload read nothing at all (found by review)."""
    rows = []
    for i in range(10):
        rows += [_notification(2 * i + 1, f"briefing {i}"), _assistant(2 * i + 2, f"told {i}")]
    live = FrameTranscript(max_messages=4, max_tool_result_chars=None)
    for row in rows:
        live.add(row)
    reloaded = FrameTranscript(max_messages=4, max_tool_result_chars=None)
    reloaded.load(rows[-5:])  # a window of the newest rows, a partial turn first

    for transcript in (live, reloaded):
        messages = transcript.messages()
        assert [m["content"] for m in messages if m["role"] == "tool"] == [
            "briefing 8",
            "briefing 9",
        ]
        assert [m["content"] for m in messages if m.get("content")][-1] == "told 9"


def test_a_message_taken_into_the_running_turn_hides_none_of_its_results():
    """A message sent while the turn worked joins it at a round boundary; it closed the
    turn's block, so the results the turn had just read were hidden from its next round
    as if they were an old turn's (found by review)."""
    transcript = FrameTranscript(max_messages=100, max_tool_result_chars=10)
    transcript.add(_user(1, "read the log"))
    transcript.add(_assistant(2, "", ("done", "a long log line " * 5, None)))
    transcript.add(_user(3, "and the errors only"), within_turn=True)

    tool = [m["content"] for m in transcript.messages() if m["role"] == "tool"]
    assert tool == ["a long log line " * 5]
