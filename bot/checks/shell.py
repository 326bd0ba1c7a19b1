"""The shell and ``secrets/``: the file tools refuse ``secrets/`` by path, but a command
can ``cat`` it. What keeps it safe is that ``execute_cmd`` asks a person first; a rule
that lets the shell run unasked (``allow``) hands ``secrets/`` to the agent."""

from __future__ import annotations

import logging

from bot.checks.database import missing_sqlite_file
from bot.checks.result import Check
from engine.approval import DEFAULT_GROUP, RuleStore, evaluate
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
    decision, rule = evaluate(rules, DEFAULT_GROUP, SHELL_TOOL, None, None, None)
    if decision is not Decision.ALLOW or rule is None:
        return fine
    return Check(
        "workspace.shell",
        False,
        f"rule {rule.id} lets {SHELL_TOOL} run without asking: the agent's shell can read secrets/",
        f"remove it (`chathub rules remove {rule.id}`) or add a narrower rule",
    )
