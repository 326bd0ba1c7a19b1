"""The built-in tools (DESIGN §8): file, shell and note tools."""

from __future__ import annotations

from engine.tools.builtins.ask_user import AskUserClarification
from engine.tools.builtins.files import EditFile, ListFiles, ReadFile, WriteFile
from engine.tools.builtins.notes import UpdateScratchpad, WriteTodos
from engine.tools.builtins.notifications import ReadNotification
from engine.tools.builtins.shell import ExecuteCmd
from engine.tools.builtins.subagents import ExecuteSubtask
from engine.tools.protocols import Tool
from engine.tools.workspace import Workspace

__all__ = [
    "AskUserClarification",
    "EditFile",
    "ExecuteCmd",
    "ExecuteSubtask",
    "ListFiles",
    "ReadFile",
    "ReadNotification",
    "UpdateScratchpad",
    "WriteFile",
    "WriteTodos",
    "builtin_tools",
]


def builtin_tools(
    workspace: Workspace,
    *,
    command_timeout_s: float = 120.0,
    max_command_timeout_s: float = 600.0,
    max_read_chars: int = 40_000,
    max_output_chars: int = 40_000,
    max_list_entries: int = 500,
) -> list[Tool]:
    """Every built-in tool, confined to ``workspace``, in the order they are offered.

    Keep ``max_read_chars`` and ``max_output_chars`` a little below the engine's global
    cut (``max_tool_output_chars``): then the tool's own note, which knows the true
    size of the file or output, is the one the model reads.
    """
    return [
        ReadFile(workspace, max_chars=max_read_chars),
        WriteFile(workspace),
        EditFile(workspace),
        ListFiles(workspace, max_entries=max_list_entries),
        ExecuteCmd(
            workspace,
            default_timeout_s=command_timeout_s,
            max_timeout_s=max(max_command_timeout_s, command_timeout_s),
            max_output_chars=max_output_chars,
        ),
        UpdateScratchpad(),
        WriteTodos(),
        AskUserClarification(),
        ReadNotification(),
        ExecuteSubtask(),
    ]
