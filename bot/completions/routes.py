"""``/v1``: the agent behind OpenAI's chat completions API (docs/openai-api.md).

``GET /v1/models`` lists the agents one may talk to; ``POST /v1/chat/completions`` gives
the request's new user message to the agent in a durable conversation (the hub source
``api:<id>``, ``conversations.py``) and answers with the agent's final answer, whole or
streamed as server-sent events. Every ``/v1`` route is behind ``CHATHUB_API_TOKEN`` as a
bearer token, wrong tokens counted per address with the API's and the inbox's; refusals
are in OpenAI's error shape.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import logging
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from bot.completions.conversations import (
    Conversation,
    ConversationMap,
    StaleConversation,
    chain,
    digest,
)
from bot.completions.exchange import KEEPALIVE, Exchange, ExchangeLimits, Piece, Turn
from bot.completions.images import Image, decode_images, keep_images
from bot.completions.protocol import (
    ApiError,
    ChatMessage,
    CompletionRequest,
    chunk,
    completion,
    completion_id,
    model_list,
    parse_request,
    usage_chunk,
)
from bot.http.credentials import bearer_refusal
from bot.http.models import RequestError, SafeJSONResponse, parse_json, read_body
from bot.http.signins import LoginThrottle
from engine.hub import ChatHub, HubError, SendOptions
from engine.store import Database
from engine.store import chat_history as h
from engine.store import chat_sessions_stack as f

__all__ = ["MAX_BODY_BYTES", "CompletionsApi"]

log = logging.getLogger(__name__)

#: A request's body at most (a long conversation's whole history fits).
MAX_BODY_BYTES = 1024 * 1024
#: At most this much of what the client carried and the conversation did not hold is given
#: to the agent (the newest of it).
MAX_CARRIED_CHARS = 32_000
CONVERSATION_HEADER = "x-chathub-conversation"
_INSTRUCTION_ROLES = ("system", "developer")

Handler = Callable[[Request], Awaitable[Response]]


class CompletionsApi:
    """The ``/v1`` routes over the hub."""

    def __init__(
        self,
        hub: ChatHub,
        db: Database,
        agents: Callable[[], Sequence[str]],
        *,
        token: str | None,
        throttle: LoginThrottle | None = None,
        limits: ExchangeLimits | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """``agents``: the ids a request may name as ``model``; ``throttle``: wrong bearer
        tokens per address, shared with the API and the inbox."""
        self._hub = hub
        self._db = db
        self._agents = agents
        self.token = token or None
        self._token = token.encode() if token else None
        self._throttle = throttle
        self._clock = clock
        self._conversations = ConversationMap(db)
        self.exchange = Exchange(hub, limits)
        # One request at a time per conversation: a second waits for the first's answer.
        self._locks: weakref.WeakValueDictionary[int, asyncio.Lock] = weakref.WeakValueDictionary()

    def routes(self) -> list[Route]:
        return [
            Route("/v1/models", self._guarded(self.models), methods=["GET"]),
            Route("/v1/models/{model}", self._guarded(self.model), methods=["GET"]),
            Route("/v1/chat/completions", self._guarded(self.completions), methods=["POST"]),
            Route("/v1/{rest:path}", self._guarded(self.elsewhere), methods=_ALL_METHODS),
        ]

    # -- plumbing ------------------------------------------------------------------------------

    def _guarded(self, handler: Handler) -> Handler:
        @functools.wraps(handler)
        async def guarded(request: Request) -> Response:
            refusal = bearer_refusal(request, self._token, self._throttle)
            if refusal is not None and refusal.retry_after is not None:
                wait = refusal.retry_after
                return ApiError(
                    429,
                    f"Too many wrong API keys from this address; try again in {wait} s.",
                    kind="rate_limit_exceeded",
                    code="rate_limit_exceeded",
                    headers={"retry-after": str(wait)},
                ).response()
            if refusal is not None:
                return ApiError(
                    401,
                    "Missing or wrong API key: send CHATHUB_API_TOKEN as the bearer token.",
                    code="invalid_api_key",
                    headers={"www-authenticate": "Bearer"},
                ).response()
            try:
                return await handler(request)
            except ApiError as refused:
                return refused.response()

        return guarded

    # -- routes --------------------------------------------------------------------------------

    async def models(self, request: Request) -> Response:
        return SafeJSONResponse(model_list(list(self._agents())))

    async def model(self, request: Request) -> Response:
        agent = self._agent(request.path_params["model"])
        return SafeJSONResponse(model_list([agent])["data"][0])

    async def elsewhere(self, request: Request) -> Response:
        path = request.url.path
        if path in ("/v1/models", "/v1/chat/completions"):
            allowed = "GET" if path.endswith("models") else "POST"
            raise ApiError(
                405,
                f"{path} takes {allowed} only.",
                code="method_not_allowed",
                headers={"allow": allowed},
            )
        raise ApiError(404, f"There is no route {_shown_path(path)} here.", code="unknown_url")

    async def completions(self, request: Request) -> Response:
        body = await _body(request)
        asked = _asked(request, body, self._agent(body.model))
        heads = chain(asked.digests)
        conversation, taken = await self._conversations.find(asked.agent, asked.name, heads)
        lock = self._locks.setdefault(conversation.id, asyncio.Lock())
        contended = lock.locked()
        await lock.acquire()
        try:
            if contended:  # read again: as the request before this one left it
                conversation, taken = await self._conversations.get(conversation, heads)
            conversation, turn = await self._start(conversation, taken, asked)
        except BaseException:
            lock.release()
            raise
        answer = Answer(self, conversation, turn, body.model, lock, usage=body.include_usage)
        if body.stream:
            return EventStream(answer)
        return SafeJSONResponse(await answer.whole())

    # -- steps ---------------------------------------------------------------------------------

    def _agent(self, model: str) -> str:
        agents = list(self._agents())
        if model not in agents:
            raise ApiError(
                404,
                f"The model {_shown_name(model)} does not exist here; GET /v1/models lists "
                f"the agents ({', '.join(agents)}).",
                code="model_not_found",
                param="model",
            )
        return model

    async def _start(
        self, conversation: Conversation, taken: int, asked: Asked
    ) -> tuple[Conversation, Turn]:
        """The request's new messages given to the agent: the last as the message (its
        images as attachments), the others it carried (and the client's instructions) as
        context of that turn; ``taken``: how many of them the conversation holds already."""
        digests, dialog = asked.digests, asked.dialog
        attachments: list[dict[str, Any]] = []
        for attempt in range(2):
            source = conversation.source
            if taken == len(digests):  # sent again (a retry): its answer is followed or read
                return conversation, await self.exchange.start(source, None)
            context = _context(asked.instructions, dialog[taken:-1])
            if asked.images and not attachments:
                root = self._hub.workspace_root
                attachments = await keep_images(root, conversation.id, asked.images)
            meta = {**_META, "attachments": attachments} if attachments else _META
            options = SendOptions(agent_id=asked.agent, extra_system_dynamic=context, metadata=meta)
            # What the client has seen now is held in the transaction storing its message.
            held, holding = self._conversations.holding(conversation, digests[taken:])
            try:
                turn = await self.exchange.start(source, asked.text, options, also=holding)
            except HubError as refused:  # a sentence meant for people (too long, …)
                raise ApiError(400, str(refused), param="messages") from None
            except StaleConversation:  # another process took a message of it meanwhile
                if attempt:
                    raise
                self._conversations.forget(conversation)
                conversation, taken = await self._conversations.get(conversation, chain(digests))
                continue
            self._conversations.remember(held)
            return held, turn
        raise AssertionError("unreachable")

    async def finish(self, conversation: Conversation, said: str) -> None:
        """The answer as the client got it, held before its last piece is sent (when the
        conversation moved on meanwhile, its next request carries the answer back)."""
        try:
            await self._conversations.hold(conversation, [digest("assistant", said)])
        except StaleConversation:
            log.info("%s moved on before its answer was held", conversation.source)

    async def last_answer(self, source: str) -> str:
        """The last answer of the conversation ``source`` (empty: none yet)."""
        session_id = await self._hub.current_session(source)
        if session_id is None:
            return ""
        return await self._db.run(_last_answer, session_id)


class Answer:
    """One request's answer, sent whole or as server-sent events."""

    def __init__(
        self,
        api: CompletionsApi,
        conversation: Conversation,
        turn: Turn,
        model: str,
        lock: asyncio.Lock,
        *,
        usage: bool = False,
    ) -> None:
        """``usage``: a last chunk with the tokens before ``[DONE]`` (streamed)."""
        self._api = api
        self._usage_chunk = usage
        self._tokens: tuple[int, int] | None = None
        self._conversation = conversation
        self._turn = turn
        self._model = model
        self._lock = lock
        self.id = completion_id()
        self.created = int(api._clock())

    async def whole(self) -> dict[str, Any]:
        try:
            said = "".join([piece.text async for piece in self._pieces()])
            await self._api.finish(self._conversation, said)
        finally:
            self._done()
        return completion(
            self.id, self.created, self._model, said, self._conversation.source, self._tokens
        )

    async def events(self) -> AsyncIterator[bytes]:
        """OpenAI's chunks; a client that goes away stops this, never the turn."""
        try:
            said: list[str] = []
            yield self._sse(chunk(*self._head(), {"role": "assistant", "content": ""}))
            async for piece in self._pieces():
                if piece is KEEPALIVE:
                    yield b": keep-alive\n\n"
                    continue
                if not piece.text:
                    continue
                said.append(piece.text)
                extra = {"event": piece.event} if piece.event else None
                yield self._sse(chunk(*self._head(), {"content": piece.text}, extra=extra))
            await self._api.finish(self._conversation, "".join(said))
            extra = {"conversation": self._conversation.source}
            yield self._sse(chunk(*self._head(), {}, finish_reason="stop", extra=extra))
            if self._usage_chunk:
                yield self._sse(usage_chunk(*self._head(), self._tokens))
            yield b"data: [DONE]\n\n"
        finally:
            self._done()

    async def _pieces(self) -> AsyncIterator[Piece]:
        if not self._turn.running:
            yield Piece(await self._api.last_answer(self._conversation.source))
            return
        async for piece in self._turn.pieces():
            if piece.usage is not None:
                self._tokens = piece.usage
            yield piece

    def _head(self) -> tuple[str, int, str]:
        return self.id, self.created, self._model

    def close(self) -> None:
        """Idempotent: the turn is let go and the conversation's next request may start."""
        self._done()

    def _done(self) -> None:
        self._turn.close()
        if self._lock.locked():
            self._lock.release()

    @staticmethod
    def _sse(body: dict[str, Any]) -> bytes:
        return b"data: " + json.dumps(body, ensure_ascii=False).encode() + b"\n\n"


class EventStream(Response):
    """The answer's server-sent events, written as they come; the answer is let go
    however the response ends. A client that goes away ends the writing (the turn goes
    on): a watcher waits for its ``http.disconnect`` beside the writer, one task, no more
    (Starlette's ``StreamingResponse`` costs a task group per response on this hot path).
    """

    media_type = "text/event-stream"

    def __init__(self, answer: Answer) -> None:
        super().__init__()
        self.raw_headers = [  # no content-length: the body is as long as the answer
            (b"content-type", b"text/event-stream; charset=utf-8"),
            (b"cache-control", b"no-cache"),
            (b"x-accel-buffering", b"no"),
        ]
        self._answer = answer

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        writer = asyncio.current_task()
        watcher = asyncio.create_task(_until_gone(receive, writer))
        try:
            await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
            async for data in self._answer.events():
                await send({"type": "http.response.body", "body": data, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except asyncio.CancelledError:
            if not watcher.done() or watcher.cancelled() or not watcher.result():
                raise  # cancelled from outside, not by the client going away
            if writer is not None:
                writer.uncancel()  # ours, taken back: the task goes on to end the response
        finally:
            watcher.cancel()
            self._answer.close()


async def _until_gone(receive: Receive, writer: asyncio.Task[Any] | None) -> bool:
    """Cancel ``writer`` when the client disconnects; whether it did."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            if writer is not None:
                writer.cancel()
            return True


# -- the request -------------------------------------------------------------------------------

_META = {"via": "openai-api"}
_ALL_METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]


async def _body(request: Request) -> CompletionRequest:
    try:
        raw = await read_body(request, MAX_BODY_BYTES)
        data = parse_json(raw)
    except RequestError as bad:
        if bad.status == 413:
            raise ApiError(
                413,
                f"The body is over the limit of {MAX_BODY_BYTES} bytes.",
                code="request_too_large",
            ) from None
        raise ApiError(400, bad.message) from None
    return parse_request(data)


@dataclass(frozen=True, slots=True)
class Asked:
    """What a request asks, read from its body."""

    agent: str
    #: The conversation it names (``None``: none).
    name: str | None
    #: The client's instructions (system, developer messages).
    instructions: list[str]
    #: The rest, in order: (role, text).
    dialog: list[tuple[str, str]]
    #: One per dialog message: what the conversation remembers of it.
    digests: list[str]
    #: The last message's text and images.
    text: str
    images: list[Image]


def _asked(request: Request, body: CompletionRequest, agent: str) -> Asked:
    messages = body.messages
    last = messages[-1]
    if last.role != "user":
        raise ApiError(
            400,
            f"The last message must be the user's (its role is '{last.role}').",
            param="messages",
        )
    images = decode_images(last.image_urls())
    text = last.text()
    if not text.strip() and not images:
        raise ApiError(400, "The last message is empty.", param="messages")
    spoken = [m for m in messages if m.role not in _INSTRUCTION_ROLES]
    instructions = [m.text() for m in messages if m.role in _INSTRUCTION_ROLES]
    return Asked(
        agent=agent,
        name=_name(request, body),
        instructions=[i for i in instructions if i.strip()],
        dialog=[(m.role, m.text()) for m in spoken],
        digests=[digest(m.role, _remembered(m)) for m in spoken],
        text=text,
        images=images,
    )


def _remembered(message: ChatMessage) -> str:
    """A message's text, with its images named by their URLs' digests (the same URL
    every time the client sends the history)."""
    urls = message.image_urls()
    if not urls:
        return message.text()
    named = "".join(f"\0image:{hashlib.sha256(url.encode()).hexdigest()}" for url in urls)
    return message.text() + named


def _name(request: Request, body: CompletionRequest) -> str | None:
    """The conversation the request names: the header, else ``user`` (``None``: none)."""
    named = request.headers.get(CONVERSATION_HEADER)
    if named is None:
        named = body.user
    if named is None or not named.strip():
        return None
    named = named.strip()
    if len(named) > 200 or not named.isprintable():
        raise ApiError(
            400,
            "A conversation's name is at most 200 printable characters.",
            param="user",
        )
    return named


def _context(instructions: list[str], carried: list[tuple[str, str]]) -> str | None:
    """What the client sent beside its message for this turn: its instructions, and the
    messages it carried that the conversation does not hold (newest kept)."""
    parts = []
    if instructions:
        parts.append(
            "The client of this conversation (chathub's OpenAI-compatible API) gives these "
            "instructions:\n" + "\n\n".join(instructions)
        )
    if carried:
        lines = [f"{role}: {said}" for role, said in carried]
        text = "\n\n".join(lines)[-MAX_CARRIED_CHARS:]
        parts.append(
            "Earlier messages of this conversation, as the client carried them (they are not "
            "in your history):\n" + text
        )
    return "\n\n".join(parts) or None


def _last_answer(conn: Connection, session_id: int) -> str:
    row = conn.execute(
        sa.select(h.c.content)
        .join(f, f.c.id == h.c.session_stack_id)
        .where(
            f.c.session_id == session_id,
            f.c.depth == 0,
            h.c.role == "assistant",
            h.c.is_synthetic.is_(False),
            h.c.content != "",
        )
        .order_by(h.c.id.desc())
        .limit(1)
    ).first()
    return row.content if row is not None else ""


def _shown_name(model: str) -> str:
    return f"'{model}'" if model.isprintable() and len(model) <= 64 else "named"


def _shown_path(path: str) -> str:
    return path if path.isprintable() and len(path) <= 200 else "of that name"
