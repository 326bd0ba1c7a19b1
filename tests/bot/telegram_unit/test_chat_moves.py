"""``ChatMoves``: groups that became supergroups, as two processes of a fleet learn them."""

from __future__ import annotations

from bot.telegram.chat_moves import NOT_MOVED_KEPT_S, ChatMoves
from engine.store import Database
from tests.clock import FakeTime

GROUP, SUPERGROUP = -4242, -1_000_000_004_242


async def test_a_move_another_process_records_is_learnt_after_a_while(sqlite_db: Database) -> None:
    """The receiver read the supergroup as no former group's; another process then learnt
    the move from Telegram's 400. Until 2026-12-07 the receiver kept taking the
    supergroup's messages for a conversation of their own (found by review)."""
    clock = FakeTime()
    receiver = ChatMoves(sqlite_db, clock=clock)
    other = ChatMoves(sqlite_db, clock=clock)
    assert await receiver.original(SUPERGROUP) == SUPERGROUP
    assert await receiver.current(GROUP) == GROUP

    assert await other.record(GROUP, SUPERGROUP)

    assert await receiver.original(SUPERGROUP) == SUPERGROUP  # read a moment ago
    await clock.advance(NOT_MOVED_KEPT_S + 1)
    assert await receiver.original(SUPERGROUP) == GROUP
    assert await receiver.current(GROUP) == SUPERGROUP


async def test_ids_that_cannot_be_a_move_are_refused(sqlite_db: Database) -> None:
    moves = ChatMoves(sqlite_db)
    for old, new in ((GROUP, 555), (GROUP, GROUP), (SUPERGROUP, GROUP), (555, SUPERGROUP)):
        assert not await moves.record(old, new)
    assert await moves.current(GROUP) == GROUP
