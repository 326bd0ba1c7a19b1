"""The ``[[mcp_servers]]`` entries of the TOML configuration.

```toml
[[mcp_servers]]
name = "time"                      # tools are named mcp__time__<tool>
command = ["uvx", "mcp-server-time", "--local-timezone", "UTC"]
env = { TZ = "UTC" }               # optional, merged over a minimal inherited environment
timeout_s = 30                     # optional: start-up and per-call limit

[[mcp_servers]]
name = "gmail"
url = "https://mcp.example.com/mcp"  # streamable HTTP
headers = { Authorization = "Bearer ..." }
enabled = false
```

``transport`` may be given (``"stdio"`` or ``"http"``) but follows from ``command``/``url``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["RESERVED_GROUPS", "McpServerConfig", "parse_mcp_servers"]

Transport = Literal["stdio", "http"]

# ``activate_tools`` groups that are not servers: ``config`` unlocks the Config-category tools.
RESERVED_GROUPS = frozenset({"config"})

_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,31}$")
_KEYS = frozenset({"name", "transport", "command", "env", "url", "headers", "timeout_s", "enabled"})


@dataclass(frozen=True, slots=True)
class McpServerConfig:
    """One MCP server: a local process over stdio, or a streamable-HTTP endpoint."""

    name: str
    transport: Transport
    command: tuple[str, ...] | None = None
    env: dict[str, str] | None = None
    url: str | None = None
    headers: dict[str, str] | None = None
    timeout_s: float = 30.0
    enabled: bool = True


def parse_mcp_servers(entries: Any) -> tuple[McpServerConfig, ...]:
    """Validate the ``mcp_servers`` array of tables; ``ValueError`` names the entry and field."""
    if entries is None:
        return ()
    if not isinstance(entries, list):
        raise ValueError("[[mcp_servers]] must be an array of tables")
    servers: list[McpServerConfig] = []
    seen: set[str] = set()
    for index, entry in enumerate(entries):
        server = _parse_entry(index, entry)
        if server.name in seen:
            raise ValueError(
                f"mcp_servers[{index}] ({server.name}): name: used by an earlier server"
            )
        seen.add(server.name)
        servers.append(server)
    return tuple(servers)


def _parse_entry(index: int, entry: Any) -> McpServerConfig:
    where = f"mcp_servers[{index}]"
    if not isinstance(entry, dict):
        raise ValueError(f"{where}: must be a table")
    name = entry.get("name")
    if not isinstance(name, str):
        raise ValueError(f"{where}: name: required, a string")
    # Not ending in '_' either: server "git_"'s tools (mcp__git___push) would fall under
    # every bypass, rule and allow_tools pattern written for server "git" (found by review).
    if not _NAME.match(name) or "__" in name or name.endswith("_"):
        raise ValueError(
            f"{where}: name: {name!r} must be 1-32 lowercase letters, digits, '_' or '-', "
            "starting with a letter or digit, without '__', not ending in '_'"
        )
    where = f"{where} ({name})"
    if name in RESERVED_GROUPS:
        raise ValueError(f"{where}: name: {name!r} is reserved")
    unknown = sorted(set(entry) - _KEYS)
    if unknown:
        raise ValueError(f"{where}: unknown keys {unknown} (expected: {', '.join(sorted(_KEYS))})")

    command = entry.get("command")
    url = entry.get("url")
    if (command is None) == (url is None):
        raise ValueError(f"{where}: give exactly one of command (stdio) or url (http)")
    transport = entry.get("transport", "stdio" if command is not None else "http")
    if transport not in ("stdio", "http"):
        raise ValueError(f"{where}: transport: must be 'stdio' or 'http', got {transport!r}")
    if transport == "stdio" and command is None:
        raise ValueError(f"{where}: transport: 'stdio' needs command, not url")
    if transport == "http" and url is None:
        raise ValueError(f"{where}: transport: 'http' needs url, not command")

    if command is not None and (
        not isinstance(command, list)
        or not command
        or not all(isinstance(part, str) and part for part in command)
    ):
        raise ValueError(f"{where}: command: must be a non-empty list of non-empty strings")
    if url is not None and (
        not isinstance(url, str) or not url.startswith(("http://", "https://"))
    ):
        raise ValueError(f"{where}: url: must be an http:// or https:// URL")

    env = _string_table(where, "env", entry.get("env"))
    headers = _string_table(where, "headers", entry.get("headers"))
    if env is not None and transport != "stdio":
        raise ValueError(f"{where}: env: only for a stdio server (command)")
    if headers is not None and transport != "http":
        raise ValueError(f"{where}: headers: only for an http server (url)")

    timeout = entry.get("timeout_s", 30.0)
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or not math.isfinite(timeout)
        or timeout <= 0
    ):
        raise ValueError(f"{where}: timeout_s: must be a positive number of seconds")
    enabled = entry.get("enabled", True)
    if not isinstance(enabled, bool):
        raise ValueError(f"{where}: enabled: must be true or false")

    return McpServerConfig(
        name=name,
        transport=transport,
        command=tuple(command) if command is not None else None,
        env=env,
        url=url,
        headers=headers,
        timeout_s=float(timeout),
        enabled=enabled,
    )


def _string_table(where: str, field: str, value: Any) -> dict[str, str] | None:
    if value is None:
        return None
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise ValueError(f"{where}: {field}: must be a table of strings")
    return dict(value)
