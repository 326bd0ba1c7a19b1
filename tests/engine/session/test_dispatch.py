"""A tool that crashes: the turn goes on, and what the chat and the model are told is one
plain sentence with an error id, never the exception's name or text (the log has them)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, ClassVar

import pytest

from engine.session.turn.cancel import CancelScope
from engine.session.turn.dispatch import Failed, execute_tool_call, parse_arguments
from engine.tools.base import ToolError
from engine.tools.protocols import ToolCategory, ToolContext
from engine.tools.registry import ToolRegistry


class Crashing:
    name = "crash_here"
    description = "Raises."
    parameters: ClassVar[dict[str, Any]] = {"type": "object", "properties": {}}
    category = ToolCategory.INTROSPECTION
    root_agent_only = sub_agents_only = interactive_only = False

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> str:
        raise KeyError("secret-ish detail from /home/owner/.config")


async def test_a_crashing_tool_is_one_plain_sentence_with_an_error_id(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ctx = ToolContext(1, 1, "telegram:1", 0, Path("."), None)  # type: ignore[arg-type]
    result = await execute_tool_call(
        ToolRegistry([Crashing()]), "crash_here", {}, ctx, CancelScope(), max_output_chars=1000
    )
    assert isinstance(result, Failed)
    assert "KeyError" not in result.error and "secret-ish" not in result.error
    assert result.error.startswith("The tool crash_here failed with an internal error (error ")
    error_id = result.error.rsplit(" ", 1)[1].rstrip(").")
    assert any(
        error_id in r.getMessage() and r.exc_info for r in caplog.records
    )  # the traceback is in the log, under the id
    assert logging.ERROR in {r.levelno for r in caplog.records}


@pytest.mark.parametrize(
    ("raw", "cut"),
    [
        ('{"path": "a.txt", "content": "lorem ipsum', True),  # cut at the output limit
        ('{"a": [1, 2', True),
        ('{"a": 1} and more', False),
        ('{"a": 1,,}', False),
    ],
)
def test_arguments_that_end_too_early_say_the_answer_was_likely_cut(raw: str, cut: bool) -> None:
    """The model read only "invalid JSON (Unterminated string starting at at position
    30)", and sent the same oversized call again, paying the output limit every round
    (found by review on 2026-12-07)."""
    with pytest.raises(ToolError) as refused:
        parse_arguments(raw)
    said = str(refused.value)
    assert " at at " not in said
    assert ("cut at the output limit: send less in one call" in said) is cut


def test_a_number_too_long_to_read_is_a_tool_error() -> None:
    """Past Python's 4,300 digits ``json`` raises a plain ValueError (no position): it
    escaped as an AttributeError and failed the turn (found by review on 2026-12-07)."""
    with pytest.raises(ToolError, match="a number too long to read"):
        parse_arguments('{"a": ' + "1" * 5000 + "}")
