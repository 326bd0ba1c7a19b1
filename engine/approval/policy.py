"""``RulesPolicy``: the ``ApprovalPolicy`` backed by rules, bypasses and the RunContext."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path

from engine.approval.bypass import Bypass, Bypasses
from engine.approval.patterns import FS_WRITE_TOOLS, PathRefused, canonical_path, is_fs_tool
from engine.approval.protocols import Clock, RequesterOf, RunContextFor, ToolCategories
from engine.approval.rules import DEFAULT_GROUP, Rule, RuleStore, evaluate
from engine.approval.run_context import RunContext, fast_path
from engine.session.protocols import Decision, GateRequest, Verdict
from engine.store.schema import utcnow
from engine.tools.workspace import Workspace

__all__ = ["RulesPolicy"]

log = logging.getLogger(__name__)


async def _default_run_context(_session_id: int) -> RunContext:
    return RunContext()


async def _nobody(_tool_call_id: int) -> str | None:
    return None


class RulesPolicy:
    """Rules (session group, then ``default``) → session bypass → RunContext fast path.

    File tools are judged on their canonical path; a path that leaves the workspace or
    reaches ``secrets/`` is denied outright. Any failure to load rules yields ``require``.
    Rules are cached; call ``invalidate()`` after changing them.
    """

    def __init__(
        self,
        rule_store: RuleStore,
        workspace: Workspace,
        bypasses: Bypasses | None = None,
        tool_categories: ToolCategories = lambda _name: None,
        clock: Clock = utcnow,
        run_context_for: RunContextFor = _default_run_context,
        requester_of: RequesterOf = _nobody,
        lasting: Callable[[str], bool] = lambda _name: False,
    ) -> None:
        """``requester_of``: who asked for a call (by its id), for a bypass that covers
        one person's calls; ``lasting``: whether a tool's effect outlives the turn (no
        bypass covers it: a bypass of 15 minutes let the model schedule a job with
        standing grants nobody saw, which outlived it; found by review)."""
        self.rule_store = rule_store
        self.workspace = workspace
        self.bypasses = bypasses if bypasses is not None else Bypasses(clock)
        self.tool_categories = tool_categories
        self.lasting = lasting
        self.clock = clock
        self.run_context_for = run_context_for
        self.requester_of = requester_of
        self._rules: list[Rule] | None = None
        self._seeded = False
        self._lock = asyncio.Lock()

    def invalidate(self) -> None:
        """Forget the cached rules; the next check reads them again."""
        self._rules = None

    async def rules(self) -> list[Rule]:
        """The cached rules, loading (and seeding the defaults once) when needed."""
        async with self._lock:
            if self._rules is None:
                if not self._seeded:
                    await self.rule_store.seed_defaults()
                    self._seeded = True
                self._rules = await self.rule_store.list_rules()
            return self._rules

    async def check(self, request: GateRequest) -> Verdict:
        tool = request.call.name
        try:
            rules = await self.rules()
        except Exception:
            log.exception("approval rules could not be loaded; asking a human")
            return Verdict(Decision.REQUIRE, "approval rules could not be loaded")

        rc_failed = False
        try:
            if request.run_context is not None:
                rc = RunContext.from_json(request.run_context)
            else:
                rc = await self.run_context_for(request.session_id)
        except Exception:
            # Without the session's group, the default group still denies what it denies,
            # but nothing may be allowed on its word alone.
            log.exception("run context of session %s could not be read", request.session_id)
            rc, rc_failed = RunContext(), True

        path: str | None = None
        if is_fs_tool(tool):
            raw = request.args.get("path")
            if tool == "list_files" and not raw:
                raw = "."
            try:
                cwd = request.working_directory or self._cwd(rc)
                path = canonical_path(self.workspace, raw, cwd=cwd)
            except PathRefused as exc:
                return Verdict(Decision.DENY, f"path refused: {exc}")

        if rc.read_only and tool in FS_WRITE_TOOLS:
            return Verdict(Decision.DENY, "this session writes no file (run context read_only)")
        group = rc.security_group or DEFAULT_GROUP
        decision, rule = evaluate(rules, group, tool, path, request.agent_id, request.source)
        reason = f"rule {rule.id} ({rule.group}: {rule.tool_pattern})" if rule else "no rule"
        if decision is Decision.DENY:
            return Verdict(decision, reason)
        if rc_failed:
            return Verdict(Decision.REQUIRE, "session run context could not be read")
        if decision is Decision.ALLOW:
            return Verdict(decision, reason)

        bypass = None if self.lasting(tool) else await self._bypass(request, tool)
        if bypass is not None:
            return Verdict(Decision.ALLOW, f"session bypass ({bypass.scope})")
        if fast_path(decision, rc, tool, path) is Decision.ALLOW:
            return Verdict(Decision.ALLOW, "pre-authorized by the session's run context")
        return Verdict(Decision.REQUIRE, reason)

    async def _bypass(self, request: GateRequest, tool: str) -> Bypass | None:
        """The session's bypass covering this call: everyone's, or its requester's (asked
        for only when a bypass covers one person's calls)."""
        covering = self.bypasses.covering(request.session_id, tool, self.tool_categories(tool))
        if not covering:
            return None
        everyone = next((b for b in covering if b.requester is None), None)
        if everyone is not None:
            return everyone
        requester = await self.requester_of(request.call.id)
        return next((b for b in covering if requester and b.requester == requester), None)

    def _cwd(self, rc: RunContext) -> Path | None:
        if rc.working_directory is None:
            return None
        return self.workspace.root / rc.working_directory
