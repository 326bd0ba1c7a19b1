"""``chathub rules list|add|remove`` against a temporary SQLite database."""

from __future__ import annotations

import argparse
import io
from pathlib import Path

import pytest

from bot.rules_cli import add_rules_parser, run_rules_command


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'chathub.db'}"


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="chathub")
    add_rules_parser(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(["rules", *argv])


async def run(url: str, *argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = await run_rules_command(parse(*argv), url, out=out, err=err)
    return code, out.getvalue(), err.getvalue()


async def test_list_shows_the_seeded_defaults(url: str) -> None:
    code, out, err = await run(url, "list")
    assert (code, err) == (0, "")
    header, *rows = out.splitlines()
    assert header.split()[:4] == ["ID", "GROUP", "PRIO", "TOOL"]
    assert any("secrets/*" in row and "deny" in row for row in rows)
    assert rows[-1].split()[3:8] == ["*", "-", "-", "-", "require"]


async def test_add_then_remove(url: str) -> None:
    code, out, _ = await run(
        url, "add", "--tool", "mcp__gmail__*", "--action", "allow", "--priority", "5",
        "--agent", "mail", "--note", "mail agent may send",
    )  # fmt: skip
    assert code == 0
    assert out.startswith("added rule ")
    rule_id = out.split()[2]
    _, listed, _ = await run(url, "list")
    assert "mcp__gmail__*" in listed and "mail agent may send" in listed
    code, out, _ = await run(url, "remove", rule_id)
    assert (code, out.strip()) == (0, f"removed rule {rule_id} (mcp__gmail__* -> allow)")
    _, listed, _ = await run(url, "list")
    assert "mcp__gmail__*" not in listed


@pytest.mark.parametrize(
    ("argv", "field"),
    [
        (["add", "--tool", "mcp__*__x", "--action", "allow"], "tool:"),
        (["add", "--tool", "@fs_any", "--path", "/etc/*", "--action", "allow"], "path:"),
        (["add", "--tool", "notify", "--action", "sometimes"], "action:"),
        (["add", "--tool", "notify", "--action", "allow", "--priority", "high"], "priority:"),
        (["add", "--tool", "notify", "--action", "allow", "--group", "nope"], "group:"),
        (["add", "--tool", "*", "--action", "allow"], "tool:"),
        (["remove", "9999"], "id:"),
        (["remove", "abc"], "id:"),
        (["remove", "99999999999999999999"], "id:"),  # past the database's integer
        (["remove", "-1"], "id:"),
    ],
)
async def test_bad_input_names_the_field(url: str, argv: list[str], field: str) -> None:
    _, before, _ = await run(url, "list")
    code, out, err = await run(url, *argv)
    assert code == 2
    assert out == ""
    assert err.startswith(f"chathub rules {argv[0]}: {field}")
    _, after, _ = await run(url, "list")
    assert after == before


async def test_list_one_group(url: str) -> None:
    code, out, _ = await run(url, "list", "--group", "cron")
    assert (code, out.strip()) == (0, "no rules")
