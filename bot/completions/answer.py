"""One request's answer as OpenAI's clients read it: whole (``chat.completion``) or as
server-sent events (``chat.completion.chunk``s, then ``[DONE]``), written by a lean ASGI
response that lets the answer go however it ends."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Protocol

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from bot.completions.conversations import Conversation
from bot.completions.exchange import INTERRUPTED, KEEPALIVE, Piece, Turn
from bot.completions.protocol import ApiError, chunk, completion, completion_id, usage_chunk
from bot.http.models import SafeJSONResponse
from bot.platform.failures import report_failure

__all__ = ["Answer", "EventStream", "Keeper", "WholeAnswer"]

log = logging.getLogger(__name__)


#: A stream's headers: no content-length, the body is as long as the answer.
STREAM_HEADERS = (
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
)
#: An SSE comment: it keeps a proxy from cutting a stream that is silent for a while.
KEEPALIVE_LINE = b": keep-alive\n\n"


def sse(body: dict[str, Any]) -> bytes:
    """``body`` as one server-sent event."""
    return b"data: " + json.dumps(body, ensure_ascii=False).encode() + b"\n\n"


class Keeper(Protocol):
    """Where an answer is kept (``CompletionsApi``)."""

    async def finish(self, conversation: Conversation, said: str) -> None:
        """The answer as the client got it, held before its last piece is sent."""


class Answer:
    """One request's answer, sent whole or as server-sent events."""

    def __init__(
        self,
        keeper: Keeper,
        conversation: Conversation,
        turn: Turn,
        model: str,
        lock: asyncio.Lock,
        *,
        created: int,
        usage: bool = False,
    ) -> None:
        """``created``: the answer's Unix time; ``usage``: a last chunk with the tokens
        before ``[DONE]`` (streamed)."""
        self._keeper = keeper
        self._usage_chunk = usage
        self._tokens: tuple[int, int] | None = None
        #: ``length`` when the model's last answer was cut at its token limit (until
        #: 2026-12-06 always ``stop``; found by review).
        self._finish_reason = "stop"
        self._conversation = conversation
        self._turn = turn
        self._model = model
        self._lock = lock
        self._released = False
        #: The streamed pieces the client took (each one's ``send`` returned).
        self._sent: list[str] = []
        self._held = False
        #: Set by the response as the client disconnects, before it cancels the writer.
        self.client_left = False
        self.id = completion_id()
        self.created = created

    async def whole(self) -> dict[str, Any]:
        try:
            parts: list[str] = []
            async for piece in self._pieces():
                if piece is INTERRUPTED:  # nothing is held: the turn goes on after a restart
                    raise _interrupted()
                if piece.void:  # a model that failed mid-answer: its words are dropped
                    parts = [_without_tail("".join(parts), piece.void)]
                    continue
                parts.append(piece.text)
            said = "".join(parts)
            await self._finish(said)
        finally:
            self._done()
        return completion(
            self.id,
            self.created,
            self._model,
            said,
            self._conversation.source,
            self._tokens,
            self._finish_reason,
        )

    async def events(self) -> AsyncIterator[bytes]:
        """OpenAI's chunks; a client that goes away stops this, never the turn."""
        try:
            yield sse(chunk(*self._head(), {"role": "assistant", "content": ""}))
            async for piece in self._pieces():
                if piece is KEEPALIVE:
                    yield KEEPALIVE_LINE
                    continue
                if piece is INTERRUPTED:
                    # As OpenAI ends a stream that failed: an error, no finish, no [DONE];
                    # its clients raise it (until 2026-12-06 the cut text ended "stop", and
                    # the conversation held it as the answer; found by review).
                    yield sse(_interrupted().body())
                    return
                if not piece.text:
                    continue
                extra = {"event": piece.event} if piece.event else None
                yield sse(chunk(*self._head(), {"content": piece.text}, extra=extra))
                self._sent.append(piece.text)  # resumed: the writer sent it
            await self._finish("".join(self._sent))
            extra = {"conversation": self._conversation.source}
            finish = self._finish_reason
            yield sse(chunk(*self._head(), {}, finish_reason=finish, extra=extra))
            if self._usage_chunk:
                yield sse(usage_chunk(*self._head(), self._tokens))
            yield b"data: [DONE]\n\n"
        except asyncio.CancelledError:  # while waiting for the turn's next piece
            if self.client_left:
                await self.left()
            raise
        except Exception:
            # A failure of ours once the stream began: OpenAI's error event, as a failed
            # stream ends (it cut the connection, and the client's SDK raised a transport
            # error instead of the error id; found by review on 2026-12-06).
            failed = _internal_error(f"streaming the answer of {self._conversation.source}")
            yield sse(failed.body())
        finally:
            self._done()

    async def _pieces(self) -> AsyncIterator[Piece]:
        # A request sent again: its answer, read back.
        pieces = self._turn.pieces() if self._turn.running else _one(self._turn.answer)
        async for piece in pieces:
            if piece.usage is not None:
                self._tokens = piece.usage
            if piece.truncated:
                self._finish_reason = "length"
            yield piece

    async def _finish(self, said: str) -> None:
        if self._turn.holds and not self._held:  # a failure's sentence too: clients send
            self._held = True  # it back as its answer
            await self._keeper.finish(self._conversation, said)

    async def left(self) -> None:
        """The client went away mid-answer: what it was sent is held as the answer (Open
        WebUI keeps a stopped answer and sends it back with the next message: until
        2026-12-06 that history matched nothing, and the chat went on in a conversation of
        its own, away from the session whose turn went on; found by review)."""
        if not self._sent or self._released:
            return
        try:
            await self._finish("".join(self._sent))
        except Exception:  # held or not, the conversation's next request may go on
            log.exception("holding the answer of %s as sent failed", self._conversation.source)

    def _head(self) -> tuple[str, int, str]:
        return self.id, self.created, self._model

    def close(self) -> None:
        """Idempotent: the turn is let go and the conversation's next request may start."""
        self._done()

    def _done(self) -> None:
        """Once: the lock released a second time (a stream's generator collected after
        the response had let go) was the conversation's next request's, and a third ran
        beside it (found by review)."""
        if self._released:
            return
        self._released = True
        self._turn.close()
        self._lock.release()


class EventStream(Response):
    """The answer's server-sent events, written as they come; the answer is let go
    however the response ends. A client that goes away ends the writing (the turn goes
    on), and what it was sent is held as the answer (``Answer.left``)."""

    media_type = "text/event-stream"

    def __init__(self, answer: Answer) -> None:
        super().__init__()
        self.raw_headers = list(STREAM_HEADERS)
        self._answer = answer

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async with _watched(receive, self._answer):
            await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
            async for data in self._answer.events():
                await send({"type": "http.response.body", "body": data, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})


class QueuedStream(Response):
    """A streamed request whose conversation another request is being answered in: its
    headers and keep-alives go out while it waits its turn (``queued``: its answer, once
    the conversation's lock is its), then its answer's events, as any stream's. A client
    that leaves meanwhile leaves the queue; a refusal once the stream began is its error
    event."""

    def __init__(self, queued: Callable[[], Awaitable[Answer]], keepalive_s: float) -> None:
        super().__init__()
        self.raw_headers = list(STREAM_HEADERS)
        self._queued = queued
        self._keepalive_s = keepalive_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
        answer = await self._turn_come(receive, send)
        if answer is None:
            return  # gone, or told why not
        async with _watched(receive, answer):
            async for data in answer.events():
                await send({"type": "http.response.body", "body": data, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _turn_come(self, receive: Receive, send: Send) -> Answer | None:
        """The answer once its turn comes; ``None`` when the client left first, or the
        request was refused (its error event sent)."""
        waiting = asyncio.ensure_future(self._queued())
        gone = asyncio.ensure_future(_disconnected(receive))
        try:
            while True:
                done, _ = await asyncio.wait(
                    {waiting, gone}, timeout=self._keepalive_s, return_when=asyncio.FIRST_COMPLETED
                )
                if gone in done:
                    await _let_go(waiting)
                    return None
                if waiting in done:
                    break
                await send(
                    {"type": "http.response.body", "body": KEEPALIVE_LINE, "more_body": True}
                )
        except BaseException:  # the client gone under a keep-alive, or a stop
            await _let_go(waiting)
            raise
        finally:
            gone.cancel()
        try:
            return waiting.result()
        except ApiError as refused:
            failed = refused
        except Exception:
            failed = _internal_error("a request waiting for its conversation")
        await send({"type": "http.response.body", "body": sse(failed.body()), "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        return None


async def _disconnected(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def _let_go(waiting: asyncio.Future[Answer]) -> None:
    """A queued request left: out of the queue, or its answer let go if its turn came."""
    waiting.cancel()
    await asyncio.gather(waiting, return_exceptions=True)
    if waiting.done() and not waiting.cancelled() and waiting.exception() is None:
        waiting.result().close()


class QueuedWhole(Response):
    """A whole (not streamed) request whose conversation another request is being
    answered in: it waits its turn (``queued``), then answers as ``WholeAnswer``. A client
    that leaves meanwhile leaves the queue, its message never sent (until 2026-12-07 only
    a stream's did: a whole request whose client gave up, the SDK's timeout, still sent
    its message and ran a turn for nobody; found by review)."""

    def __init__(self, queued: Callable[[], Awaitable[Answer]]) -> None:
        super().__init__()
        self._queued = queued

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        waiting = asyncio.ensure_future(self._queued())
        gone = asyncio.ensure_future(_disconnected(receive))
        try:
            await asyncio.wait({waiting, gone}, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:  # a stop
            await _let_go(waiting)
            raise
        finally:
            gone.cancel()
        if not waiting.done():  # the client left first
            await _let_go(waiting)
            return
        try:
            answer = waiting.result()
        except ApiError as refused:
            await refused.response()(scope, receive, send)
            return
        except Exception:
            failed = _internal_error("a request waiting for its conversation")
            await failed.response()(scope, receive, send)
            return
        await WholeAnswer(answer)(scope, receive, send)


class WholeAnswer(Response):
    """The answer as one ``chat.completion``, once the turn gives it. A client that goes
    away meanwhile lets the answer go at once (the turn goes on): until 2026-12-06 the
    conversation's next request waited for a turn nobody read, up to the decision wait
    of an approval, 300 s (found by review)."""

    def __init__(self, answer: Answer) -> None:
        super().__init__()
        self._answer = answer

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        response: Response | None = None
        async with _watched(receive, self._answer):
            try:
                response = SafeJSONResponse(await self._answer.whole())
            except ApiError as failed:  # the service stopped before the answer was whole
                response = failed.response()
        if response is not None:
            await response(scope, receive, send)


@contextlib.asynccontextmanager
async def _watched(receive: Receive, answer: Answer) -> AsyncIterator[None]:
    """The body's work, cancelled when the client disconnects (a watcher waits for its
    ``http.disconnect`` beside it: one task, no more; Starlette's ``StreamingResponse``
    costs a task group per response on this hot path); the answer let go however it ends."""
    writer = asyncio.current_task()
    watcher = asyncio.create_task(_until_gone(receive, writer, answer))
    try:
        yield
    except asyncio.CancelledError:
        if not watcher.done() or watcher.cancelled() or not watcher.result():
            raise  # cancelled from outside, not by the client going away
        if writer is not None:
            writer.uncancel()  # ours, taken back: the task goes on to end the response
        await answer.left()
    finally:
        watcher.cancel()
        answer.close()


async def _until_gone(receive: Receive, writer: asyncio.Task[Any] | None, answer: Answer) -> bool:
    """Cancel ``writer`` when the client disconnects; whether it did."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            answer.client_left = True
            if writer is not None:
                writer.cancel()
            return True


def _without_tail(text: str, count: int) -> str:
    return text[: len(text) - count] if count <= len(text) else ""


def _internal_error(what: str) -> ApiError:
    """A failure of ours, logged under an id, as OpenAI's 500 (a stream's last event)."""
    error = report_failure(log, what)
    return ApiError(
        500, f"An internal error (id {error}).", code="internal_error", kind="server_error"
    )


def _interrupted() -> ApiError:
    """The service stopped before the answer was complete (``INTERRUPTED``)."""
    return ApiError(503, INTERRUPTED.text, code="service_unavailable", kind="server_error")


async def _one(piece: Piece | None) -> AsyncIterator[Piece]:
    yield piece if piece is not None else Piece("")
