"""The whole service over each binding while the fake Bot API injects faults.

Replies held up by a Telegram outage arrive without a restart; a chat that cannot be
reached is given up with Telegram's reason; odd getUpdates answers and update ids leave
polling going. Retry waits are injected short (``SHORT``): what is checked is that the
running process retries, not how long the production schedule waits.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from bot.delivery import RetrySchedule
from bot.delivery.tables import platform_outbox
from bot.serve import Service
from bot.telegram.bindings.factory import make_bot_api
from engine.config import AppConfig
from engine.llm.registry import ModelRegistry
from tests.bot.telegram_contract.conftest import ALICE, FAST, TOKEN, eventually, texts
from tests.engine.hub.conftest import EchoModel
from tests.fakes.telegram_server import FakeTelegramServer

SHORT = RetrySchedule(first_s=0.05, cap_s=0.2)


@pytest.fixture
async def start(
    make_config: Callable[..., AppConfig],
    telegram: FakeTelegramServer,
    library: str,
    model: EchoModel,
) -> AsyncIterator[Callable[..., Any]]:
    running: list[Service] = []

    async def start_service(*, http: bool = False, **settings: Any) -> Service:
        service = Service(
            make_config(**settings),
            models=ModelRegistry([model]),
            api=make_bot_api(library, TOKEN, telegram.base_url),
            pacing=FAST,
            schedule=SHORT,
            http=http,
        )
        await service.start()
        running.append(service)
        return service

    yield start_service
    for service in running:
        await service.stop()


async def outbox(service: Service) -> list[dict[str, Any]]:
    assert service.engine is not None

    def read(conn: sa.Connection) -> list[dict[str, Any]]:
        o = platform_outbox
        return [dict(r._mapping) for r in conn.execute(sa.select(o).order_by(o.c.id))]

    return await service.engine.store.db.run(read)


async def until_serving(client: httpx.AsyncClient) -> None:
    for _ in range(500):
        try:
            await client.get("/healthz")
            return
        except httpx.TransportError:
            await asyncio.sleep(0.01)
    raise AssertionError("the HTTP app did not come up")


async def test_eight_send_failures_then_the_reply_arrives_without_a_restart(start, telegram):
    service = await start()
    telegram.fail_next("sendMessage", 8, status=500)
    started = time.monotonic()
    telegram.user_message(ALICE, ALICE, "are you there?")
    await eventually(lambda: "echo: are you there?" in texts(telegram, ALICE), within_s=10)
    took = time.monotonic() - started
    assert texts(telegram, ALICE).count("echo: are you there?") == 1
    assert len(telegram.calls_to("sendMessage")) == 9
    for _ in range(200):  # the delivery is recorded right after the send returns
        [row] = await outbox(service)
        if row["status"] == "sent":
            break
        await asyncio.sleep(0.01)
    assert row["status"] == "sent" and row["attempts"] == 2  # postponed once, then sent
    assert service.adapter is not None
    stats = service.adapter.outbound.stats
    assert (stats.postponed, stats.redelivered) == (1, 1)
    assert took < 5


async def test_a_blocked_chat_fails_the_delivery_and_it_stops(start, telegram):
    service = await start()
    telegram.fail_next("sendMessage", 2, status=500)
    telegram.fail_next("sendMessage", status=403)
    telegram.user_message(ALICE, ALICE, "hello")
    await eventually(lambda: len(telegram.calls_to("sendMessage")) == 3)

    async def failed() -> list[dict[str, Any]]:
        return [r for r in await outbox(service) if r["status"] == "failed"]

    for _ in range(200):
        if await failed():
            break
        await asyncio.sleep(0.01)
    [row] = await failed()
    assert row["error"] == "Forbidden: bot was blocked by the user"
    await asyncio.sleep(0.3)  # longer than the whole injected schedule: nothing more is tried
    assert len(telegram.calls_to("sendMessage")) == 3


async def test_deliveries_waiting_show_in_metrics_and_the_inbox(start, telegram, unused_port):
    service = await start(http=True, http_port=unused_port)
    telegram.fail_next("sendMessage", 10_000, status=502)
    telegram.user_message(ALICE, ALICE, "outage")
    base = f"http://127.0.0.1:{unused_port}"
    async with httpx.AsyncClient(base_url=base) as client:
        await until_serving(client)

        async def metrics() -> str:
            return (await client.get("/metrics")).text

        for _ in range(500):
            if 'chathub_telegram_outbox{state="waiting"} 1.0' in await metrics():
                break
            await asyncio.sleep(0.01)
        text = await metrics()
        assert 'chathub_telegram_outbox{state="waiting"} 1.0' in text
        assert "chathub_telegram_deliveries_postponed_total" in text
        page = (await client.get("/")).text
        assert "Telegram deliveries waiting" in page
        assert "Bad Gateway" in page
        health = (await client.get("/healthz")).json()
        assert health["telegram"] == "failing"
        assert health["telegram_error"].startswith("send:")

        telegram.clear_faults()  # the outage ends: delivered by the running process
        await eventually(lambda: "echo: outage" in texts(telegram, ALICE))
        for _ in range(500):
            if 'chathub_telegram_outbox{state="waiting"} 0.0' in await metrics():
                break
            await asyncio.sleep(0.01)
        assert 'chathub_telegram_outbox{state="sent"} 1.0' in await metrics()
        assert "No reply waits for Telegram." in (await client.get("/")).text
        assert (await client.get("/healthz")).json()["telegram"] == "ok"
    assert service.adapter is not None


async def test_a_get_updates_answer_that_is_not_json_leaves_polling_going(start, telegram):
    await start()
    telegram.user_message(ALICE, ALICE, "before")
    await eventually(lambda: "echo: before" in texts(telegram, ALICE))
    polls = len(telegram.calls_to("getUpdates"))
    telegram.garbage_next("getUpdates")  # a proxy's HTML page, with a 200
    telegram.garbage_next("getUpdates", status=502)  # and with a 502
    telegram.user_message(ALICE, ALICE, "one")  # ends the poll in flight: the next ones fail
    await eventually(lambda: "echo: one" in texts(telegram, ALICE))
    await eventually(lambda: len(telegram.calls_to("getUpdates")) >= polls + 3)
    telegram.user_message(ALICE, ALICE, "two")
    await eventually(lambda: "echo: two" in texts(telegram, ALICE))


async def test_an_update_id_far_above_the_offset_is_handled_and_the_offset_follows(start, telegram):
    await start()
    first = telegram.user_message(ALICE, ALICE, "first")
    await eventually(lambda: "echo: first" in texts(telegram, ALICE))
    message = dict(first["message"], message_id=first["message"]["message_id"] + 100, text="far")
    telegram.push_update({"update_id": first["update_id"] + 10**12, "message": message})
    await eventually(lambda: "echo: far" in texts(telegram, ALICE))
    after = telegram.user_message(ALICE, ALICE, "next")  # the fake numbers it far + 1
    assert after["update_id"] == first["update_id"] + 10**12 + 1
    await eventually(lambda: "echo: next" in texts(telegram, ALICE))

    def offsets() -> list[object]:
        return [c.params.get("offset") for c in telegram.calls_to("getUpdates")]

    # The next getUpdates follows the reply (the poller asks once the batch is handled).
    await eventually(lambda: after["update_id"] + 1 in offsets())
    assert after["update_id"] in offsets()
    assert texts(telegram, ALICE) == ["echo: first", "echo: far", "echo: next"]


async def test_health_says_the_database_is_unreachable_in_words_only(service, caplog) -> None:
    """``/healthz`` is open to anyone: it named the exception's class (found by review on
    2026-12-06); the log has the details."""
    await service.engine.store.db.close()
    report = await service.health()
    assert report["ok"] is False and report["database"] == "unreachable"
    assert "could not reach the database" in caplog.text


def _allow_shell(conn: Any) -> None:
    from engine.store.schema import approval_rules, utcnow

    rule = {"group_name": "default", "tool_pattern": "execute_cmd", "action": "allow"}
    conn.execute(
        sa.insert(approval_rules).values(**rule, priority=1, note="test", created_at=utcnow())
    )


async def test_a_progress_line_refused_leaves_nothing_to_the_next_turn(service, telegram, model):
    """The chat's topic closed for a turn: its progress line was never shown, the forced
    last edit after the answer sent it below the answer, raised, and the next turn's line
    listed this turn's calls (found by review on 2026-12-07)."""
    import json

    from engine.llm.scripted import text, tool_call

    await service.engine.store.db.run(_allow_shell)
    service.engine.policy.invalidate()
    for turn, answer in (("first-turn", "One."), ("second-turn", "Two.")):
        arguments = json.dumps({"command": f"echo {turn}"})
        model.add(tool_call("execute_cmd", arguments, turn), text(answer))
    closed = "Bad Request: TOPIC_CLOSED"
    telegram.fail_next("sendMessage", 3, status=400, description=closed)  # the whole turn
    telegram.user_message(ALICE, ALICE, "first")
    await eventually(lambda: len(telegram.calls_to("sendMessage")) >= 3)

    telegram.user_message(ALICE, ALICE, "second")  # the topic is open again
    await eventually(lambda: "Two." in texts(telegram, ALICE))
    progress = [t for t in texts(telegram, ALICE) if t.startswith("⚙")]
    assert progress and all("first-turn" not in t for t in progress), progress
