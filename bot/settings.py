"""The service's settings: each layer's variables, composed into one class.

Every layer owns its variables (engine/config.py, bot/telegram/settings.py,
bot/discord/settings.py, bot/slack/settings.py, bot/matrix/settings.py,
bot/http/settings.py, scheduler/settings.py); ``chathub`` reads them all at once from the
environment and ``.env``, and one wrong value stops start-up naming its variable.
"""

from __future__ import annotations

from typing import Any

from bot.discord.settings import DiscordSettings
from bot.fleet.settings import FleetSettings
from bot.http.settings import HttpSettings
from bot.matrix.settings import MatrixSettings
from bot.slack.settings import SlackSettings
from bot.telegram.settings import TelegramSettings
from engine.config import SETTINGS_CONFIG, AppConfig, EngineSettings, read_settings
from engine.config import load_config as load_engine_config
from memory.settings import MemorySettings
from scheduler.settings import SchedulerSettings
from voice.settings import VoiceSettings

__all__ = ["Settings", "load_config", "load_settings", "service_settings"]


class Settings(
    TelegramSettings,
    DiscordSettings,
    SlackSettings,
    MatrixSettings,
    HttpSettings,
    SchedulerSettings,
    MemorySettings,
    VoiceSettings,
    FleetSettings,
    EngineSettings,
):
    """Every variable of DESIGN §8."""

    model_config = SETTINGS_CONFIG

    def reached_from_outside(self) -> str | None:
        """The setting that has the world reach this service's HTTP port (through a proxy
        on this machine, its requests from loopback), if one does: the API then needs
        ``CHATHUB_API_TOKEN`` (``check_api_exposure``)."""
        if self.telegram_webhook_url:
            return "TELEGRAM_WEBHOOK_URL"
        if self.slack_bot_token and not self.slack_app_token and self.slack_signing_secret:
            return "SLACK_SIGNING_SECRET (Slack's Events API over HTTP)"
        return None


def load_settings(**overrides: Any) -> Settings:
    return read_settings(Settings, **overrides)


def load_config(settings: Settings | None = None) -> AppConfig:
    """The engine's configuration over the service's settings (``config.settings`` is a
    ``Settings``: ``service_settings`` reads it back typed)."""
    return load_engine_config(settings or load_settings())


def service_settings(config: AppConfig) -> Settings:
    """``config.settings`` as the service's settings; engine-only settings are a mistake
    here (a test or embedding that built the config from ``engine.config``)."""
    settings = config.settings
    if not isinstance(settings, Settings):
        raise TypeError("the service needs bot.settings.Settings (load it with bot.settings)")
    return settings
