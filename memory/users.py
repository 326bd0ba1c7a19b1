"""People: one user table, every platform's ids mapped into it.

A message names its speaker in its metadata (``engine.store.inbox.SENDER_KEY``: Telegram
puts the sender's id there); a front end with one operator and no sender (the web chat,
the console) speaks for its owner. ``identity_of`` reads that; ``Users`` turns an identity
into the one ``memory_users`` id, creating it the first time. A later platform plugs in the
same way: its source prefix is its platform name, its sender id the external id.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from engine.store import (
    SENDER_KEY,
    Database,
    chat_history,
    chat_sessions,
    chat_sessions_stack,
    insert_for,
    utcnow,
)
from engine.text import clean_text
from memory.tables import memory_identities, memory_personal_sources, memory_users

__all__ = [
    "OPERATOR_PLATFORMS",
    "OWNER",
    "BatchSpeakers",
    "Identity",
    "PersonalSources",
    "Users",
    "forget_through_in",
    "forgotten_through_in",
    "identity_of",
    "is_personal",
    "is_personal_in",
    "personal_rule_in",
    "personal_sources_in",
    "resolve_in",
]

#: The external id of a one-operator front end's only person.
OWNER = "owner"
#: Front ends whose every conversation is its operator's (no sender in the metadata).
_OPERATOR_SOURCES = {"web": "web", "console": "console"}
#: Their platform names in ``memory_identities``.
OPERATOR_PLATFORMS = tuple(dict.fromkeys(_OPERATOR_SOURCES.values()))


@dataclass(frozen=True, slots=True)
class Identity:
    platform: str
    external_id: str
    display_name: str | None = None


def platform_of(source: str) -> str:
    return source.split(":", 1)[0]


def is_personal(source: str) -> bool:
    """Whether ``source`` is one person's conversation with the bot (a Telegram private
    chat, whose chat id is the user's id; a Slack DM, whose channel id starts with ``D``;
    the operator's web chat and console), not a group where others read along."""
    platform = platform_of(source)
    if platform in _OPERATOR_SOURCES:
        return True
    chat = source.split(":")[1] if source.count(":") >= 1 else ""
    if platform == "telegram":
        return chat.isdigit()  # groups and channels have negative ids
    if platform == "slack":  # a DM, or a thread in one (until 2026-12-06: a group)
        return chat.startswith("D")
    return False


#: Platforms whose sources do not say whether they are one person's: theirs are found in
#: ``memory_personal_sources``, which the platform fills as it meets them.
_UNTOLD = frozenset({"discord"})


def is_personal_in(conn: Connection, source: str) -> bool:
    """``is_personal``, or a conversation its platform recorded as one person's (a Discord
    DM), read inside a caller's transaction."""
    if is_personal(source):
        return True
    if platform_of(source) not in _UNTOLD:
        return False
    found = conn.execute(
        sa.select(memory_personal_sources.c.source).where(
            memory_personal_sources.c.source == source
        )
    ).first()
    return found is not None


def personal_sources_in(conn: Connection) -> set[str]:
    """Every conversation a platform recorded as one person's."""
    return set(conn.execute(sa.select(memory_personal_sources.c.source)).scalars())


def personal_rule_in(conn: Connection) -> Callable[[str], bool]:
    """``is_personal_in`` for many sources: the recorded ones read once."""
    recorded = personal_sources_in(conn)
    return lambda source: is_personal(source) or source in recorded


class PersonalSources:
    """The recorded personal conversations, read at start (and again in a fleet), then
    cached: a source is never recorded back as a group's."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._sources: set[str] = set()

    async def load(self) -> None:
        self._sources |= await self._db.run(personal_sources_in)

    def __contains__(self, source: object) -> bool:
        return isinstance(source, str) and (is_personal(source) or source in self._sources)

    async def record(self, source: str) -> None:
        """``source`` is one person's conversation with the bot (its platform knows)."""
        if source in self or platform_of(source) not in _UNTOLD:
            return
        await self._db.run(_record_personal, source)
        self._sources.add(source)


def _record_personal(conn: Connection, source: str) -> None:
    conn.execute(
        insert_for(conn.dialect.name, memory_personal_sources)
        .values(source=source, created_at=utcnow())
        .on_conflict_do_nothing()
    )


#: The longest display name kept (the column's size).
NAME_CHARS = 255
#: The longest platform id a person is known by (the column's size): a longer one is no
#: platform's (Matrix allows 255), and nobody's words are told apart by it.
EXTERNAL_ID_CHARS = 255


def identity_of(source: str, metadata: Mapping[str, Any] | None) -> Identity | None:
    """Who said a message of ``source`` with ``metadata``; ``None`` when nobody can tell."""
    platform = platform_of(source)
    sender = (metadata or {}).get(SENDER_KEY)
    if isinstance(sender, Mapping) and sender.get("id") not in (None, ""):
        # A platform's names come as people wrote them: a NUL (PostgreSQL refuses it) or
        # half an emoji made the person's row unwritable, and each round of indexing and
        # learning stopped at it, for every later session (found by review, 2026-12-07).
        name = sender.get("name")
        shown = clean_text(name)[:NAME_CHARS] if isinstance(name, str) else None
        external_id = clean_text(str(sender["id"]))
        if len(external_id) > EXTERNAL_ID_CHARS:
            return None  # unwritable (PostgreSQL): every round of indexing stopped at it
        return Identity(platform, external_id, shown)
    if platform in _OPERATOR_SOURCES:
        return Identity(_OPERATOR_SOURCES[platform], OWNER)
    if platform == "telegram" and is_personal(source):
        return Identity(platform, source.split(":")[1])  # a private chat's id is its user's
    return None


class Users:
    """Identity -> user id, cached (an identity's user never changes once made)."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._ids: dict[tuple[str, str], int] = {}

    async def resolve(self, identity: Identity) -> int:
        key = (identity.platform, identity.external_id)
        found = self._ids.get(key)
        if found is None:
            found = self._ids[key] = await self._db.run(resolve_in, identity)
        return found

    async def link(self, identity: Identity, to: Identity) -> int:
        """Make ``identity`` the same person as ``to`` (the owner's Telegram id and the
        web sign-in), unless ``identity`` already has a user of its own; the user id."""
        user_id = await self.resolve(to)
        linked = await self._db.run(_link, identity, user_id)
        self._ids[(identity.platform, identity.external_id)] = linked
        return linked

    async def identities(self, user_id: int) -> list[Identity]:
        return await self._db.run(_identities, user_id)


class BatchSpeakers:
    """The users of one batch of messages, resolved inside its transaction: each identity
    once (a batch is mostly one or two people), not once per message."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self._ids: dict[Identity, int] = {}
        self._forgotten: dict[int, int] = {}
        self._owners: dict[str, Identity | None] = {}
        self._personal: dict[str, bool] = {}

    def user_id(self, identity: Identity) -> int:
        found = self._ids.get(identity)
        if found is None:
            found = self._ids[identity] = resolve_in(self._conn, identity)
        return found

    def forgotten(self, user_id: int, message_id: int) -> bool:
        """Whether the person said ``/forget_me`` after ``message_id`` was written: it is
        never learned from nor indexed again."""
        through = self._forgotten.get(user_id)
        if through is None:
            through = self._forgotten[user_id] = forgotten_through_in(self._conn, user_id)
        return message_id <= through

    def owner_forgotten(self, source: str, message_id: int) -> bool:
        """Whether the person whose own conversation ``source`` is forgot it after
        ``message_id`` (both sides of it: the assistant's rows too)."""
        personal = self._personal.get(source)
        if personal is None:  # once a source per batch (a Discord channel's is a query)
            personal = self._personal[source] = is_personal_in(self._conn, source)
        owner = self._owner(source) if personal else None
        return owner is not None and self.forgotten(self.user_id(owner), message_id)

    def _owner(self, source: str) -> Identity | None:
        """The person whose own conversation ``source`` is: named by the source (a Telegram
        private chat), else the speaker of its messages (a Slack DM: the bot's side of it
        was indexed again after the person's /forget_me until 2026-12-06)."""
        if source not in self._owners:
            self._owners[source] = identity_of(source, None) or _speaker_in(self._conn, source)
        return self._owners[source]


def _speaker_in(conn: Connection, source: str) -> Identity | None:
    """Who wrote the newest message of ``source`` that names its speaker."""
    h, stack, sessions = chat_history, chat_sessions_stack, chat_sessions
    said = conn.execute(
        sa.select(h.c.metadata)
        .join(stack, stack.c.id == h.c.session_stack_id)
        .join(sessions, sessions.c.id == stack.c.session_id)
        .where(sessions.c.source == source, h.c.role == "user", h.c.is_synthetic.is_(False))
        .where(h.c.metadata.is_not(None))
        .order_by(h.c.id.desc())
        .limit(1)
    ).scalar()
    return identity_of(source, said) if isinstance(said, Mapping) else None


def forgotten_through_in(conn: Connection, user_id: int) -> int:
    """The newest message id at the person's last ``/forget_me`` (0: never). Read with a
    share lock on PostgreSQL: a ``/forget_me`` (which marks first, ``_forget_user``) waits
    for the transaction that read it and then deletes what it wrote; one that committed
    between the read and that commit deleted nothing of it, and the fact or the search
    rows came back (found by review on 2026-12-06). SQLite's writers go one at a time."""
    u = memory_users
    read = sa.select(u.c.forgotten_through).where(u.c.id == user_id).with_for_update(read=True)
    value = conn.execute(read).scalar()
    return int(value or 0)


def forget_through_in(conn: Connection, user_id: int, message_id: int) -> None:
    """Mark the person's words up to ``message_id`` forgotten (in the forget's transaction)."""
    u = memory_users
    conn.execute(u.update().where(u.c.id == user_id).values(forgotten_through=message_id))


def resolve_in(conn: Connection, identity: Identity) -> int:
    """The user of ``identity``, created (with its identity row) when there is none."""
    found = _lookup(conn, identity)
    if found is not None:
        if identity.display_name:  # a name seen later (the first sighting had none)
            u = memory_users
            conn.execute(
                u.update()
                .where(
                    u.c.id == found,
                    sa.or_(u.c.display_name.is_(None), u.c.display_name != identity.display_name),
                )
                .values(display_name=identity.display_name)
            )
        return found
    user_id = int(
        conn.execute(
            memory_users.insert().values(display_name=identity.display_name, created_at=utcnow())
        ).inserted_primary_key[0]
    )
    found = _link(conn, identity, user_id)
    if found != user_id:  # another writer made the identity first: ours is nobody's
        conn.execute(memory_users.delete().where(memory_users.c.id == user_id))
    return found


def _lookup(conn: Connection, identity: Identity) -> int | None:
    ids = memory_identities
    value = conn.execute(
        sa.select(ids.c.user_id).where(
            ids.c.platform == identity.platform, ids.c.external_id == identity.external_id
        )
    ).scalar()
    return None if value is None else int(value)


def _link(conn: Connection, identity: Identity, user_id: int) -> int:
    # Two writers at once (two processes): the first identity row wins, both read it back.
    conn.execute(
        insert_for(conn.dialect.name, memory_identities)
        .values(
            platform=identity.platform,
            external_id=identity.external_id,
            user_id=user_id,
            created_at=utcnow(),
        )
        .on_conflict_do_nothing()
    )
    found = _lookup(conn, identity)
    assert found is not None
    return found


def _identities(conn: Connection, user_id: int) -> list[Identity]:
    ids = memory_identities
    rows = conn.execute(
        sa.select(ids.c.platform, ids.c.external_id)
        .where(ids.c.user_id == user_id)
        .order_by(ids.c.platform, ids.c.external_id)
    )
    return [Identity(r.platform, r.external_id) for r in rows]
