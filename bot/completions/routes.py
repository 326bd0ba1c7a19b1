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
import logging
import time
import weakref
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from functools import partial
from typing import Any

from sqlalchemy.engine import Connection
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from bot.completions.answer import Answer, EventStream, QueuedStream, QueuedWhole, WholeAnswer
from bot.completions.asked import (
    Asked,
    CompletionRequest,
    asked_of,
    carried_of,
    context_of,
    read_request,
)
from bot.completions.conversations import (
    POSITION_KEY,
    AnswerTo,
    Conversation,
    ConversationMap,
    StaleConversation,
    answers_in,
    chain,
    digest,
)
from bot.completions.exchange import Exchange, ExchangeLimits, Turn
from bot.completions.images import keep_images
from bot.completions.protocol import (
    ApiError,
    model_list,
)
from bot.http.credentials import bearer_refusal
from bot.http.models import SafeJSONResponse
from bot.http.signins import LoginThrottle
from engine.hub import ChatHub, HubError, SendOptions
from engine.session import CARRIED_KEY
from engine.store import Database
from engine.store import chat_history as h

__all__ = ["CompletionsApi"]

log = logging.getLogger(__name__)

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
        self.exchange = Exchange(hub, self.last_answer, limits)
        # One request at a time per conversation: a second waits for the first's answer.
        self._locks: weakref.WeakValueDictionary[int, asyncio.Lock] = weakref.WeakValueDictionary()
        self._waiting = 0

    @property
    def waiting(self) -> int:
        """Requests waiting for their conversation's turn (one left by its client is not)."""
        return self._waiting

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
        # A model's own path is a route too: DELETE /v1/models/main was "no route" (404;
        # until 2026-12-06, found by review).
        name = path.removeprefix("/v1/models/") if path.startswith("/v1/models/") else ""
        model_path = bool(name) and "/" not in name
        if path in ("/v1/models", "/v1/chat/completions") or model_path:
            allowed = "POST" if path == "/v1/chat/completions" else "GET"
            raise ApiError(
                405,
                f"{path} takes {allowed} only.",
                code="method_not_allowed",
                headers={"allow": allowed},
            )
        raise ApiError(404, f"There is no route {_shown_path(path)} here.", code="unknown_url")

    async def completions(self, request: Request) -> Response:
        body = await read_request(request)
        limit = self._hub.config.max_message_chars
        asked = asked_of(request, body, self._agent(body.model), limit)
        heads = chain(asked.digests)
        conversation, taken = await self._conversations.find(
            asked.agent, asked.name, heads, retried=asked.retried, opening=asked.opening
        )
        lock = self._locks.setdefault(conversation.id, asyncio.Lock())
        if lock.locked():
            # It waits in its response, which watches the client: one that leaves takes
            # its message out of the queue. A stream's headers and keep-alives go out
            # meanwhile: nothing went out until then (up to a decision's wait, 300 s), and
            # a proxy cut it after 60 s of silence (found by review on 2026-12-06).
            async def when_free() -> Answer:
                self._waiting += 1
                try:
                    await lock.acquire()
                finally:
                    self._waiting -= 1
                return await self._answer(conversation, heads, taken, asked, body, lock, True)

            if body.stream:
                return QueuedStream(when_free, self.exchange.limits.keepalive_s)
            return QueuedWhole(when_free)
        await lock.acquire()
        answer = await self._answer(conversation, heads, taken, asked, body, lock, False)
        if body.stream:
            return EventStream(answer)
        return WholeAnswer(answer)

    async def _answer(
        self,
        conversation: Conversation,
        heads: list[str],
        taken: int,
        asked: Asked,
        body: CompletionRequest,
        lock: asyncio.Lock,
        contended: bool,
    ) -> Answer:
        """The request's answer, ``lock`` held (let go here when it cannot begin)."""
        try:
            if contended:  # read again: as the request before this one left it
                conversation, taken = await self._conversations.get(conversation, heads)
            retried_at = None
            newest_only = len(asked.digests) == 1 and conversation.length > 0
            if asked.retried and (newest_only or taken < len(asked.digests) - 1):
                # A client's retry of a request whose message the conversation took (its
                # own history not sent along: a whole one that matches says the first try
                # never arrived): that request, not a new message.
                retried_at = await self._conversations.held_at(conversation, asked.digests[-1])
            conversation, turn = await self._start(conversation, taken, asked, retried_at)
        except BaseException:
            lock.release()
            raise
        return Answer(
            self,
            conversation,
            turn,
            body.model,
            lock,
            created=int(self._clock()),
            usage=body.include_usage,
        )

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
        self, conversation: Conversation, taken: int, asked: Asked, retried_at: int | None
    ) -> tuple[Conversation, Turn]:
        """The request's new messages given to the agent: the last as the message (its
        images as attachments), the others it carried stored with it (the client's
        instructions are that turn's context); ``taken``: how many of them the conversation
        holds already; ``retried_at``: where it holds the message of a request the client
        sent again."""
        digests, dialog = asked.digests, asked.dialog
        attachments: list[dict[str, Any]] = []
        for attempt in range(2):
            source = conversation.source
            at = len(digests) if taken == len(digests) else retried_at
            if at is not None:  # sent again (a retry): its answer is followed or read back
                again = await self.exchange.again(
                    source,
                    asked.text,
                    partial(self._answer_to, conversation, at),
                    holds=conversation.length <= at,
                )
                if again is not None:
                    # What it held to that message (an answer read back, or what a stopped
                    # stream had shown while its turn runs on) gives way to this answer,
                    # which the client goes on with (a Stop then Regenerate, holding the
                    # partial, sent the chat to a new conversation; found by review).
                    if conversation.length == at + 1:
                        conversation = await self._held_as_read_back(conversation, at)
                        again.holds = True
                    return conversation, again
                # Its turn failed, or it got no answer and nothing works on it: it runs
                # again, and the conversation forgets what it held after it (a failure's
                # sentence), so its answer is held in its place.
                held, holding = await self._conversations.rewind(conversation, at)
                position = at
                # What it carried the first time: the conversation holds that by now.
                carried = await self._carried_at(conversation, at)
                carried = carried or carried_of(dialog[taken:-1])
            else:
                held, holding = await self._held_with(conversation, taken, digests)
                position = held.length
                carried = carried_of(dialog[taken:-1])
            if asked.images and not attachments:
                root = self._hub.workspace_root
                attachments = await keep_images(root, conversation.id, asked.images)
            meta: dict[str, Any] = {**_META, POSITION_KEY: position}
            if carried:
                # In the session's history with the message, for every turn after it: the
                # conversation holds those messages now, so no request carries them again
                # (until 2026-12-07 they were this turn's context only; found by review).
                meta[CARRIED_KEY] = carried
            if attachments:
                meta["attachments"] = attachments
            context = context_of(asked.instructions)
            options = SendOptions(agent_id=asked.agent, extra_system_dynamic=context, metadata=meta)
            # What the client has seen now is held in the transaction storing its message.
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

    async def _held_with(
        self, conversation: Conversation, taken: int, digests: Sequence[str]
    ) -> tuple[Conversation, Callable[[Connection], None]]:
        """The conversation holding the request's new ``digests``, chained where the
        client's history parts from what it held: a whole history whose earlier message
        was edited goes on from the edit (chained after the old answer, every request
        after it carried the edited messages again as earlier ones; found by review).
        A client that sends only its newest message parts nowhere: chained at the end."""
        if len(digests) == 1 or taken >= conversation.length:
            return self._conversations.holding(conversation, digests[taken:])
        rewound, rewinding = await self._conversations.rewind(conversation, taken)
        held, holding = self._conversations.holding(rewound, digests[taken:])

        def both(conn: Connection) -> None:
            rewinding(conn)
            holding(conn)

        return held, both

    async def _held_as_read_back(self, conversation: Conversation, at: int) -> Conversation:
        """The conversation without the answer it held to its ``at``-th message, which the
        answer read back now replaces: the client never got the one held (it sent the
        request again) and goes on with this one, whose progress lines differ (until
        2026-12-06 its next request matched nothing and left for a new conversation; found
        by review)."""
        rewound, unit = await self._conversations.rewind(conversation, at)
        try:
            await self._db.run(unit)
        except StaleConversation:  # another request moved it on: it keeps what it held
            self._conversations.forget(conversation)
            return conversation
        self._conversations.remember(rewound)
        return rewound

    async def finish(self, conversation: Conversation, said: str) -> None:
        """The answer as the client got it, held before its last piece is sent (when the
        conversation moved on meanwhile, its next request carries the answer back)."""
        try:
            await self._conversations.hold(conversation, [digest("assistant", said)])
        except StaleConversation:
            log.info("%s moved on before its answer was held", conversation.source)

    async def _answer_to(self, conversation: Conversation, position: int) -> AnswerTo:
        """What became of the conversation's ``position``-th message. A session written
        before messages carried their position: the last answer, if one was held after it."""
        session_id = await self._hub.current_session(conversation.source)
        state = await self._conversations.answer_to(session_id, position)
        if state.legacy and conversation.length > position:
            return replace(state, answer=await self.last_answer(conversation.source))
        return state

    async def _carried_at(self, conversation: Conversation, position: int) -> str | None:
        """What the conversation's ``position``-th message carried when its turn last
        began (its request sent again after a failure carries nothing new)."""
        session_id = await self._hub.current_session(conversation.source)
        return await self._conversations.carried_at(session_id, position)

    async def last_answer(self, source: str) -> str:
        """The last answer of the conversation ``source`` (empty: none yet)."""
        session_id = await self._hub.current_session(source)
        if session_id is None:
            return ""
        return await self._db.run(_last_answer, session_id)


# -- the request -------------------------------------------------------------------------------

_META = {"via": "openai-api"}
_ALL_METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]


def _last_answer(conn: Connection, session_id: int) -> str:
    newest = answers_in(session_id, h.c.content).order_by(h.c.id.desc()).limit(1)
    row = conn.execute(newest).first()
    return row.content if row is not None else ""


def _shown_name(model: str) -> str:
    return f"'{model}'" if model.isprintable() and len(model) <= 64 else "named"


def _shown_path(path: str) -> str:
    return path if path.isprintable() and len(path) <= 200 else "of that name"
