"""``/search``, ``/memory`` and ``/forget_me``: long-term memory, in the same words everywhere.

What a command finds and does is here; Telegram adds a 🗑 button per fact and a
confirmation button for ``/forget_me`` (``bot/telegram/dispatch/memory.py``); the web chat and the
terminal use the text commands from ``memory_commands`` (``/forget_me yes`` confirms).
``memory`` is ``None`` when ``MEMORY_ENABLED=false``: every command then says so.

A person is their platform's id (``CommandContext.user_id``, Telegram's user id) or, for
a front end with one operator (web chat, console), that operator (``user_of``).
"""

from __future__ import annotations

from dataclasses import dataclass

from bot.platform.commands import Command, CommandContext
from memory.facts import Fact
from memory.search import Hit
from memory.service import Forgotten, MemoryService
from memory.users import Identity

__all__ = [
    "FORGET_HELP",
    "MEMORY_HELP",
    "MEMORY_OFF",
    "NOT_YOURS",
    "SEARCH_HELP",
    "SEARCH_LIMIT",
    "MemoryFront",
    "MemoryListing",
    "memory_commands",
]

#: Said by every memory command when ``MEMORY_ENABLED=false``.
MEMORY_OFF = "Long-term memory is switched off."
SEARCH_HELP = "Search this chat's past conversations"
MEMORY_HELP = "What I remember about you"
FORGET_HELP = "Delete what I remember about you"
SEARCH_USAGE = "Usage: /search <words> — I look for them in this chat's past conversations."
MEMORY_USAGE = "Usage: /memory (what I remember about you), /memory off or /memory on."
NOT_YOURS = "These are not your memories."
NOBODY = "I cannot tell who you are here, so I have no memories to show."
ONLY_OWNER = "In a group only the bot's owner can switch memory off or on."
#: Hits shown by ``/search``.
SEARCH_LIMIT = 5
#: A fact in a listing is cut here (a Telegram panel is one message of 4,096 characters).
SHOWN_FACT_CHARS = 200
SNIPPET_CHARS = 300
HISTORY_KEPT = (
    "The chat history itself is kept: /new and /clear start a new conversation but delete "
    "nothing, and no command deletes history; ask the bot's owner if you want it deleted."
)


@dataclass(frozen=True, slots=True)
class MemoryListing:
    """``/memory``'s answer: its text and the facts it numbers, in order."""

    text: str
    facts: tuple[Fact, ...]
    #: The page shown (from 0) and how many there are (1 for an unpaged listing).
    page: int = 0
    pages: int = 1


class MemoryFront:
    """The memory commands' words and actions over ``MemoryService`` (``None``: off)."""

    def __init__(self, memory: MemoryService | None) -> None:
        self.memory = memory

    def _personal(self, source: str) -> bool:
        """One person's conversation: as its form says, or as its platform recorded it
        (asked only with memory on)."""
        assert self.memory is not None
        return self.memory.is_personal(source)

    async def person(self, source: str, user_id: str | None) -> int | None:
        """The memory user of ``user_id`` (the platform's id) in ``source``; without one,
        the conversation's operator or owner (``None`` when nobody can tell)."""
        if self.memory is None:
            return None
        if user_id is not None:
            platform = source.split(":", 1)[0]
            return await self.memory.user_for(Identity(platform, user_id))
        return await self.memory.user_of(source, None)

    # -- /search ---------------------------------------------------------------------------

    async def search(self, source: str, query: str) -> str:
        if self.memory is None:
            return MEMORY_OFF
        words = query.strip()
        if not words:
            return SEARCH_USAGE
        hits = await self.memory.search.sessions(source, words, limit=SEARCH_LIMIT)
        if not hits:
            return "Nothing about that in this chat's past conversations."
        return "Found in this chat's past conversations:\n\n" + "\n\n".join(
            _hit_line(number, hit) for number, hit in enumerate(hits, start=1)
        )

    # -- /memory ---------------------------------------------------------------------------

    async def facts_of(self, source: str, user: int) -> list[Fact]:
        """``user``'s facts as ``/memory`` shows them in ``source``: all of them in a
        personal conversation, in a group only those learned in that group."""
        assert self.memory is not None
        return await self.memory.facts_in(source, user)

    async def listing(
        self, source: str, user: int | None, *, page: int = 0, per_page: int | None = None
    ) -> MemoryListing:
        """The numbered facts (one page of ``per_page`` when given) and whether memory
        is off in ``source``."""
        if self.memory is None:
            return MemoryListing(MEMORY_OFF, ())
        if user is None:
            return MemoryListing(NOBODY, ())
        facts = await self.facts_of(source, user)
        pages = 1 if not per_page else max(1, -(-len(facts) // per_page))
        page = min(max(page, 0), pages - 1)
        first = page * per_page if per_page else 0
        shown = facts[first : first + per_page] if per_page else facts
        where = "in this chat" if self._personal(source) else "from this group"
        lines = []
        if not facts:
            lines.append(f"I remember nothing about you {where}.")
        else:
            head = f"What I remember about you {where} ({len(facts)}"
            head += f", page {page + 1} of {pages}):" if pages > 1 else "):"
            lines.append(head)
            lines += [
                f"{first + number}. {_cut(fact.body, SHOWN_FACT_CHARS)}"
                for number, fact in enumerate(shown, start=1)
            ]
        lines.append("")
        if source in self.memory.optouts:
            lines.append("Memory is off in this chat: I learn nothing new here. /memory on")
        else:
            lines.append("/memory off stops me learning in this chat; /forget_me deletes it all.")
        return MemoryListing("\n".join(lines), tuple(shown), page, pages)

    async def switch(self, source: str, argument: str, *, is_owner: bool) -> str:
        """``/memory off`` / ``/memory on`` (in a group, the owner's only)."""
        if self.memory is None:
            return MEMORY_OFF
        if not self._personal(source) and not is_owner:
            return ONLY_OWNER
        off = argument == "off"
        await self.memory.set_opt_out(source, opted_out=off)
        if not off and source in self.memory.optouts:  # its channel's (group's) opt-out
            return (
                "Memory is off in the channel or group this conversation is part of, and "
                "that covers it: switch it on there with /memory on."
            )
        if off:
            return (
                "Memory is off in this chat: nothing new is remembered or indexed for search "
                "here, and I use no facts about you. What I learned before stays until "
                "/forget_me. /memory on switches it back on."
            )
        return "Memory is on in this chat again."

    async def delete_fact(self, user: int, fact_id: int) -> str:
        """Delete ``user``'s fact ``fact_id`` (another user's is not found: nothing happens)."""
        if self.memory is None:
            return MEMORY_OFF
        if await self.memory.facts.delete(user, fact_id):
            return "Deleted."
        return "That one was already gone."

    # -- /forget_me ------------------------------------------------------------------------

    async def forget_prompt(self, user: int | None, confirm: str, source: str) -> str:
        """What ``/forget_me`` asks before it deletes; ``confirm`` says how to go on. In a
        group it counts nothing: the room would learn how much is remembered of the person
        elsewhere (it did, until 2026-12-06; found by review)."""
        if self.memory is None:
            return MEMORY_OFF
        if user is None:
            return NOBODY
        what = "everything I remember about you"
        if self._personal(source):
            what += f": {_facts(len(await self.memory.facts.list(user)))}"
        return (
            f"This deletes {what}, and what you said from my search index (in groups too), "
            f"with both sides of your own conversations. {HISTORY_KEPT}\n\n{confirm}"
        )

    async def forget(self, user: int | None, source: str) -> str:
        if self.memory is None:
            return MEMORY_OFF
        if user is None:
            return NOBODY
        done: Forgotten = await self.memory.forget_user(user)
        if not self._personal(source):  # the room is told nothing of how much there was
            return f"Done: I deleted everything I remembered about you. {HISTORY_KEPT}"
        entries = "search entry" if done.documents == 1 else "search entries"
        return (
            f"Done: I deleted {_facts(done.facts)} and {done.documents} {entries}. {HISTORY_KEPT}"
        )


def memory_commands(front: MemoryFront) -> list[Command]:
    """``/search``, ``/memory`` and ``/forget_me`` as text (``/forget_me yes`` confirms),
    for a front end without buttons."""

    async def search(c: CommandContext) -> str:
        return await front.search(c.source, c.argument)

    async def memory(c: CommandContext) -> str:
        argument = c.argument.strip().lower()
        if argument in ("off", "on"):
            return await front.switch(c.source, argument, is_owner=c.is_owner)
        if argument:
            return MEMORY_USAGE
        return (await front.listing(c.source, await front.person(c.source, c.user_id))).text

    async def forget_me(c: CommandContext) -> str:
        user = await front.person(c.source, c.user_id)
        if c.argument.strip().lower() == "yes":
            return await front.forget(user, c.source)
        return await front.forget_prompt(user, "Send /forget_me yes to go ahead.", c.source)

    return [
        Command("search", SEARCH_HELP, search, argument="<words>"),
        Command("memory", MEMORY_HELP, memory, argument="[off|on]"),
        Command("forget_me", FORGET_HELP, forget_me, argument="[yes]"),
    ]


def _hit_line(number: int, hit: Hit) -> str:
    title = hit.title or "untitled conversation"
    return (
        f"{number}. {hit.created_at:%Y-%m-%d} · {_cut(title, 80)}\n"
        f"{_cut(' '.join(hit.snippet.split()), SNIPPET_CHARS)}"
    )


def _facts(count: int) -> str:
    return "1 fact" if count == 1 else f"{count} facts"


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
