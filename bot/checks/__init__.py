"""Checks shared by ``chathub setup``, ``chathub doctor`` and ``GET /api/health/details``.

One module per thing checked (the model endpoint, Telegram, Discord, Slack, the
database, the workspace, the HTTP port, MCP servers); each takes what it needs as
arguments (an ``httpx`` client, a URL, a timeout) and answers in plain sentences, never
with an exception's name.
"""

from bot.checks.result import Check, Problem

__all__ = ["Check", "Problem"]
