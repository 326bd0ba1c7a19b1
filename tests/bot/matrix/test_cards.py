"""Matrix cards: one posted again after an outage is the same transaction, so a
homeserver that took the first PUT (its answer lost on the way back) shows it once."""

from __future__ import annotations

import asyncio
from typing import Any

from nio.responses import RoomSendResponse

from bot.delivery import CardRow, Pacing, Unavailable
from bot.delivery.outbound import Outbound
from bot.matrix.cards import MatrixFace
from bot.matrix.decisions import Decisions
from bot.matrix.incoming import Incoming, source_of
from bot.matrix.sending import MatrixClient, MatrixSender, Rooms
from bot.platform.open_cards import REPOST_FIRST_S, OpenCards
from bot.platform.tasks import Background, Runtime
from tests.bot.platform.test_open_cards import Store
from tests.engine.hub.conftest import ManualSleep

ROOM = "!room:example.org"


class Homeserver:
    """``room_send`` as Synapse does it: one event per transaction id. The first
    ``lost`` PUTs are taken but their answers never come back (a proxy timing out)."""

    access_token = "token"  # signed in

    def __init__(self, lost: int) -> None:
        self.events: dict[str, dict[str, Any]] = {}
        self.lost = lost

    async def room_send(self, room: str, kind: str, content: dict, tx_id: str) -> Any:
        self.events.setdefault(tx_id, content)  # the same transaction: the same event
        if self.lost > 0:
            self.lost -= 1
            raise TimeoutError("the answer never came")
        return RoomSendResponse(f"$event{len(self.events)}", room)


async def test_a_card_posted_again_is_not_a_second_event() -> None:
    """Each post had a transaction id of its own: the room showed the card twice (found by
    review)."""
    homeserver = Homeserver(lost=6)  # every one of the sender's tries: the card waits
    client = MatrixClient(homeserver, Rooms())  # type: ignore[arg-type]
    outbound = Outbound(client, None, Pacing.unpaced(backoff_s=(0.0,)))  # type: ignore[arg-type]
    sender = MatrixSender(client, outbound)
    store, sleep, background = Store(), ManualSleep(), Background()
    cards = OpenCards(None, store, MatrixFace(sender))  # type: ignore[arg-type]
    await cards.load(Runtime(lambda: 0.0, sleep, background))
    source = source_of(ROOM)
    card = CardRow(7, "approval", source, ROOM, None, "Run ls?", None, "open")

    await cards.show(card)
    assert len(homeserver.events) == 1  # the card reached the room; its answer did not
    await sleep.release(REPOST_FIRST_S)
    await asyncio.gather(*background.running())

    assert store.rows[7].message_id is not None
    assert len(homeserver.events) == 1, "the room shows the card twice"


class _Away:
    """The delivery layer, past its retries: the homeserver still answers 503."""

    async def call(self, *args: Any, **kwargs: Any) -> Any:
        raise Unavailable("HTTP 503")


class _SenderAway:
    outbound = _Away()


async def test_a_reaction_that_cannot_be_checked_now_still_decides() -> None:
    """A 429 or 5xx while asking whether the ✅ was taken back read as "redacted": the card
    kept waiting though its person had decided (found by review)."""
    unused: Any = None
    decisions = Decisions(unused, unused, unused, unused, _SenderAway(), unused)  # type: ignore[arg-type]
    reaction = Incoming(
        "reaction", "!room:example.org", "$r", "@alice:example.org", "✅", None, "$c"
    )
    assert await decisions._still_there(reaction)
