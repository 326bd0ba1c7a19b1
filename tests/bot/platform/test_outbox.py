"""The outbox: durable final replies and notices, the progress line, through a sender."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bot.platform.outbox import DONE, FAILED, Outbox, final_key, preview


class Sender:
    """An ``OutboxSender`` that writes down what it is asked to do."""

    def __init__(self) -> None:
        self.log: list[tuple[Any, ...]] = []
        self.refs = 0

    def prepare(self, source: str, text: str) -> list[str]:
        return text.split("|")  # a "part" per |

    def written(self, source: str, text: str) -> list[str]:
        return self.prepare(source, text)

    def answering(self, conn: Any, source: str, answer_id: int, prepared: list[str]) -> list[str]:
        return prepared

    def record(self, conn: Any, source: str, key: str, prepared: list[str]) -> list[str]:
        rows = [f"{key}:{i}={part}" for i, part in enumerate(prepared)]
        self.log.append(("record", conn, source, rows))
        return rows

    async def send_recorded(self, rows: Sequence[str]) -> None:
        self.log.append(("send_recorded", list(rows)))

    async def send_durable(self, source: str, key: str, prepared: list[str]) -> None:
        self.log.append(("send_durable", source, key, prepared))

    async def say(self, source: str, text: str) -> None:
        self.log.append(("say", source, text))

    def progress_text(self, lines: Sequence[str]) -> str:
        return "\n".join(lines)

    async def send_progress(self, source: str, text: str) -> int:
        self.refs += 1
        self.log.append(("send_progress", text))
        return self.refs

    async def edit_progress(self, source: str, ref: int | str, text: str) -> None:
        self.log.append(("edit_progress", ref, text))


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Hub:
    def __init__(self) -> None:
        self.hooks: dict[str, Any] = {}

    def on_answer(self, prefix: str, hook: Any) -> None:
        self.hooks["answer", prefix] = hook

    def on_failure(self, prefix: str, hook: Any) -> None:
        self.hooks["failure", prefix] = hook


async def test_an_answer_is_recorded_in_its_transaction_then_sent_from_the_rows() -> None:
    sender, hub = Sender(), Hub()
    outbox = Outbox(sender, clock=Clock())
    outbox.attach(hub, "x:")  # type: ignore[arg-type]
    record = hub.hooks["answer", "x:"]("x:1", "one|two")
    record("conn", 42)
    assert sender.log == [("record", "conn", "x:1", ["final:42:0=one", "final:42:1=two"])]
    await outbox.final("x:1", 42, "one|two")
    assert sender.log[-1] == ("send_recorded", ["final:42:0=one", "final:42:1=two"])
    # Stored without rows (an older version, a crash before): sent durably under its key.
    await outbox.final("x:1", 43, "late")
    assert sender.log[-1] == ("send_durable", "x:1", final_key(43), ["late"])


async def test_a_failure_notice_is_sent_from_its_rows_and_any_other_error_said() -> None:
    sender, hub = Sender(), Hub()
    outbox = Outbox(sender, clock=Clock())
    outbox.attach(hub, "x:")  # type: ignore[arg-type]
    hub.hooks["failure", "x:"]("x:1", "the model failed")("conn", "failed:7")
    await outbox.notice("x:1", "the model failed", "failed:7")
    assert sender.log[-1] == ("send_recorded", ["failed:7:0=⚠️ the model failed"])
    await outbox.notice("x:1", "the model failed", "failed:7")  # once
    await outbox.notice("x:1", "other", None)
    assert sender.log[-2:] == [
        ("say", "x:1", "⚠️ the model failed"),
        ("say", "x:1", "⚠️ other"),
    ]


async def test_the_progress_line_is_one_message_edited_at_most_every_interval() -> None:
    sender, clock = Sender(), Clock()
    outbox = Outbox(sender, clock=clock, progress_interval_s=2.0)
    await outbox.show_progress("s")  # nothing to show yet
    outbox.tool_started("s", 0, "read_file", '{"path":\n "a"}')
    await outbox.show_progress("s")
    assert sender.log == [("send_progress", '⚙ read_file {"path": "a"}')]
    outbox.tool_ended("s", 0, "read_file", DONE)
    clock.now += 1
    await outbox.show_progress("s")  # too soon
    outbox.tool_started("s", 1, "web", "{}")
    clock.now += 1.5
    await outbox.show_progress("s")
    assert sender.log[-1] == ("edit_progress", 1, '⚙ read_file {"path": "a"} ✓\n  ⚙ web {}')
    outbox.tool_ended("s", 1, "web", FAILED)
    await outbox.show_progress("s", force=True)
    assert sender.log[-1][2].endswith("⚙ web {} ✗")
    await outbox.show_progress("s", force=True)  # unchanged: no edit
    assert len(sender.log) == 3
    outbox.reset_progress("s")
    assert outbox._progress == {}  # forgotten: one per source was kept for good (review)
    outbox.tool_started("s", 0, "x", "")
    await outbox.show_progress("s")
    assert sender.log[-1] == ("send_progress", "⚙ x ")


def test_a_preview_is_one_line_cut_to_its_limit() -> None:
    assert preview("a\n  b") == "a b"
    assert preview("x" * 100, limit=10) == "x" * 9 + "…"
