"""Tools: the ``Tool`` protocol, the registry, the workspace (canonical paths, no
``secrets/``), previews of a call, and the base the built-ins and other layers' tools share."""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.faces import lazy_attributes

if TYPE_CHECKING:
    from engine.tools.base import ToolError
    from engine.tools.builtins._common import BuiltinTool, object_schema
    from engine.tools.preview import ApprovalPreview, preview_call
    from engine.tools.protocols import Tool, ToolCategory, ToolContext
    from engine.tools.workspace import SECRETS_DIR, Workspace

#: What the outer layers use besides, loaded on first use (PEP 562): importing the
#: face costs nothing more, and no cycle runs through it.
_LAZY = {
    "ApprovalPreview": "engine.tools.preview",
    "BuiltinTool": "engine.tools.builtins._common",
    "SECRETS_DIR": "engine.tools.workspace",
    "Tool": "engine.tools.protocols",
    "ToolCategory": "engine.tools.protocols",
    "ToolContext": "engine.tools.protocols",
    "ToolError": "engine.tools.base",
    "Workspace": "engine.tools.workspace",
    "object_schema": "engine.tools.builtins._common",
    "preview_call": "engine.tools.preview",
}

__all__ = [
    "SECRETS_DIR",
    "ApprovalPreview",
    "BuiltinTool",
    "Tool",
    "ToolCategory",
    "ToolContext",
    "ToolError",
    "Workspace",
    "object_schema",
    "preview_call",
]


__getattr__ = lazy_attributes(__name__, _LAZY)
