"""Telegram's commands: the shared ones, ``/jobs`` and the memory commands with buttons,
and the owner's pairing."""

from __future__ import annotations

from bot.platform.access import WELCOME, Access, PairingDesk, pairing_commands
from bot.platform.commands import Command, CommandContext, CommandRegistry, shared_commands
from bot.platform.jobs import JOBS_HELP
from bot.platform.protocols import PairingCode
from bot.platform.voice_mode import VoiceMode, voice_command
from bot.telegram.dispatch.jobs import JobsPanel
from bot.telegram.dispatch.memory import MemoryPanel
from bot.telegram.inbound.updates import parse_source
from bot.telegram.sending.delivery import TelegramSender

__all__ = ["telegram_commands"]


def telegram_commands(
    access: Access,
    sender: TelegramSender,
    jobs: JobsPanel | None,
    memory: MemoryPanel | None = None,
    desk: PairingDesk | None = None,
    voice_mode: VoiceMode | None = None,
) -> CommandRegistry:
    """In menu order: the shared commands, ``/jobs``, ``/voice`` (with ``voice_mode``),
    ``/search``, ``/memory`` and ``/forget_me`` (with ``memory``), then ``/pair`` and
    ``/unpair`` (over ``desk``: every platform's pairing, Telegram's added to it)."""
    registry = CommandRegistry()
    for command in shared_commands(lambda: registry.help_text()):
        registry.register(command)

    async def show_jobs(c: CommandContext) -> str | None:
        if jobs is None:
            return "No scheduled jobs."
        chat_id, thread_id = parse_source(c.source)
        text, keyboard = await jobs.render(c.source)
        await sender.send_text(chat_id, text, reply_markup=keyboard, thread_id=thread_id)
        return None

    async def welcome(paired: PairingCode) -> None:
        await sender.say_in(int(paired.chat), None, WELCOME)

    registry.register(Command("jobs", JOBS_HELP, show_jobs))
    if voice_mode is not None:
        registry.register(voice_command(voice_mode))
    for command in memory.commands() if memory is not None else ():
        registry.register(command)
    desk = desk if desk is not None else PairingDesk()
    desk.add(access, welcome)
    for command in pairing_commands(desk):
        registry.register(command)
    return registry
