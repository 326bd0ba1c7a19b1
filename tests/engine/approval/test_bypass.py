"""Session bypasses: scopes, expiry, and what they never do."""

from __future__ import annotations

from datetime import timedelta

import pytest

import engine.approval.bypass as bypass_module
from engine.approval.bypass import Bypasses, BypassScope
from engine.tools.protocols import ToolCategory
from tests.clock import FakeClock


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def bypasses(clock: FakeClock) -> Bypasses:
    return Bypasses(clock)


def test_scope_all_covers_every_tool_of_that_session_only(bypasses: Bypasses) -> None:
    bypasses.grant(1, "all")
    assert bypasses.find(1, "execute_cmd", ToolCategory.SHELL) is not None
    assert bypasses.find(2, "execute_cmd", ToolCategory.SHELL) is None


def test_scope_category(bypasses: Bypasses) -> None:
    bypasses.grant(1, BypassScope.CATEGORY, "Shell")
    assert bypasses.find(1, "execute_cmd", ToolCategory.SHELL) is not None
    assert bypasses.find(1, "write_file", ToolCategory.FILESYSTEM) is None
    assert bypasses.find(1, "mystery", None) is None


def test_scope_mcp_server_matches_the_prefix_exactly(bypasses: Bypasses) -> None:
    bypasses.grant(1, "mcp_server", "gmail")
    assert bypasses.find(1, "mcp__gmail__send", None) is not None
    assert bypasses.find(1, "mcp__gmailx__send", None) is None
    assert bypasses.find(1, "gmail", None) is None


def test_expired_bypass_is_ignored(bypasses: Bypasses, clock: FakeClock) -> None:
    bypasses.grant(1, "all", ttl=timedelta(minutes=5))
    clock.now += timedelta(minutes=4)
    assert bypasses.find(1, "execute_cmd", None) is not None
    clock.now += timedelta(minutes=1)
    assert bypasses.find(1, "execute_cmd", None) is None
    assert bypasses.active(1) == []


def test_revoke(bypasses: Bypasses) -> None:
    bypasses.grant(1, "all")
    bypasses.revoke(1)
    assert bypasses.find(1, "x", None) is None


@pytest.mark.parametrize(
    ("scope", "value", "message"),
    [
        ("everything", None, "everything"),
        ("all", "x", "takes no value"),
        ("category", "Magic", "Magic"),
        ("mcp_server", "", "not an MCP server"),
        ("mcp_server", "a__b", "not an MCP server"),
    ],
)
def test_bad_grants_are_refused(
    bypasses: Bypasses, scope: str, value: str | None, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        bypasses.grant(1, scope, value)
    with pytest.raises(ValueError, match="ttl"):
        bypasses.grant(1, "all", ttl=timedelta(0))


def test_bypass_is_no_tool() -> None:
    """Nothing in the module looks like a Tool the registry could offer the model."""
    for name in dir(bypass_module):
        obj = getattr(bypass_module, name)
        assert not (isinstance(obj, type) and hasattr(obj, "parameters") and hasattr(obj, "run"))
