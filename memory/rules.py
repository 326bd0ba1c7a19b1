"""The default group's rules for memory's tools (rows of migration 0014)."""

from __future__ import annotations

from sqlalchemy.engine import Connection

from engine.store import approval_rules, insert_for, permission_groups, utcnow

__all__ = ["MEMORY_TOOLS", "allow_memory_tools"]

#: Tools that read or change only the speaker's own memory: allowed without asking, like
#: the agent's ``memory/`` files (an owner may still add a rule above them).
MEMORY_TOOLS = ("search_sessions", "memory_list", "memory_save", "memory_forget")


def allow_memory_tools(conn: Connection) -> None:
    """The default group's allow rules for ``MEMORY_TOOLS`` (migration 0014's rows)."""
    now = utcnow()
    conn.execute(
        insert_for(conn.dialect.name, permission_groups)
        .values(name="default", description="Rules every session falls back to", created_at=now)
        .on_conflict_do_nothing()
    )
    conn.execute(
        approval_rules.insert(),
        [
            {
                "group_name": "default",
                "tool_pattern": name,
                "action": "allow",
                "priority": 50,
                "note": "long-term memory: the speaker's own",
                "created_at": now,
            }
            for name in MEMORY_TOOLS
        ],
    )
