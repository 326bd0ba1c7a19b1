"""The shell and ``secrets/``: the file tools refuse ``secrets/`` by path, but a command
can ``cat`` it. What keeps it safe is that ``execute_cmd`` asks a person first; a rule
that lets the shell run unasked (``allow``) hands ``secrets/`` to the agent."""

from __future__ import annotations

import logging

from bot.checks.database import missing_sqlite_file
from bot.checks.result import Check
from engine.approval import DEFAULT_GROUP, Rule, RuleStore, evaluate
from engine.session import Decision
from engine.store import connect

__all__ = ["check_shell_gate"]

log = logging.getLogger(__name__)

SHELL_TOOL = "execute_cmd"


async def check_shell_gate(database_url: str) -> Check:
    fine = Check("workspace.shell", True, "the shell asks before it runs a command")
    if missing_sqlite_file(database_url) is not None:
        return fine  # no database yet: the seeded defaults ask
    db = None
    try:
        db = connect(database_url)
        rules = await RuleStore(db).list_rules()
    except Exception as exc:  # the database line reports what is wrong with it
        log.info("shell gate check: rules unreadable: %s: %s", type(exc).__name__, exc)
        if "no such table" in str(exc) or "does not exist" in str(exc):
            return fine  # an empty database: the defaults are seeded at the first start
        return Check(
            "workspace.shell",
            False,
            "the approval rules cannot be read, so whether the shell asks first is unknown",
            "fix the database (see its line)",
        )
    finally:
        if db is not None:
            await db.close()
    rule = _unasked(rules)
    if rule is None:
        return fine
    return Check(
        "workspace.shell",
        False,
        f"rule {rule.id} lets {SHELL_TOOL} run without asking: the agent's shell can read secrets/",
        f"remove it (`chathub rules remove {rule.id}`) or add a narrower rule",
    )


def _unasked(rules: list[Rule]) -> Rule | None:
    """The rule that lets the shell run unasked somewhere: in any group, for any agent or
    chat a rule names (until 2026-12-06 only a call of no chat and no agent was asked
    about, so "allow execute_cmd for telegram:42" passed as asking; found by review)."""
    groups = {DEFAULT_GROUP, *(r.group for r in rules)}
    places = {(None, None), *((r.agent_id, r.source) for r in rules)}
    for group in sorted(groups):
        for agent, source in sorted(places, key=str):
            decision, rule = evaluate(rules, group, SHELL_TOOL, None, agent, source)
            if decision is Decision.ALLOW and rule is not None:
                return rule
    return None
