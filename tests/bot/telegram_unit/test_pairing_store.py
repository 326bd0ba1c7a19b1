"""Telegram's pairing store behind every platform's ``/pair``: the owner who pairs a
Telegram stranger may be another platform's (a Slack or Matrix id is no number)."""

from __future__ import annotations

import time

from bot.platform.access import Access, PairingDesk, pairing_commands
from bot.platform.commands import CommandContext
from bot.platform.pairing import PairingStore as PlatformPairingStore
from bot.telegram.dispatch.access import PairingStore
from bot.telegram.store import TelegramStore
from engine.store import Database


async def test_a_slack_owner_pairs_a_telegram_stranger(sqlite_tg_store: TelegramStore) -> None:
    """It raised ValueError after the code was redeemed: the code was used up, the
    stranger never paired, the owner told "sorry" (found by review)."""
    telegram = Access(PairingStore(sqlite_tg_store), owner="999", clock=time.monotonic)
    offer = await telegram.offer_pairing("555", "555", "Stranger")
    assert offer.to_user is not None
    code = offer.to_user.split("/pair ")[1].strip(".")
    desk = PairingDesk()
    welcomed = []

    async def welcome(paired: object) -> None:
        welcomed.append(paired)

    desk.add(telegram, welcome)
    pair = pairing_commands(desk)[0]
    for by in ("U0OWNER01", "@owner:example.org"):
        context = CommandContext(None, "slack:D0OWNER", code, by, is_owner=True)  # type: ignore[arg-type]
        reply = await pair.handler(context)
        if by == "U0OWNER01":
            assert reply.startswith("Paired Stranger"), reply
        else:
            assert "No pending pairing" in str(reply)  # used once
    assert telegram.is_allowed("555") and len(welcomed) == 1
    assert await sqlite_tg_store.paired_users() == {555}


async def test_a_slack_or_matrix_member_is_unpaired_with_telegram_configured(
    sqlite_db: Database,
) -> None:
    """Telegram's store, first on the desk, raised ValueError on a worded id: the owner was
    told "sorry" and the member stayed paired on their own platform (found by review)."""
    telegram = Access(PairingStore(TelegramStore(sqlite_db)), owner="999", clock=time.monotonic)
    slack = Access(
        PlatformPairingStore(sqlite_db, "slack"), owner="U0OWNER01", clock=time.monotonic
    )
    await slack.store.pair("U0BOB0001", "Bob", "U0OWNER01")
    await slack.load()
    desk = PairingDesk()

    async def welcome(_paired: object) -> None:
        return None

    desk.add(telegram, welcome)  # as serve.py does: Telegram first
    desk.add(slack, welcome)
    unpair = pairing_commands(desk)[1]
    for member in ("U0BOB0001", "@bob:example.org"):
        context = CommandContext(None, "slack:D0OWNER", member, "U0OWNER01", is_owner=True)  # type: ignore[arg-type]
        reply = await unpair.handler(context)
        assert reply in ("Unpaired U0BOB0001.", "@bob:example.org was not paired.")
    assert not slack.is_allowed("U0BOB0001")
