"""Session bypasses: a human lets a session's gated calls run without asking.

Human-only by construction: this is a Python API for adapters (a button, a command), never
a tool the model can call. A bypass turns ``require`` into ``allow``; ``deny`` is untouched.
Bypasses live in memory and end with the process.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from engine.approval.protocols import Clock
from engine.store.schema import utcnow
from engine.tools.protocols import ToolCategory

__all__ = ["Bypass", "BypassScope", "Bypasses", "validate_bypass"]


class BypassScope(StrEnum):
    ALL = "all"
    CATEGORY = "category"
    MCP_SERVER = "mcp_server"


@dataclass(frozen=True, slots=True)
class Bypass:
    """``value`` is a ``ToolCategory`` value for CATEGORY, a server name for MCP_SERVER;
    ``requester``: whose calls it covers (``None``: everyone's, granted by someone who may
    decide every call of the session)."""

    scope: BypassScope
    value: str | None = None
    expires_at: datetime | None = None
    requester: str | None = None

    def covers(self, tool_name: str, category: ToolCategory | None) -> bool:
        if self.scope is BypassScope.ALL:
            return True
        if self.scope is BypassScope.CATEGORY:
            return category is not None and category.value == self.value
        return tool_name.startswith(f"mcp__{self.value}__")


def validate_bypass(
    scope: BypassScope | str, value: str | None, ttl: timedelta | None = None
) -> tuple[BypassScope, str | None]:
    """The normalised ``(scope, value)``; ``ValueError`` for a bad scope, value or ttl."""
    try:
        scope = BypassScope(scope)
    except ValueError:
        raise ValueError(
            f"scope: {scope!r} is not one of {', '.join(s.value for s in BypassScope)}"
        ) from None
    if scope is BypassScope.ALL:
        if value is not None:
            raise ValueError("value: a bypass of scope 'all' takes no value")
    elif scope is BypassScope.CATEGORY:
        try:
            value = ToolCategory(value).value
        except ValueError:
            raise ValueError(f"value: {value!r} is not a tool category") from None
    elif not value or "__" in value or "*" in value:
        raise ValueError(f"value: {value!r} is not an MCP server name")
    if ttl is not None and ttl <= timedelta(0):
        raise ValueError("ttl: must be positive")
    return scope, value


class Bypasses:
    """The active bypasses of every session, with an injectable clock for expiry."""

    def __init__(self, clock: Clock = utcnow) -> None:
        self._clock = clock
        self._by_session: dict[int, list[Bypass]] = {}

    def grant(
        self,
        session_id: int,
        scope: BypassScope | str,
        value: str | None = None,
        *,
        ttl: timedelta | None = None,
        requester: str | None = None,
    ) -> Bypass:
        """Add a bypass for ``session_id``; raise ``ValueError`` for a bad scope or value.
        ``requester``: only that person's calls are covered."""
        scope, value = validate_bypass(scope, value, ttl)
        expires_at = self._clock() + ttl if ttl is not None else None
        bypass = Bypass(scope, value, expires_at, requester)
        self._by_session.setdefault(session_id, []).append(bypass)
        return bypass

    def revoke(self, session_id: int) -> None:
        """Drop every bypass of ``session_id``."""
        self._by_session.pop(session_id, None)

    def active(self, session_id: int) -> list[Bypass]:
        """The unexpired bypasses of ``session_id`` (expired ones are dropped)."""
        now = self._clock()
        live = [
            b
            for b in self._by_session.get(session_id, [])
            if b.expires_at is None or b.expires_at > now
        ]
        if live:
            self._by_session[session_id] = live
        else:
            self._by_session.pop(session_id, None)
        return list(live)

    def covering(
        self, session_id: int, tool_name: str, category: ToolCategory | None
    ) -> list[Bypass]:
        """The active bypasses covering this call's tool (whose calls: ``requester``)."""
        return [b for b in self.active(session_id) if b.covers(tool_name, category)]

    def find(
        self,
        session_id: int,
        tool_name: str,
        category: ToolCategory | None,
        requester: str | None = None,
    ) -> Bypass | None:
        """The active bypass covering this call of ``requester``, if any."""
        for bypass in self.covering(session_id, tool_name, category):
            if bypass.requester is None or bypass.requester == requester:
                return bypass
        return None
