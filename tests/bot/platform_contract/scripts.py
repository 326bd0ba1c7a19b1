"""What the scripted model answers in the scenarios, and what it was sent."""

from __future__ import annotations

import json
from typing import Any

from engine.llm.scripted import tool_call

__all__ = ["shell", "tool_results", "user_texts"]


def shell(command: str, call_id: str = "c1") -> Any:
    """A model reply that runs ``command`` (it asks for approval under the default rules)."""
    return tool_call("execute_cmd", json.dumps({"command": command}), call_id)


def tool_results(model: Any) -> list[str]:
    """The tool results in the model's last request."""
    return [m["content"] for m in model.requests[-1][0] if m["role"] == "tool"]


def user_texts(model: Any) -> list[str]:
    """The user messages in the model's last request."""
    return [m["content"] for m in model.requests[-1][0] if m["role"] == "user"]
