"""Tool output left out of a request that outgrew the model's context window.

A turn of many tool rounds can outgrow the window within itself (compaction summarises
only at a turn's start). When the model says so (``LlmContextOverflow``), the round asks
again with older tool results left out, each level leaving out more; the level reached
holds for the rest of the turn, so each later round does not fail first. What is stored
is untouched: only the request is smaller. A turn that never overflows pays nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.llm.types import Message

__all__ = ["LEFT_OUT", "ContextFit"]

LEFT_OUT = (
    "[{chars} characters of tool output left out: the conversation outgrew the model's "
    "context window. Run the tool again if you still need it.]"
)
#: The newest result is cut to this head and tail at the last level.
HEAD, TAIL = 3_000, 1_000


@dataclass(frozen=True, slots=True)
class _Level:
    #: How many of the newest tool results stay whole.
    keep: int
    #: Whether the newest result is cut to ``HEAD`` and ``TAIL``.
    cut_newest: bool = False


_LEVELS = (_Level(keep=3), _Level(keep=1), _Level(keep=0, cut_newest=True))


class ContextFit:
    """One turn's level of leaving out (0: nothing)."""

    __slots__ = ("level",)

    def __init__(self) -> None:
        self.level = 0

    def apply(self, messages: list[Message]) -> list[Message]:
        """``messages`` with what this level leaves out left out (a copy; the same list at
        level 0)."""
        if self.level == 0:
            return messages
        return _left_out(messages, _LEVELS[self.level - 1])

    def tighten(self, messages: list[Message]) -> bool:
        """Go to the next level that leaves out more of ``messages``; False when none does
        (what overflows is not tool output)."""
        current = self.apply(messages)
        for level in range(self.level + 1, len(_LEVELS) + 1):
            if _left_out(messages, _LEVELS[level - 1]) != current:
                self.level = level
                return True
        return False


def _left_out(messages: list[Message], level: _Level) -> list[Message]:
    results = [i for i, message in enumerate(messages) if message.get("role") == "tool"]
    whole = set(results[max(0, len(results) - level.keep) :])
    newest = results[-1] if results else None
    out = list(messages)
    for index in results:
        if index in whole:
            continue
        content = messages[index].get("content")
        if not isinstance(content, str):  # the transcript renders every result as text
            continue
        if index == newest and level.cut_newest:
            shorter = _cut(content)
        else:
            shorter = LEFT_OUT.format(chars=len(content))
        if len(shorter) < len(content):
            out[index] = {**messages[index], "content": shorter}
    return out


def _cut(content: str) -> str:
    if len(content) <= HEAD + TAIL:
        return content
    left = len(content) - HEAD - TAIL
    return (
        f"{content[:HEAD]}\n[… {left} characters left out: the conversation outgrew the "
        f"model's context window …]\n{content[-TAIL:]}"
    )
