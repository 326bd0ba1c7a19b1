"""ChatHub: the one entry point of interactive chat sessions (DESIGN §4)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.faces import lazy_attributes
from engine.hub.adapters import SourceDefaults
from engine.hub.controls import AUTO_MODEL
from engine.hub.events import SourceEvents
from engine.hub.hub import ChatHub
from engine.hub.types import (
    ANSWERED,
    APPROVE,
    AS_A_FILE,
    CHOICES,
    REJECT,
    Choice,
    DecisionMade,
    FailureNotice,
    HubError,
    HubEvent,
    NewSession,
    NoticeWithdrawn,
    Notification,
    SendOptions,
    TextRefused,
    validate_source,
)

if TYPE_CHECKING:
    from engine.hub.events import HubEvents
    from engine.hub.fleet.ownership import FleetConfig, pick
    from engine.hub.fleet.relay import CHANNEL, EventRelay, carried, is_cut, unpack
    from engine.hub.tasks import BackgroundTasks

#: What the outer layers use besides, loaded on first use (PEP 562): importing the
#: face costs nothing more, and no cycle runs through it.
_LAZY = {
    "BackgroundTasks": "engine.hub.tasks",
    "CHANNEL": "engine.hub.fleet.relay",
    "EventRelay": "engine.hub.fleet.relay",
    "FleetConfig": "engine.hub.fleet.ownership",
    "HubEvents": "engine.hub.events",
    "carried": "engine.hub.fleet.relay",
    "is_cut": "engine.hub.fleet.relay",
    "pick": "engine.hub.fleet.ownership",
    "unpack": "engine.hub.fleet.relay",
}

__all__ = [
    "ANSWERED",
    "APPROVE",
    "AS_A_FILE",
    "AUTO_MODEL",
    "CHANNEL",
    "CHOICES",
    "REJECT",
    "BackgroundTasks",
    "ChatHub",
    "Choice",
    "DecisionMade",
    "EventRelay",
    "FailureNotice",
    "FleetConfig",
    "HubError",
    "HubEvent",
    "HubEvents",
    "NewSession",
    "NoticeWithdrawn",
    "Notification",
    "SendOptions",
    "SourceDefaults",
    "SourceEvents",
    "TextRefused",
    "carried",
    "is_cut",
    "pick",
    "unpack",
    "validate_source",
]


__getattr__ = lazy_attributes(__name__, _LAZY)
