"""The approval gate's policy: rules, permission groups, bypasses, RunContext."""

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

__all__ = [
    "DEFAULT_GROUP",
    "Bypass",
    "BypassScope",
    "Bypasses",
    "PathRefused",
    "PermissionGroup",
    "Rule",
    "RuleError",
    "RuleStore",
    "RulesPolicy",
    "RunContext",
    "canonical_path",
    "evaluate",
    "fast_path",
    "path_matches",
    "tool_matches",
    "validate_path_pattern",
    "validate_tool_pattern",
]
