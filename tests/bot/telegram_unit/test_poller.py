"""Poller: durable-before-confirm ordering, dedupe, replay, backoff — in fake time."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest
import sqlalchemy as sa

from bot.telegram.inbound.poller import Poller
from bot.telegram.sending.api import ALLOWED_UPDATES, NetworkError, RetryAfter, ServerError
from bot.telegram.store import TelegramStore
from tests.bot.telegram_unit.fakes import FakeBotApi, RecordingSink, RecordingStore
from tests.clock import FakeTime


def upd(update_id: int, text: str | None = None) -> dict[str, Any]:
    return {
        "update_id": update_id,
        "message": {
            "message_id": update_id * 10,
            "chat": {"id": 42, "type": "private"},
            "from": {"id": 42, "is_bot": False, "first_name": "Ann"},
            "text": text or f"u{update_id}",
        },
    }


class Rig:
    def __init__(self, store: TelegramStore, script: list[Any], **kwargs: Any) -> None:
        self.time = FakeTime()
        self.api = FakeBotApi(clock=self.time, updates_script=list(script))
        self.store = RecordingStore(store, self.api.log)
        self.sink = RecordingSink(self.api.log)
        self.poller = Poller(
            self.api,
            self.store,  # type: ignore[arg-type]
            self.sink,
            clock=self.time,
            sleep=self.time.sleep,
            **kwargs,
        )

    async def run_until_drained(self) -> None:
        """Run the poller until the fake has served every scripted batch, then stop it."""
        task = asyncio.create_task(self.poller.run())
        drained = asyncio.create_task(self.api.drained.wait())
        done, _ = await asyncio.wait({task, drained}, timeout=10, return_when="FIRST_COMPLETED")
        if task in done:  # the loop ended on its own: surface why
            drained.cancel()
            task.result()
            raise AssertionError("the poll loop returned")
        assert drained in done, "the poller never drained the script"
        assert not task.done()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    def offsets(self) -> list[int | None]:
        return [c.args[0] for c in self.api.calls_to("get_updates")]


async def test_batches_are_stored_before_the_offset_confirms_them(
    sqlite_tg_store: TelegramStore,
) -> None:
    rig = Rig(sqlite_tg_store, [[upd(1), upd(2)], [upd(3)]])
    await rig.run_until_drained()
    assert rig.api.log == [
        ("delete_webhook",),
        ("get_updates", None),
        ("submit", 1),
        ("submit", 2),
        ("stored", [1, 2]),
        ("get_updates", 3),
        ("submit", 3),
        ("stored", [3]),
        ("get_updates", 4),
    ]
    assert [u["update_id"] for u in await sqlite_tg_store.unhandled()] == [1, 2, 3]
    assert await sqlite_tg_store.last_update_id() == 3
    call = rig.api.calls_to("get_updates")[0]
    assert call.kwargs["timeout"] == 30
    assert tuple(call.kwargs["allowed_updates"]) == ALLOWED_UPDATES


async def test_updates_are_durable_when_get_updates_asks_for_the_next_offset(
    sqlite_tg_store: TelegramStore,
) -> None:
    """Check the store itself at the moment the confirming call is made."""
    seen_at_confirm: list[list[int]] = []

    rig = Rig(sqlite_tg_store, [[upd(5), upd(6)]])
    original = rig.api.get_updates

    async def get_updates(offset: int | None, **kwargs: Any) -> list[dict[str, Any]]:
        if offset is not None:
            stored = await sqlite_tg_store.unhandled()
            seen_at_confirm.append([u["update_id"] for u in stored])
        return await original(offset, **kwargs)

    rig.api.get_updates = get_updates  # type: ignore[method-assign]
    await rig.run_until_drained()
    assert rig.offsets() == [None, 7]
    assert seen_at_confirm == [[5, 6]]


async def test_offset_is_max_plus_one_even_for_unsorted_batches(
    sqlite_tg_store: TelegramStore,
) -> None:
    rig = Rig(sqlite_tg_store, [[upd(12), upd(10), upd(11)]])
    await rig.run_until_drained()
    assert rig.offsets() == [None, 13]
    assert rig.sink.ids == [10, 11, 12]  # submitted in update_id order


async def test_a_redelivered_update_is_not_submitted_twice(
    sqlite_tg_store: TelegramStore,
) -> None:
    # Telegram re-sends 2 (say the confirming call was lost), then 3 twice over.
    rig = Rig(sqlite_tg_store, [[upd(1), upd(2)], [upd(2), upd(3)], [upd(3)], [upd(4), upd(4)]])
    await rig.run_until_drained()
    assert rig.sink.ids == [1, 2, 3, 4]
    assert rig.offsets() == [None, 3, 4, 4, 5]


async def test_updates_stored_by_an_earlier_process_are_not_submitted_again(
    sqlite_tg_store: TelegramStore,
) -> None:
    await sqlite_tg_store.record_updates([upd(1), upd(2)])
    await sqlite_tg_store.mark_handled(1)
    await sqlite_tg_store.mark_handled(2)
    rig = Rig(sqlite_tg_store, [[upd(2), upd(3)]])
    await rig.run_until_drained()
    assert rig.sink.ids == [3]


async def test_a_batch_of_only_known_updates_still_moves_the_offset(
    sqlite_tg_store: TelegramStore,
) -> None:
    await sqlite_tg_store.record_updates([upd(8)])
    await sqlite_tg_store.mark_handled(8)
    rig = Rig(sqlite_tg_store, [[upd(8)], [upd(9)]])
    await rig.run_until_drained()
    assert rig.offsets() == [9, 9, 10]
    assert rig.sink.ids == [9]


async def test_entries_without_an_update_id_are_skipped(sqlite_tg_store: TelegramStore) -> None:
    rig = Rig(sqlite_tg_store, [[{"message": {}}, upd(4), {"update_id": "5"}]])
    await rig.run_until_drained()
    assert rig.sink.ids == [4]
    assert rig.offsets() == [None, 5]


async def test_stored_but_unhandled_updates_are_replayed_at_start(
    sqlite_tg_store: TelegramStore,
) -> None:
    await sqlite_tg_store.record_updates([upd(1), upd(2), upd(3), upd(4)])
    await sqlite_tg_store.mark_handled(1)
    await sqlite_tg_store.mark_handled(3)
    rig = Rig(sqlite_tg_store, [[upd(5)]])
    await rig.run_until_drained()
    assert rig.sink.ids == [2, 4, 5]
    assert rig.sink.submitted[0] == upd(2)  # the stored payload, intact
    # replayed before polling starts, and polling resumes after the newest stored update
    assert rig.api.log[:4] == [
        ("delete_webhook",),
        ("submit", 2),
        ("submit", 4),
        ("get_updates", 5),
    ]
    assert rig.offsets() == [5, 6]


async def test_nothing_stored_starts_without_an_offset(sqlite_tg_store: TelegramStore) -> None:
    rig = Rig(sqlite_tg_store, [])
    await rig.run_until_drained()
    assert rig.offsets() == [None]
    assert rig.sink.ids == []
    assert rig.api.calls[0].method == "delete_webhook"


async def test_empty_batches_keep_the_offset(sqlite_tg_store: TelegramStore) -> None:
    rig = Rig(sqlite_tg_store, [[upd(1)], [], []])
    await rig.run_until_drained()
    assert rig.offsets() == [None, 2, 2, 2]
    assert rig.time.sleeps == []  # an empty long poll is not a failure


@pytest.mark.parametrize(
    "error",
    [KeyError("from"), NetworkError("connection reset"), ServerError("Bad Gateway"), ValueError()],
    ids=["KeyError", "NetworkError", "ServerError", "ValueError"],
)
async def test_an_exception_does_not_end_the_loop(
    sqlite_tg_store: TelegramStore, error: Exception
) -> None:
    rig = Rig(sqlite_tg_store, [[upd(1)], error, [upd(2)]])
    await rig.run_until_drained()
    assert rig.sink.ids == [1, 2]
    assert rig.offsets() == [None, 2, 2, 3]  # the failed call's offset is asked again
    assert rig.time.sleeps == [0.5]


async def test_failures_back_off_exponentially_and_reset_on_success(
    sqlite_tg_store: TelegramStore,
) -> None:
    failures: list[Any] = [NetworkError(f"n{i}") for i in range(8)]
    rig = Rig(sqlite_tg_store, [*failures, [upd(1)], KeyError("x"), KeyError("y")])
    await rig.run_until_drained()
    assert rig.time.sleeps == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 16.0, 16.0, 0.5, 1.0]
    assert rig.sink.ids == [1]


async def test_backoff_is_capped_by_max_backoff(sqlite_tg_store: TelegramStore) -> None:
    rig = Rig(sqlite_tg_store, [NetworkError("n")] * 6, max_backoff_s=3.0)
    await rig.run_until_drained()
    assert rig.time.sleeps == [0.5, 1.0, 2.0, 3.0, 3.0, 3.0]


async def test_retry_after_waits_the_given_seconds(sqlite_tg_store: TelegramStore) -> None:
    rig = Rig(sqlite_tg_store, [RetryAfter(7), [upd(1)], RetryAfter(2.5)])
    await rig.run_until_drained()
    assert rig.time.sleeps == [7, 2.5]
    assert rig.sink.ids == [1]
    assert [c.at for c in rig.api.calls_to("get_updates")] == [0.0, 7.0, 7.0, 9.5]


async def test_retry_after_does_not_count_as_a_failure(sqlite_tg_store: TelegramStore) -> None:
    rig = Rig(sqlite_tg_store, [NetworkError("a"), RetryAfter(1), NetworkError("b")])
    await rig.run_until_drained()
    # the 429 neither resets nor grows the failure count
    assert rig.time.sleeps == [0.5, 1, 1.0]


async def test_age_tracks_the_last_success(sqlite_tg_store: TelegramStore) -> None:
    rig = Rig(sqlite_tg_store, [NetworkError("a"), [upd(1)], RetryAfter(10), NetworkError("b")])
    assert rig.poller.age() is None
    await rig.run_until_drained()
    # the only success was at t=0.5 (after one 0.5 s backoff); then 10 s + 0.5 s of failures
    assert rig.poller.last_success == pytest.approx(0.5)
    assert rig.time.now == pytest.approx(11.0)
    assert rig.poller.age() == pytest.approx(10.5)
    rig.time.now += 4
    assert rig.poller.age() == pytest.approx(14.5)


async def test_age_is_none_before_any_success(sqlite_tg_store: TelegramStore) -> None:
    rig = Rig(sqlite_tg_store, [NetworkError("a"), NetworkError("b")])
    await rig.run_until_drained()
    assert rig.poller.age() is None


async def test_an_empty_batch_counts_as_success(sqlite_tg_store: TelegramStore) -> None:
    rig = Rig(sqlite_tg_store, [RetryAfter(3), []])
    await rig.run_until_drained()
    assert rig.poller.age() == pytest.approx(0.0)
    assert rig.poller.last_success == pytest.approx(3.0)


async def test_timeout_is_passed_through(sqlite_tg_store: TelegramStore) -> None:
    rig = Rig(sqlite_tg_store, [], timeout_s=50)
    await rig.run_until_drained()
    assert rig.api.calls_to("get_updates")[0].kwargs["timeout"] == 50


async def test_cancellation_ends_the_loop(sqlite_tg_store: TelegramStore) -> None:
    rig = Rig(sqlite_tg_store, [])
    task = asyncio.create_task(rig.poller.run())
    await rig.api.drained.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


class ChainSink:
    """Each update's handling hops through a few tasks (as adapter → hub → turn → reply do)."""

    def __init__(self, log: list[Any], hops: int = 4, wait: asyncio.Event | None = None) -> None:
        self.log, self.hops, self.wait = log, hops, wait
        self.tasks: list[asyncio.Task[None]] = []

    def submit(self, update: dict[str, Any]) -> None:
        self.log.append(("submit", update["update_id"]))
        self.tasks.append(asyncio.create_task(self._handle(update["update_id"], self.hops)))

    async def _handle(self, update_id: int, hops: int) -> None:
        if hops:
            await asyncio.create_task(self._handle(update_id, hops - 1))
            return
        if self.wait is not None:
            await self.wait.wait()  # I/O: a model call, a send
        self.log.append(("replied", update_id))


def chain_rig(store: TelegramStore, script: list[Any], **sink: Any) -> tuple[Rig, ChainSink]:
    rig = Rig(store, script)
    rig.poller.sink = rig.sink = ChainSink(rig.api.log, **sink)  # type: ignore[assignment]
    return rig, rig.sink  # type: ignore[return-value]


async def test_a_batch_is_handled_before_the_next_get_updates_is_asked(
    sqlite_tg_store: TelegramStore,
) -> None:
    rig, _ = chain_rig(sqlite_tg_store, [[upd(1), upd(2)], [upd(3)]])
    await rig.run_until_drained()
    log = [entry for entry in rig.api.log if entry[0] != "stored"]
    assert log[log.index(("get_updates", None)) + 1 :] == [
        ("submit", 1),
        ("submit", 2),
        ("replied", 1),
        ("replied", 2),
        ("get_updates", 3),
        ("submit", 3),
        ("replied", 3),
        ("get_updates", 4),
    ]


async def test_a_big_batch_is_handed_over_in_groups_each_handled_before_the_next(
    sqlite_tg_store: TelegramStore,
) -> None:
    rig, _ = chain_rig(sqlite_tg_store, [[upd(n) for n in range(1, 26)]])
    await rig.run_until_drained()
    order = [entry for entry in rig.api.log if entry[0] in ("submit", "replied")]
    assert order.index(("replied", 10)) < order.index(("submit", 11))
    assert order.index(("replied", 20)) < order.index(("submit", 21))
    assert order.index(("submit", 25)) < order.index(("replied", 21))  # a group runs together
    assert sorted(n for kind, n in order if kind == "replied") == list(range(1, 26))


async def test_a_handler_waiting_on_io_does_not_hold_back_polling(
    sqlite_tg_store: TelegramStore,
) -> None:
    io = asyncio.Event()
    rig, sink = chain_rig(sqlite_tg_store, [[upd(1)], [upd(2)]], wait=io)
    await rig.run_until_drained()
    assert rig.offsets() == [None, 2, 3]  # both batches fetched while 1 still waits
    assert ("replied", 1) not in rig.api.log
    io.set()
    await asyncio.gather(*sink.tasks)
    assert rig.api.log[-2:] == [("replied", 1), ("replied", 2)]


async def test_a_handlers_first_commit_carries_the_update_record(
    sqlite_tg_store: TelegramStore, tmp_path: Any
) -> None:
    """On SQLite the update row rides with what its handler writes: one commit, not two."""
    rig = Rig(sqlite_tg_store, [[upd(1)]])
    db = sqlite_tg_store._db
    commits = [0]
    sa.event.listen(db._engine, "commit", lambda _c: commits.__setitem__(0, commits[0] + 1))

    class MarkingSink:
        def submit(self, update: dict[str, Any]) -> None:
            rig.sink.submitted.append(update)
            asyncio.get_running_loop().create_task(
                sqlite_tg_store.mark_handled(update["update_id"])
            )

    polled = rig.api.get_updates

    async def get_updates(offset: int | None, **kwargs: Any) -> list[dict[str, Any]]:
        if offset is None:
            commits[0] = 0  # from here: the start-up's reads are behind us
        return await polled(offset, **kwargs)

    rig.api.get_updates = get_updates  # type: ignore[method-assign]
    rig.poller.sink = MarkingSink()  # type: ignore[assignment]
    await rig.run_until_drained()
    assert commits == [1]
    assert await sqlite_tg_store.unhandled() == []  # stored and marked handled together
    assert await sqlite_tg_store.last_update_id() == 1


async def test_a_batch_that_failed_to_store_is_polled_again_stored_and_not_handed_twice(
    sqlite_tg_store: TelegramStore,
) -> None:
    # The offset does not move past a batch it could not store, so Telegram sends 1 again.
    rig = Rig(sqlite_tg_store, [[upd(1)], [upd(1)]])
    accept = rig.store.accept_polled
    attempts: list[int] = []

    async def flaky_accept(updates: Any) -> Any:
        attempts.append(len(updates))
        durable = await accept(updates)
        if len(attempts) > 1:
            return durable

        async def lost() -> None:
            raise OSError("disk went away")

        return lost

    rig.store.accept_polled = flaky_accept  # type: ignore[method-assign]
    await rig.run_until_drained()
    assert attempts == [1, 1]
    assert rig.offsets() == [None, None, 2]
    assert rig.sink.ids == [1]  # handed over once, stored by the second attempt
    assert 1.0 in rig.time.sleeps
    assert await sqlite_tg_store.last_update_id() == 1
