"""One request's answer as OpenAI's clients read it: whole (``chat.completion``) or as
server-sent events (``chat.completion.chunk``s, then ``[DONE]``), written by a lean ASGI
response that lets the answer go however it ends."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator
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
            yield self._sse(chunk(*self._head(), {"role": "assistant", "content": ""}))
            async for piece in self._pieces():
                if piece is KEEPALIVE:
                    yield b": keep-alive\n\n"
                    continue
                if piece is INTERRUPTED:
                    # As OpenAI ends a stream that failed: an error, no finish, no [DONE];
                    # its clients raise it (until 2026-12-06 the cut text ended "stop", and
                    # the conversation held it as the answer; found by review).
                    yield self._sse(_interrupted().body())
                    return
                if not piece.text:
                    continue
                extra = {"event": piece.event} if piece.event else None
                yield self._sse(chunk(*self._head(), {"content": piece.text}, extra=extra))
                self._sent.append(piece.text)  # resumed: the writer sent it
            await self._finish("".join(self._sent))
            extra = {"conversation": self._conversation.source}
            finish = self._finish_reason
            yield self._sse(chunk(*self._head(), {}, finish_reason=finish, extra=extra))
            if self._usage_chunk:
                yield self._sse(usage_chunk(*self._head(), self._tokens))
            yield b"data: [DONE]\n\n"
        except asyncio.CancelledError:  # while waiting for the turn's next piece
            if self.client_left:
                await self.left()
            raise
        except Exception:
            # A failure of ours once the stream began: OpenAI's error event, as a failed
            # stream ends (it cut the connection, and the client's SDK raised a transport
            # error instead of the error id; found by review on 2026-12-06).
            error = report_failure(log, f"streaming the answer of {self._conversation.source}")
            failed = ApiError(
                500, f"An internal error (id {error}).", code="internal_error", kind="server_error"
            )
            yield self._sse(failed.body())
        finally:
            self._done()

    async def _pieces(self) -> AsyncIterator[Piece]:
        if not self._turn.running:  # a request sent again: its answer, read back
            yield Piece(self._turn.answer or "")
            return
        async for piece in self._turn.pieces():
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

    @staticmethod
    def _sse(body: dict[str, Any]) -> bytes:
        return b"data: " + json.dumps(body, ensure_ascii=False).encode() + b"\n\n"


class EventStream(Response):
    """The answer's server-sent events, written as they come; the answer is let go
    however the response ends. A client that goes away ends the writing (the turn goes
    on), and what it was sent is held as the answer (``Answer.left``)."""

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
        async with _watched(receive, self._answer):
            await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
            async for data in self._answer.events():
                await send({"type": "http.response.body", "body": data, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})


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


def _interrupted() -> ApiError:
    """The service stopped before the answer was complete (``INTERRUPTED``)."""
    return ApiError(503, INTERRUPTED.text, code="service_unavailable", kind="server_error")
