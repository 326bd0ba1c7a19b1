"""The commands a chat platform offers: the shared ones, ``/jobs``, memory, pairing."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from bot.platform.access import PairingDesk, pairing_commands
from bot.platform.commands import CommandRegistry, shared_commands
from bot.platform.jobs import Jobs, jobs_command
from bot.platform.memory import MemoryFront, memory_commands
from memory.service import MemoryService

__all__ = ["chat_commands"]


def chat_commands(
    desk: PairingDesk, jobs: Jobs | None, memory: MemoryService | None
) -> CommandRegistry:
    """The shared commands, ``/jobs``, the memory commands, then ``/pair`` and ``/unpair``."""
    registry = CommandRegistry()
    commands: Iterable[Any] = [
        *shared_commands(lambda: registry.help_text()),
        *([jobs_command(jobs)] if jobs is not None else []),
        *memory_commands(MemoryFront(memory)),
        *pairing_commands(desk),
    ]
    for command in commands:
        registry.register(command)
    return registry
