"""RuleStore on both back ends, the seeded defaults, and evaluation order."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from engine.approval.rules import (
    CATCH_ALL_PRIORITY,
    PLUMBING_TOOLS,
    Rule,
    RuleError,
    RuleStore,
    evaluate,
)
from engine.session.protocols import Decision
from engine.store import approval_rules, utcnow
from engine.store.db import Database, open_database
from memory.rules import MEMORY_TOOLS
from tests.pg import BACKENDS, database_url


@pytest.fixture(params=BACKENDS)
async def db(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Database]:
    async with database_url(request.param, tmp_path, migrated=True) as url:
        database = await open_database(url)
        try:
            yield database
        finally:
            await database.close()


@pytest.fixture
async def rules(db: Database) -> RuleStore:
    store = RuleStore(db)
    await store.seed_defaults()
    return store


async def test_defaults_are_seeded_once(db: Database) -> None:
    store = RuleStore(db)
    assert await store.seed_defaults() is True
    seeded = await store.list_rules("default")
    allowed = [r.tool_pattern for r in seeded if r.action == "allow" and r.path_pattern is None]
    # The memory layer's migration allows its own tools (memory/rules.py) before the seed.
    assert allowed == [*MEMORY_TOOLS, *PLUMBING_TOOLS]
    catch_all = [r for r in seeded if r.is_catch_all]
    assert len(catch_all) == 1
    assert catch_all[0].action is Decision.REQUIRE
    assert catch_all[0].priority == CATCH_ALL_PRIORITY
    assert await store.seed_defaults() is False
    assert len(await store.list_rules()) == len(seeded)


async def test_a_removed_default_rule_is_not_seeded_again(rules: RuleStore) -> None:
    notify = next(r for r in await rules.list_rules() if r.tool_pattern == "notify")
    await rules.remove_rule(notify.id)
    assert await rules.seed_defaults() is False
    assert "notify" not in [r.tool_pattern for r in await rules.list_rules()]


async def test_seeded_defaults_decide_as_documented(rules: RuleStore) -> None:
    loaded = await rules.list_rules()

    def decide(tool: str, path: str | None = None) -> Decision:
        return evaluate(loaded, "default", tool, path, "main", "telegram:1")[0]

    assert decide("notify") is Decision.ALLOW
    assert decide("execute_cmd") is Decision.REQUIRE
    assert decide("read_file", "secrets/key") is Decision.DENY
    assert decide("write_file", "secrets") is Decision.DENY
    assert decide("write_file", "memory/today.md") is Decision.ALLOW
    assert decide("write_file", "memory-old/today.md") is Decision.REQUIRE
    assert decide("read_file", "notes.md") is Decision.REQUIRE


async def test_add_and_remove_a_rule(rules: RuleStore) -> None:
    rule = await rules.add_rule(
        "mcp__gmail__*", "allow", agent_id="mail", source="web", priority=5, note="mail agent"
    )
    assert rule.id > 0
    assert (rule.group, rule.agent_id, rule.source, rule.note) == (
        "default",
        "mail",
        "web",
        "mail agent",
    )
    loaded = await rules.list_rules()
    assert evaluate(loaded, None, "mcp__gmail__send", None, "mail", "web") == (
        Decision.ALLOW,
        rule,
    )
    # Another agent falls through to the catch-all.
    assert evaluate(loaded, None, "mcp__gmail__send", None, "main", "web")[0] is Decision.REQUIRE
    removed = await rules.remove_rule(rule.id)
    assert removed.id == rule.id
    with pytest.raises(RuleError, match="id: no rule"):
        await rules.remove_rule(rule.id)


async def test_a_deny_rule_written_with_dot_slash_denies(rules: RuleStore, db: Database) -> None:
    """Stored as written, ``./private/*`` never matched the gate's canonical path: the
    rule was listed and did nothing (found by review on 2026-12-06); one stored so before
    is read as it is matched."""
    await rules.add_rule("read_file", "allow", priority=30)
    await rules.add_rule("@fs_any", "deny", path_pattern="./private/*", priority=5)
    await db.run(
        lambda c: c.execute(
            sa.insert(approval_rules).values(
                group_name="default",
                tool_pattern="@fs_any",
                action="deny",
                priority=6,
                path_pattern="./keys//*",
                created_at=utcnow(),
            )
        )
    )
    loaded = await rules.list_rules()

    def decide(path: str) -> Decision:
        return evaluate(loaded, None, "read_file", path, "main", "telegram:1")[0]

    assert decide("private/key") is Decision.DENY
    assert decide("keys/id_ed25519") is Decision.DENY
    assert decide("notes.md") is Decision.ALLOW


async def test_invalid_pattern_is_refused_naming_the_field(rules: RuleStore) -> None:
    before = await rules.list_rules()
    with pytest.raises(RuleError, match=r"^tool: .*may only end") as info:
        await rules.add_rule("mcp__*__send", "allow")
    assert info.value.field == "tool"
    with pytest.raises(RuleError, match=r"^path: .*'\.\.'"):
        await rules.add_rule("@fs_any", "allow", path_pattern="../etc/*")
    with pytest.raises(RuleError, match=r"^action: "):
        await rules.add_rule("notify", "maybe")
    with pytest.raises(RuleError, match=r"^group: no permission group"):
        await rules.add_rule("notify", "allow", group="nope")
    assert await rules.list_rules() == before


async def test_second_catch_all_with_another_action_is_refused(rules: RuleStore) -> None:
    with pytest.raises(RuleError, match=r"already has a '\*' catch-all"):
        await rules.add_rule("*", "allow", priority=1)
    # A scoped '*' is not a catch-all, and the same action again is harmless.
    await rules.add_rule("*", "allow", agent_id="trusted")
    await rules.add_rule("*", "require")
    # Another group may choose its own catch-all.
    await rules.add_group("cron", "headless jobs")
    await rules.add_rule("*", "deny", group="cron")


async def test_default_group_cannot_be_deleted(rules: RuleStore) -> None:
    with pytest.raises(RuleError, match="default group cannot be deleted"):
        await rules.remove_group("default")
    assert "default" in [g.name for g in await rules.list_groups()]


async def test_groups(rules: RuleStore) -> None:
    await rules.add_group("cron")
    with pytest.raises(RuleError, match="already exists"):
        await rules.add_group("cron")
    await rules.add_rule("execute_cmd", "deny", group="cron")
    with pytest.raises(RuleError, match="still has 1 rule"):
        await rules.remove_group("cron")
    await rules.remove_group("cron", with_rules=True)
    assert [g.name for g in await rules.list_groups()] == ["default"]
    assert all(r.group == "default" for r in await rules.list_rules())


def _rule(id: int, group: str, tool: str, action: str, priority: int = 100) -> Rule:
    return Rule(id=id, group=group, tool_pattern=tool, action=Decision(action), priority=priority)


def test_session_group_is_evaluated_before_default() -> None:
    rules = [
        _rule(1, "default", "execute_cmd", "allow", priority=1),
        _rule(2, "cron", "execute_cmd", "deny", priority=500),
    ]
    assert evaluate(rules, "cron", "execute_cmd", None, None, None)[1] == rules[1]
    assert evaluate(rules, "default", "execute_cmd", None, None, None)[1] == rules[0]
    assert evaluate(rules, "other", "execute_cmd", None, None, None)[1] == rules[0]


def test_priority_then_id_and_first_match_wins() -> None:
    rules = [
        _rule(3, "default", "execute_cmd", "deny", priority=10),
        _rule(2, "default", "execute_*", "allow", priority=10),
        _rule(1, "default", "*", "allow", priority=20),
    ]
    assert evaluate(rules, None, "execute_cmd", None, None, None)[1] == rules[1]


def test_no_match_requires() -> None:
    assert evaluate([], None, "anything", None, None, None) == (Decision.REQUIRE, None)


def test_path_rule_never_matches_a_call_without_a_path() -> None:
    rule = Rule(1, "default", "*", Decision.ALLOW, path_pattern="*")
    assert evaluate([rule], None, "execute_cmd", None, None, None) == (Decision.REQUIRE, None)
