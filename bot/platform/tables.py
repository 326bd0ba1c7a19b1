"""Every platform's paired people and pairing codes, keyed by platform and the platform's
own user id (a string: a Discord snowflake, a Slack member id, a Matrix user id), on the
one shared ``MetaData`` (``engine.store.schema``).

Created by ``bot/platform/migrations/`` (0022); queried by ``bot/platform/pairing.py``.
Telegram keeps its own ``telegram_users`` and ``telegram_pairing`` (``bot/telegram/tables.py``).
"""

from __future__ import annotations

from sqlalchemy import Column, Index, PrimaryKeyConstraint, String, Table, Text

from engine.store import UtcDateTime, metadata

__all__ = ["platform_pairing", "platform_people"]

#: What a platform is called in every table (``discord``, ``slack``, ...).
_Platform = String(32)
_UserId = String(64)

#: The people paired with the bot, per platform.
platform_people = Table(
    "platform_people",
    metadata,
    Column("platform", _Platform, nullable=False),
    Column("user_id", _UserId, nullable=False),
    Column("name", Text, nullable=False, server_default=""),
    #: Who paired them (the platform's user id); NULL: the owner's list or a command line.
    Column("paired_by", _UserId),
    Column("paired_at", UtcDateTime, nullable=False),
    PrimaryKeyConstraint("platform", "user_id"),
)

#: A stranger's pairing code: who asked, the conversation to welcome them in, until when.
platform_pairing = Table(
    "platform_pairing",
    metadata,
    Column("code", String(16), primary_key=True),
    Column("platform", _Platform, nullable=False),
    Column("user_id", _UserId, nullable=False),
    Column("chat", String(255), nullable=False),
    Column("name", Text, nullable=False, server_default=""),
    Column("created_at", UtcDateTime, nullable=False),
    Column("expires_at", UtcDateTime, nullable=False),
    Column("used_at", UtcDateTime),
    Index("ix_platform_pairing_user", "platform", "user_id", "created_at"),
)
