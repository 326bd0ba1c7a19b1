"""``chathub rules list|add|remove``: manage approval rules from the shell."""

from __future__ import annotations

import argparse
import sys
from typing import Any, TextIO

from engine.approval import DEFAULT_GROUP, DEFAULT_PRIORITY, Rule, RuleError, RuleStore
from engine.store import open_database

__all__ = ["add_rules_parser", "format_rules", "run_rules_command"]


def add_rules_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``rules`` with its ``list``, ``add`` and ``remove`` sub-commands."""
    rules = subparsers.add_parser("rules", help="list, add or remove approval rules")
    actions = rules.add_subparsers(dest="rules_command", required=True)

    listing = actions.add_parser("list", help="show the rules in evaluation order")
    listing.add_argument("--group", help="only this permission group")

    add = actions.add_parser("add", help="add a rule")
    add.add_argument(
        "--tool", required=True, help="name, trailing-* glob or @fs_read/@fs_write/@fs_any"
    )
    add.add_argument("--action", required=True, help="allow, deny or require")
    add.add_argument("--group", default=DEFAULT_GROUP, help="permission group (default: default)")
    add.add_argument("--path", help="workspace-relative path pattern, e.g. data/*")
    add.add_argument("--agent", help="only calls by this agent")
    add.add_argument("--source", help="only calls from this source, e.g. telegram:42")
    add.add_argument("--priority", default=str(DEFAULT_PRIORITY), help="lower runs first")
    add.add_argument("--note", default="", help="why the rule exists")

    remove = actions.add_parser("remove", help="remove a rule by id")
    remove.add_argument("id", help="the rule id shown by 'rules list'")
    return rules


def format_rules(rules: list[Rule]) -> str:
    """A plain-text table of ``rules``."""
    header = ("ID", "GROUP", "PRIO", "TOOL", "PATH", "AGENT", "SOURCE", "ACTION", "NOTE")
    rows = [
        (
            str(r.id),
            r.group,
            str(r.priority),
            r.tool_pattern,
            r.path_pattern or "-",
            r.agent_id or "-",
            r.source or "-",
            r.action.value,
            r.note,
        )
        for r in rules
    ]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header) - 1)]
    lines = []
    for row in [header, *rows]:
        cells = [cell.ljust(width) for cell, width in zip(row[:-1], widths, strict=True)]
        lines.append("  ".join([*cells, row[-1]]).rstrip())
    return "\n".join(lines)


async def run_rules_command(
    args: argparse.Namespace,
    database_url: str,
    *,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """Run one ``rules`` sub-command; 0 on success, 2 for refused input."""
    out = out or sys.stdout
    err = err or sys.stderr
    command = args.rules_command
    db = await open_database(database_url)
    try:
        store = RuleStore(db)
        await store.seed_defaults()
        if command == "list":
            rules = await store.list_rules(args.group)
            print(format_rules(rules) if rules else "no rules", file=out)
        elif command == "add":
            try:
                priority = int(args.priority)
            except (TypeError, ValueError):
                raise RuleError("priority", f"{args.priority!r} is not an integer") from None
            rule = await store.add_rule(
                args.tool,
                args.action,
                group=args.group or DEFAULT_GROUP,
                path_pattern=args.path,
                agent_id=args.agent,
                source=args.source,
                priority=priority,
                note=args.note or "",
            )
            print(f"added rule {rule.id}", file=out)
            print(format_rules([rule]), file=out)
        elif command == "remove":
            try:
                rule_id = int(args.id)
            except (TypeError, ValueError):
                raise RuleError("id", f"{args.id!r} is not a rule id") from None
            if not 0 < rule_id < 2**63:  # the database's integer (a traceback until 2026-12-06)
                raise RuleError("id", f"{args.id!r} is not a rule id")
            rule = await store.remove_rule(rule_id)
            print(f"removed rule {rule.id} ({rule.tool_pattern} -> {rule.action})", file=out)
        else:
            raise RuleError("command", f"unknown rules command {command!r}")
    except RuleError as exc:
        print(f"chathub rules {command}: {exc}", file=err)
        return 2
    finally:
        await db.close()
    return 0
