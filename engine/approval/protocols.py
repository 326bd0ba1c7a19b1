"""The approval package's seams: what the composition root (and tests) plug into the gate.

The gate's own contract with the turn (``ApprovalPolicy``, ``HumanApprovals``) belongs to
the session that uses it: ``engine.session.protocols``; ``RulesPolicy`` and
``ApprovalBroker`` implement it. Implementations here are plain functions.
"""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

from engine.approval.run_context import RunContext
from engine.tools.protocols import ToolCategory

__all__ = ["Clock", "RequesterOf", "RunContextFor", "ToolCategories"]


class Clock(Protocol):
    """The current time, timezone-aware UTC (``utcnow``; a fake one in tests)."""

    def __call__(self) -> datetime: ...


class ToolCategories(Protocol):
    """The category of the tool named so, ``None`` for an unknown one (bypass scopes)."""

    def __call__(self, name: str, /) -> ToolCategory | None: ...


class RunContextFor(Protocol):
    """The RunContext a session's calls are judged by (its fast path), by session id."""

    async def __call__(self, session_id: int, /) -> RunContext: ...


class RequesterOf(Protocol):
    """Who asked for a call (the sender of the last person's message before it), by the
    call's id; ``None``: nobody (a background session)."""

    async def __call__(self, tool_call_id: int, /) -> str | None: ...
