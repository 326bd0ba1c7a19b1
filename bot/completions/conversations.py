"""Which chathub conversation a request continues, and which of its messages are new.

A conversation is the hub source ``api:<id>``. What the client has seen in it (the user's
messages, and each answer exactly as it was sent) is kept as a chain of digests: the
head after each message (``api_conversation_heads``), the last one and the count on the
conversation's row. A request's dialog (its messages but the system ones) is chained the
same way; the longest beginning whose head the conversation has is what it has already
taken; the rest is new. So a client that sends the whole history every time adds nothing
twice, and one that sends only its last message adds just that. One indexed query finds
it, however long the conversation.

Finding the conversation:

- a request that names one (``X-Chathub-Conversation``, else ``user``) continues the
  conversation of that name and agent, made on first use;
- a request that names none continues the unnamed conversation whose ``head`` is its
  history without the last message (Open WebUI, LibreChat and most scripts send the
  whole history every time); a history no conversation ends with (the first message, an
  edited or regenerated one) starts a conversation of its own, built from what it carries;
  a first message the client marks as sent again continues the conversation it began.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from bot.completions.layer import SOURCE_PREFIX
from bot.completions.tables import api_conversation_heads as heads_table
from bot.completions.tables import api_conversations as c
from engine.session import CARRIED_KEY, TRUNCATED_KEY
from engine.store import Database, PerDialect, Prepared, insert_for, quick_unit, utcnow
from engine.store import chat_history as h
from engine.store import chat_llm_tools as tools
from engine.store import chat_sessions_stack as f

__all__ = [
    "POSITION_KEY",
    "ROOT",
    "AnswerTo",
    "Conversation",
    "ConversationMap",
    "StaleConversation",
    "answers_in",
    "chain",
    "digest",
]

#: The head of a conversation that holds nothing yet.
ROOT = hashlib.sha256(b"chathub api conversation").hexdigest()


def digest(role: str, text: str) -> str:
    """One message as the conversation remembers it: its role and its text, with line
    ends and surrounding spaces as clients tend to change them."""
    normal = text.replace("\r\n", "\n").strip()
    return hashlib.sha256(f"{role}\0{normal}".encode("utf-8", "surrogatepass")).hexdigest()


def chain(digests: Sequence[str], start: str = ROOT) -> list[str]:
    """The head after each of ``digests``, chained on ``start``."""
    heads = []
    head = start
    for one in digests:
        head = hashlib.sha256(f"{head}|{one}".encode()).hexdigest()
        heads.append(head)
    return heads


#: How recently a conversation must have moved (begun, or its answer held) for a marked
#: retry of its first message to continue it: OpenAI's SDKs retry at once after an error,
#: or after their 10-minute timeout, twice (a turn waiting on a card: the second retry
#: comes 20 minutes on); a script's same first words of yesterday are no retry of today's.
FIRST_RETRY_WINDOW = timedelta(minutes=35)

#: The key of a user message's metadata that holds its position in the conversation.
POSITION_KEY = "api_position"


@dataclass(frozen=True, slots=True)
class AnswerTo:
    """What became of one message of a conversation in the agent's session."""

    #: Its user row is in the session (its turn began).
    stored: bool
    #: The agent's answer to it (``None``: none yet, or none coming).
    answer: str | None
    #: Its turn failed (the user was told so).
    failed: bool
    #: The session holds no positioned message at all (written before positions were).
    legacy: bool
    #: The answer's tokens (prompt, completion), as stored with it.
    usage: tuple[int, int] | None = None
    #: The answer was cut at the model's token limit (``finish_reason`` ``length``).
    truncated: bool = False


@dataclass(frozen=True, slots=True)
class Conversation:
    id: int
    agent: str
    name: str | None
    head: str
    length: int

    @property
    def source(self) -> str:
        return f"{SOURCE_PREFIX}{self.id}"


class StaleConversation(Exception):
    """The conversation moved on since it was read (another process of a fleet took a
    message of it): the unit of work that would hold more rolls back."""


class ConversationMap:
    """The conversations in ``api_conversations``, the ones this process used last kept
    in memory: a request of a conversation it knows reads nothing before its message is
    stored. What it knows is checked in the transaction that stores the message (the
    conversation's head is still the one read), so another process's change is found
    there (``StaleConversation``) and never overwritten."""

    def __init__(
        self,
        db: Database,
        *,
        clock: Callable[[], datetime] = utcnow,
        remembered: int = 10_000,
    ) -> None:
        self._db = db
        self._clock = clock
        self._remembered = remembered
        self._by_name: OrderedDict[tuple[str, str], Conversation] = OrderedDict()
        self._by_head: OrderedDict[tuple[str, str], Conversation] = OrderedDict()
        #: The head each unnamed conversation is kept under in ``_by_head``.
        self._head_of: dict[int, str] = {}

    async def find(
        self,
        agent: str,
        name: str | None,
        heads: Sequence[str],
        *,
        retried: bool = False,
        opening: str | None = None,
    ) -> tuple[Conversation, int]:
        """The conversation a request whose dialog chains to ``heads`` continues (made
        when there is none), and how many of its messages it holds already: by ``name``;
        else the unnamed one whose messages are the dialog before its last (or all of it:
        a request sent again). ``retried``: the client marked the request as one it sent
        before, so a first message is the newest conversation begun with it, if any, and
        with the same instructions (``opening``, their digest, kept by a new one)."""
        known = self._known(agent, name, heads)
        if known is not None:
            return known
        found = await self._db.run(
            _find, agent, name, tuple(heads), self._clock(), retried, opening
        )
        self._remember(found[0])
        return found

    async def get(
        self, conversation: Conversation, heads: Sequence[str]
    ) -> tuple[Conversation, int]:
        """``conversation`` as stored now, and how many of ``heads`` it holds."""
        found = await self._db.run(_get, conversation.id, tuple(heads))
        self._remember(found[0])
        return found

    async def hold(self, conversation: Conversation, digests: Sequence[str]) -> Conversation:
        """The client has seen ``digests`` too (chained on what it held); raises
        ``StaleConversation`` when it moved on meanwhile."""
        held, unit = self.holding(conversation, digests)
        try:
            await self._db.run(unit)
        except StaleConversation:
            self.forget(conversation)
            raise
        self.remember(held)
        return held

    def holding(
        self, conversation: Conversation, digests: Sequence[str]
    ) -> tuple[Conversation, Callable[[Connection], None]]:
        """``hold`` as work for another transaction (the one storing the user's message):
        the conversation as it will be, and the work (``remember`` it once committed)."""
        heads = chain(digests, conversation.head)
        if not heads:
            return conversation, _nothing
        now = self._clock()
        first = conversation.length + 1
        held = Conversation(
            conversation.id,
            conversation.agent,
            conversation.name,
            heads[-1],
            conversation.length + len(heads),
        )

        @quick_unit
        def unit(conn: Connection) -> None:
            _hold(conn, conversation, held, first, heads, now)

        return held, unit

    async def answer_to(self, session_id: int | None, position: int) -> AnswerTo:
        """What became of the conversation's ``position``-th message in the agent's
        session: stored or not, failed, answered (its user row carries its position)."""
        if session_id is None:
            return AnswerTo(stored=False, answer=None, failed=False, legacy=False)
        return await self._db.run(_answer_to, session_id, position)

    async def carried_at(self, session_id: int | None, position: int) -> str | None:
        """What the conversation's ``position``-th message carried (``CARRIED_KEY``) when
        its turn last began (``None``: nothing, or it never began)."""
        if session_id is None:
            return None
        return await self._db.run(_carried_at, session_id, position)

    async def rewind(
        self, conversation: Conversation, position: int
    ) -> tuple[Conversation, Callable[[Connection], None]]:
        """The conversation as it held its first ``position`` messages (what it held after
        them, a failure's sentence, forgotten), and the work that makes it so (for the
        transaction that sends the message again; ``StaleConversation`` if it moved on)."""
        if conversation.length <= position:
            return conversation, _nothing
        head = await self._db.run(_head_at, conversation.id, position)
        rewound = Conversation(
            conversation.id, conversation.agent, conversation.name, head, position
        )

        @quick_unit
        def unit(conn: Connection) -> None:
            _rewind(conn, conversation, rewound, self._clock())

        return rewound, unit

    async def held_at(self, conversation: Conversation, last: str) -> int | None:
        """Where the conversation holds the message whose digest is ``last`` as its last
        message (the answer to it, if any, after it): its position, else ``None``."""
        return await self._db.run(_held_at, conversation.id, last)

    def remember(self, conversation: Conversation) -> None:
        """``conversation`` as committed (after ``holding``'s work)."""
        self._remember(conversation)

    def forget(self, conversation: Conversation) -> None:
        """What this process knew of ``conversation`` is stale: read it again next time."""
        if conversation.name is not None:
            self._by_name.pop((conversation.agent, conversation.name), None)
        self._by_head.pop((conversation.agent, conversation.head), None)
        self._head_of.pop(conversation.id, None)

    def _known(
        self, agent: str, name: str | None, heads: Sequence[str]
    ) -> tuple[Conversation, int] | None:
        if name is not None:
            known = self._by_name.get((agent, name))
            if known is None:
                return None
            taken = _taken_from_row(known, heads)
            return None if taken is None else (known, taken)
        for taken in (len(heads), len(heads) - 1) if len(heads) > 1 else ():
            known = self._by_head.get((agent, heads[taken - 1]))
            if known is not None and known.length == taken:
                return known, taken
        return None

    def _remember(self, conversation: Conversation) -> None:
        if conversation.name is not None:
            self._keep(self._by_name, (conversation.agent, conversation.name), conversation)
            return
        before = self._head_of.pop(conversation.id, None)
        if before is not None and before != conversation.head:  # it moved on: not there
            self._by_head.pop((conversation.agent, before), None)
        if conversation.length:
            self._keep(self._by_head, (conversation.agent, conversation.head), conversation)
            self._head_of[conversation.id] = conversation.head

    def _keep(
        self,
        kept: OrderedDict[tuple[str, str], Conversation],
        key: tuple[str, str],
        conversation: Conversation,
    ) -> None:
        kept[key] = conversation
        kept.move_to_end(key)
        while len(kept) > self._remembered:
            _, evicted = kept.popitem(last=False)
            if kept is self._by_head:
                self._head_of.pop(evicted.id, None)


def _nothing(conn: Connection) -> None:
    return None


def _conversation(row: sa.Row) -> Conversation:
    return Conversation(row.id, row.agent, row.name, row.head, row.length)


@quick_unit
def _find(
    conn: Connection,
    agent: str,
    name: str | None,
    heads: tuple[str, ...],
    now: datetime,
    retried: bool = False,
    opening: str | None = None,
) -> tuple[Conversation, int]:
    if name is not None:
        named = sa.select(c).where(c.c.agent == agent, c.c.name == name)
        row = conn.execute(named).first()
        if row is None:  # two first requests of one name (two processes): one row
            conn.execute(
                insert_for(conn.dialect.name, c)
                .values(agent=agent, name=name, head=ROOT, length=0, created_at=now, updated_at=now)
                .on_conflict_do_nothing()
            )
            row = conn.execute(named).one()
        conversation = _conversation(row)
        return conversation, _taken(conn, conversation, heads)
    if len(heads) == 1 and retried:  # a first message sent again: where it began, if it did
        row = conn.execute(
            sa.select(c)
            .join(heads_table, heads_table.c.conversation_id == c.c.id)
            .where(
                heads_table.c.position == 1,
                heads_table.c.head == heads[0],
                c.c.agent == agent,
                c.c.name.is_(None),
                c.c.length.in_((1, 2)),  # its message held, maybe its answer: nothing more
                c.c.updated_at >= now - FIRST_RETRY_WINDOW,
                c.c.opening.is_(None) if opening is None else c.c.opening == opening,
            )
            .order_by(c.c.updated_at.desc(), c.c.id.desc())
            .limit(1)
        ).first()
        if row is not None:
            return _conversation(row), 1
    if len(heads) > 1:  # a first message is a conversation of its own (unless sent again)
        count = len(heads)
        rows = conn.execute(
            sa.select(c, heads_table.c.position)
            .join(heads_table, heads_table.c.conversation_id == c.c.id)
            .where(
                heads_table.c.head.in_(heads[-2:]),
                c.c.agent == agent,
                c.c.name.is_(None),
            )
            .order_by(c.c.updated_at.desc(), c.c.id.desc())
        ).all()
        for row in rows:  # sent again: its message held, maybe its answer too
            if row.position == count and row.length in (count, count + 1):
                return _conversation(row), count
        for row in rows:  # the usual: everything but the last message held
            if row.position == count - 1 and row.length == count - 1:
                return _conversation(row), count - 1
    new_id = conn.execute(
        sa.insert(c)
        .values(
            agent=agent,
            name=None,
            head=ROOT,
            length=0,
            created_at=now,
            updated_at=now,
            opening=opening,
        )
        .returning(c.c.id)
    ).scalar_one()
    return Conversation(new_id, agent, None, ROOT, 0), 0


@quick_unit
def _answer_to(conn: Connection, session_id: int, position: int) -> AnswerTo:
    asked = conn.execute(
        _top_level(session_id, "user", h.c.id, h.c.status)
        .where(h.c.metadata[POSITION_KEY].as_integer() == position)
        .order_by(h.c.id.desc())
        .limit(1)
    ).first()
    if asked is None:
        positioned = _top_level(session_id, "user", h.c.id).where(
            h.c.metadata[POSITION_KEY].as_integer().is_not(None)
        )
        legacy = conn.execute(positioned.limit(1)).first() is None
        return AnswerTo(stored=False, answer=None, failed=False, legacy=legacy)
    if asked.status == "failed":
        return AnswerTo(stored=True, answer=None, failed=True, legacy=False)
    final = (
        answers_in(session_id, h.c.content, h.c.input_tokens, h.c.output_tokens, h.c.metadata)
        .where(
            h.c.id > asked.id,
            h.c.status == "ok",
            ~sa.exists().where(tools.c.message_id == h.c.id),  # a tool round is no answer
        )
        .order_by(h.c.id)
        .limit(1)
    )
    row = conn.execute(final).first()
    if row is None:
        return AnswerTo(stored=True, answer=None, failed=False, legacy=False)
    # Read back as it was given (until 2026-12-07 a request sent again was told "stop" and
    # no tokens for an answer cut at the token limit; found by review).
    return AnswerTo(
        stored=True,
        answer=row.content,
        failed=False,
        legacy=False,
        usage=(row.input_tokens or 0, row.output_tokens or 0),
        truncated=bool((row.metadata or {}).get(TRUNCATED_KEY)),
    )


@quick_unit
def _carried_at(conn: Connection, session_id: int, position: int) -> str | None:
    metadata = conn.execute(
        _top_level(session_id, "user", h.c.metadata)
        .where(h.c.metadata[POSITION_KEY].as_integer() == position)
        .order_by(h.c.id.desc())
        .limit(1)
    ).scalar()
    carried = (metadata or {}).get(CARRIED_KEY)
    return carried if isinstance(carried, str) else None


def _head_at(conn: Connection, conversation_id: int, position: int) -> str:
    if position == 0:
        return ROOT
    return conn.execute(
        sa.select(heads_table.c.head).where(
            heads_table.c.conversation_id == conversation_id,
            heads_table.c.position == position,
        )
    ).scalar_one()


def _rewind(conn: Connection, was: Conversation, rewound: Conversation, now: datetime) -> None:
    _move_on(conn, was, rewound, now)
    conn.execute(
        heads_table.delete().where(
            heads_table.c.conversation_id == was.id, heads_table.c.position > rewound.length
        )
    )


def answers_in(session_id: int, *columns: sa.ColumnElement[Any]) -> sa.Select[Any]:
    """``columns`` of the agent's answers in session ``session_id`` (its own words at the
    top level: not a sub-agent's, not a synthetic row, not an empty one)."""
    return _top_level(session_id, "assistant", *columns).where(h.c.content != "")


def _top_level(session_id: int, role: str, *columns: sa.ColumnElement[Any]) -> sa.Select[Any]:
    """``columns`` of the session's own rows of ``role`` (not a sub-agent's, not synthetic)."""
    return (
        sa.select(*columns)
        .join(f, f.c.id == h.c.session_stack_id)
        .where(
            f.c.session_id == session_id,
            f.c.depth == 0,
            h.c.role == role,
            h.c.is_synthetic.is_(False),
        )
    )


@quick_unit
def _held_at(conn: Connection, conversation_id: int, last: str) -> int | None:
    length = conn.execute(sa.select(c.c.length).where(c.c.id == conversation_id)).scalar_one()
    rows = conn.execute(
        sa.select(heads_table.c.position, heads_table.c.head).where(
            heads_table.c.conversation_id == conversation_id,
            heads_table.c.position.between(length - 2, length),
        )
    ).all()
    heads = {int(row.position): row.head for row in rows}
    heads[0] = ROOT
    for position in (length, length - 1):  # its message last, or its answer after it
        before = heads.get(position - 1)
        if before is not None and heads.get(position) == chain([last], before)[0]:
            return position
    return None


@quick_unit
def _get(
    conn: Connection, conversation_id: int, heads: tuple[str, ...]
) -> tuple[Conversation, int]:
    row = conn.execute(sa.select(c).where(c.c.id == conversation_id)).one()
    conversation = _conversation(row)
    return conversation, _taken(conn, conversation, heads)


def _taken(conn: Connection, conversation: Conversation, heads: tuple[str, ...]) -> int:
    """How many of the dialog's first messages ``conversation`` holds. Its last message
    counts only for a request sent again: the conversation's last message, or the one
    before its last answer; an older one said again is new."""
    taken = _taken_from_row(conversation, heads)
    if taken is not None:
        return taken
    found = conn.execute(
        sa.select(sa.func.max(heads_table.c.position)).where(
            heads_table.c.conversation_id == conversation.id, heads_table.c.head.in_(heads)
        )
    ).scalar()
    found = int(found or 0)
    if found == len(heads) and conversation.length == found + 1:
        return found  # sent again after its answer was held: the answer is read back
    return min(found, len(heads) - 1)  # an older message again is a new one


def _taken_from_row(conversation: Conversation, heads: Sequence[str]) -> int | None:
    """``_taken`` when the conversation's row tells (``None``: its heads must be read)."""
    held = conversation.length
    if held == 0:
        return 0
    if held <= len(heads) and heads[held - 1] == conversation.head:
        return held  # the usual: what it holds, then what is new (or nothing: sent again)
    if len(heads) == 1:
        return 0  # one message, not the last held: new, even if said before
    return None


_MOVE_ON = Prepared(
    c.update()
    .where(
        c.c.id == sa.bindparam("cid"),
        c.c.head == sa.bindparam("was"),
        c.c.length == sa.bindparam("had"),
    )
    .values(head=sa.bindparam("head"), length=sa.bindparam("length"), updated_at=sa.bindparam("at"))
)
_ADD_HEADS = PerDialect(
    lambda dialect: Prepared(insert_for(dialect, heads_table).on_conflict_do_nothing())
)


def _hold(
    conn: Connection,
    was: Conversation,
    held: Conversation,
    first: int,
    heads: list[str],
    now: datetime,
) -> None:
    _move_on(conn, was, held, now)
    _ADD_HEADS[conn.dialect.name].executemany(
        conn,
        [
            {"conversation_id": was.id, "position": first + i, "head": head}
            for i, head in enumerate(heads)
        ],
    )


def _move_on(conn: Connection, was: Conversation, to: Conversation, now: datetime) -> None:
    """The conversation's row from ``was`` to ``to``, unless another request moved it on
    meanwhile (``StaleConversation``)."""
    values = {"cid": was.id, "was": was.head, "had": was.length, "at": now}
    moved = _MOVE_ON.execute(conn, {**values, "head": to.head, "length": to.length})
    if moved.rowcount != 1:
        raise StaleConversation(f"conversation {was.id} moved on")
