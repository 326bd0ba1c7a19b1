"""Models: the ``ChatModel`` protocol and its types, the OpenAI-compatible client, the
registry of configured models, the scripted model for tests and dry runs."""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.faces import lazy_attributes

if TYPE_CHECKING:
    from engine.llm.client import OpenAICompatModel
    from engine.llm.protocols import ChatModel
    from engine.llm.registry import ModelRegistry
    from engine.llm.scripted import ScriptedModel, text, tool_call
    from engine.llm.tool_schemas import with_tool_schemas
    from engine.llm.types import (
        LlmConnectionError,
        LlmEndpointError,
        LlmError,
        LlmRequestError,
        LlmResponse,
        LlmTimeout,
        Message,
        ToolCallRequest,
        ToolSchema,
        Usage,
    )

#: What the outer layers use besides, loaded on first use (PEP 562): importing the
#: face costs nothing more, and no cycle runs through it.
_LAZY = {
    "ChatModel": "engine.llm.protocols",
    "LlmConnectionError": "engine.llm.types",
    "LlmError": "engine.llm.types",
    "LlmEndpointError": "engine.llm.types",
    "LlmRequestError": "engine.llm.types",
    "LlmResponse": "engine.llm.types",
    "LlmTimeout": "engine.llm.types",
    "Message": "engine.llm.types",
    "ModelRegistry": "engine.llm.registry",
    "OpenAICompatModel": "engine.llm.client",
    "ScriptedModel": "engine.llm.scripted",
    "ToolCallRequest": "engine.llm.types",
    "ToolSchema": "engine.llm.types",
    "Usage": "engine.llm.types",
    "text": "engine.llm.scripted",
    "tool_call": "engine.llm.scripted",
    "with_tool_schemas": "engine.llm.tool_schemas",
}

__all__ = [
    "ChatModel",
    "LlmConnectionError",
    "LlmEndpointError",
    "LlmError",
    "LlmRequestError",
    "LlmResponse",
    "LlmTimeout",
    "Message",
    "ModelRegistry",
    "OpenAICompatModel",
    "ScriptedModel",
    "ToolCallRequest",
    "ToolSchema",
    "Usage",
    "text",
    "tool_call",
    "with_tool_schemas",
]


__getattr__ = lazy_attributes(__name__, _LAZY)
