"""Telegram's variables: the bot, who may talk to it, how it receives, how fast it sends."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, NoDecode

from engine.config import SETTINGS_CONFIG, ConfigError, http_url, split_csv

__all__ = ["TelegramSettings"]


class TelegramSettings(BaseSettings):
    """Field names are the variable names, lower-cased (DESIGN §8)."""

    model_config = SETTINGS_CONFIG

    telegram_bot_token: str | None = None
    telegram_api_url: str = "https://api.telegram.org"
    telegram_library: Literal["ptb", "aiogram"] = "ptb"
    telegram_allowed_user_ids: Annotated[list[int], NoDecode] = Field(default_factory=list)
    telegram_owner_id: int | None = None
    telegram_webhook_url: str | None = None
    telegram_webhook_secret: str | None = None
    telegram_streaming: bool = False
    #: Outbound pacing, token buckets (bot/delivery/pacing.py; docs/telegram.md "Pacing"):
    #: per private chat a burst, then a rate; per group a burst, then so many a minute;
    #: all chats together at most so many a second. Every value above 0.
    telegram_private_burst: int = Field(default=4, ge=1, le=1000)
    telegram_private_per_second: float = Field(default=1.0, gt=0, allow_inf_nan=False)
    telegram_group_burst: int = Field(default=3, ge=1, le=1000)
    telegram_group_per_minute: float = Field(default=20.0, gt=0, allow_inf_nan=False)
    telegram_global_per_second: float = Field(default=30.0, gt=0, allow_inf_nan=False)

    @field_validator("telegram_allowed_user_ids", mode="before")
    @classmethod
    def _user_ids(cls, value: Any) -> list[int]:
        ids = []
        for part in split_csv(value):
            try:
                ids.append(int(part))
            except ValueError:
                raise ValueError(f"{part!r} is not a numeric Telegram user id") from None
        return ids

    def check_telegram_webhook(self) -> None:
        """Refuse, naming the variable, a webhook anyone could post updates to."""
        if self.telegram_webhook_url and not self.telegram_webhook_secret:
            raise ConfigError(
                "TELEGRAM_WEBHOOK_SECRET: required with TELEGRAM_WEBHOOK_URL (Telegram sends "
                "it with every update, and the bot takes no update without it)"
            )

    @field_validator("telegram_api_url")
    @classmethod
    def _telegram_api_url(cls, value: str) -> str:
        return http_url(value)
