"""Clicks, modal submits and slash commands: each answered through the interaction
callback within Discord's 3 seconds, a refused one too.

A card's ✅ / ⏱ / 🔄 are acknowledged at once (a deferred update) and the decision is
shown by editing the card; ❌ opens a modal for the reason (optional), a question's
✍️ Answer a modal for the answer. A button is judged by what the store says of its card
(``is_live``: open, in this channel, on this message), never by the view that sent it,
so a card shown before a restart works after it, once. A slash command is deferred, then
its reply edits the deferral (``None``: the deferral goes, the hub's event says it).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import discord

from bot.delivery import CardRow, PlatformError
from bot.discord.cards import DiscordCards
from bot.discord.incoming import source_of
from bot.discord.messages import IN_ITS_THREAD, Listening
from bot.discord.sending import discord_call, in_messages
from bot.platform.access import ASKED_ALREADY, Access
from bot.platform.cards import EXPIRED, NOT_ALLOWED, decide
from bot.platform.commands import ABOUT_A_CONVERSATION, CommandRegistry
from bot.platform.controls import ControlId, parse_control
from bot.platform.failures import SORRY_TAP, report_failure
from bot.platform.open_cards import tapped
from engine.hub import ChatHub

__all__ = ["NOT_HERE", "Interactions"]

log = logging.getLogger(__name__)

NOT_HERE = "I do not work in this server."
NOT_PAIRED = "You are not allowed to use this bot; send me a direct message to ask for access."
_MODAL_TEXT = 1000

#: ``(user, channel, name, tell)``: a stranger's pairing code offered, the owner told;
#: whether they were told.
Pairing = Callable[[str, str, str, Callable[[str, str], Awaitable[None]]], Awaitable[bool]]


class Interactions:
    def __init__(
        self,
        hub: ChatHub,
        access: Access,
        listening: Listening,
        cards: DiscordCards,
        commands: CommandRegistry,
        pairing: Pairing | None = None,
    ) -> None:
        """``pairing``: a stranger's request in their DM (``MessageHandler.offer_pairing``).
        A DM is recorded as its person's (memory) from its messages only: an interaction
        without a guild may come from a group DM, or a DM between other people (an app
        their own account installed), never one person's conversation with the bot."""
        self._hub = hub
        self._access = access
        self._listening = listening
        self._cards = cards
        self._commands = commands
        self._pairing = pairing

    async def handle(self, interaction: discord.Interaction) -> None:
        """Every interaction gets its answer; a failure of ours too (its id, never the
        exception)."""
        try:
            await self._route(interaction)
        except Exception:
            error = report_failure(log, f"interaction {interaction.id}")
            await _tell(interaction, SORRY_TAP.format(error=error))

    async def _route(self, interaction: discord.Interaction) -> None:
        kind = interaction.type
        if kind == discord.InteractionType.application_command:
            return  # the command tree's (``slash``), which answers it
        if not self._here(interaction):
            await _tell(interaction, NOT_HERE)
            return
        data: Any = interaction.data or {}
        parsed = parse_control(data.get("custom_id"))
        if kind == discord.InteractionType.component:
            await self._click(interaction, parsed)
        elif kind == discord.InteractionType.modal_submit:
            await self._submit(interaction, parsed, _modal_text(data.get("components") or []))
        else:
            await _tell(interaction, EXPIRED)

    def _here(self, interaction: discord.Interaction) -> bool:
        """A DM, or a server of ``DISCORD_GUILD_IDS``."""
        guild = interaction.guild_id
        return guild is None or str(guild) in self._listening.guilds

    # -- buttons --------------------------------------------------------------------------

    async def _click(self, interaction: discord.Interaction, parsed: ControlId | None) -> None:
        if parsed is None or parsed.kind not in ("card", "ask"):
            await _tell(interaction, EXPIRED)
            return
        if parsed.kind == "card" and parsed.choice != "reject":
            # Acknowledged before anything is read: a database busy past Discord's 3 s
            # made the click "fail" to the user (until 2026-12-07; found by review). A
            # click that opens a form cannot wait: the form must be its first answer.
            await interaction.response.defer()
        user = str(interaction.user.id)
        shown_at = str(interaction.message.id) if interaction.message is not None else None
        card = await self._cards.held(parsed.tool_call_id)
        kind = "approval" if parsed.kind == "card" else "question"
        card = tapped(card, kind, str(interaction.channel_id), shown_at)
        if card is None:
            await _tell(interaction, EXPIRED)
            return
        if not self._access.is_allowed(user):
            await _tell(interaction, NOT_ALLOWED)
            return
        if parsed.kind == "ask":
            await _modal(interaction, "Answer", f"answer:{card.tool_call_id}", "Your answer", True)
            return
        decider = self._access.decider(user)
        refused = await self._hub.decision_refusal(card.tool_call_id, decider)
        if refused is not None:  # the card stays as it is, for those who may decide
            await _tell(interaction, refused)
            return
        if parsed.choice == "reject":
            await _modal(
                interaction, "Reject", f"reason:{card.tool_call_id}", "Reason (optional)", False
            )
            return
        assert parsed.choice is not None
        result = await decide(self._hub, card.source, card.tool_call_id, parsed.choice, decider)
        await self._after(interaction, card, result, parsed.choice)

    async def _after(
        self,
        interaction: discord.Interaction,
        card: CardRow,
        result: str,
        outcome: str,
        note: str = "",
    ) -> None:
        name = interaction.user.display_name
        if not await self._cards.after_tap(card, result, outcome, name, note):
            await _tell(interaction, NOT_ALLOWED)

    # -- modals ---------------------------------------------------------------------------

    async def _submit(
        self, interaction: discord.Interaction, parsed: ControlId | None, text: str
    ) -> None:
        if parsed is None or parsed.kind not in ("reason", "answer"):
            await _tell(interaction, EXPIRED)
            return
        await interaction.response.defer()  # before any read, as a click's (``_click``)
        user = str(interaction.user.id)
        card = await self._cards.held(parsed.tool_call_id)
        kind = "approval" if parsed.kind == "reason" else "question"
        # A modal's submit names the card's message when it was opened from it.
        shown_at = str(interaction.message.id) if interaction.message is not None else None
        card = tapped(card, kind, str(interaction.channel_id), shown_at)
        if card is None:
            await _tell(interaction, EXPIRED)
            return
        if not self._access.is_allowed(user):
            await _tell(interaction, NOT_ALLOWED)
            return
        if parsed.kind == "answer":
            await self._answer(interaction, card, text)
            return
        decider = self._access.decider(user)
        refused = await self._hub.decision_refusal(card.tool_call_id, decider)
        if refused is not None:
            await _tell(interaction, refused)
            return
        result = await decide(self._hub, card.source, card.tool_call_id, "reject", decider, text)
        await self._after(interaction, card, result, "reject", text)

    async def _answer(self, interaction: discord.Interaction, card: CardRow, text: str) -> None:
        if not text.strip():
            await _tell(interaction, "An answer needs some text.")
            return
        user = str(interaction.user.id)
        refused = await self._hub.answer_refusal(card.tool_call_id, self._access.decider(user))
        if refused is not None:  # another member's: the question waits for who asked
            await _tell(interaction, refused)
            return
        # Every platform's rule (``OpenCards.answer``): the same words again, a double
        # submit, are the answer given, not an expired question.
        await self._cards.answer(card, text, by=interaction.user.display_name)

    # -- slash commands -------------------------------------------------------------------

    async def slash(self, interaction: discord.Interaction, name: str, argument: str) -> None:
        """``/name argument`` from the command menu, answered once."""
        try:
            await self._slash(interaction, name, argument)
        except Exception:
            error = report_failure(log, f"slash command /{name}")
            await _tell(interaction, SORRY_TAP.format(error=error))

    async def _stranger(self, interaction: discord.Interaction, user: str) -> None:
        """In their own DM a stranger's command is their request, as a message there is:
        a pairing code, the owner told (until 2026-12-06 they were told to send a direct
        message, in one; found by review); elsewhere a refusal."""
        if interaction.guild_id is not None or self._pairing is None:
            await _tell(interaction, NOT_PAIRED)
            return
        await interaction.response.defer(ephemeral=True, thinking=True)

        async def tell(_channel: str, text: str) -> None:
            await _tell(interaction, text)

        name = interaction.user.display_name
        if not await self._pairing(user, str(interaction.channel_id), name, tell):
            await _tell(interaction, ASKED_ALREADY)  # their code came within the reminder window

    async def _slash(self, interaction: discord.Interaction, name: str, argument: str) -> None:
        if not self._here(interaction):
            await _tell(interaction, NOT_HERE)
            return
        user = str(interaction.user.id)
        if not self._access.is_allowed(user):
            await self._stranger(interaction, user)
            return
        channel = interaction.channel
        parent = (
            getattr(channel, "parent_id", None) if isinstance(channel, discord.Thread) else None
        )
        channel_id = str(interaction.channel_id)
        if self._listening.starts_threads(parent and str(parent), channel_id) and (
            name in ABOUT_A_CONVERSATION
        ):
            await _tell(interaction, IN_ITS_THREAD.format(name=name))
            return
        source = source_of(str(parent), channel_id) if parent else source_of(channel_id)
        await interaction.response.defer(thinking=True)
        context = self._access.command_context(self._hub, source, argument.strip(), user)
        reply = await self._commands.run(name, context)
        if not reply:
            await _quietly(interaction.delete_original_response)
            return
        chunks = in_messages(reply)
        await _quietly(lambda: interaction.edit_original_response(content=chunks[0]))
        for chunk in chunks[1:]:
            await _quietly(lambda chunk=chunk: interaction.followup.send(chunk))


def _modal_text(components: Iterable[Any]) -> str:
    """The first text input's value in a submitted modal (rows or labels), cut."""
    for component in components:
        if not isinstance(component, dict):
            continue
        if component.get("type") == 4 and isinstance(component.get("value"), str):
            return component["value"][:_MODAL_TEXT]
        inner = component.get("components") or (
            [component["component"]] if isinstance(component.get("component"), dict) else []
        )
        found = _modal_text(inner)
        if found:
            return found
    return ""


async def _modal(
    interaction: discord.Interaction, title: str, custom_id: str, label: str, required: bool
) -> None:
    modal = discord.ui.Modal(title=title, custom_id=custom_id)
    modal.add_item(
        discord.ui.TextInput(
            label=label,
            custom_id="text",
            style=discord.TextStyle.paragraph,
            required=required,
            max_length=_MODAL_TEXT,
        )
    )
    try:
        await interaction.response.send_modal(modal)
    finally:
        modal.stop()  # its submit is read from the gateway by custom_id


async def _tell(interaction: discord.Interaction, text: str) -> None:
    """A short answer only the clicking user sees: the response, or a follow-up after it."""
    if interaction.response.is_done():
        await _quietly(lambda: interaction.followup.send(text, ephemeral=True))
    else:
        await _quietly(lambda: interaction.response.send_message(text, ephemeral=True))


async def _quietly(op: Any) -> None:
    try:
        await discord_call(op)
    except PlatformError as exc:
        log.info("answering an interaction failed: %s", exc.description)
