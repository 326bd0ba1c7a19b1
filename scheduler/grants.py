"""What a job may do without asking: its grants, checked once when they are proposed.

A job's grants are stored as the RunContext of its runs (``scheduled_jobs.run_context``):
tools by name (``web_fetch``) or one MCP server's tools (``mcp__news__*``), MCP servers
activated before the first round, workspace paths to read and to write, a working
directory. Paths are stored canonical and workspace-relative, so the gate and the tools
read them the same way. Nothing here widens what the rules deny: a ``deny`` rule and
``secrets/`` stay out of reach whatever a job was granted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from engine.approval import (
    FS_CLASSES,
    PathRefused,
    canonical_path,
    is_fs_tool,
    tool_matches,
    validate_tool_pattern,
)
from engine.tools import Workspace

__all__ = ["GRANT_FIELDS", "MAX_GRANTS", "GrantChecker", "GrantError", "JobGrants"]

#: Entries per list: a briefing needs a handful; thousands are a mistake or an attack.
MAX_GRANTS = 50
MAX_ENTRY_CHARS = 300
GRANT_FIELDS = ("tools", "mcp_servers", "read", "write", "working_directory")


class GrantError(ValueError):
    """Grants that cannot be recorded; the text says what to change."""


@dataclass(frozen=True, slots=True)
class JobGrants:
    tools: tuple[str, ...] = ()
    mcp_servers: tuple[str, ...] = ()
    read: tuple[str, ...] = ()
    write: tuple[str, ...] = ()
    working_directory: str | None = None

    def __bool__(self) -> bool:
        return bool(
            self.tools or self.mcp_servers or self.read or self.write or self.working_directory
        )

    def lines(self) -> list[str]:
        """One plain line per grant, as the owner approves them."""
        return [
            *(f"may read {path}" for path in self.read),
            *(f"may write {path}" for path in self.write),
            *(f"may call {tool}" for tool in self.tools),
            *(f"starts MCP server {server}" for server in self.mcp_servers),
            *([f"works in {self.working_directory}"] if self.working_directory else []),
        ]

    def to_json(self) -> dict[str, Any]:
        """The grants as the API shows them (the field names ``execute_task`` takes)."""
        return {
            "tools": list(self.tools),
            "mcp_servers": list(self.mcp_servers),
            "read": list(self.read),
            "write": list(self.write),
            "working_directory": self.working_directory,
        }

    def run_context(self) -> dict[str, Any] | None:
        """The RunContext (JSON) a run applies; ``None`` when nothing is granted."""
        if not self:
            return None
        return {
            "allow_tools": list(self.tools),
            "mcp_servers": list(self.mcp_servers),
            "allow_fs_reads": list(self.read),
            "allow_fs_writes": list(self.write),
            "working_directory": self.working_directory,
        }

    @classmethod
    def of(cls, run_context: dict[str, Any] | None) -> JobGrants:
        """A stored job's grants (its RunContext; unknown or bad fields read as none)."""
        rc = run_context or {}

        def listed(key: str) -> tuple[str, ...]:
            value = rc.get(key)
            return tuple(v for v in value if isinstance(v, str)) if isinstance(value, list) else ()

        wd = rc.get("working_directory")
        return cls(
            tools=listed("allow_tools"),
            mcp_servers=listed("mcp_servers"),
            read=listed("allow_fs_reads"),
            write=listed("allow_fs_writes"),
            working_directory=wd if isinstance(wd, str) and wd else None,
        )

    def beyond(self, now: JobGrants) -> JobGrants:
        """What these grants give that ``now``'s do not (nothing: a narrowing). A folder
        covers what is in it, a write grant covers reads, ``mcp__news__*`` covers
        ``mcp__news__search``; a working directory other than ``now``'s is more. (An
        exact comparison refused narrowing a folder to a file in it, or writes to reads;
        found by review.)"""
        readable = (*now.read, *now.write)
        return JobGrants(
            tools=tuple(t for t in self.tools if not any(_tool_covers(n, t) for n in now.tools)),
            mcp_servers=tuple(s for s in self.mcp_servers if s not in now.mcp_servers),
            read=tuple(p for p in self.read if not any(_path_covers(n, p) for n in readable)),
            write=tuple(p for p in self.write if not any(_path_covers(n, p) for n in now.write)),
            working_directory=(
                self.working_directory
                if self.working_directory not in (None, now.working_directory)
                else None
            ),
        )

    def with_tool(self, tool: str) -> JobGrants:
        """These grants and ``tool`` (the "🔄 Session" choice on a job's card)."""
        if tool in self.tools:
            return self
        return JobGrants(
            (*self.tools, tool), self.mcp_servers, self.read, self.write, self.working_directory
        )


def _tool_covers(granted: str, asked: str) -> bool:
    """Whether tool pattern ``granted`` matches every tool ``asked`` matches."""
    if granted == asked:
        return True
    if asked.endswith("*") or asked in FS_CLASSES:
        return granted.endswith("*") and asked.startswith(granted[:-1]) and asked not in FS_CLASSES
    return tool_matches(granted, asked)


def _path_covers(granted: str, asked: str) -> bool:
    """Whether path grant ``granted`` covers every path ``asked`` grants (a bare folder is
    its subtree; ``.`` the whole workspace; ``x*`` what starts with ``x``)."""
    g, a = _tree(granted), _tree(asked)
    if g == "":
        return True  # the whole workspace
    if a == "":
        return False
    if _is_prefix(granted):
        return a.startswith(g)
    if _is_prefix(asked):  # "ab*" reaches past the folder "ab": only "ab/x*" stays in it
        return a.startswith(g + "/")
    return a == g or a.startswith(g + "/")


def _is_prefix(entry: str) -> bool:
    return entry.endswith("*") and not entry.endswith("/*")


def _tree(entry: str) -> str:
    """A grant's base: the folder (or prefix) it covers; "" for the whole workspace."""
    base = entry.rstrip("*").rstrip("/")
    return "" if base in (".", "") else base


class GrantChecker:
    """Checks proposed grants against what exists: the tools a job can call, the
    configured MCP servers, the workspace."""

    def __init__(
        self,
        workspace: Workspace,
        tool_names: Callable[[], Iterable[str]],
        mcp_servers: Callable[[], Iterable[str]],
    ) -> None:
        self._workspace = workspace
        self._tool_names = tool_names
        self._mcp_servers = mcp_servers

    def check(self, raw: object, *, as_shown: bool = False) -> JobGrants:
        """``raw`` (``execute_task``'s ``grants`` or the API's body) as checked grants.
        ``as_shown``: its paths are written as a job's grants are shown (from the
        workspace's root, as ``GET /api/jobs`` gives them), not from its working
        directory: the API's narrowing, whose body is what it read (until 2026-12-07 the
        job's own grants, sent back, were read as ``reports/reports/notes.txt`` and
        refused as more; found by review)."""
        if raw is None:
            return JobGrants()
        if not isinstance(raw, dict):
            raise GrantError("grants: must be an object with tools, mcp_servers, read, write")
        unknown = sorted(set(raw) - set(GRANT_FIELDS))
        if unknown:
            raise GrantError(
                f"grants: unknown field(s) {', '.join(map(str, unknown))} "
                f"(known: {', '.join(GRANT_FIELDS)})"
            )
        cwd = self._working_directory(raw.get("working_directory"))
        servers = self._servers(_entries(raw, "mcp_servers"))
        return JobGrants(
            tools=self._tools(_entries(raw, "tools")),
            mcp_servers=servers,
            read=self._paths(_entries(raw, "read"), None if as_shown else cwd, "read"),
            write=self._paths(_entries(raw, "write"), None if as_shown else cwd, "write"),
            working_directory=cwd,
        )

    def _tools(self, entries: list[str]) -> tuple[str, ...]:
        known = set(self._tool_names())
        servers = set(self._mcp_servers())
        checked: list[str] = []
        for entry in entries:
            try:
                pattern = validate_tool_pattern(entry)
            except ValueError as exc:
                raise GrantError(f"grants.tools: {exc}") from None
            if pattern in FS_CLASSES or is_fs_tool(pattern):
                raise GrantError(
                    f"grants.tools: {pattern!r} is a file tool; grant the paths it may use "
                    "in grants.read or grants.write instead"
                )
            if pattern.startswith("mcp__"):
                server = pattern[len("mcp__") :].split("__", 1)
                if len(server) < 2 or not server[0] or "*" in server[0]:
                    raise GrantError(
                        f"grants.tools: {pattern!r} names no MCP server; write "
                        "mcp__<server>__<tool> or mcp__<server>__*"
                    )
                if server[0] not in servers:
                    raise GrantError(
                        f"grants.tools: no MCP server {server[0]!r} is configured "
                        f"(configured: {', '.join(sorted(servers)) or 'none'})"
                    )
            elif "*" in pattern:
                raise GrantError(
                    f"grants.tools: {pattern!r} would match every tool, and a job runs with "
                    "nobody watching; name each tool, or one MCP server's tools as "
                    "mcp__<server>__*"
                )
            elif pattern not in known:
                raise GrantError(
                    f"grants.tools: there is no tool {pattern!r} a scheduled job can call"
                )
            if pattern not in checked:
                checked.append(pattern)
        return tuple(checked)

    def _servers(self, entries: list[str]) -> tuple[str, ...]:
        configured = set(self._mcp_servers())
        for entry in entries:
            if entry not in configured:
                raise GrantError(
                    f"grants.mcp_servers: no MCP server {entry!r} is configured "
                    f"(configured: {', '.join(sorted(configured)) or 'none'})"
                )
        return tuple(dict.fromkeys(entries))

    def _working_directory(self, raw: object) -> str | None:
        if raw is None or raw == "":
            return None
        if not isinstance(raw, str) or len(raw) > MAX_ENTRY_CHARS:
            raise GrantError("grants.working_directory: must be a workspace path")
        try:
            rel = canonical_path(self._workspace, raw)
        except PathRefused as exc:
            raise GrantError(f"grants.working_directory: {exc}") from None
        try:
            is_dir = (self._workspace.root / rel).is_dir()
        except OSError:  # a name too long for the file system: it names no directory
            is_dir = False  # (it raised past every handler: a 500; found by review)
        if not is_dir:
            raise GrantError(
                f"grants.working_directory: {raw!r} is not a directory of the workspace"
            )
        return None if rel == "." else rel

    def _paths(self, entries: list[str], cwd: str | None, what: str) -> tuple[str, ...]:
        base = self._workspace.root / cwd if cwd else None
        checked: list[str] = []
        for entry in entries:
            if "*" in entry:
                raise GrantError(
                    f"grants.{what}: {entry!r}: name a file or a folder (a folder covers "
                    "everything in it); patterns are not granted"
                )
            try:
                rel = canonical_path(self._workspace, entry, cwd=base)
            except PathRefused as exc:
                raise GrantError(f"grants.{what}: {exc}") from None
            if rel == ".":
                raise GrantError(
                    f"grants.{what}: {entry!r} is the whole workspace, and a job runs with "
                    "nobody watching; name the folders or files it needs"
                )
            if rel not in checked:
                checked.append(rel)
        return tuple(checked)


def _entries(raw: dict[str, Any], key: str) -> list[str]:
    value = raw.get(key)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise GrantError(f"grants.{key}: must be a list of strings")
    if len(value) > MAX_GRANTS:
        raise GrantError(
            f"grants.{key}: {len(value)} entries; a job may be granted at most {MAX_GRANTS}"
        )
    for entry in value:
        if not entry.strip() or len(entry) > MAX_ENTRY_CHARS:
            raise GrantError(f"grants.{key}: each entry must be 1 to {MAX_ENTRY_CHARS} characters")
    return [v.strip() for v in value]
