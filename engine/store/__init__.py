"""Storage: SQLAlchemy Core over SQLite (default) or PostgreSQL, one code path."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from engine.store.db import Database, connect, migrate, open_database
from engine.store.history import History
from engine.store.inbox import InboxStore
from engine.store.migrations import ENGINE, Layer
from engine.store.queue import AppSettings, QueueStore
from engine.store.scratchpad import ScratchpadStore
from engine.store.sessions import Sessions
from engine.store.summaries import SummaryStore
from engine.store.views import SessionViews


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


__all__ = ["ENGINE", "Database", "Layer", "Store", "connect", "migrate", "open_database"]
