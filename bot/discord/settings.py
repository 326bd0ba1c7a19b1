"""Discord's variables: the bot, where its API is, who may talk to it, where it listens."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, NoDecode

from engine.config import SETTINGS_CONFIG, http_url, split_csv

__all__ = ["DiscordSettings", "snowflake"]

#: Discord ids are 64-bit "snowflakes", written in decimal.
_MAX_SNOWFLAKE = 2**63 - 1


def snowflake(value: Any, what: str) -> str:
    """A Discord id in its canonical decimal spelling (a ValueError names ``what``)."""
    text = str(value).strip()
    if not (text.isascii() and text.isdigit()) or not 0 < int(text) <= _MAX_SNOWFLAKE:
        raise ValueError(f"{text!r} is not a numeric Discord {what} id")
    return str(int(text))


class DiscordSettings(BaseSettings):
    """Field names are the variable names, lower-cased (DESIGN §8; docs/discord.md)."""

    model_config = SETTINGS_CONFIG

    discord_bot_token: str | None = None
    #: The REST base including its version; the gateway's URL is what its
    #: ``GET /gateway/bot`` answers (tests and proxies point both elsewhere).
    discord_api_url: str = "https://discord.com/api/v10"
    discord_owner_id: str | None = None
    discord_allowed_user_ids: Annotated[list[str], NoDecode] = Field(default_factory=list)
    #: Guilds whose channels the bot answers in; empty: DMs only.
    discord_guild_ids: Annotated[list[str], NoDecode] = Field(default_factory=list)
    #: Channels where every message is answered, not only mentions: needs the privileged
    #: MESSAGE_CONTENT intent, which the bot then asks for (switch it on in the portal).
    discord_open_channel_ids: Annotated[list[str], NoDecode] = Field(default_factory=list)
    #: Channels where a mention starts a thread the conversation goes on in (its own
    #: source); elsewhere the bot answers in the channel.
    discord_thread_channel_ids: Annotated[list[str], NoDecode] = Field(default_factory=list)
    #: Ask for the privileged MESSAGE_CONTENT intent (implied by open channels): then a
    #: thread the bot started is answered without a mention.
    discord_message_content: bool = False
    #: Outbound pacing: per channel a burst, then a rate (Discord: 5 per 5 s per channel);
    #: the whole bot at most so many requests a second (Discord: 50), for the whole fleet.
    discord_channel_burst: int = Field(default=5, ge=1, le=1000)
    discord_channel_per_second: float = Field(default=1.0, gt=0, allow_inf_nan=False)
    discord_global_per_second: float = Field(default=45.0, gt=0, allow_inf_nan=False)

    @field_validator("discord_owner_id", mode="before")
    @classmethod
    def _owner(cls, value: Any) -> str | None:
        if value is None or str(value).strip() == "":
            return None
        return snowflake(value, "user")

    @field_validator("discord_allowed_user_ids", mode="before")
    @classmethod
    def _users(cls, value: Any) -> list[str]:
        return [snowflake(part, "user") for part in split_csv(value)]

    @field_validator("discord_guild_ids", mode="before")
    @classmethod
    def _guilds(cls, value: Any) -> list[str]:
        return [snowflake(part, "guild") for part in split_csv(value)]

    @field_validator("discord_open_channel_ids", "discord_thread_channel_ids", mode="before")
    @classmethod
    def _channels(cls, value: Any) -> list[str]:
        return [snowflake(part, "channel") for part in split_csv(value)]

    @property
    def discord_reads_content(self) -> bool:
        """Whether the bot asks for the MESSAGE_CONTENT intent."""
        return self.discord_message_content or bool(self.discord_open_channel_ids)

    @field_validator("discord_api_url")
    @classmethod
    def _api_url(cls, value: str) -> str:
        return http_url(value)

    @field_validator("discord_bot_token", mode="before")
    @classmethod
    def _token(cls, value: Any) -> str | None:
        if value is None or str(value).strip() == "":
            return None
        return str(value).strip()
