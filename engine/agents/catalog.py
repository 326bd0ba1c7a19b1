"""Agent definitions: ``agents/<id>/AGENT.md`` with a small metadata header.

The header is a block of ``key: value`` lines between ``---`` fences::

    ---
    kind: chat            # chat | task | system
    model: gpt-4o-mini    # optional preferred model
    description: one line shown to other agents
    tools: read_file, list_files   # optional: only these tools (plus per-level ones)
    ---
    The agent's system prompt.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Literal, cast

AgentKind = Literal["chat", "task", "system"]
_KINDS = ("chat", "task", "system")
_ID = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
BUILTIN_DIR = Path(__file__).parent


class AgentDefinitionError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class AgentDefinition:
    id: str
    kind: AgentKind
    prompt: str
    model: str | None = None
    description: str = ""
    #: Only these tools (besides the per-level ones every agent gets); None: all.
    tools: tuple[str, ...] | None = None

    def lists(self, tool: str) -> bool:
        """Whether ``tools`` names ``tool`` (a name, or a pattern: ``mcp__news__*``);
        true for every tool when there is no list."""
        if self.tools is None:
            return True
        return tool in self.tools or any(
            "*" in name and fnmatchcase(tool, name) for name in self.tools
        )


def parse_agent(agent_id: str, text: str) -> AgentDefinition:
    if not _ID.match(agent_id):
        raise AgentDefinitionError(f"agent id {agent_id!r} must match {_ID.pattern}")
    meta: dict[str, str] = {}
    body = text
    if text.startswith("---"):
        header, sep, rest = text[3:].partition("\n---")
        if not sep:
            raise AgentDefinitionError(f"agent {agent_id}: header opened with --- is never closed")
        body = rest.split("\n", 1)[1] if "\n" in rest else ""
        for number, line in enumerate(header.strip().splitlines(), start=2):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            key, colon, value = line.partition(":")
            if not colon:
                raise AgentDefinitionError(f"agent {agent_id}: line {number} is not 'key: value'")
            meta[key.strip()] = value.strip()
    unknown = set(meta) - {"kind", "model", "description", "tools"}
    if unknown:
        raise AgentDefinitionError(f"agent {agent_id}: unknown header keys {sorted(unknown)}")
    kind = meta.get("kind", "chat")
    if kind not in _KINDS:
        raise AgentDefinitionError(f"agent {agent_id}: kind must be one of {_KINDS}, got {kind!r}")
    prompt = body.strip()
    if not prompt:
        raise AgentDefinitionError(f"agent {agent_id}: the prompt is empty")
    return AgentDefinition(
        id=agent_id,
        kind=cast(AgentKind, kind),
        prompt=prompt,
        model=meta.get("model") or None,
        description=meta.get("description", ""),
        tools=tuple(t.strip() for t in meta["tools"].split(",") if t.strip())
        if "tools" in meta
        else None,
    )


class AgentCatalog:
    """Built-in agents, overridden or extended by an optional directory."""

    def __init__(self, agents: dict[str, AgentDefinition]) -> None:
        self._agents = dict(agents)

    @classmethod
    def load(cls, *directories: Path | None) -> AgentCatalog:
        agents: dict[str, AgentDefinition] = {}
        for directory in (BUILTIN_DIR, *directories):
            if directory is None:
                continue
            for path in sorted(directory.glob("*/AGENT.md")):
                agent_id = path.parent.name
                agents[agent_id] = parse_agent(agent_id, path.read_text(encoding="utf-8"))
        if "main" not in agents:
            raise AgentDefinitionError("no 'main' agent defined")
        return cls(agents)

    def task_agents(self) -> list[AgentDefinition]:
        return [a for a in self._agents.values() if a.kind == "task"]

    def get(self, agent_id: str) -> AgentDefinition | None:
        return self._agents.get(agent_id)

    def __getitem__(self, agent_id: str) -> AgentDefinition:
        try:
            return self._agents[agent_id]
        except KeyError:
            raise KeyError(f"unknown agent {agent_id!r}") from None

    @property
    def ids(self) -> list[str]:
        return sorted(self._agents)
