"""``HomeSource``: where notifications without a target go (persisted in ``app_settings``)."""

from __future__ import annotations

import logging

from engine.hub.types import validate_source
from engine.store.notify import Notifier
from engine.store.queue import AppSettings

__all__ = ["HOME_CHANNEL", "HOME_KEY", "HomeSource"]

log = logging.getLogger(__name__)

HOME_KEY = "home_source"
#: A fleet's notice that the home was set: every process reads it again.
HOME_CHANNEL = "chathub_home"


class HomeSource:
    """The home source: the stored choice (`set`), else the default the hub was made with."""

    __slots__ = ("_default", "_notifier", "_settings", "_stored")

    def __init__(
        self, settings: AppSettings, default: str, notifier: Notifier | None = None
    ) -> None:
        """``notifier``: a fleet's, which tells the other processes of a ``set``."""
        self._settings = settings
        self._default = validate_source(default)
        self._stored: str | None = None
        self._notifier = notifier

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
        if self._notifier is not None:
            try:
                await self._notifier.publish(HOME_CHANNEL, {})
            except Exception:  # stored: the others read it at their next notice or start
                log.exception("telling the fleet of the new home failed")

    async def watch(self) -> None:
        """Read the home again whenever another process set it, or notices may have been
        lost (runs until cancelled; a fleet's only). Until 2026-12-07 a ``/sethome`` taken
        by one process was known there alone, and the others' tics told the old home
        (found by review)."""
        if self._notifier is None:
            return
        async with self._notifier.subscribe(HOME_CHANNEL) as notices:
            await self._reload()  # a set between the start's read and the subscription
            async for _changed in notices:  # a Notice or a Resync: read it again
                await self._reload()

    async def _reload(self) -> None:
        try:
            await self.load()
        except Exception:  # the database away: the next notice reads it
            log.exception("reading the home again failed")
