"""``OpenCards``: the card a tap names comes from what this process holds open, without a
read; a card it does not hold (closed, or shown by another process) from the store."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

from bot.delivery import CardRow, Refused, RetryLater, Unavailable
from bot.platform.open_cards import (
    NOT_SHOWN,
    QUESTION_NOT_SHOWN,
    REPOST_FIRST_S,
    TAKEN_GRACE_S,
    OpenCards,
    tapped,
)
from bot.platform.tasks import Background, Runtime
from engine.store import InboxError
from tests.engine.hub.conftest import ManualSleep


class Store:
    """The card store's surface ``OpenCards`` uses, counting reads."""

    def __init__(self) -> None:
        self.rows: dict[int, CardRow] = {}
        self.reads = 0

    async def save(self, card: CardRow) -> None:
        self.rows[card.tool_call_id] = card

    async def get(self, tool_call_id: int) -> CardRow | None:
        self.reads += 1
        return self.rows.get(tool_call_id)

    async def open(self, source: str | None = None) -> list[CardRow]:
        self.reads += 1
        return [
            card
            for card in self.rows.values()
            if card.state == "open" and source in (None, card.source)
        ]

    async def close(self, tool_call_id: int, state: str) -> bool:
        card = self.rows.get(tool_call_id)
        if card is None or card.state != "open":
            return False
        self.rows[tool_call_id] = replace(card, state=state)
        return True


class Face:
    def conversation(self, source: str) -> str:
        return source.split(":")[1]

    async def post(self, card: CardRow, attachment: Any) -> str | None:
        return f"m{card.tool_call_id}"

    async def closed(self, card: CardRow, outcome: str, by: str | None, note: str | None) -> None:
        pass


def card(tool_call_id: int, source: str = "chat:1") -> CardRow:
    return CardRow(tool_call_id, "approval", source, "1", None, "Run ls?", None, "open")


async def test_a_card_held_open_here_is_found_without_a_read() -> None:
    store = Store()
    cards = OpenCards(None, store, Face())  # type: ignore[arg-type]
    await cards.show(card(1))
    held = await cards.held(1)
    assert held is not None and held.message_id == "m1" and store.reads == 0


async def test_a_card_not_held_here_is_read_from_the_store() -> None:
    store = Store()
    cards = OpenCards(None, store, Face())  # type: ignore[arg-type]
    await cards.show(card(1))
    await cards.close(card(1), "approve", "resolved")
    closed = await cards.held(1)
    assert closed is not None and closed.state == "resolved" and store.reads == 1
    store.rows[2] = card(2, "chat:2")  # shown by another process of a fleet
    assert await cards.held(2) == card(2, "chat:2") and store.reads == 2
    assert await cards.held(3) is None


def test_a_card_tapped_before_its_message_id_was_recorded_gets_it_from_the_tap() -> None:
    shown = tapped(card(1), "approval", "1", "m7")
    assert shown is not None and shown.message_id == "m7"  # its outcome can be shown on it
    recorded = replace(card(1), message_id="m7")
    assert tapped(recorded, "approval", "1", "m7") == recorded
    assert tapped(recorded, "approval", "1", "m8") is None  # another message: not this card
    assert tapped(card(1), "question", "1", "m7") is None
    assert tapped(None, "approval", "1", "m7") is None


def question(request_id: int, source: str = "chat:1") -> CardRow:
    return CardRow(request_id, "question", source, "1", None, "Which one?", None, "open")


async def test_what_a_message_answers_in_a_conversation() -> None:
    cards = OpenCards(None, Store(), Face())  # type: ignore[arg-type]
    assert cards.answered_by("chat:1") is None  # nothing open: a message is a message
    await cards.show(card(1))
    assert cards.answered_by("chat:1", reply_to="m1") is None  # an approval card: no window
    await cards.show(question(2))
    await cards.show(question(3))
    assert cards.answered_by("chat:1") == ("answer", cards.open_in("chat:1")[2])  # the newest
    answered = cards.answered_by("chat:1", reply_to="m2")
    assert answered is not None and answered[1].tool_call_id == 2  # the one replied to
    assert cards.answered_by("chat:1", is_command=True) is None
    assert cards.answered_by("chat:2") is None  # another conversation's
    replied = cards.question_for("chat:1", reply_to="m2")
    assert replied is not None and replied.tool_call_id == 2
    newest = cards.question_for("chat:1")
    assert newest is not None and newest.tool_call_id == 3
    assert cards.question_for("chat:2") is None


async def test_a_reply_to_a_card_in_its_reject_window_is_the_reason_until_it_closes() -> None:
    cards = OpenCards(None, Store(), Face())  # type: ignore[arg-type]
    await cards.show(card(1))
    cards.rejecting.open(1, None)  # type: ignore[arg-type]
    reason = cards.answered_by("chat:1", reply_to="m1")
    assert reason is not None and reason[0] == "reason" and reason[1].tool_call_id == 1
    assert cards.question_for("chat:1", reply_to="m1") is None  # a reason is no answer
    await cards.close_quietly(reason[1], "resolved")
    assert 1 not in cards.rejecting
    assert cards.answered_by("chat:1", reply_to="m1") is None


class FleetHub:
    """A hub in a fleet, as far as ``OpenCards`` asks."""

    fleet = object()


async def test_in_a_fleet_a_question_shown_by_another_process_is_answered_here() -> None:
    """The process running the turn showed the question; this one took the reply: it reads
    the chat's open cards from the table (it knew only its own, and the answer became a
    new message queued behind the turn waiting for it; found by review)."""
    store = Store()
    elsewhere = OpenCards(None, store, Face())  # type: ignore[arg-type]
    await elsewhere.show(question(2))
    here = OpenCards(FleetHub(), store, Face())  # type: ignore[arg-type]
    found = await here.question_now("chat:1", reply_to="m2")
    assert found is not None and found.tool_call_id == 2
    answered = await here.answered_now("chat:1")
    assert answered is not None and answered[1].tool_call_id == 2
    await elsewhere.close_quietly(question(2), "answered")  # closed there: gone here too
    assert await here.question_now("chat:1") is None
    # One process reads nothing: what it holds is all there is.
    alone = OpenCards(None, store, Face())  # type: ignore[arg-type]
    reads = store.reads
    assert await alone.question_now("chat:1") is None and store.reads == reads


# -- a card the platform could not take ------------------------------------------------------


class AwayFace(Face):
    """A platform answering each post with the next of ``answers`` (an error to raise,
    or a message id), then taking every post."""

    def __init__(self, *answers: Exception | str | None) -> None:
        self.answers = list(answers)
        self.posts = 0

    async def post(self, card: CardRow, attachment: Any) -> str | None:
        self.posts += 1
        if self.answers:
            answer = self.answers.pop(0)
            if isinstance(answer, Exception):
                raise answer
            return answer
        return f"m{card.tool_call_id}"


def away_for(face: Face, hub: Any = None) -> tuple[OpenCards, Store, ManualSleep]:
    store, sleep = Store(), ManualSleep()
    cards = OpenCards(hub, store, face)
    return cards, store, sleep


async def loaded(cards: OpenCards, sleep: ManualSleep) -> Background:
    background = Background()
    await cards.load(Runtime(lambda: 0.0, sleep, background))
    return background


async def test_a_card_the_platform_could_not_take_is_posted_again_until_it_shows() -> None:
    """The platform down (after the sender's own retries): the card stays open and is
    posted again, waiting longer each time, and shows once the platform is back (it was
    closed as expired, never shown, and the turn waited for a decision nobody saw)."""
    face = AwayFace(Unavailable("502 Bad Gateway"), Unavailable("timed out"))
    cards, store, sleep = away_for(face)
    background = await loaded(cards, sleep)
    await cards.show(card(7))
    assert store.rows[7].state == "open" and store.rows[7].message_id is None
    await sleep.release(REPOST_FIRST_S)
    await sleep.release(2 * REPOST_FIRST_S)
    await asyncio.gather(*background.running())
    assert face.posts == 3
    assert store.rows[7].message_id == "m7" and store.rows[7].state == "open"


async def test_a_429_while_posting_a_card_is_waited_out() -> None:
    face = AwayFace(RetryLater(42.0))
    cards, store, sleep = away_for(face)
    background = await loaded(cards, sleep)
    await cards.show(card(7))
    await sleep.release(42.0)
    await asyncio.gather(*background.running())
    assert store.rows[7].message_id == "m7"


async def test_a_card_decided_elsewhere_while_the_platform_was_away_is_not_posted() -> None:
    face = AwayFace(Unavailable("502 Bad Gateway"))
    cards, store, sleep = away_for(face)
    background = await loaded(cards, sleep)
    await cards.show(card(7))
    await cards.close_quietly(card(7), "resolved")  # decided in the inbox meanwhile
    await sleep.release(REPOST_FIRST_S)
    await asyncio.gather(*background.running())
    assert face.posts == 1 and store.rows[7].state == "resolved"


class Hub:
    """The hub's doors a refused card ends its wait through."""

    def __init__(self) -> None:
        self.decided: list[tuple[int, str, str]] = []
        self.answered: list[tuple[int, str]] = []

    async def decide(self, call_id: int, choice: Any, *, decider: Any, note: str, source: Any):
        self.decided.append((call_id, choice.name, note))

    async def answer(self, request_id: int, answer: str) -> None:
        if request_id == 9:
            raise InboxError("decided", "answered in the inbox meanwhile")
        self.answered.append((request_id, answer))


async def test_a_card_the_platform_refuses_is_closed_unseen_and_its_wait_ends() -> None:
    """The turn waited for good for a decision on a card nobody could see (a blocked bot,
    a closed topic; found by review): its call is rejected, its question answered as
    unseen, and the model says so."""
    face = AwayFace(*[Refused("Forbidden: bot was blocked by the user")] * 3)
    hub = Hub()
    cards, store, sleep = away_for(face, hub)
    background = await loaded(cards, sleep)
    await cards.show(card(7))
    await cards.show(replace(card(8), kind="question"))
    await cards.show(replace(card(9), kind="question"))  # answered elsewhere meanwhile
    await asyncio.gather(*background.running())
    assert face.posts == 3 and all(store.rows[n].state == "expired" for n in (7, 8, 9))
    assert hub.decided == [(7, "reject", NOT_SHOWN)]
    assert hub.answered == [(8, QUESTION_NOT_SHOWN)]


class Platform:
    """Posts fail while ``down``; every card posted is kept (what people see)."""

    def __init__(self, down: bool = True) -> None:
        self.down = down
        self.shown: list[int] = []

    def conversation(self, source: str) -> str:
        return source.split(":")[1]

    async def post(self, card: CardRow, attachment: Any) -> str | None:
        if self.down:
            raise Unavailable("502 Bad Gateway")
        self.shown.append(card.tool_call_id)
        return f"m{len(self.shown)}"

    async def closed(self, card: CardRow, outcome: str, by: str | None, note: str | None) -> None:
        pass


async def test_in_a_fleet_a_card_decided_on_another_process_is_not_posted_again() -> None:
    """Process A runs the turn; its card's post failed, so A posts it again later. The
    person decided it meanwhile on process B (the first try had reached the chat, only its
    answer was lost; B took the tap). A posted the decided card again, with live buttons,
    and wrote its row back as 'open' (found by review)."""
    store, sleep, background = Store(), ManualSleep(), Background()
    platform = Platform(down=True)
    a = OpenCards(FleetHub(), store, platform)  # type: ignore[arg-type]
    await a.load(Runtime(lambda: 0.0, sleep, background))
    b = OpenCards(FleetHub(), store, platform)  # type: ignore[arg-type]
    await b.load(Runtime(lambda: 0.0, ManualSleep(), Background()))

    await a.show(card(7))
    platform.down = False
    held = await b.held(7)  # the tap on B, on the message that did show
    shown = tapped(held, "approval", "1", "m0")
    assert shown is not None
    await b.close(shown, "approve", "resolved", by="Alice")

    await sleep.release(REPOST_FIRST_S)
    await asyncio.gather(*background.running())
    assert platform.shown == [], "the decided card was posted again"
    assert store.rows[7].state == "resolved", "the decided card's row was reopened"


async def test_a_message_sent_while_a_question_could_not_be_shown_is_not_its_answer() -> None:
    """The question could not be posted yet (the platform refuses the bot's posts for a
    while; the person's messages still come in). The person, seeing nothing, writes
    'are you still there?': it was taken as the answer to a question they never saw
    (found by review)."""
    store, sleep, background = Store(), ManualSleep(), Background()
    cards = OpenCards(None, store, Platform(down=True))  # type: ignore[arg-type]
    await cards.load(Runtime(lambda: 0.0, sleep, background))
    await cards.show(question(9))
    assert store.rows[9].message_id is None  # not shown: open, waiting to be posted again
    try:
        assert cards.answered_by("chat:1") is None, "an unseen question takes the message"
    finally:
        await background.close()


async def test_a_card_posted_while_the_front_end_closes_leaves_no_task_behind() -> None:
    """The front end closes its background tasks first, then lets the lanes finish what
    they hold: a card whose post failed in that grace got a repost task nobody cancelled
    (it slept, then posted through a closed sender and store; found by review)."""
    store, sleep, background = Store(), ManualSleep(), Background()
    cards = OpenCards(None, store, Platform(down=True))  # type: ignore[arg-type]
    await cards.load(Runtime(lambda: 0.0, sleep, background))
    await background.close()  # Front.close: background first ...
    await cards.show(card(7))  # ... the outgoing lane's card, in its grace
    await asyncio.sleep(0)  # a task spawned after the close is cancelled before it runs
    alive = [task for task in background.running() if not task.done()]
    assert alive == [], "a repost task outlived the closed front end"


async def test_a_card_a_tap_found_taken_closes_once_nothing_else_closed_it() -> None:
    """A tap on a card whose call ended (a /stop committed, then a crash before its card
    was edited): the card closes as expired once the first decision's tap had its time
    (its buttons stayed live forever; found by review). Closed meanwhile, it stays so."""
    store, sleep, background = Store(), ManualSleep(), Background()
    cards = OpenCards(None, store, Face())  # type: ignore[arg-type]
    await cards.load(Runtime(lambda: 0.0, sleep, background))
    for tool_call_id in (7, 8):
        await cards.show(card(tool_call_id))
        cards.taken(card(tool_call_id))
    await cards.close(card(8), "approve", "resolved", by="Alice")  # the double click's first
    await sleep.release(TAKEN_GRACE_S)
    await sleep.release(TAKEN_GRACE_S)
    await asyncio.gather(*background.running())
    assert (store.rows[7].state, store.rows[8].state) == ("expired", "resolved")


class OneProcessHub:
    """A hub of one process, as far as an answer asks: the turn it resumes ends at once."""

    fleet = None

    def __init__(self) -> None:
        self.working: set[str] = set()

    async def answer_refusal(self, tool_call_id: int, decider: object) -> None:
        return None

    async def answer(self, tool_call_id: int, text: str, **_: object) -> None:
        self.working.discard("chat:1")  # the resumed turn answered before the card's edit

    def has_work(self, source: str) -> bool:
        return source in self.working


async def test_typing_starts_after_an_answer_only_while_its_turn_goes_on() -> None:
    """The turn resumed by the answer ended while the card's closing edit was sent:
    "typing…" was started after its end, and renewed until the next turn ended (found by
    review on 2026-12-07)."""
    hub, typing = OneProcessHub(), []
    cards = OpenCards(hub, Store(), Face())  # type: ignore[arg-type]
    await cards.show(question(2))
    assert await cards.answer(question(2), "Rome", by="Ann", goes_on=lambda: typing.append(1))
    assert typing == []
    hub.working.add("chat:1")  # a turn still running: typing shows
    await cards.show(question(3))
    hub.answer = lambda *a, **k: asyncio.sleep(0)  # type: ignore[method-assign]
    assert await cards.answer(question(3), "Paris", by="Ann", goes_on=lambda: typing.append(1))
    assert typing == [1]
