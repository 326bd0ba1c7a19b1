"""``AdapterRegistry``: what each platform adapter registered for the sources it serves,
kept in ``PrefixMap``s (a source gets what its longest registered prefix has)."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from engine.hub.protocols import AnswerHook, FailureHook, Publish, TurnContext
from engine.hub.turns.bridge import TurnBridge
from engine.tools.protocols import Tool

__all__ = ["AdapterRegistry", "PrefixMap", "SourceDefaults"]

T = TypeVar("T")


class PrefixMap(Generic[T]):
    """Values keyed by source prefix; a source gets the value of its longest prefix."""

    __slots__ = ("_items",)

    def __init__(self) -> None:
        self._items: list[tuple[str, T]] = []

    def add(self, prefix: str, value: T) -> None:
        self._items.append((prefix, value))
        # Longest first, so the first match is the most specific; stable for equal lengths.
        self._items.sort(key=lambda item: len(item[0]), reverse=True)

    def get(self, source: str) -> T | None:
        return next((value for prefix, value in self._items if source.startswith(prefix)), None)


@dataclass(frozen=True, slots=True)
class SourceDefaults:
    """What an adapter adds to every turn of its sources (``register``)."""

    interface_tools: Sequence[Tool] = ()
    extra_system_static: str | None = None
    extra_system_dynamic: str | None = None
    tail_reminder: str | None = None


_NO_DEFAULTS = SourceDefaults()

log = logging.getLogger(__name__)


class AdapterRegistry:
    """Turn defaults, answer hooks and failure hooks by source prefix (longest wins), and
    the services adding dynamic content to every turn."""

    __slots__ = ("_answer_hooks", "_contexts", "_defaults", "_failure_hooks", "_publish")

    def __init__(self, publish: Publish) -> None:
        self._publish = publish
        self._defaults: PrefixMap[SourceDefaults] = PrefixMap()
        self._answer_hooks: PrefixMap[AnswerHook] = PrefixMap()
        self._failure_hooks: PrefixMap[FailureHook] = PrefixMap()
        self._contexts: list[TurnContext] = []

    def register(self, prefix: str, defaults: SourceDefaults) -> None:
        self._defaults.add(prefix, defaults)

    def on_answer(self, prefix: str, hook: AnswerHook) -> None:
        self._answer_hooks.add(prefix, hook)

    def on_failure(self, prefix: str, hook: FailureHook) -> None:
        self._failure_hooks.add(prefix, hook)

    def add_context(self, context: TurnContext) -> None:
        self._contexts.append(context)

    async def dynamic(
        self, source: str, metadata: Mapping[str, Any] | None, base: str | None
    ) -> str | None:
        """``base`` (the adapter's or message's dynamic extra) with each context's part.

        A context that fails adds nothing to this turn (and is logged): a broken memory
        never stops a turn.
        """
        parts = [base] if base else []
        for context in self._contexts:
            try:
                part = await context(source, metadata)
            except Exception:
                log.exception(
                    "turn context %r failed for %s; the turn goes on without it", context, source
                )
                continue
            if part:
                parts.append(part)
        return "\n\n".join(parts) if parts else None

    def defaults_for(self, source: str) -> SourceDefaults:
        return self._defaults.get(source) or _NO_DEFAULTS

    def failure_hook(self, source: str) -> FailureHook | None:
        return self._failure_hooks.get(source)

    @property
    def publish(self) -> Publish:
        """The hub's broadcast (``HubEvents.publish``, or a fleet's relay)."""
        return self._publish

    def bridge(self, source: str, session_id: int) -> TurnBridge:
        """The ``emit`` for one turn of ``source``'s session ``session_id``."""
        return TurnBridge(
            self._publish,
            source,
            session_id,
            self._answer_hooks.get(source),
            self._failure_hooks.get(source),
        )
