"""Commands as a registry: a name, its help text, its argument, and a handler on the hub.

Every front end shows the same commands with the same meaning and the same words: it parses
``/name argument`` its own way, builds a ``CommandContext`` and calls ``CommandRegistry.run``;
what comes back is the one reply to show (``None``: the handler showed what it had to, or
a hub event will). A platform adds its own commands (Telegram: ``/jobs`` with buttons) to
the shared ones from ``shared_commands``, and where strangers can write, the owner's
``/pair`` and ``/unpair`` (``bot.platform.access.pairing_commands``).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

from sqlalchemy.engine import Connection

from bot.delivery import EventAlreadyHandled
from engine.hub import AUTO_MODEL, ChatHub, HubError
from engine.session import CompactionError

#: A command as Telegram marks one (a ``bot_command`` entity), and as every text front end
#: reads one: ``/name`` of up to 32 letters, digits and ``_``, maybe ``@bot``, then a space
#: of any kind or the end (a path, ``/etc/hosts``, is no command).
COMMAND = re.compile(r"/([A-Za-z0-9_]{1,32})(?:@([A-Za-z0-9_]{1,64}))?(?=\s|$)")

__all__ = [
    "ABOUT_A_CONVERSATION",
    "COMMAND",
    "INTRO",
    "Command",
    "CommandContext",
    "CommandRegistry",
    "shared_commands",
]

log = logging.getLogger(__name__)

#: The commands about one conversation. In a channel whose every thread is its own
#: conversation (Slack's channels, Discord's ``DISCORD_THREAD_CHANNEL_IDS``), they mean
#: nothing outside a thread: there they are refused, naming the thread instead (until
#: 2026-12-06 Slack's "/chathub new" said a new conversation began; until 2026-12-07 a
#: Discord "/voice on" there promised voice replies no thread gave; found by review).
ABOUT_A_CONVERSATION = frozenset(
    {
        "new",
        "clear",
        "stop",
        "model",
        "context",
        "cost",
        "compact",
        "resettools",
        "voice",
        "search",
        "memory",
        # A job is its thread's: a channel's list was always empty (until 2026-12-07;
        # found by review).
        "jobs",
    }
)

INTRO = "Talk to me in plain words; I answer and use tools, asking first before anything risky."


@dataclass(frozen=True, slots=True)
class CommandContext:
    """One command as a person gave it: where, by whom, with what argument."""

    hub: ChatHub
    source: str
    argument: str = ""
    #: The platform's user id as an opaque string (``None``: no sender).
    user_id: str | None = None
    is_owner: bool = False
    #: Named by the operator's configuration (the allowlist, the owner), not only paired.
    is_configured: bool = False
    #: The platform event that gave the command, marked handled in the commit of what the
    #: command changes (``/new``'s fresh session): handed over again after a crash, it acts
    #: no more (``EventAlreadyHandled``).
    also: Callable[[Connection], None] | None = None


Handler = Callable[[CommandContext], Awaitable[str | None]]


@dataclass(frozen=True, slots=True)
class Command:
    name: str
    help: str
    handler: Handler
    #: Shown after the name in the help text, e.g. ``<N|name|auto>``.
    argument: str = ""
    #: Only the owner may run it; for anyone else it does not exist (never listed).
    owner_only: bool = False


class CommandRegistry:
    """The commands of one front end, in the order they are listed."""

    def __init__(self, commands: Iterable[Command] = ()) -> None:
        self._commands: dict[str, Command] = {}
        for command in commands:
            self.register(command)

    def register(self, command: Command) -> None:
        if command.name in self._commands:
            raise ValueError(f"command /{command.name} is registered twice")
        self._commands[command.name] = command

    def get(self, name: str, *, is_owner: bool = False) -> Command | None:
        command = self._commands.get(name)
        if command is None or (command.owner_only and not is_owner):
            return None
        return command

    def knows(self, name: str) -> bool:
        """Whether ``/name`` is one of these commands (the owner's too)."""
        return name in self._commands

    def listed(self) -> tuple[tuple[str, str], ...]:
        """``(name, help)`` of the commands everyone has (a platform's command menu)."""
        return tuple((c.name, c.help) for c in self._commands.values() if not c.owner_only)

    def help_text(self) -> str:
        lines = [
            f"/{c.name}{f' {c.argument}' if c.argument else ''} — {c.help}"
            for c in self._commands.values()
            if not c.owner_only
        ]
        return INTRO + "\n\n" + "\n".join(lines)

    async def run(self, name: str, context: CommandContext) -> str | None:
        """The reply to ``/name``; an unknown command gets the help text. ``None`` too for a
        command whose event acted before (a redelivery after a crash)."""
        command = self.get(name, is_owner=context.is_owner)
        if command is None:
            return f"Unknown command /{name}.\n\n{self.help_text()}"
        try:
            return await command.handler(context)
        except EventAlreadyHandled:
            log.info("/%s in %s acted before; not again", name, context.source)
            return None


# -- the commands every front end has ------------------------------------------------------


def shared_commands(help_text: Callable[[], str]) -> list[Command]:
    """The hub's commands; ``help_text`` is the front end's whole list (its own included)."""

    async def show_help(_context: CommandContext) -> str:
        return help_text()

    return [
        Command("start", "Say hello", show_help),
        Command("help", "What I can do", show_help),
        Command("new", "Start a new conversation", _new),
        Command("clear", "Forget this conversation", _new),
        Command("stop", "Stop what I am doing", _stop),
        Command("models", "List the models", _models),
        Command("model", "Choose a model", _model, argument="<N|name|auto>"),
        Command("context", "How full my context is", _context),
        Command("cost", "What this conversation cost", _cost),
        Command("compact", "Compact my context now", _compact),
        Command("resettools", "Revoke the tool groups I activated", _reset_tools),
        Command("sethome", "Send background notifications to this chat", _set_home),
    ]


async def _new(c: CommandContext) -> None:
    await c.hub.clear(c.source, also=c.also)  # the NewSession event says it
    return None


async def _stop(c: CommandContext) -> str:
    """Says how many waiting messages it dropped: each was acknowledged as taken, and
    until 2026-12-07 they vanished without a word (found by review)."""
    busy = await c.hub.is_busy(c.source)  # here, or (a fleet) in the process working it
    dropped = await c.hub.cancel(c.source)
    if not busy and not dropped:
        return "Nothing to stop."
    if not dropped:
        return "⏹ Stopped."
    waiting = "1 message that was" if dropped == 1 else f"{dropped} messages that were"
    return f"⏹ Stopped. Dropped {waiting} waiting: send again what still matters."


async def _models(c: CommandContext) -> str:
    selected = await c.hub.selected_model(c.source)
    lines = [
        f"{i}. {name}{' ✓' if name == selected else ''}"
        for i, name in enumerate(c.hub.list_models(), start=1)
    ]
    auto = " ✓" if selected == AUTO_MODEL else ""
    return "\n".join(
        [*lines, f"auto — the configured order{auto}", "Choose with /model <N|name|auto>"]
    )


async def _model(c: CommandContext) -> str:
    names = c.hub.list_models()
    choice = c.argument.strip()
    number = int(choice) if choice.isascii() and choice.isdigit() and len(choice) < 6 else None
    if number is not None and 1 <= number <= len(names):
        choice = names[number - 1]
    if not choice:
        return "Usage: /model <N|name|auto>"
    try:
        await c.hub.select_model(c.source, choice)
    except HubError as exc:
        return f"⚠️ {exc}"
    return f"Model: {choice}."


async def _context(c: CommandContext) -> str:
    usage = await c.hub.context_info(c.source)
    if usage.last_input_tokens is None:
        return "No model call in this conversation yet."
    return f"Context: {usage.last_input_tokens} tokens in the last request ({usage.last_model})."


async def _cost(c: CommandContext) -> str:
    usage = await c.hub.cost_info(c.source)
    return (
        f"This conversation: {usage.model_calls} model calls, "
        f"{usage.total_input_tokens} tokens in, {usage.total_output_tokens} out, "
        f"${usage.total_cost:.4f}."
    )


async def _compact(c: CommandContext) -> str:
    try:
        done = await c.hub.force_compact(c.source)
    except CompactionError as exc:
        return f"⚠️ {exc}"
    if not done:
        return "Nothing to compact yet."
    return f"Context compacted: {done.rows_summarised} messages summarised."


async def _reset_tools(c: CommandContext) -> str:
    count = await c.hub.reset_tools(c.source)
    return f"Revoked {count} tool group(s)."


async def _set_home(c: CommandContext) -> str:
    # Background notifications are the owner's: a paired member cannot move them to a
    # chat of their own.
    if not (c.is_owner or c.is_configured):
        return "Only people of the bot's configuration can choose where notifications go."
    await c.hub.set_home(c.source)
    return "🏠 Background notifications will come to this chat."
