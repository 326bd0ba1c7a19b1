"""Scheduled briefings that act, through ``chathub serve``, the fake Bot API and the fake
model: the user asks for a briefing in the chat, approves the job's card (its grants on it,
one line each), and the run reads the workspace file; a run without the grant asks in the
chat with a card of its own, which still works after ``kill -9`` and a restart.

The job is a single run a few seconds ahead (a 7-field spec with the year), so a test waits
for one real firing and nothing fires again.
"""

from __future__ import annotations

import json
import signal
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.bot.process import ALICE, wait_for
from tests.fakes.openai_server import FakeOpenAIServer, ScriptedReply
from tests.fakes.telegram_server import FakeTelegramServer, SentMessage

NOTES = "Buy oat milk. Call Ada at 10."
ASKED = "in a few seconds, read notes.txt and brief me"
PROMPT = "Read notes.txt and write my briefing."
OWNER = {"TELEGRAM_OWNER_ID": str(ALICE), "SCHEDULER_LEASE_SECONDS": "2"}


def _said(content: str) -> ScriptedReply:
    return ScriptedReply("completion", content=content, finish_reason="stop")


def _call(name: str, args: dict[str, Any]) -> ScriptedReply:
    return ScriptedReply(
        "completion", tool_calls=(("c1", name, json.dumps(args)),), finish_reason="tool_calls"
    )


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    return content if isinstance(content, str) else json.dumps(content)


class BriefingModel:
    """Answers by what a request asks (the chat's and the job's requests interleave)."""

    def __init__(self, grants: dict[str, Any] | None) -> None:
        self.grants = grants
        self.job_reads: list[str] = []  # what the job's run got back from read_file

    def __call__(self, messages: list[dict[str, Any]]) -> ScriptedReply:
        last = next((m for m in reversed(messages) if m.get("role") != "system"), {})
        text = _text(last)
        if last.get("role") == "user" and ASKED in text:
            at = time.gmtime(time.time() + 4)  # one fire, a few seconds ahead
            spec = f"{at.tm_sec} {at.tm_min} {at.tm_hour} {at.tm_mday} {at.tm_mon} * {at.tm_year}"
            args: dict[str, Any] = {"mode": "cron", "title": "Notes", "prompt": PROMPT}
            args["cron"] = spec
            if self.grants is not None:
                args["grants"] = self.grants
            return _call("execute_task", args)
        if last.get("role") == "user" and PROMPT in text:
            return _call("read_file", {"path": "notes.txt"})
        if last.get("role") == "tool":
            if "job_result" in text or "job_failed" in text:  # the chat's agent relays it
                return _said(f"Your briefing is in. {text}")
            if "task_id" in text:
                return _said("Scheduled.")
            self.job_reads.append(text)  # the job's run read the file (or was refused)
            return _said(f"Briefing: {text}")
        return _said("ok")


@pytest.fixture
def home(tmp_path: Path) -> Path:
    (tmp_path / "workspace").mkdir()
    (tmp_path / "workspace" / "notes.txt").write_text(NOTES)
    return tmp_path


def _card(telegram: FakeTelegramServer, marker: str) -> SentMessage | None:
    return next(
        (m for m in telegram.messages(ALICE) if marker in (m.text or "") and m.reply_markup),
        None,
    )


def _approve(telegram: FakeTelegramServer, card: SentMessage) -> None:
    data = card.reply_markup["inline_keyboard"][0][0]["callback_data"]  # ✅ Approve
    telegram.callback(ALICE, ALICE, card.message_id, data)


def _briefings(telegram: FakeTelegramServer) -> list[str]:
    return [
        m.text or ""
        for m in telegram.messages(ALICE)
        if (m.text or "").startswith("Your briefing is in.")
    ]


def _schedule(telegram: FakeTelegramServer) -> SentMessage:
    """Ask for the briefing and approve the job's own card; the job's card it returns."""
    wait_for(lambda: telegram.calls_to("getUpdates"), within_s=30)
    telegram.user_message(ALICE, ALICE, ASKED)
    card = wait_for(lambda: _card(telegram, "Approval needed"), within_s=30)
    _approve(telegram, card)
    wait_for(lambda: any(m.text == "Scheduled." for m in telegram.messages(ALICE)), 30)
    return card


@pytest.fixture
def model(fake_openai: FakeOpenAIServer) -> Iterator[FakeOpenAIServer]:
    yield fake_openai


def _runs(home: Path) -> list[tuple[str, int]]:
    with sqlite3.connect(home / "chathub.db") as db:
        return [tuple(row) for row in db.execute("SELECT status, attempt FROM job_runs")]


@pytest.mark.timeout(120)
def test_a_briefing_granted_the_read_delivers_the_files_content_without_a_card(
    serve, telegram: FakeTelegramServer, model: FakeOpenAIServer, home: Path
) -> None:
    model.respond = BriefingModel({"read": ["notes.txt"]})
    serve(**OWNER)

    job_card = _schedule(telegram)

    assert "may read notes.txt" in (job_card.text or "")  # the grant, approved with the job
    [briefing] = wait_for(lambda: _briefings(telegram), within_s=30)
    assert NOTES in briefing
    assert _card(telegram, "wants to run") is None  # the run asked nobody
    assert _runs(home) == [("done", 1)]


@pytest.mark.timeout(120)
def test_a_briefings_card_outlives_kill_9_and_its_old_button_finishes_the_run_once(
    serve, telegram: FakeTelegramServer, model: FakeOpenAIServer, home: Path
) -> None:
    briefing_model = BriefingModel(None)
    model.respond = briefing_model
    child = serve(**OWNER)
    _schedule(telegram)

    card = wait_for(lambda: _card(telegram, "⏰ Notes wants to run: read_file"), within_s=30)
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=10)
    assert briefing_model.job_reads == []  # nothing was read before the kill

    serve(**OWNER)
    wait_for(lambda: len(telegram.calls_to("getUpdates")) > 2, within_s=30)
    _approve(telegram, card)  # the button of the card sent before the kill

    [briefing] = wait_for(lambda: _briefings(telegram), within_s=30)
    assert NOTES in briefing
    assert len(_briefings(telegram)) == 1
    assert len(briefing_model.job_reads) == 1
    assert [status for status, _attempt in _runs(home)] == ["done"]
    assert len([m for m in telegram.messages(ALICE) if "wants to run" in (m.text or "")]) == 1
