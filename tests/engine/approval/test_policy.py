"""RulesPolicy: rules, then bypass, then the RunContext fast path, over a real SQLite store."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from engine.approval.bypass import Bypasses
from engine.approval.policy import RulesPolicy
from engine.approval.rules import Rule, RuleStore
from engine.approval.run_context import RunContext
from engine.session.protocols import Decision, GateRequest
from engine.store.db import Database, open_database
from engine.store.rows import ToolCallRow
from engine.tools.protocols import ToolCategory
from engine.tools.workspace import Workspace
from tests.clock import FakeClock

CATEGORIES = {"execute_cmd": ToolCategory.SHELL, "write_file": ToolCategory.FILESYSTEM}


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[Database]:
    database = await open_database(f"sqlite:///{tmp_path / 'chathub.db'}")
    try:
        yield database
    finally:
        await database.close()


@pytest.fixture
def workspace(tmp_path: Path) -> Workspace:
    ws = Workspace(tmp_path / "ws")
    (ws.root / "secrets").mkdir()
    (ws.root / "memory").mkdir()
    return ws


class Env:
    """A policy plus the knobs a test turns."""

    def __init__(self, db: Database, workspace: Workspace) -> None:
        self.clock = FakeClock()
        self.bypasses = Bypasses(self.clock)
        self.rules = RuleStore(db)
        self.run_contexts: dict[int, RunContext] = {}
        self.workspace = workspace
        self.policy = RulesPolicy(
            self.rules,
            workspace,
            self.bypasses,
            CATEGORIES.get,
            self.clock,
            run_context_for=self._run_context,
            lasting=lambda name: name == "execute_task",
        )

    async def _run_context(self, session_id: int) -> RunContext:
        return self.run_contexts.get(session_id, RunContext())

    async def decide(
        self, tool: str, session_id: int = 1, agent: str = "main", **args: Any
    ) -> Decision:
        call = ToolCallRow(1, 1, "call_1", tool, json.dumps(args), None, "running")
        request = GateRequest(session_id, agent, "telegram:1", call, args)
        return (await self.policy.check(request)).decision


@pytest.fixture
def env(db: Database, workspace: Workspace) -> Env:
    return Env(db, workspace)


async def test_seeded_rules_apply(env: Env) -> None:
    assert await env.decide("notify") is Decision.ALLOW
    assert await env.decide("execute_cmd", command="ls") is Decision.REQUIRE
    assert await env.decide("write_file", path="memory/today.md") is Decision.ALLOW
    assert await env.decide("read_file", path="notes.md") is Decision.REQUIRE
    assert await env.decide("list_files") is Decision.REQUIRE


async def test_paths_that_escape_or_reach_secrets_are_denied(env: Env) -> None:
    await env.rules.add_rule("@fs_any", "allow", path_pattern="*", priority=1)
    env.policy.invalidate()
    assert await env.decide("read_file", path="notes.md") is Decision.ALLOW
    assert await env.decide("read_file", path="secrets/api.key") is Decision.DENY
    assert await env.decide("read_file", path="memory/../secrets/api.key") is Decision.DENY
    assert await env.decide("write_file", path="../outside.txt") is Decision.DENY
    assert await env.decide("read_file", path="/etc/passwd") is Decision.DENY
    assert await env.decide("read_file") is Decision.DENY  # no path at all


async def test_symlink_into_secrets_is_denied(env: Env) -> None:
    os.symlink(env.workspace.root / "secrets", env.workspace.root / "memory" / "keys")
    # memory/* is allowed by name, but the link leads into secrets/.
    assert await env.decide("read_file", path="memory/keys/api.key") is Decision.DENY


async def test_dotdot_path_is_judged_on_its_canonical_form(env: Env) -> None:
    assert await env.decide("write_file", path="docs/../memory/a.md") is Decision.ALLOW
    assert await env.decide("write_file", path="memory/../notes.md") is Decision.REQUIRE


async def test_rule_cache_needs_invalidate(env: Env) -> None:
    assert await env.decide("execute_cmd") is Decision.REQUIRE
    await env.rules.add_rule("execute_cmd", "deny", priority=1)
    assert await env.decide("execute_cmd") is Decision.REQUIRE  # cached
    env.policy.invalidate()
    assert await env.decide("execute_cmd") is Decision.DENY


async def test_session_group_comes_first(env: Env) -> None:
    await env.rules.add_group("cron")
    await env.rules.add_rule("notify", "deny", group="cron")
    env.policy.invalidate()
    env.run_contexts[2] = RunContext(security_group="cron")
    assert await env.decide("notify", session_id=2) is Decision.DENY
    assert await env.decide("notify", session_id=1) is Decision.ALLOW


async def test_rule_load_error_requires(env: Env) -> None:
    async def broken(group: str | None = None) -> list[Rule]:
        raise RuntimeError("database is down")

    env.rules.list_rules = broken  # type: ignore[method-assign]
    env.bypasses.grant(1, "all")
    assert await env.decide("notify") is Decision.REQUIRE
    assert await env.decide("write_file", path="memory/a.md") is Decision.REQUIRE


async def test_run_context_read_error_allows_nothing_but_keeps_deny(env: Env) -> None:
    async def broken(session_id: int) -> RunContext:
        raise RuntimeError("no such session")

    env.policy.run_context_for = broken
    assert await env.decide("notify") is Decision.REQUIRE
    assert await env.decide("read_file", path="secrets/x") is Decision.DENY


async def test_bypass_turns_require_into_allow(env: Env) -> None:
    env.bypasses.grant(1, "category", "Shell")
    assert await env.decide("execute_cmd") is Decision.ALLOW
    assert await env.decide("execute_cmd", session_id=2) is Decision.REQUIRE
    assert await env.decide("write_file", path="notes.md") is Decision.REQUIRE


async def test_bypass_never_turns_deny_into_allow(env: Env) -> None:
    await env.rules.add_rule("execute_cmd", "deny", priority=1)
    env.policy.invalidate()
    env.bypasses.grant(1, "all")
    assert await env.decide("execute_cmd") is Decision.DENY
    assert await env.decide("write_file", path="secrets/key") is Decision.DENY


async def test_no_bypass_covers_a_call_whose_effect_outlives_it(env: Env) -> None:
    """⏱ 15 min or 🔄 Session let the model schedule a job with standing grants, unseen,
    which outlived the bypass and a restart (found by review): such a call still asks."""
    env.bypasses.grant(1, "all")
    assert await env.decide("execute_cmd", command="ls") is Decision.ALLOW
    assert await env.decide("execute_task", mode="cron", prompt="x") is Decision.REQUIRE


async def test_expired_bypass_is_ignored(env: Env) -> None:
    env.bypasses.grant(1, "all", ttl=timedelta(minutes=1))
    assert await env.decide("execute_cmd") is Decision.ALLOW
    env.clock.now += timedelta(minutes=2)
    assert await env.decide("execute_cmd") is Decision.REQUIRE


async def test_run_context_fast_path(env: Env) -> None:
    env.run_contexts[1] = RunContext(allow_fs_writes=["data"], allow_fs_reads=["docs/*"])
    assert await env.decide("write_file", path="data/out.csv") is Decision.ALLOW
    assert await env.decide("read_file", path="docs/readme.md") is Decision.ALLOW
    assert await env.decide("write_file", path="docs/readme.md") is Decision.REQUIRE
    assert await env.decide("write_file", path="data/../notes.md") is Decision.REQUIRE


async def test_fast_path_never_overrides_deny(env: Env) -> None:
    await env.rules.add_rule("@fs_write", "deny", path_pattern="data/locked/*", priority=1)
    env.policy.invalidate()
    env.run_contexts[1] = RunContext(allow_fs_writes=["*"])
    assert await env.decide("write_file", path="data/locked/x") is Decision.DENY
    assert await env.decide("write_file", path="data/open/x") is Decision.ALLOW


async def test_working_directory_resolves_relative_paths(env: Env) -> None:
    env.run_contexts[1] = RunContext(working_directory="memory")
    assert await env.decide("write_file", path="a.md") is Decision.ALLOW
    assert await env.decide("write_file", path="../secrets/k") is Decision.DENY


async def test_run_context_carried_by_the_request_is_used(env: Env) -> None:
    call = ToolCallRow(1, 1, "c", "write_file", '{"path": "data/open/x"}', None, "running")
    rc = RunContext(allow_fs_writes=["data/open/*"]).to_json()
    request = GateRequest(1, "main", "t", call, {"path": "data/open/x"}, run_context=rc)
    assert (await env.policy.check(request)).decision is Decision.ALLOW
