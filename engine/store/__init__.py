"""Storage: SQLAlchemy Core over SQLite (default) or PostgreSQL, one code path."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from engine.faces import lazy_attributes
from engine.store.db import Database, connect, migrate, open_database
from engine.store.history import History
from engine.store.inbox import InboxStore
from engine.store.migrations import ENGINE, Layer
from engine.store.queue import AppSettings, QueueStore
from engine.store.scratchpad import ScratchpadStore
from engine.store.sessions import Sessions
from engine.store.summaries import SummaryStore
from engine.store.views import SessionViews

if TYPE_CHECKING:
    from engine.store.db import SqliteDatabase, quick_unit
    from engine.store.dialects import PerDialect, insert_for, serialize
    from engine.store.fencing import fenced
    from engine.store.history import AlsoWithKey, AlsoWithRow
    from engine.store.inbox import VISITS_KEY, InboxError, InboxItem, NotPermitted
    from engine.store.leases import (
        Lease,
        Leases,
        live_members,
    )
    from engine.store.migrations import discover
    from engine.store.notify import Notice, Notifier, PgNotifier, asyncpg_dsn, notifier_for
    from engine.store.prepared import Prepared
    from engine.store.queue import SENDER_KEY
    from engine.store.rows import AssistantRecord, NewToolCall
    from engine.store.schema import (
        Id,
        UtcDateTime,
        app_settings,
        approval_rules,
        chat_history,
        chat_llm_tools,
        chat_sessions,
        chat_sessions_stack,
        chat_summaries,
        metadata,
        permission_groups,
        sources,
        utcnow,
    )
    from engine.store.views import MAX_PAGE, MAX_PER_PAGE

#: What the outer layers use besides, loaded on first use (PEP 562): importing the
#: face costs nothing more, and no cycle runs through it.
_LAZY = {
    "AlsoWithKey": "engine.store.history",
    "AlsoWithRow": "engine.store.history",
    "AssistantRecord": "engine.store.rows",
    "Id": "engine.store.schema",
    "InboxError": "engine.store.inbox",
    "InboxItem": "engine.store.inbox",
    "Lease": "engine.store.leases",
    "Leases": "engine.store.leases",
    "MAX_PAGE": "engine.store.views",
    "MAX_PER_PAGE": "engine.store.views",
    "NewToolCall": "engine.store.rows",
    "NotPermitted": "engine.store.inbox",
    "Notice": "engine.store.notify",
    "Notifier": "engine.store.notify",
    "live_members": "engine.store.leases",
    "PerDialect": "engine.store.dialects",
    "PgNotifier": "engine.store.notify",
    "Prepared": "engine.store.prepared",
    "SENDER_KEY": "engine.store.queue",
    "VISITS_KEY": "engine.store.inbox",
    "SqliteDatabase": "engine.store.db",
    "UtcDateTime": "engine.store.schema",
    "app_settings": "engine.store.schema",
    "approval_rules": "engine.store.schema",
    "asyncpg_dsn": "engine.store.notify",
    "chat_history": "engine.store.schema",
    "chat_llm_tools": "engine.store.schema",
    "chat_sessions": "engine.store.schema",
    "chat_sessions_stack": "engine.store.schema",
    "chat_summaries": "engine.store.schema",
    "discover": "engine.store.migrations",
    "fenced": "engine.store.fencing",
    "insert_for": "engine.store.dialects",
    "metadata": "engine.store.schema",
    "notifier_for": "engine.store.notify",
    "permission_groups": "engine.store.schema",
    "quick_unit": "engine.store.db",
    "serialize": "engine.store.dialects",
    "sources": "engine.store.schema",
    "utcnow": "engine.store.schema",
}


@dataclass(frozen=True, slots=True)
class Store:
    """The repositories over one database."""

    db: Database
    sessions: Sessions
    history: History
    scratchpad: ScratchpadStore
    inbox: InboxStore
    views: SessionViews
    queue: QueueStore
    settings: AppSettings
    summaries: SummaryStore

    @classmethod
    def over(cls, db: Database) -> Store:
        return cls(
            db,
            Sessions(db),
            History(db),
            ScratchpadStore(db),
            InboxStore(db),
            SessionViews(db),
            QueueStore(db),
            AppSettings(db),
            SummaryStore(db),
        )

    @classmethod
    async def open(cls, url: str, layers: Sequence[Layer] = (ENGINE,)) -> Store:
        """Over ``url``, migrated to ``layers``: the engine's own tables unless told more
        (``bot.schema.LAYERS`` for the service)."""
        return cls.over(await open_database(url, layers))

    async def close(self) -> None:
        await self.db.close()


__all__ = [
    "ENGINE",
    "MAX_PAGE",
    "MAX_PER_PAGE",
    "SENDER_KEY",
    "VISITS_KEY",
    "AlsoWithKey",
    "AlsoWithRow",
    "AppSettings",
    "AssistantRecord",
    "Database",
    "History",
    "Id",
    "InboxError",
    "InboxItem",
    "InboxStore",
    "Layer",
    "Lease",
    "Leases",
    "NewToolCall",
    "NotPermitted",
    "Notice",
    "Notifier",
    "PerDialect",
    "PgNotifier",
    "Prepared",
    "QueueStore",
    "ScratchpadStore",
    "SessionViews",
    "Sessions",
    "SqliteDatabase",
    "Store",
    "SummaryStore",
    "UtcDateTime",
    "app_settings",
    "approval_rules",
    "asyncpg_dsn",
    "chat_history",
    "chat_llm_tools",
    "chat_sessions",
    "chat_sessions_stack",
    "chat_summaries",
    "connect",
    "discover",
    "fenced",
    "insert_for",
    "live_members",
    "metadata",
    "migrate",
    "notifier_for",
    "open_database",
    "permission_groups",
    "quick_unit",
    "serialize",
    "sources",
    "utcnow",
]


__getattr__ = lazy_attributes(__name__, _LAZY)
