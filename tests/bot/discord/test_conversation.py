"""Talking to the agent on Discord: DMs, mentions in guild channels, threads, strangers."""

from __future__ import annotations

from tests.bot.discord.conftest import (
    ALICE,
    GENERAL,
    GUILD,
    MakeService,
    texts,
    until,
)
from tests.fakes.discord_server import FakeDiscordServer


async def test_a_dm_is_answered_once(fake: FakeDiscordServer, make_service: MakeService) -> None:
    await make_service()
    pushed = fake.dm(ALICE, "hello there")
    channel = pushed["channel_id"]
    await until(lambda: texts(fake, channel) == ["echo: hello there"])


async def test_a_mention_in_a_guild_channel_is_answered_there(
    fake: FakeDiscordServer, make_service: MakeService
) -> None:
    await make_service()
    fake.channel_message(GUILD, GENERAL, ALICE, "what time is it", mentions_bot=True)
    await until(lambda: texts(fake, GENERAL) == ["echo: what time is it"])
