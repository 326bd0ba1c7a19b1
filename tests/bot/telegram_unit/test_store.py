"""TelegramStore (and its outbox, ``tg_store.outbox``) on SQLite and (when configured)
PostgreSQL."""

from __future__ import annotations

import asyncio
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from bot.delivery import CardRow
from bot.delivery.tables import platform_outbox
from bot.telegram.store import (
    CODE_ALPHABET,
    CODE_LENGTH,
    MAX_PENDING_CODES,
    TelegramStore,
)
from tests.clock import FakeClock

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
DAY = timedelta(hours=24)


def upd(update_id: Any, text: str = "hi") -> dict[str, Any]:
    return {"update_id": update_id, "message": {"message_id": 1, "text": text}}


async def outbox_row(store: TelegramStore, outbox_id: int) -> dict[str, Any]:
    def read(conn: sa.Connection) -> dict[str, Any]:
        row = conn.execute(sa.select(platform_outbox).where(platform_outbox.c.id == outbox_id))
        return dict(row.one()._mapping)

    return await store._db.run(read)


# -- pairing codes ---------------------------------------------------------------------------


def test_code_alphabet_has_no_ambiguous_characters() -> None:
    assert CODE_LENGTH == 6
    assert not set("01OIL") & set(CODE_ALPHABET)
    assert len(set(CODE_ALPHABET)) == len(CODE_ALPHABET) == 31


async def test_code_format(tg_store: TelegramStore) -> None:
    clock = FakeClock(T0)
    codes = []
    for user in range(1, 10):  # redeem as we go so the pending limit never bites
        row, new = await tg_store.issue_code(user, user * 10, f"user{user}", now=clock())
        assert row is not None and new
        codes.append(row.code)
        assert await tg_store.redeem(row.code, now=clock()) is not None
    assert len(set(codes)) == len(codes)
    pattern = re.compile(rf"[{re.escape(CODE_ALPHABET)}]{{{CODE_LENGTH}}}")
    for code in codes:
        assert pattern.fullmatch(code), code


async def test_issued_row_fields(tg_store: TelegramStore) -> None:
    row, new = await tg_store.issue_code(7, 70, "Ann", now=T0)
    assert new and row is not None
    assert (row.user_id, row.chat_id, row.name) == (7, 70, "Ann")
    assert row.created_at == T0
    assert row.expires_at == T0 + DAY


async def test_a_users_pending_code_is_reused(tg_store: TelegramStore) -> None:
    clock = FakeClock(T0)
    first, new1 = await tg_store.issue_code(7, 70, "Ann", now=clock())
    clock.advance(timedelta(hours=5))
    again, new2 = await tg_store.issue_code(7, 70, "Ann", now=clock())
    assert new1 and not new2
    assert first is not None and again is not None
    assert again.code == first.code
    assert again.expires_at == T0 + DAY  # reuse does not extend the code's life
    assert again.created_at == T0


async def test_at_most_three_people_wait(tg_store: TelegramStore) -> None:
    assert MAX_PENDING_CODES == 3
    codes = {}
    for user in (1, 2, 3):
        row, new = await tg_store.issue_code(user, user, f"u{user}", now=T0)
        assert row is not None and new
        codes[user] = row.code
    assert await tg_store.issue_code(4, 4, "u4", now=T0) == (None, False)
    # someone already waiting still gets their code back
    row, new = await tg_store.issue_code(2, 2, "u2", now=T0)
    assert row is not None and row.code == codes[2] and not new
    # a redeemed code frees a place
    assert await tg_store.redeem(codes[1], now=T0) is not None
    row, new = await tg_store.issue_code(4, 4, "u4", now=T0)
    assert row is not None and new
    assert await tg_store.issue_code(5, 5, "u5", now=T0) == (None, False)


async def test_concurrent_strangers_cannot_exceed_the_pending_limit(
    tg_store: TelegramStore, request: pytest.FixtureRequest
) -> None:
    results = await asyncio.gather(
        *[tg_store.issue_code(user, user, f"u{user}", now=T0) for user in range(10, 20)]
    )
    issued = [row for row, _ in results if row is not None]
    assert len(issued) == MAX_PENDING_CODES


async def test_codes_expire_after_24_hours(tg_store: TelegramStore) -> None:
    clock = FakeClock(T0)
    row, _ = await tg_store.issue_code(7, 70, "Ann", now=clock())
    assert row is not None
    clock.advance(DAY)  # expires_at > now is false at exactly 24 h
    assert await tg_store.redeem(row.code, now=clock()) is None
    # an expired code is not reused: the user gets a new one
    fresh, new = await tg_store.issue_code(7, 70, "Ann", now=clock())
    assert fresh is not None and new and fresh.code != row.code
    assert fresh.expires_at == clock() + DAY


async def test_code_is_valid_just_before_expiry(tg_store: TelegramStore) -> None:
    row, _ = await tg_store.issue_code(7, 70, "Ann", now=T0)
    assert row is not None
    redeemed = await tg_store.redeem(row.code, now=T0 + DAY - timedelta(seconds=1))
    assert redeemed is not None and redeemed.user_id == 7


async def test_expired_codes_do_not_count_towards_the_limit(tg_store: TelegramStore) -> None:
    for user in (1, 2, 3):
        await tg_store.issue_code(user, user, "", now=T0)
    assert (await tg_store.issue_code(4, 4, "", now=T0 + DAY - timedelta(minutes=1)))[0] is None
    row, new = await tg_store.issue_code(4, 4, "", now=T0 + DAY)
    assert row is not None and new


async def test_redeem_once(tg_store: TelegramStore) -> None:
    row, _ = await tg_store.issue_code(7, 70, "Ann", now=T0)
    assert row is not None
    used = await tg_store.redeem(row.code, now=T0 + timedelta(minutes=1))
    assert used is not None
    assert (used.code, used.user_id, used.chat_id, used.name) == (row.code, 7, 70, "Ann")
    assert await tg_store.redeem(row.code, now=T0 + timedelta(minutes=2)) is None
    # the redeemed user asking again gets a new code, not the used one
    again, new = await tg_store.issue_code(7, 70, "Ann", now=T0 + timedelta(minutes=3))
    assert again is not None and new and again.code != row.code


async def test_redeem_normalises_what_was_typed(tg_store: TelegramStore) -> None:
    row, _ = await tg_store.issue_code(7, 70, "Ann", now=T0)
    assert row is not None
    assert await tg_store.redeem(f"  {row.code.lower()}\n", now=T0) is not None


async def test_redeem_unknown_code(tg_store: TelegramStore) -> None:
    assert await tg_store.redeem("ZZZZZZ", now=T0) is None
    assert await tg_store.redeem("", now=T0) is None


# -- paired users ----------------------------------------------------------------------------


async def test_pair_and_unpair(tg_store: TelegramStore) -> None:
    assert await tg_store.paired_users() == set()
    await tg_store.pair(7, "Ann", None)
    await tg_store.pair(8, "Bob", 7)
    await tg_store.pair(7, "Ann again", 8)  # pairing twice is harmless
    assert await tg_store.paired_users() == {7, 8}
    assert await tg_store.unpair(7) is True
    assert await tg_store.unpair(7) is False
    assert await tg_store.unpair(999) is False
    assert await tg_store.paired_users() == {8}


async def test_big_telegram_ids(tg_store: TelegramStore) -> None:
    big = 7_000_000_000  # user ids exceed 32 bits
    await tg_store.pair(big, "Big", None)
    assert await tg_store.paired_users() == {big}
    row, _ = await tg_store.issue_code(big, -1001234567890, "Big", now=T0)
    assert row is not None
    redeemed = await tg_store.redeem(row.code, now=T0)
    assert redeemed is not None and redeemed.chat_id == -1001234567890


# -- cards -----------------------------------------------------------------------------------


def card(tool_call_id: int, **changes: Any) -> CardRow:
    """A Telegram card as the platform layer keeps it (entities in ``extra``)."""
    values: dict[str, Any] = {
        "tool_call_id": tool_call_id,
        "kind": "approval",
        "source": "telegram:42",
        "conversation": "42",
        "message_id": str(500 + tool_call_id),
        "text": f"run tool {tool_call_id}?",
        "extra": [{"type": "code", "offset": 0, "length": 3}],
        "state": "open",
    }
    values.update(changes)
    return CardRow(**values)


async def test_card_round_trip_and_lookup(tg_store: TelegramStore) -> None:
    await tg_store.cards.save(card(1))
    assert await tg_store.cards.get(1) == card(1)
    assert await tg_store.cards.at("42", "501") == card(1)
    assert await tg_store.cards.get(2) is None
    assert await tg_store.cards.at("42", "999") is None


async def test_save_card_updates_an_existing_card(tg_store: TelegramStore) -> None:
    await tg_store.cards.save(card(1, message_id=None, extra=None))
    assert (await tg_store.cards.get(1)) == card(1, message_id=None, extra=None)
    await tg_store.cards.save(card(1, text="edited"))
    assert await tg_store.cards.get(1) == card(1, text="edited")


async def test_close_card_once(tg_store: TelegramStore) -> None:
    await tg_store.cards.save(card(1))
    assert await tg_store.cards.close(1, "approved") is True
    assert await tg_store.cards.close(1, "denied") is False  # someone else closed it first
    closed = await tg_store.cards.get(1)
    assert closed is not None and closed.state == "approved"
    assert await tg_store.cards.close(99, "approved") is False


async def test_open_cards(tg_store: TelegramStore) -> None:
    await tg_store.cards.save(card(3))
    await tg_store.cards.save(card(1))
    await tg_store.cards.save(card(2, source="telegram:7"))
    await tg_store.cards.close(3, "expired")
    assert [c.tool_call_id for c in await tg_store.cards.open()] == [1, 2]
    assert [c.tool_call_id for c in await tg_store.cards.open("telegram:42")] == [1]
    assert await tg_store.cards.open("nobody") == []


# -- outbox ----------------------------------------------------------------------------------


async def test_enqueue_dedupes_by_key(tg_store: TelegramStore) -> None:
    outbox = tg_store.outbox
    assert not await outbox.has_key("reply:1")
    row = await outbox.enqueue("42", "reply:1", {"text": "hello", "entities": []})
    assert row is not None
    assert (row.conversation, row.dedupe_key, row.status, row.attempts, row.message_id) == (
        "42",
        "reply:1",
        "pending",
        0,
        None,
    )
    assert row.payload == {"text": "hello", "entities": []}
    assert await outbox.enqueue("42", "reply:1", {"text": "other"}) is None
    assert await outbox.enqueue("43", "reply:1", {"text": "other chat"}) is None
    assert await outbox.has_key("reply:1")
    assert await outbox.pending() == [row]


async def test_concurrent_enqueue_of_one_key_records_it_once(
    tg_store: TelegramStore, request: pytest.FixtureRequest
) -> None:
    results = await asyncio.gather(
        *[tg_store.outbox.enqueue("42", "reply:1", {"text": "x"}) for _ in range(5)],
        return_exceptions=True,
    )
    assert not [r for r in results if isinstance(r, BaseException)]
    assert sum(1 for r in results if r is not None) == 1
    assert len(await tg_store.outbox.pending()) == 1


async def test_outbox_pending_to_sent(tg_store: TelegramStore) -> None:
    outbox = tg_store.outbox
    a = await outbox.enqueue("42", "a", {"text": "a"})
    b = await outbox.enqueue("-100", "b", {"text": "b"})
    assert a is not None and b is not None
    assert [r.id for r in await outbox.pending()] == [a.id, b.id]
    await outbox.mark_sent(a.id, "9001")
    [pending] = await outbox.pending()
    assert pending.id == b.id
    sent = await outbox_row(tg_store, a.id)
    assert (sent["status"], sent["message_id"], sent["attempts"]) == ("sent", "9001", 1)
    assert sent["sent_at"] is not None and sent["error"] is None
    assert await outbox.has_key("a")  # still deduped after sending
    assert await outbox.enqueue("42", "a", {"text": "a"}) is None


async def test_outbox_pending_to_failed(tg_store: TelegramStore) -> None:
    row = await tg_store.outbox.enqueue("42", "x", {"text": "x"})
    assert row is not None
    await tg_store.outbox.mark_failed(row.id, "Forbidden: " + "e" * 5000)
    assert await tg_store.outbox.pending() == []
    failed = await outbox_row(tg_store, row.id)
    assert failed["status"] == "failed"
    assert failed["attempts"] == 1
    assert failed["sent_at"] is None and failed["message_id"] is None
    assert failed["error"].startswith("Forbidden: ")
    assert len(failed["error"]) == 2000  # truncated


async def test_mark_sent_without_message_id(tg_store: TelegramStore) -> None:
    row = await tg_store.outbox.enqueue("42", "x", {"text": "x"})
    assert row is not None
    await tg_store.outbox.mark_sent(row.id, None)
    sent = await outbox_row(tg_store, row.id)
    assert sent["status"] == "sent" and sent["message_id"] is None


# -- updates ---------------------------------------------------------------------------------


async def test_record_updates_dedupes_within_a_batch(tg_store: TelegramStore) -> None:
    fresh = await tg_store.record_updates([upd(3), upd(1), upd(3, "dup"), upd(2)])
    assert [u["update_id"] for u in fresh] == [1, 2, 3]
    assert fresh[2] == upd(3)  # the first copy wins
    assert [u["update_id"] for u in await tg_store.unhandled()] == [1, 2, 3]


async def test_record_updates_dedupes_across_batches(tg_store: TelegramStore) -> None:
    assert [u["update_id"] for u in await tg_store.record_updates([upd(1), upd(2)])] == [1, 2]
    assert [u["update_id"] for u in await tg_store.record_updates([upd(2), upd(3)])] == [3]
    assert await tg_store.record_updates([upd(1), upd(2), upd(3)]) == []
    assert await tg_store.last_update_id() == 3


async def test_record_updates_ignores_entries_without_an_integer_id(
    tg_store: TelegramStore,
) -> None:
    batch = [{"message": {}}, upd("5"), upd(None), upd(5.0), upd(4)]
    fresh = await tg_store.record_updates(batch)
    assert fresh == [upd(4)]
    assert await tg_store.record_updates([{"message": {}}, upd("7")]) == []
    assert await tg_store.record_updates([]) == []
    assert await tg_store.unhandled() == [upd(4)]


async def test_unhandled_and_mark_handled(tg_store: TelegramStore) -> None:
    assert await tg_store.last_update_id() is None
    assert await tg_store.unhandled() == []
    await tg_store.record_updates([upd(10), upd(11), upd(12)])
    await tg_store.mark_handled(11)
    await tg_store.mark_handled(11)  # idempotent
    await tg_store.mark_handled(99)  # unknown: no error
    assert await tg_store.unhandled() == [upd(10), upd(12)]
    await tg_store.mark_handled(10)
    await tg_store.mark_handled(12)
    assert await tg_store.unhandled() == []
    assert await tg_store.last_update_id() == 12  # handled updates still fix the offset


async def test_update_payload_round_trips(tg_store: TelegramStore) -> None:
    update = {
        "update_id": 2_000_000_001,
        "message": {
            "message_id": 5,
            "from": {"id": 7_000_000_000, "first_name": "Zoë"},
            "chat": {"id": -1001234567890, "type": "supergroup"},
            "text": "héllo 👋",
            "entities": [{"type": "bold", "offset": 0, "length": 5}],
        },
    }
    assert await tg_store.record_updates([update]) == [update]
    assert await tg_store.unhandled() == [update]
    assert await tg_store.last_update_id() == 2_000_000_001
