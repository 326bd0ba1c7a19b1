"""The conversations over HTTP (JSON), for the page's sidebar and for API clients.

``GET /chat/conversations`` lists, ``POST`` creates (``{"title"}`` optional),
``PATCH /chat/conversations/{id}`` renames, ``DELETE`` hides (its messages stay),
``GET /chat/conversations/{id}/messages?before=&limit=`` pages the history back in time,
``POST /chat/conversations/{id}/files?name=`` uploads one file (the raw bytes, as
``application/octet-stream``) for a later ``message`` frame to attach (``uploads.py``);
``&voice=1&seconds=`` marks it a voice note that long (``voice.py``).
Access is the socket's (``auth.py``): the inbox's sign-in cookie or the bearer token. A
write also needs a JSON body type and, from a browser's sign-in, its form token in
``X-CSRF-Token`` (another site can send neither without the browser asking this one
first, which it never allows).
"""

from __future__ import annotations

import hmac
import math
from collections.abc import Awaitable, Callable
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from bot.http.models import RequestError, SafeJSONResponse, ids_in_range, json_body, query_params
from bot.platform.voice_notes import VoiceNotes
from bot.webchat.auth import Access, SocketAuth
from bot.webchat.conversations import source_of
from bot.webchat.history import DEFAULT_PAGE, MAX_PAGE
from bot.webchat.store import ConversationStore, clean_title
from bot.webchat.uploads import TooLarge, Uploads, audio_type, safe_name
from bot.webchat.voice import upload_refusal
from engine.hub import ChatHub

__all__ = ["ConversationRoutes"]

MAX_BODY_BYTES = 8 * 1024
CSRF_HEADER = "x-csrf-token"
JSON = "application/json"
OCTETS = "application/octet-stream"
MAX_FILE_NAME_CHARS = 1000
#: The longest duration a voice note may declare (a day; ``VOICE_MAX_SECONDS`` refuses
#: sooner); anything beyond is no duration.
MAX_DECLARED_SECONDS = 24 * 3600.0

Handler = Callable[[Request, Access], Awaitable[Response]]


class NewConversation(BaseModel):
    model_config = ConfigDict(extra="forbid")

    title: str = ""  # cut by clean_title, as a pasted one is (the body's limit bounds it)


class Rename(BaseModel):
    model_config = ConfigDict(extra="forbid")

    title: Annotated[str, Field(min_length=1)]  # cut, never refused for its length


class PageQuery(BaseModel):
    model_config = ConfigDict(extra="ignore")

    before: Annotated[int, Field(ge=1, le=2**63 - 1)] | None = None
    limit: Annotated[int, Field(ge=1, le=MAX_PAGE)] = DEFAULT_PAGE


class FileQuery(BaseModel):
    model_config = ConfigDict(extra="ignore")

    name: Annotated[str, Field(min_length=1, max_length=MAX_FILE_NAME_CHARS)]
    #: A voice note recorded in the page (``1``), and how long it is.
    voice: bool = False
    seconds: Annotated[float, Field(ge=0, le=MAX_DECLARED_SECONDS, allow_inf_nan=False)] | None = (
        None
    )


class ConversationRoutes:
    def __init__(
        self,
        store: ConversationStore,
        hub: ChatHub,
        auth: SocketAuth,
        *,
        uploads: Uploads | None = None,
        voice: VoiceNotes | None = None,
    ) -> None:
        """``uploads``: where files go (default: the engine's workspace, 20 MB each);
        ``voice``: the voice notes' limits, which a voice note or audio file is held to."""
        self._store = store
        self._hub = hub
        self._auth = auth
        self._uploads = uploads or Uploads(hub.workspace_root)
        self._voice = voice

    def routes(self) -> list[Route]:
        one = "/chat/conversations/{conversation_id:id}"
        return [
            Route("/chat/conversations", self._read(self.list), methods=["GET"]),
            Route("/chat/conversations", self._write(self.create), methods=["POST"]),
            Route(one, self._write(self.rename), methods=["PATCH"]),
            Route(one, self._write(self.delete), methods=["DELETE"]),
            Route(f"{one}/messages", self._read(self.messages), methods=["GET"]),
            Route(f"{one}/files", self._write(self.upload, body=OCTETS), methods=["POST"]),
        ]

    # -- access ------------------------------------------------------------------------------

    def _read(self, handler: Handler) -> Callable[[Request], Awaitable[Response]]:
        async def read(request: Request) -> Response:
            access = await self._auth.check(request)
            if isinstance(access, str):
                return _refused(access)
            if not ids_in_range(request):
                return _error(404, "No such conversation.")
            return await handler(request, access)

        return read

    def _write(
        self, handler: Handler, *, body: str = JSON
    ) -> Callable[[Request], Awaitable[Response]]:
        async def write(request: Request) -> Response:
            access = await self._auth.check(request)
            if isinstance(access, str):
                return _refused(access)
            if access.csrf is not None:
                given = request.headers.get(CSRF_HEADER, "")
                if not hmac.compare_digest(given.encode(), access.csrf.encode()):
                    return _error(403, "Missing or wrong form token; reload the page.")
            if request.method != "DELETE":
                kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
                if kind != body:
                    return _error(415, f"Send the body as {body}.")
            if not ids_in_range(request):
                return _error(404, "No such conversation.")
            try:
                return await handler(request, access)
            except RequestError as bad:
                return bad.response()
            except TooLarge as big:
                return _error(413, str(big))

        return write

    # -- handlers ----------------------------------------------------------------------------

    async def list(self, request: Request, access: Access) -> Response:
        listed = await self._store.listed()
        return SafeJSONResponse({"conversations": [c.to_json() for c in listed]})

    async def create(self, request: Request, access: Access) -> Response:
        body = await json_body(request, NewConversation, optional=True, limit=MAX_BODY_BYTES)
        conversation = await self._store.create(body.title)
        return SafeJSONResponse(conversation.to_json(), status_code=201)

    async def rename(self, request: Request, access: Access) -> Response:
        body = await json_body(request, Rename, limit=MAX_BODY_BYTES)
        title = clean_title(body.title)
        if not title:
            return _error(422, "A title cannot be empty.")
        renamed = await self._store.rename(request.path_params["conversation_id"], title)
        if renamed is None:
            return _error(404, "No such conversation.")
        return SafeJSONResponse(renamed.to_json())

    async def delete(self, request: Request, access: Access) -> Response:
        if not await self._store.hide(request.path_params["conversation_id"]):
            return _error(404, "No such conversation.")
        return Response(status_code=204)

    async def upload(self, request: Request, access: Access) -> Response:
        conversation_id = request.path_params["conversation_id"]
        query = query_params(request, FileQuery)
        limit = self._uploads.max_bytes
        declared = request.headers.get("content-length", "").strip()
        if declared.isdigit() and (len(declared) > 20 or int(declared) > limit):
            raise TooLarge(limit)  # refused before a byte of the body is read
        size = int(declared) if declared.isdigit() else None
        name, voice = safe_name(query.name), self._voice
        kind = "voice" if query.voice else "audio" if audio_type(name) else None
        max_bytes, too_large = None, None
        if kind is not None and voice is not None:  # held to the voice notes' limits
            why = upload_refusal(voice, kind, name, size, query.seconds)
            if why is not None:
                return _error(413, why)  # before a byte of it is read
            if voice.max_bytes < limit:  # counted while it streams, said as voice says it
                max_bytes = voice.max_bytes
                too_large = upload_refusal(voice, kind, name, voice.max_bytes + 1, None)
        if await self._store.get(conversation_id) is None:
            return _error(404, "No such conversation.")
        saved = await self._uploads.save(
            str(conversation_id),
            query.name,
            request.stream(),
            max_bytes=max_bytes,
            too_large=too_large,
            voice=query.voice,
            seconds=None if query.seconds is None else math.ceil(query.seconds),
        )
        return SafeJSONResponse(saved.to_json(), status_code=201)

    async def messages(self, request: Request, access: Access) -> Response:
        conversation_id = request.path_params["conversation_id"]
        try:
            query = query_params(request, PageQuery)
        except RequestError as bad:
            return bad.response()
        if await self._store.get(conversation_id) is None:
            return _error(404, "No such conversation.")
        source = source_of(str(conversation_id))
        session_id = await self._hub.current_session(source)
        page = await self._store.page(session_id, before=query.before, limit=query.limit)
        return SafeJSONResponse({"conversation_id": str(conversation_id), **page.to_json()})


def _refused(why: str) -> JSONResponse:
    if why == "foreign_origin":
        return _error(403, "Cross-site request refused.")
    if why == "throttled":
        return _error(429, "Too many failed sign-ins from this address; try again later.")
    return _error(401, "Sign in first.")


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)
