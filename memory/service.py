"""The memory service: the ChatEventBus's consumer that keeps the search index current,
and the one place the front ends and tools reach users, facts and profiles through.

Subscribed before its first catch-up, so nothing published after ``start`` is missed; an
event only names a session to index (``Indexer`` reads the text back from the database).
On ``Lagged`` it no longer knows which sessions it missed, so it catches up every session
behind its watermark. The bus never waits for it: a slow index slows nobody's turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from engine.bus import (
    AssistantResponse,
    BusClosed,
    BusEvent,
    ChatEventBus,
    CompactionDone,
    Lagged,
    Subscription,
    UserMessage,
)
from engine.llm import ChatModel
from engine.store import VISITS_KEY, Database, chat_history, chat_sessions, chat_sessions_stack
from engine.tls import shared_tls_context
from memory.deriver import Deriver, DeriverLimits
from memory.embedder import Embedder, EmbedderLimits
from memory.embeddings import ChosenEmbeddings, EmbeddingChoice, EmbeddingClient, EmbeddingConfig
from memory.facts import Fact, FactLimits, FactStore
from memory.followups import FollowUps
from memory.indexer import Indexer, SessionsFailed
from memory.optouts import OptOuts
from memory.profile import ProfileCache, ProfileLimits
from memory.search import Search, Semantic
from memory.tables import memory_documents, memory_facts
from memory.users import (
    OPERATOR_PLATFORMS,
    OWNER,
    Identity,
    PersonalSources,
    Users,
    forget_through_in,
    identity_of,
    personal_rule_in,
)
from memory.vectors import detect

__all__ = ["Forgotten", "MemoryService"]


@dataclass(frozen=True, slots=True)
class Forgotten:
    """What ``forget_user`` deleted."""

    facts: int
    documents: int


log = logging.getLogger(__name__)


class MemoryService:
    """Start after the engine (its bus and database); close before the engine."""

    def __init__(
        self,
        db: Database,
        bus: ChatEventBus,
        *,
        indexer: Indexer | None = None,
        capacity: int | None = None,
        fact_limits: FactLimits | None = None,
        profile_limits: ProfileLimits | None = None,
        models: Callable[[], Sequence[ChatModel]] | None = None,
        deriver_limits: DeriverLimits | None = None,
        embeddings: EmbeddingConfig | EmbeddingChoice | None = None,
        embedder_limits: EmbedderLimits | None = None,
        min_similarity: float = 0.3,
        reread_s: float | None = None,
    ) -> None:
        """``models``: the deriver's models in the order to try them; ``None``: no facts
        are derived (search, profiles and the tools still work). ``embeddings``: the
        endpoint for semantic recall, or the choice of one that follows the providers
        (``chathub serve``'s: whoever follows it makes it choose again; while it names
        nobody, search is full text only); ``None``: search is full text only.
        ``reread_s``: in a fleet, other processes change facts and opt-outs too (a
        derivation, a ``/forget_me`` or ``/memory off`` taken by the receiver), so what is
        cached here is read again that often (until 2026-12-06 never: a forgotten fact
        stayed in another process's profiles; found by review)."""
        self._db = db
        self._reread_s = reread_s
        self._reread: asyncio.Task[None] | None = None
        self._bus = bus
        self._capacity = capacity
        self.indexer = indexer or Indexer(db)
        self.search = Search(db)
        self.users = Users(db)
        self.optouts = OptOuts(db)
        #: Conversations a platform recorded as one person's (a Discord DM).
        self.personal = PersonalSources(db)
        self.facts = FactStore(db, limits=fact_limits, on_change=self._facts_changed)
        self.profiles = ProfileCache(self.facts, profile_limits)
        #: Embedding and fact derivation: run after indexing rounds, in a task of their own.
        self.followups = FollowUps()
        self.deriver: Deriver | None = None
        if models is not None:
            # The same FactStore: its change callback drops the profiles it changes.
            self.deriver = Deriver(db, models, self.facts, deriver_limits)
            self.followups.add("fact derivation", self.deriver.derive_pending)
        self._embeddings = embeddings
        self._embedder_limits = embedder_limits
        self._min_similarity = min_similarity
        self._http: httpx.AsyncClient | None = None
        self._semantic_started = False
        self._semantic_start: asyncio.Task[None] | None = None
        self._closing = False
        self._sub: Subscription[BusEvent] | None = None
        self._task: asyncio.Task[None] | None = None
        self._idle = asyncio.Event()  # set while waiting for an event with nothing buffered

    async def start(self) -> None:
        await self.optouts.load()
        await self.personal.load()
        embeddings = self._embeddings
        if isinstance(embeddings, EmbeddingChoice) and embeddings.endpoint() is None:
            # Nothing embeds yet: memory as without embeddings, until a provider serving
            # them is chosen (then set up as at start, without a restart).
            embeddings.on_change(self._embeddings_chosen)
        elif embeddings is not None:
            await self._start_semantic(embeddings)
        self._sub = self._bus.subscribe(self._capacity)
        self._task = asyncio.create_task(self._run(self._sub), name="chathub-memory")
        self.followups.start()
        if self._reread_s is not None:
            self._reread = asyncio.create_task(
                self._read_again(self._reread_s), name="chathub-memory-reread"
            )

    async def _read_again(self, every_s: float) -> None:
        """What other processes changed: the opt-outs read again, the profiles dropped."""
        while True:
            await asyncio.sleep(every_s)
            try:
                await self.optouts.load()
                await self.personal.load()
            except Exception:  # the database away: the cache as it was, until next time
                log.warning("memory: the opt-outs could not be read again", exc_info=True)
                continue
            self.profiles.clear()

    async def _start_semantic(self, embeddings: EmbeddingConfig | EmbeddingChoice) -> None:
        self._semantic_started = True
        vectors = await detect(self._db)
        if vectors is None:
            log.warning(
                "memory: %s, but this PostgreSQL has no pgvector extension; search stays full text",
                "EMBEDDING_MODEL is set"
                if isinstance(embeddings, EmbeddingConfig)
                else f"embeddings are chosen ({embeddings.endpoint()!r})",
            )
            return
        self._http = httpx.AsyncClient(verify=shared_tls_context())
        client: EmbeddingClient | ChosenEmbeddings
        if isinstance(embeddings, EmbeddingChoice):
            client = ChosenEmbeddings(embeddings, self._http)
            # A new model starts embedding everything again at once, not after a message.
            embeddings.on_change(self.followups.wake)
            chosen = f"{embeddings.endpoint()!r}, following the providers"
        else:
            client = EmbeddingClient(embeddings, self._http)
            chosen = embeddings.model
        self.search.semantic = Semantic(client, vectors, self._min_similarity)
        embedder = Embedder(self._db, client, vectors, self._embedder_limits)
        self.followups.add("embedding", embedder.embed_pending)
        log.info("memory: semantic recall with %s (vectors: %s)", chosen, vectors.kind)

    def _embeddings_chosen(self) -> None:
        """The choice names an endpoint for the first time: semantic recall set up."""
        choice = self._embeddings
        if self._semantic_started or self._closing or not isinstance(choice, EmbeddingChoice):
            return
        if choice.endpoint() is None:
            return
        self._semantic_started = True
        self._semantic_start = asyncio.create_task(
            self._start_semantic_late(choice), name="chathub-memory-semantic"
        )

    async def _start_semantic_late(self, choice: EmbeddingChoice) -> None:
        try:
            await self._start_semantic(choice)
        except Exception:
            self._semantic_started = False  # the next change tries again
            log.exception("memory: setting up semantic recall failed; full text only")
            return
        if not self._closing and self._task is not None:
            self.followups.start()
            self.followups.wake()  # everything indexed so far, embedded now

    async def drained(self) -> None:
        """Return once the bus is closed and everything it delivered is indexed."""
        if self._task is not None:
            await asyncio.shield(self._task)

    async def settled(self) -> None:
        """Return once everything published so far is indexed (for tests and tools that
        must read their own writes); at once when the service is not running."""
        sub = self._sub
        while sub is not None and self._task is not None and not self._task.done():
            if self._idle.is_set() and not sub.pending:
                return
            self._idle.clear()
            # The worker sets it again when it next waits with an empty buffer.
            waiter = asyncio.ensure_future(self._idle.wait())
            await asyncio.wait({waiter, self._task}, return_when=asyncio.FIRST_COMPLETED)
            waiter.cancel()

    async def followed_up(self) -> None:
        """``settled``, then return once the follow-up jobs have nothing due (tests)."""
        if self._semantic_start is not None:  # a provider of embeddings came meanwhile
            await asyncio.shield(self._semantic_start)
        await self.settled()
        await self.followups.settled()

    async def close(self) -> None:
        self._closing = True
        if self._reread is not None:
            self._reread.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reread
            self._reread = None
        if self._semantic_start is not None:
            self._semantic_start.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._semantic_start
            self._semantic_start = None
        await self.followups.close()
        if self._http is not None:
            await self._http.aclose()
            self._http = None
        if self._sub is not None:
            self._sub.close()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._task = self._sub = None

    # -- people, facts, profiles ---------------------------------------------------------

    async def user_of(self, source: str, metadata: Mapping[str, Any] | None = None) -> int | None:
        """The user speaking in ``source`` (the sender in ``metadata``; a personal
        conversation's owner without one); ``None`` when nobody can tell."""
        identity = identity_of(source, metadata)
        return None if identity is None else await self.users.resolve(identity)

    async def speaker(
        self, session_id: int, *, before: int | None = None
    ) -> tuple[str, int | None] | None:
        """``(source, user id)`` of whoever wrote the session's latest message, or the
        latest ``before`` the message that made a tool's call (the person a memory tool
        acts for: in a group someone else's message may join the turn meanwhile, and the
        tool acted for them until 2026-12-06; found by review), in the session's conversation
        (``conversation_in``: a job's run, its chat's); ``None`` for an unknown session or
        one that serves no conversation."""
        found = await self._db.run(conversation_in, session_id, before)
        if found is None:
            return None
        source, metadata = found
        return source, await self.user_of(source, metadata)

    async def link_operator(self, identity: Identity) -> None:
        """Make the one-operator front ends (web chat, console) speak as ``identity``
        (the owner's Telegram id), unless they already have a user of their own."""
        for platform in OPERATOR_PLATFORMS:
            await self.users.link(Identity(platform, OWNER), to=identity)

    async def user_for(self, identity: Identity) -> int:
        return await self.users.resolve(identity)

    def is_personal(self, source: str) -> bool:
        """Whether ``source`` is one person's conversation: its form says so (a Telegram
        private chat, a Slack DM) or its platform recorded it (a Discord DM: until
        2026-12-07 one counted as a group, and its person could not switch memory off
        there)."""
        return source in self.personal

    async def note_personal(self, source: str) -> None:
        """``source`` is one person's conversation with the bot, which its form does not
        say (a Discord DM): recorded once."""
        await self.personal.record(source)

    async def facts_in(self, source: str, user_id: int) -> list[Fact]:
        """``user_id``'s facts as ``source`` may read them: all of them in a personal
        conversation, in a group only those learned in that group (nothing told in private
        reaches a room others read: ``/memory``, the memory tools and the profile alike)."""
        facts = await self.facts.list(user_id)
        if self.is_personal(source):
            return facts
        return [fact for fact in facts if fact.origin_source == source]

    async def turn_context(self, source: str, metadata: Mapping[str, Any] | None) -> str | None:
        """The speaker's profile for a turn of ``source`` (``ChatHub.add_turn_context``):
        all their facts in their own conversation, in a group only what they said there."""
        if source in self.optouts:
            return None
        identity = identity_of(source, metadata)
        if identity is None:
            return None
        user_id = await self.users.resolve(identity)  # cached after the first turn
        return await self.profiles.profile(user_id, None if self.is_personal(source) else source)

    def _facts_changed(self, user_id: int) -> None:
        self.profiles.forget(user_id)

    async def forget_user(self, user_id: int) -> Forgotten:
        """``/forget_me``: the user's facts and search rows (what they said anywhere, and
        both sides of their own conversations). The chat history itself is kept."""
        facts, documents = await self._db.run(_forget_user, user_id)
        self.facts.changed(user_id)
        return Forgotten(facts, documents)

    async def set_opt_out(self, source: str, *, opted_out: bool) -> None:
        """``/memory off`` / ``on`` for one conversation (off: nothing new is indexed or
        derived there and no profile is shown; what is stored stays until forgotten)."""
        await self.optouts.set(source, opted_out=opted_out)

    # -- the bus consumer ----------------------------------------------------------------

    async def _run(self, sub: Subscription[BusEvent]) -> None:
        full = True  # at start: resume every session from its watermark
        wait = False  # the first round indexes at once, later ones wait for an event
        while True:
            sessions: set[int] = set()
            closed = False
            try:
                if wait:
                    if not sub.pending:
                        self._idle.set()
                    item = await sub.recv()
                    self._idle.clear()
                    sessions.add(_session_of(item))
                while sub.pending:  # whatever else is buffered: one pass per session
                    sessions.add(_session_of(await sub.recv()))
            except Lagged as lagged:
                log.info("memory: the chat bus dropped %d events; catching up", lagged.missed)
                full = True
            except BusClosed:
                closed = True
            self._idle.clear()  # (Lagged skipped the clear after recv)
            sessions.discard(0)
            # A failed round leaves ``full`` set: the next event retries everything behind.
            full = not await self._index(sessions, full)
            if closed:
                return
            wait = True

    async def _index(self, sessions: set[int], full: bool) -> bool:
        """Index ``sessions`` (every session behind, when ``full``); False when it failed
        (the next round catches up everything: the watermarks say what is missing)."""
        try:
            if full:
                await self.indexer.catch_up()
            for session_id in sorted(sessions):
                await self.indexer.index_session(session_id)
        except asyncio.CancelledError:
            raise
        except SessionsFailed:  # each logged; the others were indexed: they go on
            # Until 2026-12-07 one session that could never be indexed kept the follow-ups
            # (facts, embeddings) asleep for every conversation until a restart (found by
            # review).
            self.followups.wake()
            return False
        except Exception:
            log.exception("memory: indexing failed; retrying with the next event")
            return False
        self.followups.wake()
        return True


def conversation_in(
    conn: Connection, session_id: int, before: int | None = None
) -> tuple[str, Any] | None:
    """The conversation whose memory session ``session_id`` uses and the metadata of its
    latest user message (before ``before``): its own source, or for a background run (a
    job's) the chat it serves, ``VISITS_KEY``; ``None``: an unknown session, or a run that
    serves no chat (the tic)."""
    session = conn.execute(
        sa.select(chat_sessions.c.source, chat_sessions.c.is_ephemeral).where(
            chat_sessions.c.id == session_id
        )
    ).first()
    if session is None:
        return None
    h, stack = chat_history, chat_sessions_stack
    metadata = conn.execute(
        sa.select(h.c.metadata)
        .join(stack, stack.c.id == h.c.session_stack_id)
        .where(stack.c.session_id == session_id, stack.c.depth == 0, h.c.role == "user")
        .where(h.c.id < before if before is not None else sa.true())
        .order_by(h.c.id.desc())
        .limit(1)
    ).scalar()
    if not session.is_ephemeral:
        return session.source, metadata
    visits = metadata.get(VISITS_KEY) if isinstance(metadata, Mapping) else None
    return (visits, metadata) if isinstance(visits, str) and visits else None


def _forget_user(conn: Connection, user_id: int) -> tuple[int, int]:
    # Marked first: this waits for a deriver or an indexer that read the mark (under a
    # share lock), so what they wrote is deleted below; what they have not reached yet, or
    # are working on now, is passed over: until 2026-12-06 a batch behind the forget
    # brought the facts back.
    newest = conn.execute(sa.select(sa.func.max(chat_history.c.id))).scalar()
    forget_through_in(conn, user_id, int(newest or 0))
    d = memory_documents
    personal_here = personal_rule_in(conn)
    personal = [
        source
        for source in conn.execute(
            sa.select(d.c.source).where(d.c.user_id == user_id).distinct()
        ).scalars()
        if personal_here(source)
    ]
    documents = conn.execute(
        d.delete().where(sa.or_(d.c.user_id == user_id, d.c.source.in_(personal)))
    ).rowcount
    facts = conn.execute(memory_facts.delete().where(memory_facts.c.user_id == user_id)).rowcount
    return int(facts), int(documents)


def _session_of(event: BusEvent) -> int:
    match event:
        case UserMessage(e) | AssistantResponse(e):
            return e.session_id
        case CompactionDone(e):
            return e.session_id
    return 0  # an event kind this consumer does not know
