"""A cron job fires once across a fleet of real ``chathub serve`` processes on one
PostgreSQL, against the fake Bot API and the fake model: the user asks for it in the chat,
approves the card, and every due run reaches the chat exactly once; when the process that
delivered the last run is killed with ``kill -9``, the next run reaches the chat exactly
once through another process.

PostgreSQL only (``CHATHUB_TEST_POSTGRES_URL``): a fleet shares its work through it.
"""

from __future__ import annotations

import itertools
import json
import os
import re
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.bot.fleet.test_fleet_processes import Fleet, fleet_on_fresh_database
from tests.bot.process import wait_for
from tests.fakes.openai_server import FakeOpenAIServer, ScriptedReply
from tests.fakes.telegram_server import SentMessage
from tests.pg import POSTGRES_URL_ENV

pytestmark = pytest.mark.skipif(
    not os.environ.get(POSTGRES_URL_ENV), reason=f"{POSTGRES_URL_ENV} is not set"
)

CHAT = 1000  # a private chat of an allowed user (Fleet's default list): the chat id is hers
PERIOD_S = 10
# serve runs the scheduler on the real clock (nothing injects one into a process), so the
# job fires every 10 s rather than every minute: a 6-field spec (seconds first), allowed by
# the operator's SCHEDULER_MIN_PERIOD_SECONDS. Four firings then take ~40 s, not 4 minutes.
SPEC = f"*/{PERIOD_S} * * * * *"
PROMPT = "Say the next tick."
ASKED = "every ten seconds, tell me the next tick"
# No \b: in a notification's JSON a result follows the two characters "\n".
TICK = re.compile(r"tick \d+")
FAILED_STEP = "dispatch step failed"  # scheduler/dispatcher.py logs it with the traceback


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    return content if isinstance(content, str) else json.dumps(content)


def _last(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The message a request ends with, before the tail system messages."""
    return next((m for m in reversed(messages) if m.get("role") != "system"), {})


def _said(content: str) -> ScriptedReply:
    return ScriptedReply("completion", content=content, finish_reason="stop")


class CronModel(FakeOpenAIServer):
    """The fake model, answering each request by what it asks: the requests of three
    processes interleave, so a queue of scripted replies cannot say which gets which.

    In the chat it schedules the job (``execute_task``) and relays each notification's
    tick; in the job's own session it answers ``tick <n>``, a new n for every run it
    executes (a run executed twice would show as two ticks)."""

    def __init__(self) -> None:
        super().__init__()
        self._ticks = itertools.count(1)
        self.ticks: list[str] = []  # what the job's sessions answered, in order
        self.respond = self.answer

    def answer(self, messages: list[dict[str, Any]]) -> ScriptedReply:
        last = _last(messages)
        if last.get("role") == "tool":
            result = _text(last)
            if "job_result" in result:  # the chat's agent reads a run's notification
                return _said("\n".join(f"cron said: {t}" for t in TICK.findall(result)))
            if "task_id" in result:
                return _said(f"Done: a tick every {PERIOD_S} seconds.")
            return _said("noted")
        if last.get("role") == "user" and PROMPT in _text(last):  # a run of the job
            tick = f"tick {next(self._ticks)}"
            self.ticks.append(tick)
            return _said(tick)
        if last.get("role") == "user" and ASKED in _text(last):
            spec = {"mode": "cron", "title": "Ticks", "prompt": PROMPT, "cron": SPEC}
            return ScriptedReply(
                "completion",
                tool_calls=(("t1", "execute_task", json.dumps(spec)),),
                finish_reason="tool_calls",
            )
        return _said("ok")


@pytest.fixture
def model() -> Iterator[CronModel]:
    with CronModel() as model:
        yield model


@pytest.fixture
def fleet(tmp_path: Path, model: CronModel) -> Iterator[Fleet]:
    with fleet_on_fresh_database(tmp_path, model) as fleet:
        yield fleet


@dataclass(frozen=True)
class JobRun:
    id: int
    at: float  # scheduled_for, epoch seconds
    status: str
    delivery: str
    result: str | None


def runs(fleet: Fleet) -> list[JobRun]:
    rows = fleet.psql(
        "SELECT id, extract(epoch from scheduled_for), status, delivery_status, "
        "coalesce(result, '') FROM job_runs ORDER BY scheduled_for"
    )
    return [JobRun(int(i), float(at), s, d, r or None) for i, at, s, d, r in rows]


def told(fleet: Fleet, run: JobRun) -> list[SentMessage]:
    """The messages the chat got with the run's output (each one an accepted sendMessage)."""
    line = f"cron said: {run.result}"
    return [m for m in fleet.telegram.messages(CHAT) if line in (m.text or "").splitlines()]


def delivered(fleet: Fleet, *, besides: Collection[int] = (), at_least: int) -> list[JobRun]:
    """The runs whose output reached the chat (those in ``besides`` left out), once there
    are ``at_least`` of them; an empty list before."""
    done = [r for r in runs(fleet) if r.result and r.id not in besides and told(fleet, r)]
    return done if len(done) >= at_least else []


def sender(fleet: Fleet, message: SentMessage) -> str | None:
    """The fleet name of the process that recorded and sent ``message`` (once it is sent)."""
    rows = fleet.psql(
        f"SELECT recorded_by FROM platform_outbox WHERE conversation = '{CHAT}' "
        f"AND message_id = '{message.message_id}' AND status = 'sent'"
    )
    if not rows:
        return None
    start = rows[0][0].rsplit(":", 1)[0]  # the CHATHUB_PROCESS_ID, its start's suffix cut
    return next((name for name, pid in fleet.ids.items() if pid == start), start)


def live_members(fleet: Fleet) -> int:
    [[count]] = fleet.psql(
        "SELECT count(*) FROM leases WHERE name LIKE 'process:%' "
        "AND expires_at > extract(epoch from clock_timestamp())"
    )
    return int(count)


def waited(fleet: Fleet, predicate: Callable[[], Any], within_s: float) -> Any:
    try:
        return wait_for(predicate, within_s)
    except AssertionError:
        print("runs:", runs(fleet))
        print("chat:", [m.text for m in fleet.telegram.messages(CHAT)])
        print(fleet.psql("SELECT id, lease_owner, attempt, status, error FROM job_runs"))
        print(fleet.diagnosis())
        print(fleet.state())
        print(fleet.logs())
        raise


@pytest.mark.timeout(240)
def test_a_cron_job_fires_once_across_the_fleet_and_outlives_its_runner(
    fleet: Fleet, model: CronModel
) -> None:
    for name in ("p1", "p2", "p3"):
        home = fleet.tmp_path / name
        home.mkdir()
        # serve reads ./.env (the operator's file): the 10 s period is allowed there.
        (home / ".env").write_text(f"SCHEDULER_MIN_PERIOD_SECONDS={PERIOD_S}\n")

    # The job is asked for, approved and created in p1; p2 and p3 join afterwards, so
    # every dispatcher knows it from its first step and all three race for each firing
    # (a process learns of a job made elsewhere only at its 30 s safety wake).
    fleet.start("p1")
    wait_for(lambda: fleet.telegram.calls_to("getUpdates"), within_s=30)
    fleet.telegram.user_message(CHAT, CHAT, ASKED)
    card = waited(
        fleet,
        lambda: next(
            (m for m in fleet.telegram.messages(CHAT) if "Approval needed" in (m.text or "")),
            None,
        ),
        within_s=30,
    )
    approve = card.reply_markup["inline_keyboard"][0][0]["callback_data"]
    fleet.telegram.callback(CHAT, CHAT, card.message_id, approve)
    waited(
        fleet,
        lambda: any("Done: a tick" in (m.text or "") for m in fleet.telegram.messages(CHAT)),
        within_s=30,
    )
    assert fleet.psql("SELECT spec, origin_source, enabled FROM scheduled_jobs") == [
        [SPEC, f"telegram:{CHAT}", "t"]
    ]
    fleet.start("p2")
    fleet.start("p3")
    waited(fleet, lambda: live_members(fleet) == 3, within_s=30)

    # Two firings reach the chat; the process that sent the second is killed once it has
    # recorded the send (a kill between Telegram's accepting and the record is the
    # documented doubled-reply window, not the scheduler's).
    before = waited(fleet, lambda: delivered(fleet, at_least=2), within_s=60)
    [message] = told(fleet, before[-1])
    victim = waited(fleet, lambda: sender(fleet, message), within_s=20)
    fleet.kill(victim)
    seen = {run.id for run in runs(fleet)}

    # The next firing reaches the chat through another process; one more firing after it
    # gives a double of any earlier run a full period to show.
    after = waited(fleet, lambda: delivered(fleet, besides=seen, at_least=2), within_s=60)
    [next_message] = told(fleet, after[0])
    next_sender = waited(fleet, lambda: sender(fleet, next_message), within_s=20)
    assert next_sender != victim and next_sender in fleet.children, next_sender
    assert fleet.children[next_sender].poll() is None

    last = after[-1]
    settled = [run for run in runs(fleet) if run.at <= last.at]
    print(
        f"\n{len(settled)} firings, {victim} killed after the second; the next sent by "
        f"{next_sender}; runners: {fleet.psql('SELECT lease_owner, count(*) FROM job_runs GROUP BY 1')}"
    )
    # Every firing up to the last delivered one ran and reached the chat exactly once:
    # none missed, failed or left undelivered, one message each, one model answer each.
    assert [(run.status, run.delivery) for run in settled] == [("done", "delivered")] * len(
        settled
    ), settled
    assert [len(told(fleet, run)) for run in settled] == [1] * len(settled), [
        m.text for m in fleet.telegram.messages(CHAT)
    ]
    gaps = {round(b.at - a.at) for a, b in itertools.pairwise(settled)}
    assert gaps == {PERIOD_S}, settled  # consecutive fires: none skipped
    results = [run.result for run in settled]
    assert sorted(set(results)) == sorted(results)
    # No run executed twice: the job's sessions answered once per run (the latest fire
    # may be executing now, hence the prefix).
    assert model.ticks[: len(settled)] == results
    # Nor a tick in the chat that is no run's stored outcome (a second execution's).
    stored = {run.result for run in runs(fleet)}
    chat_ticks = set(TICK.findall(" ".join(m.text or "" for m in fleet.telegram.messages(CHAT))))
    assert chat_ticks <= stored, (chat_ticks, stored)
    # And every process's dispatcher kept stepping: one whose steps fail fires nothing,
    # which the others hide from the chat. Its log is where that shows (/healthz's
    # scheduler_last_step too, but the fleet's HTTP ports are not kept).
    failures = {
        path.parent.name: text[max(0, text.index(FAILED_STEP) - 200) :][:2500]
        for path in sorted(fleet.tmp_path.glob("*/serve-*.log"))
        if FAILED_STEP in (text := path.read_text())
    }
    assert not failures, "\n".join(f"--- {name}\n{text}" for name, text in failures.items())
