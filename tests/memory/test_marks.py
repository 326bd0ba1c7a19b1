"""The marks the deriver and the embedder share (``memory/marks.py``): a batch moves its
key's mark only from where it was read, failures count on the mark, and a batch failed
``max_failures`` times is passed over."""

from __future__ import annotations

from engine.store import Store
from memory.marks import Mark, Marks
from memory.tables import memory_embed_marks

MARKS = Marks(memory_embed_marks, "model", "last_document_id")


async def test_a_first_read_starts_at_zero_and_a_move_is_a_compare_and_set(store: Store) -> None:
    db = store.db
    assert await db.run(MARKS.read, "m") == Mark(0, 0)
    assert await db.run(MARKS.move, "m", 0, 10)
    assert not await db.run(MARKS.move, "m", 0, 12)  # another process stored it first
    assert await db.run(MARKS.read, "m") == Mark(10, 0)
    assert await db.run(MARKS.read, "other") == Mark(0, 0)  # keys apart


async def test_failures_count_until_the_batch_is_passed_over(store: Store) -> None:
    db = store.db
    await db.run(MARKS.read, "m")
    assert not await db.run(MARKS.fail, "m", 0, 5, 3)
    assert not await db.run(MARKS.fail, "m", 0, 5, 3)
    assert await db.run(MARKS.read, "m") == Mark(0, 2)
    assert await db.run(MARKS.fail, "m", 0, 5, 3)  # the third: passed over
    assert await db.run(MARKS.read, "m") == Mark(5, 0)
    assert not await db.run(MARKS.fail, "m", 0, 5, 3)  # read before the move: nothing


async def test_a_successful_batch_clears_the_failures(store: Store) -> None:
    db = store.db
    await db.run(MARKS.read, "m")
    await db.run(MARKS.fail, "m", 0, 5, 3)
    assert await db.run(MARKS.move, "m", 0, 5)
    assert await db.run(MARKS.read, "m") == Mark(5, 0)
