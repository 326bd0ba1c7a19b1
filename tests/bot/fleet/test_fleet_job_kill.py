"""A kill of a job running on another process of a two-process fleet stops it.

Two real ``chathub serve`` processes on one PostgreSQL, the fake Bot API and the fake model.
The job's run waits on a card in the chat (its call was not granted); the kill is asked of
the process that does not run it, and answers only once the run has stopped there.

PostgreSQL only (``CHATHUB_TEST_POSTGRES_URL``): a fleet shares its work through it.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.bot.fleet.test_fleet_processes import Fleet, fleet_on_fresh_database
from tests.bot.process import free_port, wait_for, wait_for_http
from tests.fakes.openai_server import FakeOpenAIServer, ScriptedReply
from tests.pg import POSTGRES_URL_ENV

pytestmark = pytest.mark.skipif(
    not os.environ.get(POSTGRES_URL_ENV), reason=f"{POSTGRES_URL_ENV} is not set"
)

CHAT = 1000  # a private chat of an allowed user (Fleet's default list)
ASKED = "in a few seconds, check the disk"
PROMPT = "Check the disk with df."


def _said(content: str) -> ScriptedReply:
    return ScriptedReply("completion", content=content, finish_reason="stop")


def _call(name: str, args: dict[str, Any]) -> ScriptedReply:
    return ScriptedReply(
        "completion", tool_calls=(("c1", name, json.dumps(args)),), finish_reason="tool_calls"
    )


def answer(messages: list[dict[str, Any]]) -> ScriptedReply:
    last = next((m for m in reversed(messages) if m.get("role") != "system"), {})
    text = last.get("content") if isinstance(last.get("content"), str) else json.dumps(last)
    if last.get("role") == "user" and ASKED in text:
        at = time.gmtime(time.time() + 3)
        spec = f"{at.tm_sec} {at.tm_min} {at.tm_hour} {at.tm_mday} {at.tm_mon} * {at.tm_year}"
        return _call(
            "execute_task", {"mode": "cron", "title": "Disk", "prompt": PROMPT, "cron": spec}
        )
    if last.get("role") == "user" and PROMPT in text:
        return _call("execute_cmd", {"command": "df -h"})  # not granted: it asks
    if last.get("role") == "tool" and "task_id" in text:
        return _said("Scheduled.")
    return _said("ok")


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    with FakeOpenAIServer() as model:
        model.respond = answer
        with fleet_on_fresh_database(tmp_path, model) as fleet:
            yield fleet


def _card(fleet: Fleet, marker: str) -> Any:
    return next(
        (m for m in fleet.telegram.messages(CHAT) if marker in (m.text or "") and m.reply_markup),
        None,
    )


@pytest.mark.timeout(180)
def test_a_kill_asked_of_the_other_process_stops_the_run_where_it_runs(fleet: Fleet) -> None:
    ports = {"p1": free_port(), "p2": free_port()}
    fleet.start("p1", HTTP_PORT=str(ports["p1"]))
    fleet.start("p2", HTTP_PORT=str(ports["p2"]))
    for port in ports.values():
        wait_for_http(port, within_s=60)

    fleet.telegram.user_message(CHAT, CHAT, ASKED)
    card = wait_for(lambda: _card(fleet, "Approval needed"), within_s=30)
    data = card.reply_markup["inline_keyboard"][0][0]["callback_data"]
    fleet.telegram.callback(CHAT, CHAT, card.message_id, data)
    asked = wait_for(lambda: _card(fleet, "⏰ Disk wants to run: execute_cmd"), within_s=60)

    [[job_id, owner]] = fleet.psql("SELECT job_id, lease_owner FROM job_runs")
    runner = next(name for name, pid in fleet.ids.items() if owner.startswith(pid))
    other = "p2" if runner == "p1" else "p1"
    killed = httpx.post(f"http://127.0.0.1:{ports[other]}/api/jobs/{job_id}/kill", timeout=30)

    assert killed.status_code == 200, killed.text
    assert len(killed.json()["cancelled_sessions"]) == 1
    [[status, error]] = fleet.psql("SELECT status, coalesce(error, '') FROM job_runs")
    assert status == "failed", error
    assert fleet.children[runner].poll() is None  # stopped the run, not the process
    # The card of the stopped run closes in the chat; its button does nothing now.
    wait_for(lambda: "Stopped" in (asked.text or ""), within_s=20)
