"""Which conversation a request continues and what of it is new, on a SQLite file and on
PostgreSQL, with two maps over one database as two processes of a fleet have."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.completions.conversations import (
    ConversationMap,
    StaleConversation,
    chain,
    digest,
)
from bot.schema import LAYERS
from engine.store import open_database
from tests.pg import BACKENDS, database_url


def dialog(*texts: str) -> list[str]:
    """Digests of alternating user and assistant messages, the user's first."""
    return [digest("user" if i % 2 == 0 else "assistant", t) for i, t in enumerate(texts)]


@pytest.fixture(params=BACKENDS)
async def maps(request, tmp_path: Path):
    async with database_url(request.param, tmp_path, migrated=True) as url:
        first, second = await open_database(url, LAYERS), await open_database(url, LAYERS)
        yield ConversationMap(first), ConversationMap(second)
        await first.close()
        await second.close()


async def test_a_named_conversation_takes_only_what_it_does_not_hold(maps):
    here, _ = maps
    said = dialog("one", "answer one", "two")
    conversation, taken = await here.find("main", "alice", chain(said[:1]))
    assert taken == 0
    conversation = await here.hold(conversation, said)
    # the whole history again, one new message: only that one is new
    more = dialog("one", "answer one", "two", "answer two", "three")
    again, taken = await here.find("main", "alice", chain(more))
    assert (again.id, taken) == (conversation.id, 3)
    # only the new message: nothing of it is held
    _, taken = await here.find("main", "alice", chain(dialog("three")))
    assert taken == 0
    # the first message said again is a new message, not a request sent again
    _, taken = await here.find("main", "alice", chain(dialog("one")))
    assert taken == 0
    # another name, another agent: other conversations
    bob, _ = await here.find("main", "bob", chain(said[:1]))
    other_agent, _ = await here.find("helper", "alice", chain(said[:1]))
    assert len({conversation.id, bob.id, other_agent.id}) == 3


async def test_a_history_that_went_another_way_is_matched_as_far_as_it_goes(maps):
    here, _ = maps
    conversation, _ = await here.find("main", "carol", chain(dialog("a")))
    held = dialog(*(f"message {n}" for n in range(200)))
    await here.hold(conversation, held)
    edited = dialog(*(f"message {n}" for n in range(120)), "an edit", "x", "the last")
    fresh = ConversationMap(here._db)
    _, taken = await fresh.find("main", "carol", chain(edited))
    assert taken == 120


async def test_an_unnamed_history_finds_the_conversation_it_continues(maps):
    here, elsewhere = maps
    first, taken = await here.find("main", None, chain(dialog("hi")))
    assert taken == 0
    await here.hold(first, dialog("hi", "hello"))
    # another process, the whole history and a new message
    found, taken = await elsewhere.find("main", None, chain(dialog("hi", "hello", "how are you")))
    assert (found.id, taken) == (first.id, 2)
    # a first message is always a conversation of its own
    other, _ = await elsewhere.find("main", None, chain(dialog("hi")))
    assert other.id != first.id
    # a history no conversation ends with starts one
    branch, taken = await elsewhere.find("main", None, chain(dialog("hi", "hey!", "so")))
    assert branch.id not in (first.id, other.id) and taken == 0


async def test_a_request_sent_again_is_recognised(maps):
    here, _ = maps
    conversation, _ = await here.find("main", None, chain(dialog("q1")))
    conversation = await here.hold(conversation, dialog("q1", "a1", "q2"))
    request = chain(dialog("q1", "a1", "q2"))
    again, taken = await ConversationMap(here._db).find("main", None, request)
    assert (again.id, taken) == (conversation.id, 3)  # its answer is not held yet
    await here.hold(conversation, [digest("assistant", "a2")])
    again, taken = await ConversationMap(here._db).find("main", None, request)
    assert (again.id, taken) == (conversation.id, 3)  # held: read back


async def test_what_one_process_knows_is_checked_where_the_other_wrote(maps):
    here, elsewhere = maps
    mine, _ = await here.find("main", "dave", chain(dialog("x")))
    theirs, _ = await elsewhere.find("main", "dave", chain(dialog("x")))
    assert mine.id == theirs.id
    await elsewhere.hold(theirs, dialog("x"))
    with pytest.raises(StaleConversation):  # here still knows it empty
        await here.hold(mine, dialog("y"))
    now, taken = await here.find("main", "dave", chain(dialog("x", "answer", "z")))
    assert (now.length, taken) == (1, 1)
