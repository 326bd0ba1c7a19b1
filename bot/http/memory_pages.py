"""Long-term memory over HTTP: the inbox's Memory page, and what the API's memory routes
share with it (``MemoryAdmin``: people, their facts, the indexed chats; the JSON models).

The inbox is the owner's, so the page and the API see every person's facts and may edit
or delete any of them; each change still names the fact's own user (``FactStore``), so
an edit of a fact deleted meanwhile changes nothing. Search is per chat (a source), as in
the chats themselves. A fact is checked by ``FactStore`` (``FactError``: a sentence shown
as it is). With ``MEMORY_ENABLED=false`` (no ``MemoryService``) the page says so and the
API answers 503.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import sqlalchemy as sa
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy.engine import Connection
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from bot.http.pages import PageHost, Visitor
from engine.store import Database
from memory.facts import ADDED_BY_OWNER, Fact, FactError, FactLimits
from memory.search import MAX_LIMIT, Hit
from memory.service import MemoryService
from memory.tables import memory_documents, memory_facts, memory_identities, memory_users
from memory.users import Identity

__all__ = [
    "FactIn",
    "FactItem",
    "MemoryAdmin",
    "MemoryPages",
    "MemorySearchQuery",
    "Person",
    "fact_json",
    "hit_json",
]

SEARCH_SHOWN = 10
MAX_QUERY_CHARS = 1000
MAX_SOURCE_CHARS = 255

#: Flash messages by code (the redirect carries a code and an id, never text).
_FLASH = {
    "edited": "Fact #{id} saved.",
    "deleted": "Fact #{id} deleted.",
    "added": "Fact #{id} added.",
    "not_found": "#{id} no longer exists.",
}


@dataclass(frozen=True, slots=True)
class Person:
    id: int
    display_name: str | None
    identities: tuple[Identity, ...]
    facts: tuple[Fact, ...]


class MemoryAdmin:
    """The owner's view of memory: every person, every fact, the chats with an index."""

    def __init__(self, memory: MemoryService, db: Database) -> None:
        """``db``: the database ``memory`` runs on (the engine's)."""
        self.memory = memory
        self._db = db

    async def people(self) -> list[Person]:
        rows, identities = await self._db.run(_people)
        facts = await self.memory.facts.list_many([user_id for user_id, _ in rows])
        return [
            Person(user_id, name, tuple(identities.get(user_id, ())), tuple(facts[user_id]))
            for user_id, name in rows
        ]

    async def exists(self, user_id: int) -> bool:
        return await self._db.run(_user_exists, user_id)

    async def facts(self, user_id: int) -> list[Fact] | None:
        """``None`` for an unknown user."""
        if not await self.exists(user_id):
            return None
        return await self.memory.facts.list(user_id)

    async def sources(self) -> list[str]:
        """The chats with something indexed, for the search's choice."""
        return await self._db.run(_sources)

    async def add(self, user_id: int, body: str) -> Fact | None:
        """``None`` for an unknown user; ``FactError`` for a fact that cannot be stored."""
        if not await self.exists(user_id):
            return None
        return await self.memory.facts.add(
            user_id, body, origin_source=ADDED_BY_OWNER, created_by="user"
        )

    async def owner(self, fact_id: int) -> int | None:
        """The user whose fact ``fact_id`` is (``None``: no such fact)."""
        return await self._db.run(_owner_of, fact_id)

    async def edit(self, fact_id: int, body: str) -> Fact | None:
        """The fact as saved; ``None`` when there is no such fact (``FactError`` as above)."""
        owner = await self._db.run(_owner_of, fact_id)
        if owner is None or not await self.memory.facts.update(owner, fact_id, body):
            return None
        return await self.memory.facts.get(owner, fact_id)

    async def delete(self, fact_id: int) -> bool:
        owner = await self._db.run(_owner_of, fact_id)
        return owner is not None and await self.memory.facts.delete(owner, fact_id)

    async def search(self, source: str, query: str, limit: int) -> list[Hit]:
        return await self.memory.search.sessions(source, query, limit=limit)


def _people(conn: Connection) -> tuple[list[tuple[int, str | None]], dict[int, list[Identity]]]:
    users = [
        (int(row.id), row.display_name)
        for row in conn.execute(
            sa.select(memory_users.c.id, memory_users.c.display_name).order_by(memory_users.c.id)
        )
    ]
    ids = memory_identities
    identities: dict[int, list[Identity]] = {}
    for row in conn.execute(
        sa.select(ids.c.user_id, ids.c.platform, ids.c.external_id).order_by(
            ids.c.platform, ids.c.external_id
        )
    ):
        identities.setdefault(int(row.user_id), []).append(Identity(row.platform, row.external_id))
    return users, identities


def _user_exists(conn: Connection, user_id: int) -> bool:
    found = conn.execute(sa.select(memory_users.c.id).where(memory_users.c.id == user_id)).first()
    return found is not None


def _owner_of(conn: Connection, fact_id: int) -> int | None:
    value = conn.execute(
        sa.select(memory_facts.c.user_id).where(memory_facts.c.id == fact_id)
    ).scalar()
    return None if value is None else int(value)


def _sources(conn: Connection) -> list[str]:
    d = memory_documents
    return list(conn.execute(sa.select(d.c.source).distinct().order_by(d.c.source)).scalars())


# -- the JSON API's models (``bot/http/api.py``) -------------------------------------------


class FactIn(BaseModel):
    """``POST /api/memory/users/{id}/facts``, ``PATCH /api/memory/facts/{id}``: one line
    (whitespace is collapsed; ``MEMORY_FACT_CHARS`` may allow fewer characters: 422)."""

    model_config = ConfigDict(extra="forbid", strict=True, regex_engine="python-re")

    body: str = Field(min_length=1, max_length=FactLimits().max_chars, pattern=r"\S")


class FactItem(BaseModel):
    id: int
    user_id: int
    body: str
    #: The chat it was learned in (``inbox`` when added here or on the page).
    origin_source: str
    message_ids: list[int]
    created_by: str
    created_at: str
    updated_at: str


class FactList(BaseModel):
    items: list[FactItem]


class FactDeleted(BaseModel):
    id: int
    deleted: bool


class IdentityItem(BaseModel):
    platform: str
    external_id: str


class MemoryUserItem(BaseModel):
    id: int
    display_name: str | None
    identities: list[IdentityItem]
    facts: int


class MemoryUserList(BaseModel):
    items: list[MemoryUserItem]


class MemorySearchQuery(BaseModel):
    """``GET /api/memory/search``: one chat's past conversations."""

    model_config = ConfigDict(extra="ignore", regex_engine="python-re")

    source: str = Field(min_length=1, max_length=MAX_SOURCE_CHARS)
    q: str = Field(min_length=1, max_length=MAX_QUERY_CHARS)
    limit: int = Field(default=5, ge=1, le=MAX_LIMIT)


class MemoryHit(BaseModel):
    session_id: int
    title: str | None
    role: str
    kind: str
    date: str
    created_at: str
    #: The matched words in ``[brackets]``; quoted past text, not markup.
    snippet: str


class MemoryHits(BaseModel):
    items: list[MemoryHit]


def fact_json(fact: Fact) -> dict[str, Any]:
    return {
        "id": fact.id,
        "user_id": fact.user_id,
        "body": fact.body,
        "origin_source": fact.origin_source,
        "message_ids": list(fact.message_ids),
        "created_by": fact.created_by,
        "created_at": fact.created_at.isoformat(),
        "updated_at": fact.updated_at.isoformat(),
    }


def person_json(person: Person) -> dict[str, Any]:
    return {
        "id": person.id,
        "display_name": person.display_name,
        "identities": [
            {"platform": i.platform, "external_id": i.external_id} for i in person.identities
        ],
        "facts": len(person.facts),
    }


def hit_json(hit: Hit) -> dict[str, Any]:
    return {
        "session_id": hit.session_id,
        "title": hit.title,
        "role": hit.role,
        "kind": hit.kind,
        "date": hit.created_at.date().isoformat(),
        "created_at": hit.created_at.isoformat(),
        "snippet": hit.snippet,
    }


# -- the page ------------------------------------------------------------------------------

PageHandler = Callable[[Request, Visitor], Awaitable[Response]]
ActionHandler = Callable[[Request, dict[str, str], Visitor], Awaitable[Response]]


class MemoryPages:
    """``/memory`` and its forms, behind the inbox's sign-in and form checks."""

    def __init__(self, inbox: PageHost, admin: MemoryAdmin | None) -> None:
        self._inbox = inbox
        self._admin = admin

    def routes(self) -> list[Route]:
        page, action = self._inbox.guarded_page, self._inbox.guarded_action
        return [
            Route("/memory", page(self.page), methods=["GET"], name="web_memory"),
            Route("/memory/facts/{fact_id:id}/edit", action(self.edit), methods=["POST"]),
            Route("/memory/facts/{fact_id:id}/delete", action(self.delete), methods=["POST"]),
            Route("/memory/users/{user_id:id}/facts", action(self.add), methods=["POST"]),
        ]

    async def page(
        self, request: Request, visitor: Visitor, *, error: str | None = None, status: int = 200
    ) -> Response:
        admin = self._admin
        if admin is None:
            return self._inbox.render("memory.html", visitor, enabled=False)
        params = request.query_params
        source = params.get("source", "")[:MAX_SOURCE_CHARS]
        query = params.get("q", "")[:MAX_QUERY_CHARS]
        hits = None
        if source and query.strip():
            hits = await admin.search(source, query, SEARCH_SHOWN)
        flash = _flash(request)
        return self._inbox.render(
            "memory.html",
            visitor,
            status=status,
            enabled=True,
            sources=await admin.sources(),
            source=source,
            query=query,
            hits=hits,
            people=await admin.people(),
            max_chars=admin.memory.facts.limits.max_chars,
            flash=error or flash,
            flash_error=error is not None or request.query_params.get("ok") == "0",
        )

    async def edit(self, request: Request, form: dict[str, str], visitor: Visitor) -> Response:
        fact_id = request.path_params["fact_id"]
        if self._admin is None:
            return await self.page(request, visitor)
        try:
            fact = await self._admin.edit(fact_id, form.get("body", ""))
        except FactError as exc:
            return await self.page(request, visitor, error=str(exc), status=422)
        return _back("edited" if fact else "not_found", fact_id, ok=fact is not None)

    async def delete(self, request: Request, form: dict[str, str], visitor: Visitor) -> Response:
        fact_id = request.path_params["fact_id"]
        if self._admin is None:
            return await self.page(request, visitor)
        done = await self._admin.delete(fact_id)
        return _back("deleted" if done else "not_found", fact_id, ok=done)

    async def add(self, request: Request, form: dict[str, str], visitor: Visitor) -> Response:
        user_id = request.path_params["user_id"]
        if self._admin is None:
            return await self.page(request, visitor)
        try:
            fact = await self._admin.add(user_id, form.get("body", ""))
        except FactError as exc:
            return await self.page(request, visitor, error=str(exc), status=422)
        if fact is None:
            return _back("not_found", user_id, ok=False)
        return _back("added", fact.id)


def _back(code: str, item_id: int, *, ok: bool = True) -> Response:
    query = urlencode({"done": code, "id": item_id, "ok": "1" if ok else "0"})
    return RedirectResponse(f"/memory?{query}#facts", status_code=303)


def _flash(request: Request) -> str | None:
    template = _FLASH.get(request.query_params.get("done") or "")
    if template is None:
        return None
    raw = request.query_params.get("id") or ""
    number = int(raw) if raw.isascii() and raw.isdigit() and len(raw) < 20 else 0
    return template.format(id=number)
