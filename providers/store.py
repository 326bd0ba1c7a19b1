"""The API providers in the database: added, removed, listed, and a change counter.

Every change bumps ``providers:version`` (``app_settings``) in its own transaction, so
any process (the CLI, another member of a fleet) learns of it by reading one row
(``ProviderRegistry.watch``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import httpx
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from engine.config import http_url
from engine.store import Database, app_settings, serialize, utcnow
from providers.tables import api_providers

__all__ = ["SERVICES", "Provider", "ProviderError", "ProviderStore", "masked"]

#: What a provider may serve.
SERVICES = ("chat", "embeddings", "transcription", "speech")
VERSION_KEY = "providers:version"
_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")
_MAX_MODELS = 50


class ProviderError(ValueError):
    """A provider refused: the message says which field and why, in one sentence."""


def name_of(name: str) -> str:
    """A provider's name as stored and looked up."""
    return name.strip().lower()


def masked(key: str) -> str:
    """A key as it may be shown: its first three and last four characters, and those only
    of a key of 20 or more (7 of a local server's 12 were shown; found by review)."""
    if not key:
        return "(none)"
    if len(key) < 20:
        return "…" * 3
    return f"{key[:3]}…{key[-4:]}"


#: What sending a request to an endpoint can raise before any answer, when its address or
#: key cannot be carried (a port that is no number, a key with a typographic dash): each
#: caller says so in one sentence of its own.
UNSENDABLE: tuple[type[BaseException], ...] = (
    httpx.InvalidURL,
    ValueError,
    OverflowError,
    ExceptionGroup,
)


@dataclass(frozen=True, slots=True)
class Provider:
    name: str
    base_url: str
    api_key: str
    serves: tuple[str, ...]
    models: tuple[str, ...]

    def __repr__(self) -> str:  # never the key, in a log line or a traceback
        return (
            f"Provider({self.name!r}, {self.base_url!r}, serves={self.serves!r}, "
            f"models={self.models!r}, key={masked(self.api_key)!r})"
        )

    def models_for(self, service: str) -> tuple[str, ...]:
        """The listed models that do ``service``: all of them for a provider serving only
        that; else told apart by their names (``whisper-1`` transcribes, ``tts-1``
        speaks, ``text-embedding-3-small`` embeds; a name of none of these chats). A
        service none of whose names fits gets every model: which one it is cannot be
        told, and the first is asked as before. A provider serving chat and audio offered
        its audio models to ``/model`` (found by review)."""
        if self.serves == (service,):
            return self.models
        named = tuple(m for m in self.models if _service_named(m) == service)
        if service == _CHAT:
            return named
        return named or self.models

    def unlisted_note(self) -> str | None:
        """What to tell whoever added a provider listing no models, its name the subject:
        it does a job only with the model the configuration names for it
        (``TRANSCRIBE_MODEL``, …), and is passed over otherwise (until 2026-12-07 nothing
        said so; found by review)."""
        if self.models:
            return None
        return (
            f"lists no models: it does {', '.join(self.serves)} only with the "
            "model the configuration names for it (LLM_MODEL, TRANSCRIBE_MODEL, "
            "SPEECH_MODEL or EMBEDDING_MODEL); list its models to use it without."
        )

    def shown(self) -> dict[str, object]:
        """What the CLI and the API show: everything but the key in full."""
        return {
            "name": self.name,
            "base_url": self.base_url,
            "key": masked(self.api_key),
            "serves": list(self.serves),
            "models": list(self.models),
        }

    @classmethod
    def checked(
        cls,
        name: object,
        base_url: object,
        api_key: object,
        serves: object,
        models: object,
    ) -> Provider:
        """A provider from what a person typed; ``ProviderError`` names what is wrong."""
        if not isinstance(name, str) or not _NAME.match(name_of(name)):
            raise ProviderError(
                "name: 1-64 lower-case letters, digits, '.', '_' or '-' (like groq or local-whisper)"
            )
        if not isinstance(base_url, str):
            raise ProviderError("base_url: an http(s):// URL, up to and including /v1")
        try:
            url = http_url(base_url.strip())
        except ValueError as exc:
            raise ProviderError(f"base_url: {exc}") from None
        if not url.isascii():
            raise ProviderError("base_url: ASCII only (an international domain as xn--…)")
        if "@" in url.split("/", 3)[2]:  # shown in lists, pages and logs: no password there
            raise ProviderError("base_url: no user or password in it; give the key as api_key")
        if api_key is not None and not isinstance(api_key, str):
            raise ProviderError("api_key: a string")
        key = (api_key or "").strip()
        # ASCII, as a header carries it: a key pasted with a typographic dash could not be
        # sent (found by review).
        if not key.isascii() or any(c.isspace() for c in key) or not key.isprintable():
            raise ProviderError("api_key: one word of ASCII characters, without spaces")
        wanted = _words(serves, "serves")
        unknown = [s for s in wanted if s not in SERVICES]
        if not wanted or unknown:
            raise ProviderError(f"serves: one or more of {', '.join(SERVICES)}")
        listed = _words(models, "models")
        if len(listed) > _MAX_MODELS or any(len(m) > 200 for m in listed):
            raise ProviderError(f"models: at most {_MAX_MODELS} names of at most 200 characters")
        return cls(name_of(name), url, key, tuple(wanted), tuple(listed))


#: How the names of models that do not chat say what they do (OpenAI's, Groq's, local
#: servers' usual ones); ``None``: a model that does none of the jobs (images,
#: moderation, reranking, realtime audio), never offered to chat.
_NAMED_FOR: tuple[tuple[str | None, re.Pattern[str]], ...] = (
    ("transcription", re.compile(r"whisper|transcri|(?<![a-z])stt(?![a-z])", re.IGNORECASE)),
    (
        "speech",
        re.compile(r"tts|speech(?!less)|kokoro|piper|orpheus|chatterbox|(?<![a-z])bark", re.I),
    ),
    (
        "embeddings",
        re.compile(r"embed|(?<![a-z])(?:bge|e5|gte)-|minilm|voyage-(?!.*rerank)", re.I),
    ),
    (None, re.compile(r"moderation|dall-e|gpt-image|image-|rerank|realtime", re.IGNORECASE)),
)
_CHAT = "chat"


def _service_named(model: str) -> str | None:
    """The job a model's name says it does: chat when it names none; ``None`` when it
    names one chathub has no use for."""
    return next((service for service, name in _NAMED_FOR if name.search(model)), _CHAT)


def _words(value: object, field: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        value = value.split(",")
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise ProviderError(f"{field}: a list of names")
    return list(dict.fromkeys(v.strip() for v in value if v.strip()))


class ProviderStore:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def add(self, provider: Provider) -> None:
        """Recorded; ``ProviderError`` when its name is taken."""
        if not await self._db.run(_add, provider):
            raise ProviderError(f"name: a provider named {provider.name!r} exists; remove it first")

    async def remove(self, name: str) -> Provider | None:
        """``name`` as typed: found as stored (``Groq`` is ``groq``)."""
        if "\x00" in name:  # no stored name holds one (PostgreSQL refused it: a 500)
            return None
        return await self._db.run(_remove, name_of(name))

    async def all(self) -> list[Provider]:
        return await self._db.run(_all)

    async def get(self, name: str) -> Provider | None:
        """``name`` as typed: found as stored (``Groq`` is ``groq``; ``chathub providers
        add Groq`` took it, and ``remove Groq`` said there was none)."""
        if "\x00" in name:
            return None
        return await self._db.run(_get, name_of(name))

    async def version(self) -> int:
        return await self._db.run(_version)


def _row(row: sa.Row[tuple[object, ...]]) -> Provider:
    return Provider(
        str(row.name),
        str(row.base_url),
        str(row.api_key or ""),
        tuple(row.serves or ()),
        tuple(row.models or ()),
    )


def _all(conn: Connection) -> list[Provider]:
    query = sa.select(api_providers).order_by(api_providers.c.created_at, api_providers.c.name)
    return [_row(row) for row in conn.execute(query)]


def _get(conn: Connection, name: str) -> Provider | None:
    row = conn.execute(sa.select(api_providers).where(api_providers.c.name == name)).first()
    return None if row is None else _row(row)


def _add(conn: Connection, provider: Provider) -> bool:
    # One change at a time on PostgreSQL: two at once lost a version bump (another
    # process never saw the provider) or raised a primary-key error for a name given twice
    # (a 500); until 2026-12-07 (found by review).
    serialize(conn, "providers")
    if _get(conn, provider.name) is not None:
        return False
    conn.execute(
        api_providers.insert().values(
            name=provider.name,
            base_url=provider.base_url,
            api_key=provider.api_key,
            serves=list(provider.serves),
            models=list(provider.models),
            created_at=utcnow(),
        )
    )
    _bump(conn)
    return True


def _remove(conn: Connection, name: str) -> Provider | None:
    serialize(conn, "providers")
    provider = _get(conn, name)
    if provider is not None:
        conn.execute(api_providers.delete().where(api_providers.c.name == name))
        _bump(conn)
    return provider


def _version(conn: Connection) -> int:
    value = conn.execute(
        sa.select(app_settings.c.value).where(app_settings.c.key == VERSION_KEY)
    ).scalar_one_or_none()
    return int(value) if value and str(value).isdigit() else 0


def _bump(conn: Connection) -> None:
    now = utcnow()
    version = str(_version(conn) + 1)
    updated = conn.execute(
        app_settings.update()
        .where(app_settings.c.key == VERSION_KEY)
        .values(value=version, updated_at=now)
    )
    if updated.rowcount == 0:
        conn.execute(app_settings.insert().values(key=VERSION_KEY, value=version, updated_at=now))
