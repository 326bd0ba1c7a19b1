"""The gateway connection: discord.py's ``Client``, pointed at ``DISCORD_API_URL``.

discord.py runs unpatched but for its base URLs: REST goes to ``DISCORD_API_URL`` (the
library's ``Route.BASE``), and the gateway to what ``GET {DISCORD_API_URL}/gateway/bot``
answers (the library's ``DiscordWebSocket.DEFAULT_GATEWAY``, which it dials for every
IDENTIFY, one after INVALID_SESSION included; a RESUME goes to READY's
``resume_gateway_url``, as the library does). Intents: guilds, guild and direct messages;
the privileged MESSAGE_CONTENT only when channels are open to every message.

What the gateway delivers goes to the adapter (``GatewaySink``); slash commands are the
command tree's, registered from the adapter's command registry.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

import discord
import yarl
from discord import app_commands
from discord.gateway import DiscordWebSocket

from bot.platform.commands import CommandRegistry

__all__ = ["UNKNOWN_COMMAND", "DiscordGateway", "GatewaySink", "point_at"]

log = logging.getLogger(__name__)

#: Discord allows one IDENTIFY per 5 s; discord.py waits that long before each but the first.
IDENTIFY_GAP_S = 5.0
# How long discord.py waits after the last GUILD_CREATE before on_ready: short, since
# nothing is chunked and the catch-up waits for it.
GUILD_READY_TIMEOUT_S = 0.5
_DESCRIPTION_LIMIT = 100


class GatewaySink(Protocol):
    def session_began(self) -> None: ...

    def ready(self, bot_id: str) -> None: ...

    async def message(self, message: discord.Message) -> None: ...

    async def edited(self, message: discord.Message) -> None: ...

    async def deleted(self, message_id: str) -> None: ...

    async def interaction(self, interaction: discord.Interaction) -> None: ...

    async def slash(self, interaction: discord.Interaction, name: str, argument: str) -> None: ...


def _quiet_voice() -> None:
    library_log = logging.getLogger("discord.client")
    if not any(isinstance(f, _NoVoiceNotice) for f in library_log.filters):
        library_log.addFilter(_NoVoiceNotice())


def point_at(api_url: str) -> None:
    """discord.py's REST base (its one class-level setting; one bot per process)."""
    discord.http.Route.BASE = api_url


class _NoVoiceNotice(logging.Filter):
    """discord.py warns at every start that voice needs PyNaCl: chathub has no voice here."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "voice will NOT be supported" not in record.getMessage()


class DiscordGateway(discord.Client):
    def __init__(
        self,
        sink: GatewaySink,
        commands: CommandRegistry,
        *,
        message_content: bool = False,
        identify_gap_s: float = IDENTIFY_GAP_S,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        _quiet_voice()
        intents = discord.Intents.none()
        intents.guilds = intents.guild_messages = intents.dm_messages = True
        intents.message_content = message_content
        super().__init__(
            intents=intents,
            # Long waits surface as RateLimited (the outbox postpones) instead of a sleep.
            max_ratelimit_timeout=30.0,
            guild_ready_timeout=GUILD_READY_TIMEOUT_S,
            chunk_guilds_at_startup=False,
            member_cache_flags=discord.MemberCacheFlags.none(),
            allowed_mentions=discord.AllowedMentions.none(),
        )
        self._sink = sink
        self._identify_gap_s = identify_gap_s
        self._sleep = sleep
        self.tree = app_commands.CommandTree(self)
        self.tree.error(_command_failed)
        for name, help_text in commands.listed():
            takes = commands.get(name)
            self.tree.add_command(
                _slash_command(sink, name, help_text, bool(takes and takes.argument))
            )

    async def setup_hook(self) -> None:
        """Where the gateway is: asked once per start, never a built-in host."""
        _shards, url, _limits = await self.http.get_bot_gateway()
        DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(url)

    async def before_identify_hook(self, shard_id: int | None, *, initial: bool = False) -> None:
        if not initial:
            await self._sleep(self._identify_gap_s)

    async def on_socket_event_type(self, event_type: str) -> None:
        # READY, seen before any of the session's messages (discord.py's on_ready waits
        # for the guilds, and messages arrive meanwhile).
        if event_type == "READY":
            self._sink.session_began()

    async def on_ready(self) -> None:
        assert self.user is not None
        self._sink.ready(str(self.user.id))
        log.info("Discord gateway ready as %s (%s)", self.user, self.user.id)

    async def on_resumed(self) -> None:
        log.info("Discord gateway resumed")

    async def on_message(self, message: discord.Message) -> None:
        await self._sink.message(message)

    async def on_raw_message_edit(self, payload: discord.RawMessageUpdateEvent) -> None:
        await self._sink.edited(payload.message)

    async def on_raw_message_delete(self, payload: discord.RawMessageDeleteEvent) -> None:
        await self._sink.deleted(str(payload.message_id))

    async def on_interaction(self, interaction: discord.Interaction) -> None:
        await self._sink.interaction(interaction)

    async def sync_commands(self) -> bool:
        """Register the slash commands when Discord's differ (a sync per start would spend
        its tight limit); True when they were written."""
        wanted = {c.name: c.to_dict(self.tree) for c in self.tree.get_commands()}
        current = {c.name: c.to_dict() for c in await self.tree.fetch_commands()}
        if _shape(wanted) == _shape(current):
            return False
        await self.tree.sync()
        return True


#: A command Discord still lists but this bot no longer has (an older version's).
UNKNOWN_COMMAND = "I do not know that command any more; /help lists mine."


async def _command_failed(
    interaction: discord.Interaction, error: app_commands.AppCommandError
) -> None:
    """The command tree's failures (a command registered by an older version, a check):
    answered, never left to Discord's "did not respond"; our own handlers answer theirs."""
    log.info("slash command failed in the tree: %s", error)
    if interaction.response.is_done():
        return
    try:
        await interaction.response.send_message(UNKNOWN_COMMAND, ephemeral=True)
    except discord.HTTPException as exc:
        log.info("answering a failed slash command failed: %s", exc)


def _shape(commands: dict[str, dict[str, object]]) -> dict[str, tuple[object, ...]]:
    def options(command: dict[str, object]) -> tuple[object, ...]:
        raw = command.get("options") or []
        assert isinstance(raw, list)
        return tuple((o.get("name"), o.get("type"), bool(o.get("required"))) for o in raw)

    return {name: (c.get("description"), options(c)) for name, c in commands.items()}


def _slash_command(
    sink: GatewaySink, name: str, help_text: str, takes_argument: bool
) -> app_commands.Command[None, ..., None]:
    description = help_text[:_DESCRIPTION_LIMIT] or name
    if takes_argument:

        @app_commands.describe(text="What the command works on")
        async def with_text(interaction: discord.Interaction, text: str = "") -> None:
            await sink.slash(interaction, name, text)

        return app_commands.Command(name=name, description=description, callback=with_text)

    async def plain(interaction: discord.Interaction) -> None:
        await sink.slash(interaction, name, "")

    return app_commands.Command(name=name, description=description, callback=plain)
