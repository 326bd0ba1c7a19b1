"""bot/telegram/rendering/cards.py: approval cards, callback data, questions (the data
read back by bot/telegram/dispatch/approvals.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from bot.telegram.dispatch.approvals import CardAction, parse_callback
from bot.telegram.rendering.cards import (
    QUESTION_CHARS,
    Card,
    approval_card,
    format_callback,
    question_text,
    resolved_card,
)
from bot.telegram.rendering.render import TELEGRAM_LIMIT, utf16_len
from engine.session.events import ApprovalRequired
from engine.tools.preview import ApprovalPreview
from tests.bot.telegram_render.test_render import check_entities, utf16_slice

ACTIONS = ["approve", "reject", "bypass_15m", "bypass_session"]


def entity_text(text: str, entities: list[dict[str, Any]], kind: str) -> list[str]:
    return [utf16_slice(text, e["offset"], e["length"]) for e in entities if e["type"] == kind]


def event(
    name: str, arguments: dict[str, Any], preview: ApprovalPreview | None = None, **kw: Any
) -> ApprovalRequired:
    return ApprovalRequired(
        tool_call_id=kw.pop("tool_call_id", 42),
        name=name,
        arguments=arguments,
        session_id=1,
        agent_id=kw.pop("agent_id", "main"),
        preview=preview,
        **kw,
    )


def check_card(card: Card, max_chars: int = 3500) -> None:
    check_entities(card.text, card.entities)
    assert utf16_len(card.text) <= max_chars
    rows = card.reply_markup["inline_keyboard"]
    assert [[b["text"] for b in row] for row in rows] == [
        ["✅ Approve", "❌ Reject"],
        ["⏱ 15 min", "🔄 Session"],
    ]
    for row in rows:
        for button in row:
            assert len(button["callback_data"].encode()) <= 64
            assert parse_callback(button["callback_data"]) is not None


# --- callbacks -----------------------------------------------------------------------


@pytest.mark.parametrize("action", ACTIONS)
def test_callback_round_trip(action: str) -> None:
    data = format_callback(123456789012, action)  # type: ignore[arg-type]
    assert data.startswith("ap1:123456789012:")
    assert parse_callback(data) == CardAction(123456789012, action)  # type: ignore[arg-type]


def test_callback_codes() -> None:
    assert [format_callback(7, a) for a in ACTIONS] == ["ap1:7:a", "ap1:7:r", "ap1:7:t", "ap1:7:s"]  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "data",
    [
        "",
        "garbage",
        "ap1",
        "ap1:",
        "ap1::a",
        "ap1:5",
        "ap1:5:",
        "ap1:5:a:extra",
        "ap1:-5:a",
        "ap1:+5:a",
        "ap1:0:a",
        "ap1:05:a",
        "ap1:5.0:a",
        "ap1:abc:a",
        "ap1: 5:a",
        "ap1:٥:a",  # a non-ASCII digit
        "ap1:5:x",
        "ap1:5:approve",
        "ap1:5:A",
        "ap2:5:a",
        "AP1:5:a",
        "q1:5:a",
        "ap1:" + "1" * 59 + ":a",  # 65 bytes
    ],
)
def test_bad_callbacks(data: str) -> None:
    assert parse_callback(data) is None


def test_callback_size_limit() -> None:
    too_long = "ap1:" + "1" * 59 + ":a"
    assert len(too_long.encode()) == 65
    assert parse_callback(too_long) is None


@pytest.mark.parametrize(
    "raw_id",
    ["9" * 58, str(2**64 + 1), str(2**63)],  # 64 bytes of data; past 64 bits; just past
)
def test_callback_ids_past_64_bits_are_no_card(raw_id: str) -> None:
    # Issue 16: these were looked up and overflowed SQLite's INTEGER (the tap never answered).
    assert parse_callback(f"ap1:{raw_id}:a") is None


def test_the_largest_64_bit_id_is_a_card() -> None:
    assert parse_callback(f"ap1:{2**63 - 1}:r") == CardAction(2**63 - 1, "reject")
    with pytest.raises(ValueError):
        format_callback(2**63, "approve")


def test_non_string_callback() -> None:
    assert parse_callback(None) is None
    assert parse_callback(b"ap1:5:a") is None


@pytest.mark.parametrize("bad_id", [0, -1, True, 1.5, "5"])
def test_format_callback_rejects_bad_ids(bad_id: Any) -> None:
    with pytest.raises(ValueError):
        format_callback(bad_id, "approve")


def test_format_callback_rejects_unknown_action() -> None:
    with pytest.raises(ValueError):
        format_callback(5, "maybe")  # type: ignore[arg-type]


# --- approval cards ------------------------------------------------------------------


def test_execute_cmd_card() -> None:
    preview = ApprovalPreview(
        kind="command", command="rm -rf build/ && make 🚀", workdir="/work/proj"
    )
    card = approval_card(
        event(
            "execute_cmd",
            {"command": "rm -rf build/ && make 🚀"},
            preview,
            depth=2,
            agent_id="helper😀",
        )
    )
    check_card(card)
    assert card.document is None
    [pre] = [e for e in card.entities if e["type"] == "pre"]
    assert pre["language"] == "bash"
    assert utf16_slice(card.text, pre["offset"], pre["length"]) == "rm -rf build/ && make 🚀"
    codes = entity_text(card.text, card.entities, "code")
    assert codes == ["execute_cmd", "helper😀", "/work/proj"]
    assert "depth 2" in card.text
    assert card.reply_markup["inline_keyboard"][0][0]["callback_data"] == "ap1:42:a"


def test_execute_cmd_without_preview_uses_arguments() -> None:
    card = approval_card(event("execute_cmd", {"command": "ls", "workdir": "sub"}))
    check_card(card)
    assert entity_text(card.text, card.entities, "pre") == ["ls"]
    assert "Working directory: sub" in card.text
    assert "depth" not in card.text


def test_write_file_new_file_card() -> None:
    preview = ApprovalPreview(
        kind="file", path="notes/😀.md", old_content=None, new_content="hello\nworld\n"
    )
    card = approval_card(
        event("write_file", {"path": "notes/😀.md", "content": "hello\nworld\n"}, preview)
    )
    check_card(card)
    assert "(new file)" in card.text
    [pre] = [e for e in card.entities if e["type"] == "pre"]
    assert pre["language"] == "diff"
    diff = utf16_slice(card.text, pre["offset"], pre["length"])
    assert diff.splitlines() == ["@@ -0,0 +1,2 @@", "+hello", "+world"]
    assert "notes/😀.md" in entity_text(card.text, card.entities, "code")


def test_edit_file_card_is_a_compact_diff() -> None:
    old = "".join(f"line {i}\n" for i in range(100))
    new = old.replace("line 50\n", "line fifty\n")
    preview = ApprovalPreview(kind="file", path="a.txt", old_content=old, new_content=new)
    card = approval_card(
        event("edit_file", {"path": "a.txt", "old": "line 50", "new": "line fifty"}, preview)
    )
    check_card(card)
    assert "(new file)" not in card.text
    [diff] = entity_text(card.text, card.entities, "pre")
    assert diff.splitlines() == [
        "@@ -49,5 +49,5 @@",
        " line 48",
        " line 49",
        "-line 50",
        "+line fifty",
        " line 51",
        " line 52",
    ]


def test_edit_file_without_preview_shows_arguments() -> None:
    args = {"path": "bin.dat", "old": "a", "new": "b"}
    card = approval_card(event("edit_file", args))
    check_card(card)
    [pre] = [e for e in card.entities if e["type"] == "pre"]
    assert pre["language"] == "json"
    assert json.loads(utf16_slice(card.text, pre["offset"], pre["length"])) == args


def test_other_tool_card_shows_pretty_json() -> None:
    args = {"query": "café 😀", "limit": 5, "nested": {"a": [1, 2]}}
    card = approval_card(event("web_search", args))
    check_card(card)
    [pre] = [e for e in card.entities if e["type"] == "pre"]
    assert pre["language"] == "json"
    shown = utf16_slice(card.text, pre["offset"], pre["length"])
    assert json.loads(shown) == args
    assert "\n  " in shown  # pretty
    assert "café 😀" in shown  # not \u-escaped


def test_oversized_command_goes_to_a_document() -> None:
    command = "\n".join(f"echo step {i} 😀" for i in range(1000))
    card = approval_card(event("execute_cmd", {"command": command}, tool_call_id=9))
    check_card(card)
    assert card.document is not None
    filename, data = card.document
    assert filename == "approval-9.txt"
    assert data.decode() == command
    assert "approval-9.txt" in card.text
    assert "of 1000 lines" in card.text
    [shown] = entity_text(card.text, card.entities, "pre")
    assert command.startswith(shown) and shown != command
    assert command.startswith(shown + "\n")  # whole lines only


def test_oversized_single_line_command_is_marked_cut() -> None:
    command = "echo " + "x" * 10_000
    card = approval_card(event("execute_cmd", {"command": command}), max_chars=1000)
    check_card(card, 1000)
    assert card.document is not None and card.document[1].decode() == command
    assert "⚠️" in card.text and "approval-42.txt" in card.text


def test_oversized_diff_and_json_documents() -> None:
    new = "".join(f"row {i}\n" for i in range(2000))
    preview = ApprovalPreview(kind="file", path="big.csv", old_content=None, new_content=new)
    card = approval_card(event("write_file", {"path": "big.csv", "content": new}, preview))
    check_card(card)
    assert card.document is not None
    assert card.document[0] == "approval-42.diff"
    assert card.document[1].decode().count("\n+row ") == 2000

    args = {"blob": "y" * 5000}
    card = approval_card(event("upload", args))
    check_card(card)
    assert card.document is not None
    assert card.document[0] == "approval-42.json"
    assert json.loads(card.document[1]) == args


def test_tiny_max_chars_still_has_buttons_and_document() -> None:
    card = approval_card(event("execute_cmd", {"command": "ls -la /"}), max_chars=60)
    assert card.document is not None
    assert card.reply_markup["inline_keyboard"]
    check_entities(card.text, card.entities)


# --- resolution and questions --------------------------------------------------------


def _card() -> Card:
    return approval_card(event("execute_cmd", {"command": "make 🚀"}))


@pytest.mark.parametrize(
    ("outcome", "by", "line"),
    [
        ("approve", "Ada", "✅ Approved by Ada"),
        ("reject", "Ada", "❌ Rejected by Ada"),
        ("bypass_15m", "Ada", "⏱ Approved by Ada — no more asking for 15 min"),
        ("bypass_session", "Ada", "🔄 Approved by Ada — no more asking this session"),
        ("cancelled", None, "⊘ Cancelled (/stop)"),
        ("expired", None, "⌛ Expired"),
        ("approve", None, "✅ Approved"),
    ],
)
def test_resolved_card(outcome: str, by: str | None, line: str) -> None:
    card = _card()
    text, entities = resolved_card(card.text, card.entities, outcome, by)
    check_entities(text, entities)
    assert text.startswith(card.text)
    assert text.endswith("\n\n" + line)
    assert entities[: len(card.entities)] == card.entities


def test_rejected_with_note() -> None:
    card = _card()
    text, entities = resolved_card(card.text, card.entities, "reject", "Ada", note="too risky 😬")
    check_entities(text, entities)
    assert text.endswith("❌ Rejected by Ada: too risky 😬")
    assert "❌ Rejected" in entity_text(text, entities, "bold")


def test_resolved_card_does_not_exceed_telegram_limit() -> None:
    card = _card()
    text, entities = resolved_card(card.text, card.entities, "reject", "Ada", note="n" * 10_000)
    check_entities(text, entities)
    assert utf16_len(text) <= 4096


def test_question_text() -> None:
    text, entities = question_text("Which file, **a.txt** or `b😀.txt`?")
    check_entities(text, entities)
    assert text == "❓ Question\n\nWhich file, a.txt or b😀.txt?"
    assert entity_text(text, entities, "bold") == ["❓ Question", "a.txt"]
    assert entity_text(text, entities, "code") == ["b😀.txt"]


def test_long_question_fits_one_message() -> None:
    text, entities = question_text("word " * 2000)
    check_entities(text, entities)
    assert utf16_len(text) <= 4096
    assert text.endswith("…")


def test_empty_command_is_not_called_too_long() -> None:
    card = approval_card(event("execute_cmd", {"command": ""}))
    check_card(card)
    assert card.document is None
    assert "Command: (empty)" in card.text


def test_huge_names_are_cut_in_the_header() -> None:
    card = approval_card(event("t" * 5000, {"a": 1}, agent_id="😀" * 5000))
    check_card(card)
    assert card.document is None
    codes = entity_text(card.text, card.entities, "code")
    assert codes[0].endswith("…") and utf16_len(codes[0]) == 100
    assert codes[1].endswith("…") and utf16_len(codes[1]) <= 100


def test_cut_single_line_is_not_called_complete() -> None:
    card = approval_card(event("execute_cmd", {"command": "echo " + "z" * 5000}))
    check_card(card)
    assert "showing only the beginning" in card.text
    assert "of 1 lines" not in card.text


def test_a_closed_question_or_card_as_long_as_a_message_still_shows_its_outcome() -> None:
    """A question filled 4,092 units and its closing line went past Telegram's limit: the
    edit was refused and the question looked open for good (found by review). A question
    leaves room now, and a card stored long before is cut to make room."""
    text, entities = question_text("**Which** " + " ".join(["city"] * 2000))
    assert utf16_len(text) <= QUESTION_CHARS
    closed, _ = resolved_card(text, entities, "cancelled", None)
    assert utf16_len(closed) <= TELEGRAM_LIMIT and closed.endswith("Cancelled (/stop)")
    stored = "😀" * 2040 + " end"  # 4,084 units, made before the room was left
    bold = [{"type": "bold", "offset": 0, "length": utf16_len(stored)}]
    closed, kept = resolved_card(stored, bold, "approve", "Alice", note="x" * 500)
    assert utf16_len(closed) <= TELEGRAM_LIMIT and "✅ Approved by Alice" in closed
    [entity, outcome] = kept[:2]
    assert entity["offset"] + entity["length"] <= closed.index("…") * 2  # within the text
    assert outcome["type"] == "bold"
