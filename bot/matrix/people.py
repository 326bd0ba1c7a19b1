"""Who the bot is on Matrix, and the names of the people it meets."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from nio import AsyncClient

from bot.matrix.sending import MatrixError, call
from bot.platform.access import unlinked

__all__ = ["MatrixMe", "People"]

log = logging.getLogger(__name__)

_MAX_NAME = 100


@dataclass(slots=True)
class MatrixMe:
    """Who the bot is (``whoami`` and its profile, asked at start)."""

    user_id: str = ""
    display_name: str | None = None
    #: Each person's direct room with the bot, as last seen.
    direct: dict[str, str] = field(default_factory=dict)


class People:
    def __init__(self, nio: AsyncClient) -> None:
        self._nio = nio
        self._names: dict[str, str] = {}

    async def name_of(self, user: str) -> str:
        """The person's display name (asked once per process); the id when it has none."""
        known = self._names.get(user)
        if known is not None:
            return known
        try:
            answer = await call(self._nio.get_displayname(user))
        except MatrixError as exc:
            log.info("the display name of %s: %s", user, exc.description)
            return user
        # A name anyone chooses, which the bot says back as Markdown (a refusal, "by" on
        # a card): never a link (a stranger named "[Security check](https://evil…)" made
        # the bot post that link in its own voice until 2026-12-07; found by review).
        name = unlinked(str(getattr(answer, "displayname", None) or user)[:_MAX_NAME])
        self._names[user] = name
        return name
