"""Approval rules in the database, the seeded defaults, and rule evaluation."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from engine.approval.patterns import (
    path_matches,
    tool_matches,
    validate_path_pattern,
    validate_tool_pattern,
)
from engine.session.protocols import Decision
from engine.store.db import Database
from engine.store.dialects import insert_for
from engine.store.schema import approval_rules, permission_groups, utcnow

__all__ = [
    "CATCH_ALL_PRIORITY",
    "DEFAULT_GROUP",
    "DEFAULT_PRIORITY",
    "PLUMBING_TOOLS",
    "PermissionGroup",
    "Rule",
    "RuleError",
    "RuleStore",
    "evaluate",
]

DEFAULT_GROUP = "default"
DEFAULT_PRIORITY = 100
CATCH_ALL_PRIORITY = 999_999
PLUMBING_TOOLS = (
    "update_scratchpad",
    "write_todos",
    "notify",
    "activate_tools",
    "read_notification",
    "ask_user_clarification",
    "list_tasks",
    # Spawning a sub-agent changes nothing by itself; every call the sub-agent makes is gated.
    "execute_subtask",
)
_MAX_NAME = 64


class RuleError(ValueError):
    """A refused rule or group change; ``field`` names the offending input."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


@dataclass(frozen=True, slots=True)
class Rule:
    id: int
    group: str
    tool_pattern: str
    action: Decision
    priority: int = DEFAULT_PRIORITY
    path_pattern: str | None = None
    agent_id: str | None = None
    source: str | None = None
    note: str = ""
    created_at: datetime | None = None

    @property
    def is_catch_all(self) -> bool:
        """A bare ``*``: any tool, any path, agent and source."""
        return (
            self.tool_pattern == "*"
            and self.path_pattern is None
            and self.agent_id is None
            and self.source is None
        )

    def matches(
        self, tool_name: str, path: str | None, agent_id: str | None, source: str | None
    ) -> bool:
        """Whether this rule applies (a path rule never matches a call without a path)."""
        if self.agent_id is not None and self.agent_id != agent_id:
            return False
        if self.source is not None and self.source != source:
            return False
        if not tool_matches(self.tool_pattern, tool_name):
            return False
        if self.path_pattern is not None:
            return path is not None and path_matches(self.path_pattern, path)
        return True


@dataclass(frozen=True, slots=True)
class PermissionGroup:
    name: str
    description: str
    created_at: datetime | None = None


def _seed_rules() -> list[dict[str, object]]:
    rules: list[dict[str, object]] = [
        {
            "tool_pattern": "@fs_any",
            "path_pattern": "secrets/*",
            "action": "deny",
            "priority": 10,
            "note": "secrets/ is never readable or writable",
        },
        {
            "tool_pattern": "@fs_any",
            "path_pattern": "memory/*",
            "action": "allow",
            "priority": 20,
            "note": "the agent's own memory",
        },
    ]
    rules += [
        {"tool_pattern": name, "action": "allow", "priority": 50, "note": "plumbing tool"}
        for name in PLUMBING_TOOLS
    ]
    rules.append(
        {
            "tool_pattern": "*",
            "action": "require",
            "priority": CATCH_ALL_PRIORITY,
            "note": "anything else asks a human",
        }
    )
    return rules


def evaluate(
    rules: Iterable[Rule],
    group: str | None,
    tool_name: str,
    path: str | None,
    agent_id: str | None,
    source: str | None,
) -> tuple[Decision, Rule | None]:
    """The session's ``group`` first, then ``default``; ``priority, id`` order; first match wins.

    No match yields ``REQUIRE``.
    """
    tiers = [group] if group and group != DEFAULT_GROUP else []
    tiers.append(DEFAULT_GROUP)
    ordered = sorted(rules, key=lambda r: (r.priority, r.id))
    for tier in tiers:
        for rule in ordered:
            if rule.group == tier and rule.matches(tool_name, path, agent_id, source):
                return rule.action, rule
    return Decision.REQUIRE, None


def _to_rule(row: sa.Row) -> Rule:
    return Rule(
        id=row.id,
        group=row.group_name,
        tool_pattern=row.tool_pattern,
        action=Decision(row.action),
        priority=row.priority,
        path_pattern=_as_matched(row.path_pattern),
        agent_id=row.agent_id,
        source=row.source,
        note=row.note or "",
        created_at=row.created_at,
    )


def _as_matched(path_pattern: str | None) -> str | None:
    """A stored pattern as the gate matches it: one stored before 2026-12-06 may be
    written ``./private/*``, which matched nothing."""
    if path_pattern is None:
        return None
    try:
        return validate_path_pattern(path_pattern)
    except ValueError:  # stored by hand: kept as written
        return path_pattern


def _check_name(field: str, value: str | None) -> str | None:
    if value is None:
        return None
    value = value.strip()
    if not value:
        raise RuleError(field, "is empty (omit it to match any)")
    if len(value) > _MAX_NAME and field != "source":
        raise RuleError(field, f"is longer than {_MAX_NAME} characters")
    return value


def _insert_group_if_absent(conn: Connection, name: str, description: str) -> None:
    values = {"name": name, "description": description, "created_at": utcnow()}
    insert = insert_for(conn.dialect.name, permission_groups)
    conn.execute(insert.values(**values).on_conflict_do_nothing())


class RuleStore:
    """Rules and permission groups over a ``Database``."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def seed_defaults(self) -> bool:
        """Insert the default rules once; return whether this call inserted them.

        The ``seeded`` flag of the ``default`` group is the marker: rules the owner removed
        afterwards are never added back. Safe when several processes start at once.
        """
        return await self.db.run(_seed)

    async def list_rules(self, group: str | None = None) -> list[Rule]:
        """Rules (of ``group``, or all) in evaluation order within each group."""
        return await self.db.run(_list_rules, group)

    async def add_rule(
        self,
        tool_pattern: str,
        action: Decision | str,
        *,
        group: str = DEFAULT_GROUP,
        path_pattern: str | None = None,
        agent_id: str | None = None,
        source: str | None = None,
        priority: int = DEFAULT_PRIORITY,
        note: str = "",
    ) -> Rule:
        """Validate and insert a rule; raise ``RuleError`` naming the bad field."""
        try:
            tool_pattern = validate_tool_pattern(tool_pattern)
        except ValueError as exc:
            raise RuleError("tool", str(exc)) from None
        if path_pattern is not None:
            try:
                path_pattern = validate_path_pattern(path_pattern)
            except ValueError as exc:
                raise RuleError("path", str(exc)) from None
        try:
            decision = Decision(str(action).strip().lower())
        except ValueError:
            raise RuleError("action", f"{action!r} is not one of allow, deny, require") from None
        if isinstance(priority, bool) or not isinstance(priority, int):
            raise RuleError("priority", f"{priority!r} is not an integer")
        if not -(2**31) <= priority < 2**31:
            raise RuleError("priority", f"{priority} is out of range")
        rule = Rule(
            id=0,
            group=_check_name("group", group) or DEFAULT_GROUP,
            tool_pattern=tool_pattern,
            action=decision,
            priority=priority,
            path_pattern=path_pattern,
            agent_id=_check_name("agent", agent_id),
            source=_check_name("source", source),
            note=note or "",
        )
        return await self.db.run(_add_rule, rule)

    async def remove_rule(self, rule_id: int) -> Rule:
        """Delete one rule; raise ``RuleError`` when it does not exist."""
        return await self.db.run(_remove_rule, rule_id)

    async def list_groups(self) -> list[PermissionGroup]:
        return await self.db.run(_list_groups)

    async def add_group(self, name: str, description: str = "") -> PermissionGroup:
        """Create a group; raise ``RuleError`` when the name is invalid or taken."""
        checked = _check_name("group", name)
        assert checked is not None
        return await self.db.run(_add_group, checked, description)

    async def remove_group(self, name: str, *, with_rules: bool = False) -> None:
        """Delete a group (never ``default``); its rules too only with ``with_rules``."""
        if name == DEFAULT_GROUP:
            raise RuleError("group", "the default group cannot be deleted")
        await self.db.run(_remove_group, name, with_rules)


def _seed(conn: Connection) -> bool:
    _insert_group_if_absent(conn, DEFAULT_GROUP, "Rules every session falls back to")
    # The conditional UPDATE is the claim: of concurrent seeders only one sees a row change.
    claimed = conn.execute(
        permission_groups.update()
        .where(permission_groups.c.name == DEFAULT_GROUP, permission_groups.c.seeded.is_(False))
        .values(seeded=True)
    ).rowcount
    if claimed != 1:
        return False
    now = utcnow()
    conn.execute(
        approval_rules.insert(),
        [
            {
                "group_name": DEFAULT_GROUP,
                "path_pattern": None,
                "agent_id": None,
                "source": None,
                "created_at": now,
                **rule,
            }
            for rule in _seed_rules()
        ],
    )
    return True


def _list_rules(conn: Connection, group: str | None) -> list[Rule]:
    query = sa.select(approval_rules).order_by(
        approval_rules.c.group_name, approval_rules.c.priority, approval_rules.c.id
    )
    if group is not None:
        query = query.where(approval_rules.c.group_name == group)
    return [_to_rule(row) for row in conn.execute(query)]


def _add_rule(conn: Connection, rule: Rule) -> Rule:
    exists = conn.execute(
        sa.select(permission_groups.c.name).where(permission_groups.c.name == rule.group)
    ).first()
    if exists is None:
        raise RuleError("group", f"no permission group {rule.group!r}")
    if rule.is_catch_all:
        for other in _list_rules(conn, rule.group):
            if other.is_catch_all and other.action != rule.action:
                raise RuleError(
                    "tool",
                    f"group {rule.group!r} already has a '*' catch-all (rule {other.id}, "
                    f"{other.action}); edit or remove it instead of adding a second one",
                )
    created = utcnow()
    rule_id = conn.execute(
        approval_rules.insert()
        .values(
            group_name=rule.group,
            agent_id=rule.agent_id,
            source=rule.source,
            tool_pattern=rule.tool_pattern,
            path_pattern=rule.path_pattern,
            action=rule.action.value,
            priority=rule.priority,
            note=rule.note,
            created_at=created,
        )
        .returning(approval_rules.c.id)
    ).scalar_one()
    row = conn.execute(sa.select(approval_rules).where(approval_rules.c.id == rule_id)).one()
    return _to_rule(row)


def _remove_rule(conn: Connection, rule_id: int) -> Rule:
    row = conn.execute(sa.select(approval_rules).where(approval_rules.c.id == rule_id)).first()
    if row is None:
        raise RuleError("id", f"no rule {rule_id}")
    conn.execute(approval_rules.delete().where(approval_rules.c.id == rule_id))
    return _to_rule(row)


def _list_groups(conn: Connection) -> list[PermissionGroup]:
    rows = conn.execute(sa.select(permission_groups).order_by(permission_groups.c.name))
    return [PermissionGroup(r.name, r.description, r.created_at) for r in rows]


def _add_group(conn: Connection, name: str, description: str) -> PermissionGroup:
    exists = conn.execute(
        sa.select(permission_groups.c.name).where(permission_groups.c.name == name)
    ).first()
    if exists is not None:
        raise RuleError("group", f"permission group {name!r} already exists")
    now = utcnow()
    conn.execute(
        permission_groups.insert().values(name=name, description=description, created_at=now)
    )
    return PermissionGroup(name, description, now)


def _remove_group(conn: Connection, name: str, with_rules: bool) -> None:
    exists = conn.execute(
        sa.select(permission_groups.c.name).where(permission_groups.c.name == name)
    ).first()
    if exists is None:
        raise RuleError("group", f"no permission group {name!r}")
    count = conn.execute(
        sa.select(sa.func.count()).where(approval_rules.c.group_name == name)
    ).scalar_one()
    if count and not with_rules:
        raise RuleError("group", f"group {name!r} still has {count} rule(s)")
    conn.execute(approval_rules.delete().where(approval_rules.c.group_name == name))
    conn.execute(permission_groups.delete().where(permission_groups.c.name == name))
