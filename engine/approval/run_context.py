"""RunContext: per-session settings stored as JSON in ``chat_sessions.run_context``."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from engine.approval.patterns import (
    FS_READ_TOOLS,
    FS_WRITE_TOOLS,
    is_fs_tool,
    literal_path_pattern,
    path_matches,
    tool_matches,
    validate_tool_pattern,
)
from engine.session.protocols import Decision

__all__ = ["RunContext", "fast_path"]

_FIELDS = (
    "security_group",
    "system_prompt_fragments",
    "allow_fs_writes",
    "allow_fs_reads",
    "allow_tools",
    "mcp_servers",
    "working_directory",
    "read_only",
)
_LISTS = (
    "system_prompt_fragments",
    "allow_fs_writes",
    "allow_fs_reads",
    "allow_tools",
    "mcp_servers",
)


def _grant(entry: str) -> str:
    """A grant as a path pattern: a bare ``dir`` means the ``dir`` subtree. Grants are the
    scheduler's canonical paths, taken literally: a file named ``~draft.txt`` is granted
    (until 2026-12-07 it was refused as a home folder, which voided every grant of its
    job, so each call of a run asked in the chat; found by review)."""
    pattern = literal_path_pattern(entry)
    return pattern if pattern.endswith("*") else f"{pattern}/*" if pattern != "." else "*"


@dataclass(frozen=True, slots=True)
class RunContext:
    """Which rule group applies, extra prompt text, pre-authorized paths and tools, MCP
    servers granted up front, working directory.

    ``allow_fs_writes`` / ``allow_fs_reads`` are workspace-relative path patterns (a bare
    directory name means its whole subtree); a write grant also grants reads.
    ``allow_tools`` are tool patterns (``web_fetch``, ``mcp__news__*``) whose calls run
    without asking; file tools are granted by path only. ``mcp_servers`` are activated
    before the first round.
    """

    security_group: str = "default"
    system_prompt_fragments: list[str] = field(default_factory=list)
    allow_fs_writes: list[str] = field(default_factory=list)
    allow_fs_reads: list[str] = field(default_factory=list)
    allow_tools: list[str] = field(default_factory=list)
    mcp_servers: list[str] = field(default_factory=list)
    working_directory: str | None = None
    #: No file is written, whatever the rules allow: the tic's (it reads what anyone may
    #: send the owner; until 2026-12-07 the rule allowing ``memory/*`` let a mail's text
    #: rewrite the notification rules; found by review).
    read_only: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.security_group, str) or not self.security_group.strip():
            raise ValueError("security_group: must be a non-empty string")
        for name in _LISTS:
            value = getattr(self, name)
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise ValueError(f"{name}: must be a list of strings")
        for name in ("allow_fs_writes", "allow_fs_reads"):
            for entry in getattr(self, name):
                try:
                    _grant(entry)
                except ValueError as exc:
                    raise ValueError(f"{name}: {exc}") from None
        for entry in self.allow_tools:
            try:
                validate_tool_pattern(entry)
            except ValueError as exc:
                raise ValueError(f"allow_tools: {exc}") from None
        if self.working_directory is not None and not isinstance(self.working_directory, str):
            raise ValueError("working_directory: must be a string or null")
        if not isinstance(self.read_only, bool):
            raise ValueError("read_only: must be true or false")

    def to_json(self) -> dict[str, Any]:
        """The JSON object stored in ``chat_sessions.run_context``."""
        return {
            "security_group": self.security_group,
            "system_prompt_fragments": list(self.system_prompt_fragments),
            "allow_fs_writes": list(self.allow_fs_writes),
            "allow_fs_reads": list(self.allow_fs_reads),
            "allow_tools": list(self.allow_tools),
            "mcp_servers": list(self.mcp_servers),
            "working_directory": self.working_directory,
            "read_only": self.read_only,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any] | str | None) -> RunContext:
        """Parse a stored value (``None`` → defaults); raise ``ValueError`` naming a bad field."""
        if data is None:
            return cls()
        if isinstance(data, str):
            data = json.loads(data) if data.strip() else {}
            if data is None:
                return cls()
        if not isinstance(data, dict):
            raise ValueError("run_context: must be a JSON object")
        unknown = sorted(set(data) - set(_FIELDS))
        if unknown:
            raise ValueError(f"run_context: unknown field(s) {', '.join(unknown)}")
        values = {k: v for k, v in data.items() if v is not None or k == "working_directory"}
        return cls(**values)

    def extra_system_prompt(self) -> str:
        return "\n\n".join(f for f in self.system_prompt_fragments if f.strip())

    def is_write_allowed(self, path: str) -> bool:
        """Whether canonical workspace-relative ``path`` is pre-authorized for writes."""
        return any(path_matches(_grant(e), path) for e in self.allow_fs_writes)

    def is_read_allowed(self, path: str) -> bool:
        """Reads: ``allow_fs_reads`` plus everything writable."""
        return self.is_write_allowed(path) or any(
            path_matches(_grant(e), path) for e in self.allow_fs_reads
        )

    def is_tool_allowed(self, tool_name: str) -> bool:
        """Whether a call of ``tool_name`` is pre-authorized (never a file tool: by path)."""
        return not is_fs_tool(tool_name) and any(
            tool_matches(pattern, tool_name) for pattern in self.allow_tools
        )


def fast_path(decision: Decision, rc: RunContext, tool_name: str, path: str | None) -> Decision:
    """Relax ``REQUIRE`` to ``ALLOW`` for a pre-authorized file read/write or a granted
    tool; nothing else.

    ``path`` must already be canonical (``patterns.canonical_path``); ``DENY`` stays ``DENY``.
    """
    if decision is not Decision.REQUIRE:
        return decision
    if rc.is_tool_allowed(tool_name):
        return Decision.ALLOW
    if path is None:
        return decision
    if tool_name in FS_WRITE_TOOLS and rc.is_write_allowed(path):
        return Decision.ALLOW
    if tool_name in FS_READ_TOOLS and rc.is_read_allowed(path):
        return Decision.ALLOW
    return decision
