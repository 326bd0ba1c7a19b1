"""``HomeSource``: where notifications without a target go (persisted in ``app_settings``)."""

from __future__ import annotations

from engine.hub.types import validate_source
from engine.store.queue import AppSettings

__all__ = ["HOME_KEY", "HomeSource"]

HOME_KEY = "home_source"


class HomeSource:
    """The home source: the stored choice (`set`), else the default the hub was made with."""

    __slots__ = ("_default", "_settings", "_stored")

    def __init__(self, settings: AppSettings, default: str) -> None:
        self._settings = settings
        self._default = validate_source(default)
        self._stored: str | None = None

    async def load(self) -> None:
        self._stored = await self._settings.get(HOME_KEY)

    @property
    def source(self) -> str:
        return self._stored or self._default

    def use_default(self, source: str) -> None:
        """A better default than the one the hub was made with (a platform that learned
        its owner's chat after start); a stored choice still wins."""
        self._default = validate_source(source)

    async def set(self, source: str) -> None:
        validate_source(source)
        await self._settings.set(HOME_KEY, source)
        self._stored = source
