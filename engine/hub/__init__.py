"""ChatHub: the one entry point of interactive chat sessions (DESIGN §4)."""

from engine.hub.hub import AUTO_MODEL, ChatHub, SourceDefaults, SourceEvents
from engine.hub.types import (
    DecisionMade,
    FailureNotice,
    HubError,
    HubEvent,
    NewSession,
    Notification,
    SendOptions,
    validate_source,
)

__all__ = [
    "AUTO_MODEL",
    "ChatHub",
    "DecisionMade",
    "FailureNotice",
    "HubError",
    "HubEvent",
    "NewSession",
    "Notification",
    "SendOptions",
    "SourceDefaults",
    "SourceEvents",
    "validate_source",
]
