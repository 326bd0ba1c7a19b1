"""In-process event buses (DESIGN §5): bounded per-subscriber buffers, never blocking publishers."""

from engine.bus.broadcast import DEFAULT_CAPACITY, Broadcast, BusClosed, Lagged, Subscription
from engine.bus.chat import (
    AssistantResponse,
    BusEvent,
    ChatEvent,
    ChatEventBus,
    ChatEventRole,
    CompactionDone,
    CompactionEvent,
    ToolCallEvent,
    ToolCallStatus,
    UserMessage,
)
from engine.bus.system import (
    JobCompleted,
    ProviderRegistered,
    ProviderUnregistered,
    SessionCancelled,
    SystemEvent,
    SystemEventBus,
)

__all__ = [
    "DEFAULT_CAPACITY",
    "AssistantResponse",
    "Broadcast",
    "BusClosed",
    "BusEvent",
    "ChatEvent",
    "ChatEventBus",
    "ChatEventRole",
    "CompactionDone",
    "CompactionEvent",
    "JobCompleted",
    "Lagged",
    "ProviderRegistered",
    "ProviderUnregistered",
    "SessionCancelled",
    "Subscription",
    "SystemEvent",
    "SystemEventBus",
    "ToolCallEvent",
    "ToolCallStatus",
    "UserMessage",
]
