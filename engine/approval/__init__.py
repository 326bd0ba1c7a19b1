"""The approval gate's policy: rules, permission groups, bypasses, RunContext."""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.approval.bypass import Bypass, Bypasses, BypassScope
from engine.approval.patterns import (
    PathRefused,
    canonical_path,
    path_matches,
    tool_matches,
    validate_path_pattern,
    validate_tool_pattern,
)
from engine.approval.policy import RulesPolicy
from engine.approval.rules import (
    DEFAULT_GROUP,
    PermissionGroup,
    Rule,
    RuleError,
    RuleStore,
    evaluate,
)
from engine.approval.run_context import RunContext, fast_path
from engine.faces import lazy_attributes

if TYPE_CHECKING:
    from engine.approval.broker import MAX_BYPASS_SECONDS, SHORT_BYPASS_SECONDS, BypassRequest
    from engine.approval.deciders import OPERATOR, Decider, Requester, refusal
    from engine.approval.patterns import FS_CLASSES, is_fs_tool
    from engine.approval.preview import CallDisplay, display_call, plainly
    from engine.approval.rules import DEFAULT_PRIORITY

#: What the outer layers use besides, loaded on first use (PEP 562): importing the
#: face costs nothing more, and no cycle runs through it.
_LAZY = {
    "BypassRequest": "engine.approval.broker",
    "CallDisplay": "engine.approval.preview",
    "DEFAULT_PRIORITY": "engine.approval.rules",
    "Decider": "engine.approval.deciders",
    "FS_CLASSES": "engine.approval.patterns",
    "MAX_BYPASS_SECONDS": "engine.approval.broker",
    "OPERATOR": "engine.approval.deciders",
    "Requester": "engine.approval.deciders",
    "SHORT_BYPASS_SECONDS": "engine.approval.broker",
    "display_call": "engine.approval.preview",
    "is_fs_tool": "engine.approval.patterns",
    "plainly": "engine.approval.preview",
    "refusal": "engine.approval.deciders",
}

__all__ = [
    "DEFAULT_GROUP",
    "DEFAULT_PRIORITY",
    "FS_CLASSES",
    "MAX_BYPASS_SECONDS",
    "OPERATOR",
    "SHORT_BYPASS_SECONDS",
    "Bypass",
    "BypassRequest",
    "BypassScope",
    "Bypasses",
    "CallDisplay",
    "Decider",
    "PathRefused",
    "PermissionGroup",
    "Requester",
    "Rule",
    "RuleError",
    "RuleStore",
    "RulesPolicy",
    "RunContext",
    "canonical_path",
    "display_call",
    "evaluate",
    "fast_path",
    "is_fs_tool",
    "path_matches",
    "plainly",
    "refusal",
    "tool_matches",
    "validate_path_pattern",
    "validate_tool_pattern",
]


__getattr__ = lazy_attributes(__name__, _LAZY)
