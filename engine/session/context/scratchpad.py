"""The session scratchpad as tools and the context builder see it: cached, write-through."""

from __future__ import annotations

from engine.store.scratchpad import ScratchpadStore


class SessionScratchpad:
    """Loaded once, then every write goes to the database first and the cache second."""

    def __init__(self, store: ScratchpadStore, session_id: int) -> None:
        self._store = store
        self._session_id = session_id
        self._notes: dict[str, str] | None = None

    async def notes(self) -> dict[str, str]:
        if self._notes is None:
            self._notes = await self._store.all(self._session_id)
        return self._notes

    def cached(self) -> dict[str, str]:
        """The notes as last loaded or written (call ``notes()`` once first)."""
        return self._notes if self._notes is not None else {}

    async def set(self, key: str, value: str) -> None:
        await self._store.set(self._session_id, key, value)
        (await self.notes())[key] = value

    async def delete(self, key: str) -> None:
        await self._store.delete(self._session_id, key)
        (await self.notes()).pop(key, None)
