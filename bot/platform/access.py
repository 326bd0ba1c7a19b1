"""Who may talk to the bot: the allowlist, the owner, and paired users (pairing codes).

User ids are the platform's, keyed as strings: Telegram's and Discord's numbers by their
decimal spelling (``UserId``), so each platform passes its own id as it has it. A stranger is offered a pairing code (and
the owner told); the owner lets them in with ``/pair <code>`` and out with ``/unpair``.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

from sqlalchemy.engine import Connection

from bot.platform.commands import Command, CommandContext
from bot.platform.protocols import AccessStore, PairingCode
from engine.approval import Decider
from engine.hub import ChatHub
from engine.store import Notifier

__all__ = [
    "ACCESS_CHANNEL",
    "ASKED_ALREADY",
    "Access",
    "PairingDesk",
    "PairingOffer",
    "UserId",
    "pairing_commands",
    "unlinked",
]

#: A person's id as a platform gives it: a number (Telegram, Discord) or a string.
UserId = str | int

BUSY = "I am not taking new people right now; try later."
WELCOME = "👋 Welcome! You can talk to me now."
#: A stranger's command in their DM when their code came within the reminder window.
ASKED_ALREADY = "You are not allowed to use this bot yet; the owner has your request."
_MAX_ID_DIGITS = 19  # a signed 64-bit id: what every store here can hold
#: The ids that are not numbers: Slack's members (``U…``, ``W…`` in an Enterprise Grid)
#: and Matrix's users (``@name:server``, at most 255 characters).
_WORDED_ID = re.compile(r"[UW][A-Z0-9]{2,30}|@[a-z0-9._=/+\-]+:[A-Za-z0-9.\-:\[\]]+")
_MAX_WORDED_ID = 255
_LINK_JOINT = re.compile(r"\]([(\[])")

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PairingOffer:
    """What to say when a stranger writes: to them, and to the owner (``None``: nothing)."""

    to_user: str | None = None
    to_owner: str | None = None


class Access:
    """The allowlist, the owner and paired users of one platform."""

    def __init__(
        self,
        store: AccessStore,
        *,
        allowed: Iterable[UserId] = (),
        owner: UserId | None = None,
        clock: Callable[[], float],
        reminder_s: float = 600.0,
        command_prefix: str = "/",
    ) -> None:
        """``command_prefix``: how a command is written on this platform (Slack's are
        ``/chathub <command>``), for the hint that tells the owner to ``pair``."""
        self.store = store
        self.command_prefix = command_prefix
        self.allowed = frozenset(str(user_id) for user_id in allowed)
        self.owner = None if owner is None else str(owner)
        self.paired: set[str] = set()
        self._clock = clock
        self._reminder_s = reminder_s
        self._reminded: dict[str, float] = {}

    @property
    def approving_owner(self) -> str | None:
        """Who decides as the owner: the owner, or else the one allowed user of a bot that
        has just one (whose cron and tic cards would otherwise wait forever)."""
        if self.owner is not None:
            return self.owner
        if len(self.allowed) == 1:
            return next(iter(self.allowed))
        return None

    async def load(self) -> None:
        self.paired = await self.store.paired_users()

    def is_allowed(self, user_id: UserId | None) -> bool:
        if user_id is None:  # a tap without a sender (and the owner may be unset too)
            return False
        key = str(user_id)
        return key in self.allowed or key == self.owner or key in self.paired

    def is_configured(self, user_id: UserId | None) -> bool:
        """In the allowlist or the owner: named by the operator, not only paired."""
        if user_id is None:
            return False
        key = str(user_id)
        return key in self.allowed or key == self.owner

    def command_context(
        self,
        hub: ChatHub,
        source: str,
        argument: str,
        user_id: UserId | None,
        also: Callable[[Connection], None] | None = None,
    ) -> CommandContext:
        """A command as ``user_id`` gave it, with what this platform knows of them;
        ``also``: its event's mark (see ``CommandContext.also``)."""
        user = None if user_id is None else str(user_id)
        return CommandContext(
            hub,
            source,
            argument,
            user,
            is_owner=self.is_owner(user),
            is_configured=self.is_configured(user),
            also=also,
        )

    def is_owner(self, user_id: UserId | None) -> bool:
        """The configured owner, never the single-user fallback (pairing is theirs)."""
        return self.owner is not None and user_id is not None and str(user_id) == self.owner

    def decider(self, user_id: UserId | None) -> Decider:
        """Who taps a card or replies to it, for the ``APPROVERS`` rule."""
        if user_id is None:
            return Decider(None)
        key = str(user_id)
        owner = key == self.approving_owner
        return Decider(key, is_owner=owner, is_allowed=self.is_allowed(key))

    async def offer_pairing(self, user_id: str, chat: str, name: str) -> PairingOffer:
        """A stranger wrote: their code (reminded at most once per window), the owner told."""
        code, new = await self.store.issue_code(user_id, chat, name)
        now = self._clock()
        if not new and now - self._reminded.get(user_id, -1e18) < self._reminder_s:
            return PairingOffer()
        self._reminded[user_id] = now
        if code is None:
            return PairingOffer(to_user=BUSY)
        name = unlinked(name)
        to_user = (
            f"Hi {name}! I only talk to people my owner approved.\n"
            f"Your pairing code is {code.code} (valid 24 hours). "
            f"Ask the owner to send {self.command_prefix}pair {code.code}."
        )
        to_owner = None
        if new and self.owner is not None:
            to_owner = (
                f"{name} (id {user_id}) asks to talk to me. "
                f"Approve with {self.command_prefix}pair {code.code}"
            )
        return PairingOffer(to_user, to_owner)

    async def pair(self, code: str, by: str | None) -> PairingCode | None:
        redeemed = await self.store.redeem(code)
        if redeemed is not None:
            await self.store.pair(redeemed.user_id, redeemed.name, by)
            self.paired.add(redeemed.user_id)
        return redeemed

    async def unpair(self, user_id: str) -> bool:
        removed = await self.store.unpair(user_id)
        self.paired.discard(user_id)
        return removed


Welcome = Callable[[PairingCode], Awaitable[None]]


#: The notice a fleet member sends after it paired or unpaired someone.
ACCESS_CHANNEL = "chathub_access"


class PairingDesk:
    """Every platform's pairing, so that a code a stranger got on one platform is redeemed
    by the owner's ``/pair`` on any of them (and ``/unpair`` reaches every platform).

    In a fleet (``notifier``) each change is told to the other processes, which read their
    paired users again (``watch``): an unpaired user is refused by every process, not only
    by the one that took the ``/unpair``."""

    def __init__(self, notifier: Notifier | None = None, *, retry_s: float = 1.0) -> None:
        self._platforms: list[tuple[Access, Welcome]] = []
        self._notifier = notifier
        self._retry_s = retry_s

    def add(self, access: Access, welcome: Welcome) -> None:
        """``welcome`` greets a user of ``access``'s platform in their chat once paired."""
        self._platforms.append((access, welcome))

    async def pair(self, code: str, by: str | None) -> PairingCode | None:
        for access, welcome in self._platforms:
            paired = await access.pair(code, by)
            if paired is not None:
                await self._tell_the_fleet()
                await welcome(paired)
                return paired
        return None

    async def unpair(self, user_id: str) -> bool:
        removed = False
        try:
            for access, _welcome in self._platforms:
                removed = await access.unpair(user_id) or removed
        finally:  # those that did unpair are told to the fleet, whatever failed after
            await self._tell_the_fleet()
        return removed

    async def watch(self) -> None:
        """Read every platform's paired users again whenever another process changed
        them, or notices may have been lost (runs until cancelled; a fleet's only)."""
        if self._notifier is None:
            return
        async with self._notifier.subscribe(ACCESS_CHANNEL) as notices:
            async for _changed in notices:  # a Notice or a Resync: read them all again
                await self._reload()

    async def _reload(self) -> None:
        for access, _welcome in self._platforms:
            while True:
                try:
                    await access.load()
                    break
                except Exception:  # a stale list must not stay: try until it is read
                    log.exception("reading the paired users again failed; retrying")
                    await asyncio.sleep(self._retry_s)

    async def _tell_the_fleet(self) -> None:
        if self._notifier is None:
            return
        try:
            await self._notifier.publish(ACCESS_CHANNEL, {})
        except Exception:
            log.exception("telling the fleet of a pairing change failed")


def pairing_commands(desk: PairingDesk) -> list[Command]:
    """``/pair <code>`` and ``/unpair <user_id>``, the owner's, over every platform's
    pairing (``desk``)."""

    async def pair(c: CommandContext) -> str:
        paired = await desk.pair(c.argument.strip(), c.user_id)
        if paired is None:
            return "No pending pairing with that code (wrong, used or expired)."
        return f"Paired {unlinked(paired.name)} (id {paired.user_id})."

    async def unpair(c: CommandContext) -> str:
        user_id = _id_argument(c.argument.strip())
        if user_id is None:
            return "Usage: /unpair <user_id>"
        removed = await desk.unpair(user_id)
        return f"Unpaired {user_id}." if removed else f"{user_id} was not paired."

    return [
        Command("pair", "Let a user in", pair, "<code>", owner_only=True),
        Command("unpair", "Revoke a user", unpair, "<user_id>", owner_only=True),
    ]


def _id_argument(text: str) -> str | None:
    """A user id argument in its canonical spelling, or ``None``: a Slack member id or a
    Matrix user id as written (until 2026-12-06 neither could be unpaired), else ASCII
    digits (``str.isdigit`` accepts "²", which ``int`` refuses), an optional minus, 64 bits."""
    if len(text) <= _MAX_WORDED_ID and _WORDED_ID.fullmatch(text):
        return text
    digits = text.removeprefix("-")
    if not digits.isascii() or not digits.isdigit() or len(digits) > _MAX_ID_DIGITS:
        return None
    number = int(text)
    if not -(2**63) <= number < 2**63:
        return None
    return str(number)


def unlinked(name: str) -> str:
    """A stranger's name, as written, that no renderer makes a link of: a zero-width space
    parts "](" (a name "[Telegram Support](https://evil.example)" reached the owner as a
    link labelled "Telegram Support"; found by review)."""
    # One line: a reference definition ("[x]: https://…") must start one.
    return _LINK_JOINT.sub("]\u200b\\1", " ".join(name.split()))
