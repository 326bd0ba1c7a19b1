"""Access control with opaque user ids: allowlist, owner, pairing codes."""

from __future__ import annotations

import asyncio

import pytest

from bot.platform.access import BUSY, WELCOME, Access, PairingDesk, pairing_commands, unlinked
from bot.platform.commands import CommandContext
from bot.platform.protocols import PairingCode
from engine.store import notifier_for
from tests.bot.platform.conftest import stop_watching, until
from tests.pg import postgres_url


class Store:
    """An ``AccessStore`` in memory: codes by user, at most ``room`` people waiting."""

    def __init__(self, room: int = 3) -> None:
        self.paired: dict[str, str | None] = {}
        self.codes: dict[str, PairingCode] = {}
        self.room = room

    async def paired_users(self) -> set[str]:
        return set(self.paired)

    async def pair(self, user_id: str, name: str, paired_by: str | None) -> None:
        self.paired[user_id] = paired_by

    async def unpair(self, user_id: str) -> bool:
        return self.paired.pop(user_id, "gone") != "gone"

    async def issue_code(self, user_id: str, chat: str, name: str):
        for code in self.codes.values():
            if code.user_id == user_id:
                return code, False
        if len(self.codes) >= self.room:
            return None, True
        code = PairingCode(f"C{len(self.codes)}", user_id, chat, name)
        self.codes[code.code] = code
        return code, True

    async def redeem(self, code: str) -> PairingCode | None:
        return self.codes.pop(code.strip().upper(), None)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def access(store: Store | None = None, clock: Clock | None = None, **kwargs) -> Access:
    return Access(store or Store(), clock=clock or Clock(), **kwargs)


def test_who_is_allowed() -> None:
    a = access(allowed=["1", "2"], owner="9")
    a.paired.add("5")
    assert [a.is_allowed(u) for u in ("1", "9", "5", "3", None)] == [True] * 3 + [False] * 2


def test_a_commands_context_tells_the_configured_from_the_paired() -> None:
    a = access(allowed=["1"], owner="9")
    a.paired.add("5")
    hub = object()
    contexts = [a.command_context(hub, "s", "", user) for user in (9, "1", "5", None)]  # type: ignore[arg-type]
    assert [(c.user_id, c.is_owner, c.is_configured) for c in contexts] == [
        ("9", True, True),
        ("1", False, True),
        ("5", False, False),
        (None, False, False),
    ]


def test_a_numeric_id_is_the_same_person_as_its_decimal_spelling() -> None:
    a = access(allowed=[1, "2"], owner=9)
    a.paired.add("5")
    assert [a.is_allowed(u) for u in (1, "1", 2, 9, "9", 5, 3, -1)] == [True] * 6 + [False] * 2
    assert a.is_owner(9) and a.is_owner("9") and not a.is_owner(1) and not a.is_owner(None)
    decider = a.decider(9)
    assert decider.user_id == "9" and decider.is_owner and decider.is_allowed


def test_the_owner_decides_as_owner_and_a_single_allowed_user_stands_in() -> None:
    assert access(allowed=["1"], owner="9").decider("9").is_owner
    single = access(allowed=["1"])
    assert single.decider("1").is_owner and not single.is_owner("1")  # pairing stays the owner's
    several = access(allowed=["1", "2"])
    assert several.approving_owner is None and not several.decider("1").is_owner
    assert several.decider("2").is_allowed and not several.decider("3").is_allowed
    assert access().decider(None).user_id is None


async def test_a_stranger_gets_a_code_the_owner_is_told_and_reminders_are_rate_limited() -> None:
    clock = Clock()
    a = access(clock=clock, owner="9", reminder_s=600)
    first = await a.offer_pairing("5", "chat5", "Bob")
    assert first.to_user is not None and "C0" in first.to_user and "/pair C0" in first.to_user
    assert first.to_owner == "Bob (id 5) asks to talk to me. Approve with /pair C0"
    clock.now = 10
    assert await a.offer_pairing("5", "chat5", "Bob") == type(first)()  # nothing, within 10 min
    clock.now = 700
    again = await a.offer_pairing("5", "chat5", "Bob")
    assert again.to_user == first.to_user and again.to_owner is None  # reminded, owner not again


async def test_when_too_many_wait_the_stranger_is_told_to_try_later() -> None:
    a = access(Store(room=0))
    assert (await a.offer_pairing("5", "c", "Bob")).to_user == BUSY


async def test_pair_and_unpair_commands() -> None:
    store = Store()
    a = access(store, owner="9")
    await a.offer_pairing("5", "chat5", "Bob")
    welcomed: list[PairingCode] = []

    async def welcome(code: PairingCode) -> None:
        welcomed.append(code)

    desk = PairingDesk()
    desk.add(a, welcome)
    pair, unpair = pairing_commands(desk)
    assert pair.owner_only and unpair.owner_only

    def run(argument: str) -> CommandContext:
        return CommandContext(None, "s", argument, "9", True)  # type: ignore[arg-type]

    assert await pair.handler(run("c0")) == "Paired Bob (id 5)."
    assert welcomed[0].chat == "chat5" and store.paired == {"5": "9"} and a.is_allowed("5")
    assert "No pending pairing" in str(await pair.handler(run("c0")))  # used once
    for junk in (
        "",
        "x",
        "²",
        "1" * 20,
        "99999999999999999999",
        "u0bob",
        "@bob",
        "@b:" + "x" * 260,
    ):
        assert await unpair.handler(run(junk)) == "Usage: /unpair <user_id>"
    for worded in ("U0BOB00001", "W0BOB00001", "@bob:example.org", "@bob.b=1:[::1]:8448"):
        assert await unpair.handler(run(worded)) == f"{worded} was not paired."
    assert await unpair.handler(run(" 5 ")) == "Unpaired 5."
    assert not a.is_allowed("5")
    assert await unpair.handler(run("5")) == "5 was not paired."
    assert WELCOME.startswith("👋")


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
async def test_an_unpaired_user_is_refused_by_every_process_of_a_fleet(backend: str) -> None:
    """Two processes over one database: the /unpair taken by one reaches the other, which
    let the user in for as long as it ran (found by review); a /pair the same."""
    url = postgres_url() if backend == "postgresql" else "sqlite:///unused.db"
    if url is None:
        pytest.skip("CHATHUB_TEST_POSTGRES_URL is not set")
    store = Store()  # the fleet's one database
    store.paired["5"] = "9"
    notifiers = [notifier_for(url, "p1"), notifier_for(url, "p2")]
    if backend == "sqlite":  # one process's notices stand in for the database's
        notifiers[1] = notifiers[0]
    desks, accesses, watches = [], [], []
    try:
        for notifier in dict.fromkeys(notifiers):
            await notifier.start()
        for notifier in notifiers:
            a = access(store, owner="9")
            await a.load()
            desk = PairingDesk(notifier)
            desk.add(a, _no_welcome)
            desks.append(desk)
            accesses.append(a)
            watches.append(asyncio.create_task(desk.watch()))
        await asyncio.sleep(0.2)  # both listen
        first, second = accesses
        assert second.is_allowed("5")

        assert await desks[0].unpair("5")

        await until(lambda: not second.is_allowed("5"))
        assert not first.is_allowed("5")
        offer = await first.offer_pairing("6", "chat6", "Carol")
        assert offer.to_user is not None
        assert await desks[0].pair("C0", "9") is not None
        await until(lambda: second.is_allowed("6"))
    finally:
        await stop_watching(watches, notifiers)


async def _no_welcome(_code: PairingCode) -> None:
    return None


def test_a_strangers_name_is_one_line_that_makes_no_link() -> None:
    """'](' was broken up; a name over several lines could still hold a reference
    definition ("[x]: https://…" starts a line) and make a link of it (found by review)."""
    assert unlinked("[Support](https://evil.example)") == "[Support]\u200b(https://evil.example)"
    folded = unlinked("[Matrix Support]\n\n[matrix support]: https://evil.example\n")
    assert "\n" not in folded and folded.startswith("[Matrix Support] [matrix support]:")
    assert unlinked("Bob (the builder)") == "Bob (the builder)"
