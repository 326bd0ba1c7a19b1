"""``BotApi`` over python-telegram-bot (``ptb``) or aiogram, chosen by ``TELEGRAM_LIBRARY``."""
