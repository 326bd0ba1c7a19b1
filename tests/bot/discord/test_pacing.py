"""Discord's pacing: never more than 5 messages in any 5 s to one channel, on a fake clock."""

from __future__ import annotations

import asyncio

from bot.delivery.pacing import Pacer
from bot.discord.sending import DiscordClient, discord_pacing
from bot.settings import load_settings


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += seconds
        await asyncio.sleep(0)


async def test_twelve_parts_to_one_channel_keep_five_in_any_five_seconds() -> None:
    clock = FakeClock()
    policy = discord_pacing(load_settings(_env_file=None)).policy
    # The client tells the pacer a channel's kind: every one has the window, a DM too.
    client = DiscordClient(None)  # type: ignore[arg-type]
    pacer = Pacer(policy, clock=clock, sleep=clock.sleep, is_group=client.is_group)
    sent = []
    for _ in range(12):
        (await pacer.turn("123")).answered()
        sent.append(clock.now)
    for first in range(len(sent)):
        within = [t for t in sent if sent[first] <= t < sent[first] + 5.0]
        assert len(within) <= 5, sent
    assert sent[:5] == [0.0] * 5  # a quiet channel's first answer goes out at once


async def test_channels_do_not_wait_for_each_other() -> None:
    clock = FakeClock()
    policy = discord_pacing(load_settings(_env_file=None)).policy
    pacer = Pacer(policy, clock=clock, sleep=clock.sleep, is_group=lambda _c: True)
    for channel in range(20):
        (await pacer.turn(str(channel))).answered()
    assert clock.now == 0.0
