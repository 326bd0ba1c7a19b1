"""Outbound: pacing, 429s, retries, the entity fallback and the outbox — all in fake time."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import sqlalchemy as sa

from bot.delivery import Outbound, Pacing
from bot.delivery.tables import platform_outbox
from bot.telegram.sending.api import BadRequest, Forbidden, NetworkError, RetryAfter, ServerError
from bot.telegram.sending.delivery import TelegramClient, TelegramSender, telegram_pacing
from bot.telegram.store import TelegramStore
from tests.bot.telegram_unit.fakes import FakeBotApi
from tests.clock import FakeTime, settle

PRIVATE = 42
OTHER_PRIVATE = 43
GROUP = -100123

#: No pacing at all, so retry tests see only their own backoff sleeps.
UNPACED = Pacing.unpaced()


def make(
    store: TelegramStore, pacing: Pacing | None = None, *, auto: bool = True
) -> tuple[Outbound, FakeBotApi, FakeTime]:
    time = FakeTime(auto=auto)
    api = FakeBotApi(clock=time)
    out = Outbound(TelegramClient(api), store.outbox, pacing, clock=time, sleep=time.sleep)
    return out, api, time


def sender(out: Outbound) -> TelegramSender:
    """Telegram's sender over ``out`` (its ``send_text`` goes through ``out.send``)."""
    client = out.client
    assert isinstance(client, TelegramClient)
    return TelegramSender(client.api, out)


def send_times(api: FakeBotApi, chat_id: int | None = None) -> list[float]:
    return [c.at for c in api.calls_to("send_message") if chat_id is None or c.args[0] == chat_id]


async def outbox_rows(store: TelegramStore, out: Outbound | None = None) -> list[dict[str, Any]]:
    """The outbox rows, once ``out`` has recorded its deliveries (marks are written soon)."""
    if out is not None:
        await out.flush()

    def read(conn: sa.Connection) -> list[dict[str, Any]]:
        o = platform_outbox
        rows = conn.execute(sa.select(o).order_by(o.c.id))
        return [dict(row._mapping) for row in rows]

    return await store._db.run(read)


# -- pacing ------------------------------------------------------------------------------


async def test_a_quiet_private_chat_gets_its_burst_at_once(sqlite_tg_store: TelegramStore) -> None:
    """A reply of several messages to a chat that was quiet goes out without waiting."""
    out, api, _ = make(sqlite_tg_store)
    for i in range(6):
        await sender(out).send_text(PRIVATE, f"m{i}")
    assert send_times(api) == pytest.approx([0.0, 0.0, 0.0, 0.0, 1.0, 2.0])


async def test_a_group_gets_a_small_burst_then_twenty_a_minute(
    sqlite_tg_store: TelegramStore,
) -> None:
    out, api, _ = make(sqlite_tg_store)
    for i in range(5):
        await sender(out).send_text(GROUP, f"m{i}")
    assert send_times(api) == pytest.approx([0.0, 0.0, 0.0, 3.0, 6.0])


async def test_pacing_comes_from_the_settings() -> None:
    from bot.settings import load_settings

    settings = load_settings(
        _env_file=None,
        telegram_private_burst=2,
        telegram_private_per_second=0.5,
        telegram_group_per_minute=6,
        telegram_global_per_second=10,
    )
    policy = telegram_pacing(settings).policy
    assert (policy.private.burst, policy.private.per_second) == (2, 0.5)
    assert policy.group.per_second == pytest.approx(0.1)
    assert (policy.overall.limit, policy.overall.seconds) == (10, 1.0)
    assert policy.group_cap is not None and policy.group_cap.limit == 6
    assert telegram_pacing(load_settings(_env_file=None)) == Pacing()


@pytest.mark.parametrize(
    ("variable", "raw"),
    [
        ("TELEGRAM_PRIVATE_PER_SECOND", "0"),
        ("TELEGRAM_PRIVATE_PER_SECOND", "-1"),
        ("TELEGRAM_GROUP_PER_MINUTE", "soon"),
        ("TELEGRAM_GLOBAL_PER_SECOND", "nan"),
        ("TELEGRAM_GLOBAL_PER_SECOND", "inf"),
        ("TELEGRAM_PRIVATE_BURST", "0"),
        ("TELEGRAM_GROUP_BURST", "2.5"),
    ],
)
def test_a_bad_pacing_setting_names_its_variable(
    variable: str, raw: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from bot.settings import load_settings
    from engine.config import ConfigError

    monkeypatch.setenv(variable, raw)
    with pytest.raises(ConfigError, match=variable):
        load_settings(_env_file=None)


async def test_custom_rates_are_honoured(sqlite_tg_store: TelegramStore) -> None:
    from bot.delivery.pacing import PacingPolicy, Rate

    policy = PacingPolicy(private=Rate(1, 4.0), group=Rate(1, 0.2))
    out, api, _ = make(sqlite_tg_store, Pacing(policy=policy))
    await sender(out).send_text(PRIVATE, "a")
    await sender(out).send_text(PRIVATE, "b")
    await sender(out).send_text(GROUP, "c")
    await sender(out).send_text(GROUP, "d")
    assert send_times(api, PRIVATE) == pytest.approx([0.0, 0.25])
    assert send_times(api, GROUP)[1] - send_times(api, GROUP)[0] == pytest.approx(5.0)


async def test_global_rate_is_thirty_per_second(sqlite_tg_store: TelegramStore) -> None:
    out, api, _ = make(sqlite_tg_store)
    for chat in range(1, 91):  # 90 different private chats: only the global limit applies
        await sender(out).send_text(chat, "hi")
    times = send_times(api)
    assert times[-1] == pytest.approx(2.02)  # 30 at once, 30 a second later, 30 more
    for i, start in enumerate(times):  # never more than 30 in any one-second window
        assert sum(1 for t in times[i:] if t < start + 1.0) <= 30


async def test_global_rate_is_configurable(sqlite_tg_store: TelegramStore) -> None:
    from bot.delivery.pacing import Cap, PacingPolicy

    out, api, _ = make(sqlite_tg_store, Pacing(policy=PacingPolicy(overall=Cap(1, 0.25))))
    for chat in range(1, 6):
        await sender(out).send_text(chat, "hi")
    assert send_times(api) == pytest.approx([0.0, 0.26, 0.52, 0.78, 1.04])


async def test_two_chats_do_not_wait_for_each_other(sqlite_tg_store: TelegramStore) -> None:
    out, api, _ = make(sqlite_tg_store)
    for i in range(4):
        await sender(out).send_text(GROUP, f"g{i}")  # the group's burst is spent: it waits 3 s
    await sender(out).send_text(PRIVATE, "p1")  # not here: at once after the group's last
    assert send_times(api, GROUP)[-1] == pytest.approx(3.0)
    assert send_times(api, PRIVATE) == pytest.approx([3.0])


async def test_edits_are_paced_apart_and_the_latest_text_wins(
    sqlite_tg_store: TelegramStore,
) -> None:
    from bot.delivery.pacing import PacingPolicy, Rate

    policy = PacingPolicy(private=Rate(1, 1.0), edits=Rate(1, 1.0))
    out, _, time = make(sqlite_tg_store, Pacing(policy=policy), auto=False)
    await sender(out).send_text(PRIVATE, "progress")
    edited: list[str] = []

    def edit(text: str):
        async def op() -> None:
            edited.append(text)

        return op

    first = asyncio.create_task(out.edit(str(PRIVATE), "1", edit("step 1")))  # the edit bucket: now
    await settle()
    blocked = asyncio.create_task(sender(out).send_text(PRIVATE, "second message"))  # waits 1 s
    await settle()
    stale = asyncio.create_task(out.edit(str(PRIVATE), "1", edit("step 2")))
    latest = asyncio.create_task(out.edit(str(PRIVATE), "1", edit("step 3")))
    await settle()
    await time.advance(2.0)
    await asyncio.gather(first, blocked, stale, latest)
    assert first.result() is True and stale.result() is False and latest.result() is True
    assert edited == ["step 1", "step 3"]


async def test_concurrent_chats_interleave(sqlite_tg_store: TelegramStore) -> None:
    """While one chat waits for its bucket, another chat's message goes right away."""
    from bot.delivery.pacing import PacingPolicy, Rate

    out, api, time = make(
        sqlite_tg_store, Pacing(policy=PacingPolicy(private=Rate(1, 1.0))), auto=False
    )
    await sender(out).send_text(PRIVATE, "a1")  # t=0, no sleep needed
    a2 = asyncio.create_task(sender(out).send_text(PRIVATE, "a2"))  # must wait until t=1
    await settle()
    b1 = asyncio.create_task(sender(out).send_text(OTHER_PRIVATE, "b1"))
    await settle()
    assert b1.done() and not a2.done()
    assert [c.args[1] for c in api.calls_to("send_message")] == ["a1", "b1"]
    await time.advance(1.0)
    assert a2.done()
    assert send_times(api) == pytest.approx([0.0, 0.0, 1.0])


async def test_429s_from_several_chats_at_once_pause_everything(
    sqlite_tg_store: TelegramStore,
) -> None:
    out, api, time = make(sqlite_tg_store, auto=False)
    api.fail("send_message", RetryAfter(5), RetryAfter(5), RetryAfter(5))
    flooded = [asyncio.create_task(sender(out).send_text(chat, "x")) for chat in (1, 2, 3)]
    await settle()
    assert out.stats.retry_after == 3 and out.stats.global_pauses == 1
    after = asyncio.create_task(sender(out).send_text(4, "after the flood"))  # got no 429 itself
    await settle()
    await time.advance(4.9)
    assert not after.done()
    await time.advance(0.1)
    assert after.done()
    await time.advance(1.0)  # after a pause, one at a time: the others within 3/30 s
    await asyncio.gather(*flooded)
    assert send_times(api, 4) == pytest.approx([5.0])


# -- 429 -----------------------------------------------------------------------------------


async def test_retry_after_waits_exactly_the_given_seconds(sqlite_tg_store: TelegramStore) -> None:
    out, api, time = make(sqlite_tg_store)
    api.fail("send_message", RetryAfter(7))
    message = await sender(out).send_text(PRIVATE, "hi")
    assert message["message_id"] > 0
    assert send_times(api) == pytest.approx([0.0, 7.0])
    assert time.sleeps == pytest.approx([7.0])
    assert out.stats.retry_after == 1
    assert out.stats.sent == 1


async def test_retry_after_is_capped(sqlite_tg_store: TelegramStore) -> None:
    out, api, time = make(sqlite_tg_store, Pacing(max_retry_after_s=20.0))
    api.fail("send_message", RetryAfter(600))
    await sender(out).send_text(PRIVATE, "hi")
    assert time.sleeps == pytest.approx([20.0])
    assert send_times(api) == pytest.approx([0.0, 20.0])


async def test_retry_after_default_cap_is_sixty(sqlite_tg_store: TelegramStore) -> None:
    out, api, time = make(sqlite_tg_store)
    api.fail("send_message", RetryAfter(3600))
    await sender(out).send_text(PRIVATE, "hi")
    assert time.sleeps == pytest.approx([60.0])


async def test_retry_after_stalls_only_that_chat(sqlite_tg_store: TelegramStore) -> None:
    out, api, time = make(sqlite_tg_store, auto=False)
    api.fail("send_message", RetryAfter(7))
    a = asyncio.create_task(sender(out).send_text(PRIVATE, "a"))  # 429 at t=0, then waits 7 s
    await settle()
    b = asyncio.create_task(sender(out).send_text(OTHER_PRIVATE, "b"))
    await settle()
    assert b.done() and not a.done()  # another chat goes at once
    await time.advance(6.9)
    assert not a.done()
    await time.advance(0.1)
    assert a.done()
    times = {c.args[1]: c.at for c in api.calls_to("send_message")[1:]}
    assert times == pytest.approx({"b": 0.0, "a": 7.0})
    assert out.stats.global_pauses == 0


async def test_retry_after_then_next_message_is_paced_from_the_retry(
    sqlite_tg_store: TelegramStore,
) -> None:
    out, api, _ = make(sqlite_tg_store)
    api.fail("send_message", RetryAfter(7))
    await sender(out).send_text(PRIVATE, "a")
    await sender(out).send_text(PRIVATE, "b")
    assert send_times(api) == pytest.approx([0.0, 7.0, 8.0])


# -- 5xx / network -------------------------------------------------------------------------


@pytest.mark.parametrize("error", [ServerError("Bad Gateway"), NetworkError("timed out")])
async def test_transient_errors_back_off_then_succeed(
    sqlite_tg_store: TelegramStore, error: Exception
) -> None:
    out, api, time = make(sqlite_tg_store, UNPACED)
    api.fail("send_message", *[type(error)(str(error)) for _ in range(5)])  # 6th attempt works
    message = await sender(out).send_text(PRIVATE, "hi")
    assert message["text"] == "hi"
    assert len(api.calls_to("send_message")) == 6
    assert time.sleeps == [0.5, 1.0, 2.0, 4.0, 8.0]
    assert out.stats.retried_errors == 5
    assert out.stats.failed == 0


@pytest.mark.parametrize("error_type", [ServerError, NetworkError])
async def test_transient_errors_raise_after_max_attempts(
    sqlite_tg_store: TelegramStore, error_type: type[Exception]
) -> None:
    out, api, time = make(sqlite_tg_store, UNPACED)
    api.fail("send_message", *[error_type(f"boom {i}") for i in range(10)])
    with pytest.raises(error_type, match="boom 5"):
        await sender(out).send_text(PRIVATE, "hi")
    assert len(api.calls_to("send_message")) == 6  # Pacing.max_attempts
    assert time.sleeps == [0.5, 1.0, 2.0, 4.0, 8.0]  # no sleep after the last attempt
    assert out.stats.failed == 1
    assert out.stats.sent == 0


async def test_backoff_repeats_its_last_step(sqlite_tg_store: TelegramStore) -> None:
    pacing = Pacing.unpaced(max_attempts=4, backoff_s=(1.0, 3.0))
    out, api, time = make(sqlite_tg_store, pacing)
    api.fail("send_message", *[ServerError("x") for _ in range(4)])
    with pytest.raises(ServerError):
        await sender(out).send_text(PRIVATE, "hi")
    assert len(api.calls_to("send_message")) == 4
    assert time.sleeps == [1.0, 3.0, 3.0]


async def test_a_retry_takes_a_token_of_its_own(sqlite_tg_store: TelegramStore) -> None:
    """A retry is still a call to the chat: after a 0.5 s backoff it waits for the bucket."""
    from bot.delivery.pacing import PacingPolicy, Rate

    out, api, time = make(sqlite_tg_store, Pacing(policy=PacingPolicy(private=Rate(1, 1.0))))
    api.fail("send_message", ServerError("x"))
    await sender(out).send_text(PRIVATE, "hi")
    assert send_times(api) == pytest.approx([0.0, 1.0])
    assert time.sleeps == pytest.approx([0.5, 0.5])


async def test_other_errors_are_not_retried(sqlite_tg_store: TelegramStore) -> None:
    out, api, _ = make(sqlite_tg_store, UNPACED)
    api.fail("send_message", Forbidden("Forbidden: bot was blocked by the user"))
    with pytest.raises(Forbidden):
        await sender(out).send_text(PRIVATE, "hi")
    assert len(api.calls_to("send_message")) == 1


async def test_call_passes_through_any_operation(sqlite_tg_store: TelegramStore) -> None:
    out, api, _ = make(sqlite_tg_store, UNPACED)
    api.fail("edit_message_text", NetworkError("reset"))
    await out.call(str(PRIVATE), lambda: api.edit_message_text(PRIVATE, 7, "new"))
    assert [c.method for c in api.calls] == ["edit_message_text", "edit_message_text"]


# -- entities ------------------------------------------------------------------------------

ENTITIES = [{"type": "bold", "offset": 0, "length": 2}]


async def test_rejected_entities_fall_back_to_plain_text(sqlite_tg_store: TelegramStore) -> None:
    out, api, _ = make(sqlite_tg_store, UNPACED)
    api.fail("send_message", BadRequest("Bad Request: can't parse entities: unsupported"))
    message = await sender(out).send_text(
        PRIVATE, "hi there", entities=ENTITIES, reply_markup={"k": 1}, thread_id=9, reply_to=5
    )
    assert message["text"] == "hi there"
    first, second = api.calls_to("send_message")
    assert first.kwargs["entities"] == ENTITIES
    assert second.kwargs["entities"] is None
    assert second.args == (PRIVATE, "hi there")
    # everything but the entities is kept
    for key in ("reply_markup", "message_thread_id", "reply_to_message_id"):
        assert second.kwargs[key] == first.kwargs[key]


async def test_entity_fallback_matches_other_wordings(sqlite_tg_store: TelegramStore) -> None:
    out, api, _ = make(sqlite_tg_store, UNPACED)
    api.fail("send_message", BadRequest("Bad Request: ENTITY_BOUNDS_INVALID"))
    await sender(out).send_text(PRIVATE, "hi", entities=ENTITIES)
    assert [c.kwargs["entities"] for c in api.calls_to("send_message")] == [ENTITIES, None]


async def test_bad_request_not_about_entities_propagates(sqlite_tg_store: TelegramStore) -> None:
    out, api, _ = make(sqlite_tg_store, UNPACED)
    api.fail("send_message", BadRequest("Bad Request: chat not found"))
    with pytest.raises(BadRequest, match="chat not found"):
        await sender(out).send_text(PRIVATE, "hi", entities=ENTITIES)
    assert len(api.calls_to("send_message")) == 1


async def test_entity_error_without_entities_propagates(sqlite_tg_store: TelegramStore) -> None:
    out, api, _ = make(sqlite_tg_store, UNPACED)
    api.fail("send_message", BadRequest("Bad Request: can't parse entities"))
    with pytest.raises(BadRequest):
        await sender(out).send_text(PRIVATE, "hi")
    assert len(api.calls_to("send_message")) == 1


async def test_empty_entities_are_sent_as_none(sqlite_tg_store: TelegramStore) -> None:
    out, api, _ = make(sqlite_tg_store, UNPACED)
    await sender(out).send_text(PRIVATE, "hi", entities=[])
    assert api.calls_to("send_message")[0].kwargs["entities"] is None


# -- outbox --------------------------------------------------------------------------------

PAYLOAD = {"text": "final answer", "entities": ENTITIES, "thread_id": 3}


async def test_deliver_twice_with_the_same_key_sends_once(sqlite_tg_store: TelegramStore) -> None:
    out, api, _ = make(sqlite_tg_store, UNPACED)
    first = await out.deliver(str(PRIVATE), "reply:1", PAYLOAD)
    second = await out.deliver(str(PRIVATE), "reply:1", {"text": "something else"})
    assert isinstance(first, str)
    assert second is None
    sends = api.calls_to("send_message")
    assert len(sends) == 1
    assert sends[0].args == (PRIVATE, "final answer")
    assert sends[0].kwargs["entities"] == ENTITIES
    assert sends[0].kwargs["message_thread_id"] == 3
    [row] = await outbox_rows(sqlite_tg_store, out)
    assert (row["status"], row["message_id"], row["attempts"]) == ("sent", first, 1)
    assert row["payload"] == PAYLOAD
    assert row["sent_at"] is not None


async def test_different_keys_each_deliver(sqlite_tg_store: TelegramStore) -> None:
    out, api, _ = make(sqlite_tg_store, UNPACED)
    ids = [await out.deliver(str(PRIVATE), f"reply:{i}", {"text": f"t{i}"}) for i in range(3)]
    assert len(set(ids)) == 3
    assert len(api.calls_to("send_message")) == 3
    assert [r["status"] for r in await outbox_rows(sqlite_tg_store, out)] == ["sent"] * 3


async def test_interrupted_delivery_is_resent_once_at_start(
    sqlite_tg_store: TelegramStore,
) -> None:
    # The previous process recorded the message, then died before sending it.
    await sqlite_tg_store.outbox.enqueue(str(PRIVATE), "reply:7", {"text": "lost?"})
    await sqlite_tg_store.outbox.enqueue(str(GROUP), "reply:8", {"text": "also lost?"})
    out, api, _ = make(sqlite_tg_store, UNPACED)
    assert await out.resend_pending() == 2
    sends = api.calls_to("send_message")
    assert [(c.args[0], c.args[1]) for c in sends] == [(PRIVATE, "lost?"), (GROUP, "also lost?")]
    rows = await outbox_rows(sqlite_tg_store, out)
    assert [r["status"] for r in rows] == ["sent", "sent"]
    # each row carries the id Telegram gave the message that delivered it
    assert [r["message_id"] for r in rows] == ["101", "102"]
    assert await sqlite_tg_store.outbox.pending() == []
    # a second start, or a late deliver() of the same key, sends nothing more
    again, api2, _ = make(sqlite_tg_store, UNPACED)
    assert await again.resend_pending() == 0
    assert await again.deliver(str(PRIVATE), "reply:7", {"text": "lost?"}) is None
    assert api2.calls == []
    assert len(api.calls_to("send_message")) == 2


async def test_resend_pending_survives_a_transient_error(sqlite_tg_store: TelegramStore) -> None:
    await sqlite_tg_store.outbox.enqueue(str(PRIVATE), "reply:1", {"text": "x"})
    out, api, time = make(sqlite_tg_store, UNPACED)
    api.fail("send_message", NetworkError("reset"))
    assert await out.resend_pending() == 1
    [row] = await outbox_rows(sqlite_tg_store, out)
    assert row["status"] == "sent"
    assert row["message_id"] == "101"
    assert time.sleeps == [0.5]


async def test_forbidden_delivery_is_marked_failed_not_retried(
    sqlite_tg_store: TelegramStore,
) -> None:
    out, api, _ = make(sqlite_tg_store, UNPACED)
    api.fail("send_message", Forbidden("Forbidden: bot was blocked by the user"))
    assert await out.deliver(str(PRIVATE), "reply:1", {"text": "x"}) is None
    assert len(api.calls_to("send_message")) == 1
    [row] = await outbox_rows(sqlite_tg_store, out)
    assert row["status"] == "failed"
    assert "blocked" in row["error"]
    assert row["message_id"] is None
    # not pending, so a restart does not try it again
    assert await sqlite_tg_store.outbox.pending() == []
    assert await out.resend_pending() == 0
    assert len(api.calls_to("send_message")) == 1


async def test_bad_request_delivery_is_marked_failed(sqlite_tg_store: TelegramStore) -> None:
    out, api, _ = make(sqlite_tg_store, UNPACED)
    api.fail("send_message", BadRequest("Bad Request: chat not found"))
    assert await out.deliver(str(PRIVATE), "reply:1", {"text": "x"}) is None
    [row] = await outbox_rows(sqlite_tg_store, out)
    assert row["status"] == "failed"
    assert "chat not found" in row["error"]


async def test_delivery_with_rejected_entities_is_sent_plain(
    sqlite_tg_store: TelegramStore,
) -> None:
    out, api, _ = make(sqlite_tg_store, UNPACED)
    api.fail("send_message", BadRequest("Bad Request: can't parse entities"))
    message_id = await out.deliver(str(PRIVATE), "reply:1", PAYLOAD)
    assert message_id == "101"
    [row] = await outbox_rows(sqlite_tg_store, out)
    assert (row["status"], row["message_id"]) == ("sent", "101")


async def test_a_429_on_one_persons_taps_pauses_their_chat_only(
    sqlite_tg_store: TelegramStore,
) -> None:
    """A tap's answer went out with no chat, so its 429 paused every chat of the bot for
    up to a minute (found by review): it pauses the chat of the tapped button."""
    out, api, time = make(sqlite_tg_store, auto=False)
    api.fail("answer_callback_query", RetryAfter(30))
    tap = asyncio.create_task(sender(out).answer_callback("cb-1", None, PRIVATE))
    await settle()
    reply = asyncio.create_task(sender(out).send_text(OTHER_PRIVATE, "hello bob"))
    await settle()
    try:
        assert send_times(api, OTHER_PRIVATE), "another chat waited out one person's tap 429"
    finally:
        await time.advance(31)
        await asyncio.gather(tap, reply)


async def test_a_tap_in_a_chat_paused_by_a_429_on_its_replies_is_answered_at_once(
    sqlite_tg_store: TelegramStore,
) -> None:
    """The tap's answer (an approval waits for it) must not wait out its chat's pause:
    naming the chat made it (found by review of that change)."""
    out, api, time = make(sqlite_tg_store, auto=False)
    api.fail("send_message", RetryAfter(30))
    reply = asyncio.create_task(sender(out).send_text(PRIVATE, "a long reply"))
    await settle()
    tap = asyncio.create_task(sender(out).answer_callback("cb-1", None, PRIVATE))
    await settle()
    try:
        assert api.calls_to("answer_callback_query")
    finally:
        await time.advance(31)
        await asyncio.gather(tap, reply)
