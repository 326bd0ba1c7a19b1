"""The turn engine (DESIGN §2): a session's handler, its turn events and outcomes, the
gate's seams, compaction and the frame's transcript."""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.faces import lazy_attributes

if TYPE_CHECKING:
    from engine.session.context.compaction import (
        CompactionConfig,
        CompactionError,
        Compactor,
        estimate_tokens,
        load_context,
        message_chars,
    )
    from engine.session.context.messages import SystemParts
    from engine.session.context.transcript import CARRIED_KEY, FrameTranscript, attachments_block
    from engine.session.events import (
        AgentEnd,
        AgentStart,
        ApprovalRequired,
        Done,
        Error,
        ModelFallback,
        Question,
        TextDelta,
        Thinking,
        ToolCancelled,
        ToolDone,
        ToolError,
        ToolRejected,
        ToolStart,
        TurnEvent,
        UserMessage,
    )
    from engine.session.handler import ChatSessionHandler
    from engine.session.outcomes import Failed, Final, TurnResult, background_error
    from engine.session.protocols import ApprovalPolicy, Decision
    from engine.session.turn.gate import AllowAll
    from engine.session.turn.loop import TRUNCATED_KEY

#: What the outer layers use besides, loaded on first use (PEP 562): importing the
#: face costs nothing more, and no cycle runs through it.
_LAZY = {
    "AgentEnd": "engine.session.events",
    "AgentStart": "engine.session.events",
    "AllowAll": "engine.session.turn.gate",
    "ApprovalPolicy": "engine.session.protocols",
    "ApprovalRequired": "engine.session.events",
    "CARRIED_KEY": "engine.session.context.transcript",
    "TRUNCATED_KEY": "engine.session.turn.loop",
    "ChatSessionHandler": "engine.session.handler",
    "CompactionConfig": "engine.session.context.compaction",
    "CompactionError": "engine.session.context.compaction",
    "Compactor": "engine.session.context.compaction",
    "Decision": "engine.session.protocols",
    "Done": "engine.session.events",
    "Error": "engine.session.events",
    "Failed": "engine.session.outcomes",
    "Final": "engine.session.outcomes",
    "FrameTranscript": "engine.session.context.transcript",
    "attachments_block": "engine.session.context.transcript",
    "ModelFallback": "engine.session.events",
    "Question": "engine.session.events",
    "SystemParts": "engine.session.context.messages",
    "TextDelta": "engine.session.events",
    "Thinking": "engine.session.events",
    "ToolCancelled": "engine.session.events",
    "ToolDone": "engine.session.events",
    "ToolError": "engine.session.events",
    "ToolRejected": "engine.session.events",
    "ToolStart": "engine.session.events",
    "TurnEvent": "engine.session.events",
    "TurnResult": "engine.session.outcomes",
    "UserMessage": "engine.session.events",
    "background_error": "engine.session.outcomes",
    "estimate_tokens": "engine.session.context.compaction",
    "load_context": "engine.session.context.compaction",
    "message_chars": "engine.session.context.compaction",
}

__all__ = [
    "CARRIED_KEY",
    "TRUNCATED_KEY",
    "AgentEnd",
    "AgentStart",
    "AllowAll",
    "ApprovalPolicy",
    "ApprovalRequired",
    "ChatSessionHandler",
    "CompactionConfig",
    "CompactionError",
    "Compactor",
    "Decision",
    "Done",
    "Error",
    "Failed",
    "Final",
    "FrameTranscript",
    "ModelFallback",
    "Question",
    "SystemParts",
    "TextDelta",
    "Thinking",
    "ToolCancelled",
    "ToolDone",
    "ToolError",
    "ToolRejected",
    "ToolStart",
    "TurnEvent",
    "TurnResult",
    "UserMessage",
    "attachments_block",
    "background_error",
    "estimate_tokens",
    "load_context",
    "message_chars",
]


__getattr__ = lazy_attributes(__name__, _LAZY)
