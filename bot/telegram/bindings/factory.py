"""Build the ``BotApi`` binding named by ``TELEGRAM_LIBRARY``."""

from __future__ import annotations

from bot.telegram.sending.api import BotApi

__all__ = ["LIBRARIES", "make_bot_api"]

LIBRARIES = ("ptb", "aiogram")


def make_bot_api(library: str, token: str, api_root: str) -> BotApi:
    """``library`` is ``"ptb"`` (python-telegram-bot) or ``"aiogram"``; only that one is imported."""
    if library == "ptb":
        from bot.telegram.bindings.ptb import PtbBotApi

        return PtbBotApi(token, api_root)
    if library == "aiogram":
        from bot.telegram.bindings.aiogram import AiogramBotApi

        return AiogramBotApi(token, api_root)
    accepted = ", ".join(repr(name) for name in LIBRARIES)
    raise ValueError(f"unknown Telegram library {library!r}; accepted: {accepted}")
