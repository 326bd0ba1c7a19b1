"""A job's grants as proposed: what is recorded, and every bad proposal refused with a
sentence that says what to change."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.approval.run_context import RunContext, fast_path
from engine.session.protocols import Decision
from engine.tools.workspace import Workspace
from scheduler.grants import MAX_GRANTS, GrantChecker, GrantError, JobGrants

TOOLS = ("read_file", "list_files", "write_file", "execute_cmd", "web_fetch", "notify")


@pytest.fixture
def checker(tmp_path: Path) -> GrantChecker:
    root = tmp_path / "workspace"
    for folder in ("notes", "reports/daily", "secrets"):
        (root / folder).mkdir(parents=True)
    (root / "notes" / "today.md").write_text("hi")
    (tmp_path / "outside").mkdir()
    return GrantChecker(Workspace(root), lambda: TOOLS, lambda: ("news", "mail"))


def test_grants_are_recorded_canonical_and_read_back_as_lines(checker: GrantChecker) -> None:
    grants = checker.check(
        {
            "tools": ["execute_cmd", "mcp__news__*", "execute_cmd"],
            "mcp_servers": ["news"],
            "read": ["../notes/", "../notes/./today.md"],
            "write": ["daily"],
            "working_directory": "reports",
        }
    )

    assert grants.tools == ("execute_cmd", "mcp__news__*")
    assert grants.read == ("notes", "notes/today.md")
    assert grants.write == ("reports/daily",)  # relative to the working directory
    assert grants.lines() == [
        "may read notes",
        "may read notes/today.md",
        "may write reports/daily",
        "may call execute_cmd",
        "may call mcp__news__*",
        "starts MCP server news",
        "works in reports",
    ]
    assert JobGrants.of(grants.run_context()) == grants


def test_the_run_context_of_grants_lets_exactly_those_calls_through(
    checker: GrantChecker,
) -> None:
    rc = RunContext.from_json(
        checker.check({"tools": ["mcp__news__*"], "read": ["notes"]}).run_context()
    )

    def allowed(tool: str, path: str | None = None) -> bool:
        return fast_path(Decision.REQUIRE, rc, tool, path) is Decision.ALLOW

    assert allowed("mcp__news__headlines")
    assert not allowed("mcp__mail__send")
    assert allowed("read_file", "notes/today.md")
    assert not allowed("write_file", "notes/today.md")
    assert not allowed("read_file", "reports/daily")
    assert fast_path(Decision.DENY, rc, "mcp__news__headlines", None) is Decision.DENY


def test_no_grants_is_nothing(checker: GrantChecker) -> None:
    assert not checker.check(None)
    assert checker.check({}).run_context() is None


@pytest.mark.parametrize(
    ("grants", "says"),
    [
        ({"tools": ["rm_rf"]}, "there is no tool 'rm_rf'"),
        ({"tools": ["*"]}, "would match every tool"),
        ({"tools": ["exec*"]}, "would match every tool"),
        ({"tools": ["mcp__*"]}, "names no MCP server"),
        ({"tools": ["mcp__gmail__send"]}, "no MCP server 'gmail' is configured"),
        ({"tools": ["read_file"]}, "is a file tool; grant the paths"),
        ({"tools": ["@fs_read"]}, "is a file tool"),
        ({"mcp_servers": ["gmail"]}, "no MCP server 'gmail'"),
        ({"read": ["../outside"]}, "outside the workspace"),
        ({"read": ["/etc/passwd"]}, "outside the workspace"),
        ({"read": ["secrets"]}, "secrets/"),
        ({"write": ["notes/../secrets/key"]}, "secrets/"),
        ({"read": ["*"]}, "patterns are not granted"),
        ({"read": ["."]}, "is the whole workspace"),
        ({"working_directory": "nowhere"}, "is not a directory of the workspace"),
        ({"working_directory": "a" * 300}, "is not a directory of the workspace"),
        ({"working_directory": "notes/today.md"}, "is not a directory"),
        ({"working_directory": "../outside"}, "outside the workspace"),
        ({"working_directory": "secrets"}, "secrets/"),
        ({"tools": ["execute_cmd"] * 10_000}, f"at most {MAX_GRANTS}"),
        ({"read": ["x" * 1000]}, "1 to 300 characters"),
        ({"read": [""]}, "1 to 300 characters"),
        ({"tools": "execute_cmd"}, "must be a list of strings"),
        ({"tools": [1]}, "must be a list of strings"),
        ({"everything": True}, "unknown field(s) everything"),
        (["execute_cmd"], "must be an object"),
    ],
)
def test_bad_grants_are_refused_saying_what_to_change(
    checker: GrantChecker, grants: object, says: str
) -> None:
    with pytest.raises(GrantError) as refused:
        checker.check(grants)
    assert says in str(refused.value)


def test_what_is_beyond_other_grants_is_what_they_lack(checker: GrantChecker) -> None:
    grants = checker.check(
        {
            "tools": ["execute_cmd", "web_fetch"],
            "read": ["../notes"],
            "working_directory": "reports",
        }
    )

    narrowed = grants.beyond(JobGrants(tools=("web_fetch",), working_directory="reports"))

    assert narrowed == JobGrants(tools=("execute_cmd",), read=("notes",))
    assert grants.with_tool("notify").tools == ("execute_cmd", "web_fetch", "notify")


@pytest.mark.parametrize(
    ("now", "asked", "more"),
    [
        # A folder covers what is in it; writing covers reading (found by review: both
        # were refused as "not granted now").
        (JobGrants(read=("reports",)), JobGrants(read=("reports/today.md",)), False),
        (JobGrants(write=("reports",)), JobGrants(read=("reports",)), False),
        (JobGrants(read=(".",)), JobGrants(read=("anything/at/all",)), False),
        (JobGrants(read=("reports",)), JobGrants(read=("reports/x*",)), False),
        (JobGrants(tools=("mcp__news__*",)), JobGrants(tools=("mcp__news__search",)), False),
        (JobGrants(tools=("mcp__news__*",)), JobGrants(tools=("mcp__news__s*",)), False),
        (JobGrants(working_directory="reports"), JobGrants(), False),
        # Each of these is more than now.
        (JobGrants(read=("reports",)), JobGrants(read=("reports2",)), True),
        (JobGrants(read=("reports",)), JobGrants(read=("reports*",)), True),
        (JobGrants(read=("reports",)), JobGrants(write=("reports",)), True),
        (JobGrants(read=("reports/today.md",)), JobGrants(read=("reports",)), True),
        (JobGrants(read=("reports",)), JobGrants(read=(".",)), True),
        (JobGrants(tools=("mcp__news__search",)), JobGrants(tools=("mcp__news__*",)), True),
        (JobGrants(tools=("web_fetch",)), JobGrants(tools=("web_fetch_all",)), True),
        (JobGrants(mcp_servers=("news",)), JobGrants(mcp_servers=("mail",)), True),
        (JobGrants(working_directory="reports"), JobGrants(working_directory="notes"), True),
    ],
)
def test_what_asked_grants_give_beyond_the_jobs_now(
    now: JobGrants, asked: JobGrants, more: bool
) -> None:
    assert bool(asked.beyond(now)) is more
