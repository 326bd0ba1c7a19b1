"""``ProviderRegistry``: providers added and removed, announced on the SystemEventBus.

A change made here publishes ``ProviderRegistered`` / ``ProviderUnregistered`` at once; a
change made elsewhere (``chathub providers`` in a shell, another process of a fleet) is
noticed by ``watch``, which reads the change counter every few seconds and publishes the
difference, so every process's consumers (``ServiceChoice``: transcription, speech,
memory's embeddings; ``ChatModels``) reload without a restart. ``current`` is the snapshot
consumers read: reloaded from the database on every event, never per call.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import httpx

from engine.bus import Lagged, ProviderRegistered, ProviderUnregistered, SystemEventBus
from providers.store import UNSENDABLE, Provider, ProviderError, ProviderStore

__all__ = ["ProviderRegistry", "follow_providers", "probe"]

log = logging.getLogger(__name__)

WATCH_EVERY_S = 2.0


class ProviderRegistry:
    def __init__(self, store: ProviderStore, bus: SystemEventBus) -> None:
        self.store = store
        self._bus = bus
        self._current: dict[str, Provider] = {}
        self._version = -1

    @property
    def current(self) -> list[Provider]:
        """The providers as last loaded (oldest first)."""
        return list(self._current.values())

    async def load(self) -> None:
        """The providers and the change counter, read now (at start; after an event)."""
        version = await self.store.version()
        self._current = {p.name: p for p in await self.store.all()}
        self._version = version

    async def add(self, provider: Provider) -> None:
        await self.store.add(provider)
        await self._refresh()

    async def remove(self, name: str) -> Provider | None:
        removed = await self.store.remove(name)
        if removed is not None:
            await self._refresh()
        return removed

    async def watch(self, every_s: float = WATCH_EVERY_S) -> None:
        """Until cancelled: a change made by another process is published here too."""
        while True:
            await asyncio.sleep(every_s)
            try:
                if await self.store.version() != self._version:
                    await self._refresh()
            except Exception:  # the database away: the next round
                log.warning("reading the providers failed", exc_info=True)

    async def _refresh(self) -> None:
        """Reload, and publish what changed (a provider replaced counts as both)."""
        before = self._current
        await self.load()
        after = self._current
        for name, provider in before.items():
            if after.get(name) != provider:
                self._bus.publish(ProviderUnregistered(name))
        for name, provider in after.items():
            if before.get(name) != provider:
                self._bus.publish(ProviderRegistered(name))


async def follow_providers(bus: SystemEventBus, changed: Callable[[], None]) -> None:
    """Until cancelled: ``changed()`` whenever the providers change, and after a lag (the
    subscription may have missed a change). Other events are ignored."""
    async with bus.subscribe() as events:
        async for event in events:
            match event:
                case ProviderRegistered() | ProviderUnregistered() | Lagged():
                    changed()
                case _:
                    pass


async def probe(http: httpx.AsyncClient, provider: Provider, *, timeout_s: float = 10.0) -> str:
    """``GET {base_url}/models`` with its key: one sentence on success; ``ProviderError``
    (one sentence, never the key) on failure. Named models the server does not list are
    said, not refused (some servers list nothing)."""
    headers = {"Authorization": f"Bearer {provider.api_key}"} if provider.api_key else {}
    try:
        # The whole answer within ``timeout_s``: httpx's timeout is per read, and a
        # server sending a byte now and then held the test for good (found by review).
        async with asyncio.timeout(timeout_s):
            answer = await http.get(
                f"{provider.base_url}/models", headers=headers, timeout=timeout_s
            )
    except (httpx.TimeoutException, TimeoutError):
        raise ProviderError(f"{provider.base_url} did not answer within {timeout_s:g} s") from None
    except httpx.HTTPError:
        raise ProviderError(f"{provider.base_url} cannot be reached") from None
    except UNSENDABLE:
        raise ProviderError(f"{provider.name}'s address or key cannot be used") from None
    if answer.status_code in (401, 403):
        raise ProviderError(f"{provider.name} refused its key (HTTP {answer.status_code})")
    if answer.status_code >= 400:
        raise ProviderError(f"{provider.name} answered HTTP {answer.status_code} for /models")
    try:
        body = answer.json()
    except ValueError:  # a web page (a web UI, a base URL short of its /v1) is no API
        raise ProviderError(
            f"{provider.name} answered /models with something that is no API's answer: is "
            "the base URL the API's (often ending in /v1)?"
        ) from None  # until 2026-12-07 "answers (0 models listed)"; found by review
    except RecursionError:  # nested past Python's depth, it escaped as a 500 (until
        body = None  # 2026-12-06; found by review)
    data = body.get("data") if isinstance(body, dict) else None
    # Only string ids: a server listing ``{"id": ["x"]}`` made the test a 500 (found by review).
    models = data if isinstance(data, list) else []
    listed = {m["id"] for m in models if isinstance(m, dict) and isinstance(m.get("id"), str)}
    missing = [m for m in provider.models if listed and m not in listed]
    line = f"{provider.name} answers ({len(listed)} models listed)"
    if missing:
        line += f"; it does not list {', '.join(missing)}"
    return line
