"""One database, one Telegram bot: a service configured with another bot's token is refused.

The database remembers the id of the bot it first served (a token's part before ``:``,
in ``app_settings``); a start with another bot id is refused with a sentence naming both
ids, never the secret. The same id with a new secret (a token rotated at BotFather) is the
same bot and is accepted.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from engine.store import Database, app_settings, insert_for, utcnow

__all__ = ["BOT_ID_KEY", "OtherBot", "bot_id_of", "check_bot_identity"]

BOT_ID_KEY = "telegram.bot_id"


class OtherBot(Exception):
    """The database serves another bot; the message names both bot ids."""


def bot_id_of(token: str) -> str:
    """The bot id in a Bot API token (``123456:ABC…`` → ``123456``)."""
    bot_id, sep, secret = token.strip().partition(":")
    if not (sep and bot_id.isdigit() and secret):
        raise ValueError("TELEGRAM_BOT_TOKEN is not a bot token (digits, a colon, a secret)")
    return bot_id


def is_bot_token(token: str) -> bool:
    try:
        bot_id_of(token)
    except ValueError:
        return False
    return True


def _claim(conn: Connection, bot_id: str) -> str:
    """Record ``bot_id`` unless a bot is recorded already; returns the recorded one."""
    conn.execute(
        insert_for(conn.dialect.name, app_settings)
        .values(key=BOT_ID_KEY, value=bot_id, updated_at=utcnow())
        .on_conflict_do_nothing(index_elements=["key"])
    )
    return conn.execute(
        sa.select(app_settings.c.value).where(app_settings.c.key == BOT_ID_KEY)
    ).scalar_one()


async def check_bot_identity(db: Database, token: str) -> str:
    """The token's bot id, recorded on first use; ``OtherBot`` when another was recorded."""
    bot_id = bot_id_of(token)
    recorded = await db.run(_claim, bot_id)
    if recorded != bot_id:
        raise OtherBot(
            f"This database belongs to Telegram bot {recorded}, but TELEGRAM_BOT_TOKEN is "
            f"for bot {bot_id}: one database serves one bot — use that bot's token, or "
            "another DATABASE_URL for this one."
        )
    return bot_id
