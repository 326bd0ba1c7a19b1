"""Start-up calls retried until Telegram answers, only a refusal stops — in fake time.

The subprocess tests (tests/bot/test_startup_faults.py) check the same through
``chathub serve`` and the fake Bot API; these pin the schedule and the log lines.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from bot.telegram.inbound.poller import Poller
from bot.telegram.sending.api import BadRequest, NetworkError, RetryAfter, ServerError
from bot.telegram.sending.errors import NotFound, Unauthorized
from bot.telegram.sending.health import TelegramHealth
from bot.telegram.sending.retrying import StartupRefused, until_ok
from bot.telegram.startup import HeldUpdates, TelegramStartup
from bot.telegram.store import TelegramStore
from tests.bot.telegram_unit.fakes import FakeBotApi, RecordingSink, RecordingStore
from tests.clock import FakeTime


def rig() -> tuple[FakeBotApi, FakeTime, TelegramHealth, TelegramStartup]:
    time = FakeTime()
    api = FakeBotApi(clock=time)
    health = TelegramHealth(clock=time)
    return api, time, health, TelegramStartup(api, health, sleep=time.sleep)


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno >= logging.WARNING]


# -- getMe and friends ---------------------------------------------------------------------


async def test_get_me_is_retried_with_a_capped_backoff(caplog: pytest.LogCaptureFixture) -> None:
    api, time, _, startup = rig()
    api.fail("get_me", *[ServerError("Internal Server Error") for _ in range(8)])
    me = await startup.identify()
    assert me["username"] == "chathub_test_bot"
    assert time.sleeps == [0.5, 1.0, 2.0, 4.0, 5.0, 5.0, 5.0, 5.0]  # never above 5 s
    assert len(api.calls_to("get_me")) == 9
    logged = warnings_of(caplog)
    assert len(logged) == 8  # one line per failure
    assert all(r.exc_info is None for r in logged)  # and no traceback
    assert (
        "getMe failed (ServerError: Internal Server Error); retrying in 0.5 s" in logged[0].message
    )


async def test_retry_after_is_waited_and_does_not_grow_the_backoff() -> None:
    api, time, _, startup = rig()
    api.fail("get_me", NetworkError("reset"), RetryAfter(7), NetworkError("reset"))
    await startup.identify()
    assert time.sleeps == [0.5, 7, 1.0]


async def test_a_huge_retry_after_is_capped_even_if_a_binding_let_it_through() -> None:
    api, time, _, startup = rig()
    api.fail("get_me", RetryAfter(86_400))
    await startup.identify()
    assert time.sleeps == [300.0]


async def test_any_exception_from_a_binding_is_retried() -> None:
    api, time, _, startup = rig()
    api.fail("get_me", KeyError("result"), ValueError("odd"))
    await startup.identify()
    assert time.sleeps == [0.5, 1.0]


@pytest.mark.parametrize(
    ("error", "names"),
    [
        (Unauthorized("Unauthorized"), "TELEGRAM_BOT_TOKEN"),
        (NotFound("Not Found"), "TELEGRAM_API_URL"),
    ],
)
async def test_a_definitive_answer_stops_at_once_with_one_clear_line(
    error: Exception, names: str
) -> None:
    api, time, health, startup = rig()
    api.fail("get_me", error)
    with pytest.raises(StartupRefused) as caught:
        await startup.identify()
    assert names in caught.value.explain()
    assert "getMe" in caught.value.explain()
    assert "\n" not in caught.value.explain()
    assert time.sleeps == []
    assert len(api.calls_to("get_me")) == 1
    assert health.state == "failing"


async def test_set_webhook_is_retried_then_receiving() -> None:
    api, _, health, startup = rig()
    api.fail("set_webhook", ServerError("Bad Gateway"), NetworkError("reset"))
    await startup.set_webhook("https://bot.example.org/hook", "s3cret")
    assert len(api.calls_to("set_webhook")) == 3
    assert health.state == "ok"
    assert health.settled.is_set()


# -- setMyCommands -------------------------------------------------------------------------


async def test_set_my_commands_is_retried_in_the_background_without_failing_health() -> None:
    api, time, health, startup = rig()
    api.fail("set_my_commands", RetryAfter(3), ServerError("x"), ServerError("x"))
    assert await startup.register_commands([("start", "Say hello")]) is True
    assert time.sleeps == [3, 1.0, 2.0]
    assert health.state == "starting"  # the menu is no sign of Telegram's health


async def test_set_my_commands_refused_is_a_warning_and_stops(
    caplog: pytest.LogCaptureFixture,
) -> None:
    api, _, _, startup = rig()
    api.fail("set_my_commands", BadRequest("Bad Request: BOT_COMMAND_INVALID"))
    assert await startup.register_commands([("Bad!", "x")]) is False
    assert len(api.calls_to("set_my_commands")) == 1
    [line] = warnings_of(caplog)
    assert "no command menu" in line.message and line.exc_info is None


# -- health --------------------------------------------------------------------------------


async def test_health_says_starting_failing_then_ok() -> None:
    time = FakeTime()
    health = TelegramHealth(clock=time)
    assert health.report() == {"telegram": "starting"}
    health.failed("start-up", "getMe", "ServerError: Internal Server Error")
    time.now += 3
    health.failed("start-up", "getMe", "NetworkError: reset")
    report = health.report()
    assert report["telegram"] == "failing"
    assert report["telegram_error"] == "getMe: NetworkError: reset"
    assert report["telegram_failing_for_s"] == 3.0
    health.succeeded("start-up")
    assert health.state == "starting"  # Telegram answers, but no update came through yet
    health.receiving()
    assert health.report() == {"telegram": "ok"}
    health.failed("send", "send", "ServerError: Bad Gateway")
    assert health.state == "failing"  # sends failing is Telegram failing too
    health.succeeded("send")
    assert health.state == "ok"


async def test_until_ok_reports_each_failure_to_health() -> None:
    time = FakeTime()
    health = TelegramHealth(clock=time)
    states: list[str] = []

    async def sleep(delay: float) -> None:
        states.append(health.state)
        await time.sleep(delay)

    calls = iter([ServerError("a"), None])

    async def op() -> str:
        error = next(calls)
        if error is not None:
            raise error
        return "done"

    assert await until_ok("deleteWebhook", op, health=health, sleep=sleep) == "done"
    assert states == ["failing"]
    assert health.state == "starting"


# -- the webhook's held updates ------------------------------------------------------------


def upd(update_id: int) -> dict[str, Any]:
    return {"update_id": update_id, "message": {"text": f"u{update_id}"}}


def test_held_updates_are_handed_over_once_each_at_release() -> None:
    held = HeldUpdates()
    sink = RecordingSink()
    held.submit(upd(2))  # POSTed while getMe was retried (stored, too)
    held.submit(upd(3))
    held.release(sink, [upd(1), upd(2)])  # stored and unhandled, read at release
    assert sink.ids == [1, 2, 3]
    held.submit(upd(3))  # its handler ran only now: handed over already
    held.submit(upd(4))
    assert sink.ids == [1, 2, 3, 4]


# -- the poller's start-up and bad input ---------------------------------------------------


def poller(
    store: TelegramStore, script: list[Any], time: FakeTime | None = None
) -> tuple[Poller, FakeBotApi, RecordingSink, TelegramHealth]:
    time = time or FakeTime()
    api = FakeBotApi(clock=time, updates_script=list(script))
    sink = RecordingSink(api.log)
    health = TelegramHealth(clock=time)
    p = Poller(
        api,
        RecordingStore(store, api.log),  # type: ignore[arg-type]
        sink,
        clock=time,
        sleep=time.sleep,
        health=health,
    )
    return p, api, sink, health


async def run_until_drained(p: Poller, api: FakeBotApi) -> None:
    task = asyncio.create_task(p.run())
    drained = asyncio.create_task(api.drained.wait())
    done, _ = await asyncio.wait({task, drained}, timeout=10, return_when="FIRST_COMPLETED")
    if task in done:
        drained.cancel()
        task.result()
        raise AssertionError("the poll loop returned")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_failing_delete_webhook_is_retried_then_polling_starts(
    sqlite_tg_store: TelegramStore,
) -> None:
    """Today's bug: one 500 on deleteWebhook ended the poller, the service never polled."""
    time = FakeTime()
    p, api, sink, health = poller(sqlite_tg_store, [[upd(1)]], time)
    api.fail("delete_webhook", ServerError("Internal Server Error"), NetworkError("reset"))
    await run_until_drained(p, api)
    assert [entry[0] for entry in api.log[:4]] == [
        "delete_webhook",
        "delete_webhook",
        "delete_webhook",
        "get_updates",
    ]
    assert time.sleeps == [0.5, 1.0]
    assert sink.ids == [1]
    assert health.state == "ok"


async def test_delete_webhook_refused_ends_the_poller_with_startup_refused(
    sqlite_tg_store: TelegramStore,
) -> None:
    p, api, _, _ = poller(sqlite_tg_store, [])
    api.fail("delete_webhook", Unauthorized("Unauthorized"))
    with pytest.raises(StartupRefused, match="TELEGRAM_BOT_TOKEN"):
        await p.run()
    assert api.calls_to("get_updates") == []


async def test_get_updates_failing_is_reported_then_cleared(
    sqlite_tg_store: TelegramStore,
) -> None:
    p, api, _, health = poller(sqlite_tg_store, [ServerError("Bad Gateway")])
    seen: list[str] = []
    sleep = p._sleep

    async def watching_sleep(delay: float) -> None:
        seen.append(health.state)
        await sleep(delay)

    p._sleep = watching_sleep
    api.updates_script.append([])
    await run_until_drained(p, api)
    assert seen == ["failing"]
    assert health.state == "ok"


@pytest.mark.parametrize("seconds", [0, -3])
async def test_a_zero_or_negative_retry_after_still_waits_a_second(
    sqlite_tg_store: TelegramStore, seconds: float
) -> None:
    p, api, _, _ = poller(sqlite_tg_store, [RetryAfter(seconds), RetryAfter(seconds), []])
    time = api.clock
    await run_until_drained(p, api)
    assert time.sleeps == [1.0, 1.0]  # not a hammering loop


async def test_an_update_below_the_stored_offset_is_ignored_as_seen(
    sqlite_tg_store: TelegramStore,
) -> None:
    await sqlite_tg_store.record_updates([upd(100)])
    await sqlite_tg_store.mark_handled(100)
    # A misbehaving server hands out an update from before the stored offset (101).
    p, api, sink, _ = poller(sqlite_tg_store, [[upd(50)], [upd(101)]])
    await run_until_drained(p, api)
    assert sink.ids == [101]
    assert [c.args[0] for c in api.calls_to("get_updates")] == [101, 101, 102]
    assert [u["update_id"] for u in await sqlite_tg_store.unhandled()] == [101]


async def test_an_update_far_above_the_offset_is_handled_and_the_offset_follows(
    sqlite_tg_store: TelegramStore,
) -> None:
    await sqlite_tg_store.record_updates([upd(100)])
    await sqlite_tg_store.mark_handled(100)
    far = 100 + 10**12
    p, api, sink, _ = poller(sqlite_tg_store, [[upd(far)], [upd(far + 1)]])
    await run_until_drained(p, api)
    assert sink.ids == [far, far + 1]
    assert [c.args[0] for c in api.calls_to("get_updates")] == [101, far + 1, far + 2]
    assert await sqlite_tg_store.last_update_id() == far + 1
    # a restart resumes after it
    again, api2, sink2, _ = poller(sqlite_tg_store, [[upd(far + 2)]])
    await run_until_drained(again, api2)
    assert api2.calls_to("get_updates")[0].args[0] == far + 2
    assert sink2.ids == [far, far + 1, far + 2]  # unhandled ones replayed, then the new one


async def test_an_update_id_past_64_bits_or_not_an_integer_is_dropped_and_polling_goes_on(
    sqlite_tg_store: TelegramStore,
) -> None:
    junk = [{"update_id": 2**63, "message": {}}, {"update_id": True, "message": {}}]
    junk += [{"update_id": "7"}, {"update_id": -1}, "not an object"]  # type: ignore[list-item]
    p, api, sink, _ = poller(sqlite_tg_store, [[*junk, upd(5)], [upd(6)]])
    await run_until_drained(p, api)
    assert sink.ids == [5, 6]  # the batch was stored, not retried forever
    assert await sqlite_tg_store.last_update_id() == 6
