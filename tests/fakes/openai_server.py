"""A fake OpenAI-compatible chat-completions server over real HTTP on 127.0.0.1.

It runs uvicorn in a background thread with its own event loop, so synchronous
tests, async tests and subprocesses (pass them ``base_url``) can all use it.
Tests script the answers in advance; each request takes the next one::

    with FakeOpenAIServer() as fake:
        fake.reply_tool_calls(("call_1", "read_file", '{"path": "a.txt"}'))
        fake.reply_text("The file says hi.", usage=(120, 8), cost=0.0004)
        ...  # point the code under test at fake.base_url
        assert fake.requests[1]["messages"][-1]["role"] == "tool"

Answers stream when the request asks for ``stream``: content is split into
word-sized deltas and tool arguments into short fragments. ``reply_raw``, ``reply_json``
and ``reply_chunks`` send exactly what the test wrote (malformed answers, streamed or
whole). ``model=`` on a ``reply_*`` call scripts one model only (a per-model queue is
used before the shared one). With nothing scripted the server answers 500 "no scripted
response".

``GET /v1/models`` lists ``fake.models`` (ids; empty unless a test sets them). With
``fake.api_key`` set, every route answers 401 to any other bearer token.

``POST /v1/audio/transcriptions`` checks the multipart upload (a ``model`` field and a
non-empty ``file`` part, or 400), records it in ``fake.transcription_requests`` and
answers ``{"text": …}`` with the next of ``fake.transcripts`` (``transcribe``), else
``transcript of <n> bytes``; ``fake.transcription_failures`` holds scripted answers
(``ScriptedReply`` of kind error/raw/hang) its next requests get first.

``POST /v1/audio/speech`` checks its JSON (``model``, ``input``, ``voice``), records it in
``fake.speech_requests`` and answers real OGG/Opus bytes (half a second of silence,
``tests/fakes/ogg.py``); ``fake.speech_failures`` holds scripted answers first.

``POST /v1/embeddings`` answers deterministic vectors (``tests/fakes/embeddings.py``:
synonyms land near each other) for any model, and records each request in
``fake.embedding_requests``; ``fake.embedding_failures`` holds scripted answers
(``ScriptedReply`` of kind error/raw/hang) its next requests get first.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal, Self

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.fakes.background import BackgroundServer
from tests.fakes.embeddings import embed
from tests.fakes.ogg import opus_silence

ToolCallSpec = tuple[str, str, str | dict[str, Any]]
"""``(id, name, arguments)``; a string is sent verbatim (malformed JSON too)."""

_ARGUMENT_FRAGMENT = 7
_WORDS = re.compile(r"\s*\S+\s*|\s+")


@dataclass(frozen=True, slots=True)
class ScriptedReply:
    """One scripted answer; build them with the ``FakeOpenAIServer.reply_*`` methods."""

    kind: Literal["completion", "error", "hang", "raw"]
    content: str | None = None
    tool_calls: tuple[tuple[str, str, str], ...] = ()
    reasoning: str | None = None
    reasoning_field: str = "reasoning_content"
    usage: tuple[int, int] | None = None
    cost: float | None = None
    finish_reason: str | None = None
    status: int = 200
    body: bytes = b""
    content_type: str = "application/json"
    #: A ``Content-Encoding`` the body does not have (a proxy that breaks it), when set.
    content_encoding: str = ""
    #: Seconds the server waits before answering (a slow model).
    delay_s: float = 0.0
    #: Headers of an error answer (``Retry-After``).
    headers: tuple[tuple[str, str], ...] = ()
    #: A streamed answer stops after this many words of its content until ``go_on()``.
    pause_after: int = 0


class FakeOpenAIServer:
    """Scripted ``POST /v1/chat/completions``; see the module docstring."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        """Every request body received, in arrival order."""
        self.headers: list[dict[str, str]] = []
        """The matching request headers (lower-case names)."""
        self.models: list[str] = []
        """The model ids ``GET /v1/models`` lists."""
        self.api_key: str | None = None
        """When set, requests without ``Authorization: Bearer <api_key>`` get 401."""
        self.embedding_requests: list[dict[str, Any]] = []
        """Every ``/v1/embeddings`` request body, in arrival order."""
        self.embedding_failures: deque[ScriptedReply] = deque()
        """Answers the next embedding requests get instead of vectors."""
        self.transcripts: deque[str] = deque()
        """The texts the next transcription requests get."""
        self.transcription_requests: list[dict[str, Any]] = []
        """Every transcription upload: its fields, the file's name, type and bytes."""
        self.transcription_failures: deque[ScriptedReply] = deque()
        """Answers the next transcription requests get instead of a transcript."""
        self.speech_requests: list[dict[str, Any]] = []
        """Every ``/v1/audio/speech`` body, in arrival order."""
        self.speech_failures: deque[ScriptedReply] = deque()
        """Answers the next speech requests get instead of audio."""
        self.echo = False
        """With nothing scripted, answer ``echo: <the user messages since the last answer>``
        instead of 500 (load and kill-loop tests, where every message needs an answer)."""
        self.respond: Callable[[list[dict[str, Any]]], ScriptedReply | None] | None = None
        """With nothing scripted, the reply to a request's messages (before ``echo``): for
        several processes whose requests interleave, where a queue cannot say which is
        whose."""
        self._lock = threading.Lock()
        self._shared: deque[ScriptedReply] = deque()
        self._per_model: dict[str, deque[ScriptedReply]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._release: asyncio.Event | None = None
        self._going_on = threading.Event()  # paused streams go on (``pause_after``)
        self._runner: BackgroundServer | None = None
        self._port = 0
        self._counter = 0

    # -- lifecycle ---------------------------------------------------------------

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT/v1``, the value for ``LLM_BASE_URL``."""
        if not self._port:
            raise RuntimeError("the fake OpenAI server is not started")
        return f"http://127.0.0.1:{self._port}/v1"

    def start(self) -> Self:
        if self._runner is None:
            app = Starlette(
                routes=[
                    Route("/v1/chat/completions", self._handle, methods=["POST"]),
                    Route("/v1/models", self._list_models, methods=["GET"]),
                    Route("/v1/embeddings", self._embeddings, methods=["POST"]),
                    Route("/v1/audio/transcriptions", self._transcribe, methods=["POST"]),
                    Route("/v1/audio/speech", self._speak, methods=["POST"]),
                ]
            )
            self._runner = BackgroundServer(app, "fake-openai", self._on_loop)
        self._runner.start()
        self._port = self._runner.port
        return self

    def stop(self) -> None:
        """Release hanging requests and shut down; safe to call twice."""
        if self._runner is None or not self._runner.running:
            return
        self._release_hangs()
        self._runner.stop()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def go_on(self) -> None:
        """Paused streams (``pause_after``) go on to their end."""
        self._going_on.set()

    def reset(self) -> None:
        """Forget scripts, the answering function, recorded requests, the model listing and
        the key; release hangs and pauses (for a shared server)."""
        self._going_on.set()
        self._going_on = threading.Event()
        with self._lock:
            self._shared.clear()
            self._per_model.clear()
            self.requests.clear()
            self.headers.clear()
            self.models = []
            self.api_key = None
            self.embedding_requests.clear()
            self.embedding_failures.clear()
            self.transcripts.clear()
            self.transcription_requests.clear()
            self.transcription_failures.clear()
            self.speech_requests.clear()
            self.speech_failures.clear()
            self.echo = False
            self.respond = None
        self._release_hangs()

    def pending(self, model: str | None = None) -> int:
        """Scripted replies not yet used (shared queue, or the queue for ``model``)."""
        with self._lock:
            queue = self._shared if model is None else self._per_model.get(model, ())
            return len(queue)

    # -- scripting ---------------------------------------------------------------

    def reply_text(
        self,
        content: str,
        *,
        reasoning: str | None = None,
        reasoning_field: str = "reasoning_content",
        usage: tuple[int, int] | None = None,
        cost: float | None = None,
        finish_reason: str = "stop",
        model: str | None = None,
        delay_s: float = 0.0,
        pause_after: int = 0,
    ) -> None:
        """An assistant text answer; ``usage`` is ``(prompt_tokens, completion_tokens)``.

        ``reasoning_field="reasoning"`` sends reasoning the way some providers name it;
        ``delay_s``: answered that much later (real time: a slow model); ``pause_after``:
        a stream stops after that many words until ``go_on()`` (a model mid-answer).
        """
        self.enqueue(
            ScriptedReply(
                "completion",
                content=content,
                reasoning=reasoning,
                reasoning_field=reasoning_field,
                usage=usage,
                cost=cost,
                finish_reason=finish_reason,
                delay_s=delay_s,
                pause_after=pause_after,
            ),
            model=model,
        )

    def reply_tool_calls(
        self,
        *calls: ToolCallSpec,
        content: str | None = None,
        reasoning: str | None = None,
        reasoning_field: str = "reasoning_content",
        usage: tuple[int, int] | None = None,
        cost: float | None = None,
        model: str | None = None,
    ) -> None:
        """One answer carrying ``calls``, each ``(id, name, arguments)``."""
        if not calls:
            raise ValueError("reply_tool_calls needs at least one call")
        self.enqueue(
            ScriptedReply(
                "completion",
                content=content,
                tool_calls=tuple(_tool_call(*call) for call in calls),
                reasoning=reasoning,
                reasoning_field=reasoning_field,
                usage=usage,
                cost=cost,
                finish_reason="tool_calls",
            ),
            model=model,
        )

    def reply_empty(
        self, *, usage: tuple[int, int] | None = None, model: str | None = None
    ) -> None:
        """An answer with neither content nor tool calls."""
        self.enqueue(
            ScriptedReply("completion", content="", usage=usage, finish_reason="stop"),
            model=model,
        )

    def reply_error(
        self,
        status: int,
        message: str | None = None,
        *,
        model: str | None = None,
        retry_after: str | None = None,
    ) -> None:
        """An HTTP error with an OpenAI-style ``{"error": {...}}`` body (``retry_after``:
        its ``Retry-After`` header)."""
        message = message or f"fake error {status}"
        error = {"message": message, "type": _error_type(status), "code": status}
        body = json.dumps({"error": error}).encode()
        headers = (("retry-after", retry_after),) if retry_after is not None else ()
        self.enqueue(ScriptedReply("error", status=status, body=body, headers=headers), model=model)

    def reply_hang(self, *, partial: str | None = None, model: str | None = None) -> None:
        """Never answer, until ``reset()`` or ``stop()``.

        With ``partial`` and a streaming request, send that content first and then
        stall mid-stream.
        """
        self.enqueue(ScriptedReply("hang", content=partial), model=model)

    def reply_raw(
        self,
        body: str | bytes,
        *,
        status: int = 200,
        content_type: str = "application/json",
        content_encoding: str = "",
        model: str | None = None,
    ) -> None:
        """Send ``body`` verbatim whatever the request asked (malformed answers), under
        ``content_encoding`` when given (a body that does not decode)."""
        data = body.encode() if isinstance(body, str) else body
        reply = ScriptedReply(
            "raw",
            status=status,
            body=data,
            content_type=content_type,
            content_encoding=content_encoding,
        )
        self.enqueue(reply, model=model)

    def reply_json(self, value: Any, *, status: int = 200, model: str | None = None) -> None:
        """Any JSON value as the whole body (a completion with junk in it, a bare number)."""
        self.reply_raw(json.dumps(value), status=status, model=model)

    def reply_chunks(self, *chunks: Any, done: bool = True, model: str | None = None) -> None:
        """A stream made of exactly these ``data:`` lines, then ``[DONE]`` unless ``done=False``.

        A string is sent verbatim (junk that is not JSON), anything else JSON-encoded (an
        object, or a bare number where an object belongs); ``delta_chunk`` builds the usual
        ``chat.completion.chunk``.
        """
        lines = [c if isinstance(c, str) else json.dumps(c) for c in chunks]
        if done:
            lines.append("[DONE]")
        body = "".join(f"data: {line}\n\n" for line in lines)
        self.reply_raw(body, content_type="text/event-stream", model=model)

    def enqueue(self, reply: ScriptedReply, *, model: str | None = None) -> None:
        with self._lock:
            if model is None:
                self._shared.append(reply)
            else:
                self._per_model.setdefault(model, deque()).append(reply)

    # -- server side -------------------------------------------------------------

    def _on_loop(self, loop: asyncio.AbstractEventLoop | None) -> None:
        self._loop = loop
        if loop is not None:
            self._release = asyncio.Event()

    def _release_hangs(self) -> None:
        loop = self._loop
        if loop is None or loop.is_closed():
            return

        def release() -> None:
            # Hangs wait on the event they saw; later hangs get a fresh one.
            if self._release is not None:
                self._release.set()
            self._release = asyncio.Event()

        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(release)

    def _next(self, model: str | None) -> ScriptedReply | None:
        with self._lock:
            queue = self._per_model.get(model) if model is not None else None
            if queue:
                return queue.popleft()
            if self._shared:
                return self._shared.popleft()
            return None

    def _refused(self, request: Request) -> Response | None:
        if self.api_key is None:
            return None
        if request.headers.get("authorization", "") == f"Bearer {self.api_key}":
            return None
        return _error(401, "Incorrect API key provided")

    async def _list_models(self, request: Request) -> Response:
        refused = self._refused(request)
        if refused is not None:
            return refused
        listing = [{"id": m, "object": "model", "owned_by": "fake"} for m in self.models]
        return JSONResponse({"object": "list", "data": listing})

    async def _embeddings(self, request: Request) -> Response:
        refused = self._refused(request)
        if refused is not None:
            return refused
        try:
            body = json.loads(await request.body())
        except ValueError:
            return _error(400, "request body is not JSON")
        texts = body.get("input") if isinstance(body, dict) else None
        if isinstance(texts, str):
            texts = [texts]
        if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
            return _error(400, "input must be a string or a list of strings")
        with self._lock:
            self.embedding_requests.append(body)
            failure = self.embedding_failures.popleft() if self.embedding_failures else None
        if failure is not None:
            if failure.kind == "hang":
                assert self._release is not None
                await self._release.wait()
                return _error(503, "hang released")
            return _raw(failure)
        data = [
            {"object": "embedding", "index": n, "embedding": embed(t)} for n, t in enumerate(texts)
        ]
        usage = {"prompt_tokens": sum(len(t.split()) for t in texts)}
        return JSONResponse(
            {"object": "list", "data": data, "model": body.get("model"), "usage": usage}
        )

    def transcribe(self, *texts: str) -> None:
        """Script the next transcripts, in order."""
        with self._lock:
            self.transcripts.extend(texts)

    async def _transcribe(self, request: Request) -> Response:
        refused = self._refused(request)
        if refused is not None:
            return refused
        try:
            form = await request.form()
        except Exception:
            return _error(400, "the body is not multipart/form-data")
        upload = form.get("file")
        model = form.get("model")
        if not isinstance(model, str) or not model or upload is None or isinstance(upload, str):
            return _error(400, "a model field and a file part are required")
        audio = await upload.read()
        if not audio:
            return _error(400, "the file is empty")
        record = {
            "model": model,
            "fields": {k: v for k, v in form.items() if isinstance(v, str)},
            "filename": upload.filename,
            "content_type": upload.content_type,
            "audio": audio,
            "authorization": request.headers.get("authorization"),
        }
        with self._lock:
            self.transcription_requests.append(record)
            failure = self.transcription_failures.popleft() if self.transcription_failures else None
            text = self.transcripts.popleft() if self.transcripts else None
        if failure is not None:
            if failure.kind == "hang":
                assert self._release is not None
                await self._release.wait()
                return _error(503, "hang released")
            return _raw(failure)
        return JSONResponse(
            {"text": text if text is not None else f"transcript of {len(audio)} bytes"}
        )

    async def _speak(self, request: Request) -> Response:
        refused = self._refused(request)
        if refused is not None:
            return refused
        try:
            body = json.loads(await request.body())
        except ValueError:
            return _error(400, "request body is not JSON")
        fields = ("model", "input", "voice")
        if not isinstance(body, dict) or not all(isinstance(body.get(k), str) for k in fields):
            return _error(400, "model, input and voice are required strings")
        with self._lock:
            self.speech_requests.append(body)
            failure = self.speech_failures.popleft() if self.speech_failures else None
        if failure is not None:
            return _raw(failure)
        return Response(opus_silence(), media_type="audio/ogg")

    async def _handle(self, request: Request) -> Response:
        refused = self._refused(request)
        if refused is not None:
            return refused
        try:
            body = json.loads(await request.body())
        except ValueError:
            return _error(400, "request body is not JSON")
        if not isinstance(body, dict):
            return _error(400, "request body is not a JSON object")
        with self._lock:
            self.requests.append(body)
            self.headers.append(dict(request.headers))
            self._counter += 1
            serial = self._counter
        model = body.get("model")
        reply = self._next(model if isinstance(model, str) else None)
        if reply is None and self.respond is not None:
            messages = body.get("messages")
            reply = self.respond(messages if isinstance(messages, list) else [])
        if reply is None and self.echo:
            reply = ScriptedReply(kind="completion", content=f"echo: {_last_user(body)}")
        if reply is None:
            return _error(500, f"no scripted response for request #{serial} (model {model!r})")
        stream = bool(body.get("stream"))
        if reply.kind == "error":
            return Response(
                reply.body,
                status_code=reply.status,
                media_type="application/json",
                headers=dict(reply.headers),
            )
        if reply.kind == "raw":
            return _raw(reply)
        release = self._release
        assert release is not None
        if reply.kind == "hang":
            if stream and reply.content:
                chunks = _stream_content(f"chatcmpl-fake-{serial}", str(model), reply.content)
                return _sse(_then_stall(chunks, release))
            await release.wait()
            return _error(503, "hang released")
        completion_id = f"chatcmpl-fake-{serial}"
        if reply.delay_s > 0:
            await asyncio.sleep(reply.delay_s)
        if stream:
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            chunks = _stream_completion(completion_id, str(model), reply, include_usage)
            if reply.pause_after:
                return _sse(_paused(chunks, reply.pause_after, self._going_on))
            return _sse(chunks)
        return JSONResponse(_whole_completion(completion_id, str(model), reply))


def _last_user(body: dict[str, Any]) -> str:
    """The user messages since the last assistant message, joined by `` | `` (several when
    messages that came during a turn were steered into it)."""
    messages = body.get("messages")
    said: list[str] = []
    for message in reversed(messages if isinstance(messages, list) else []):
        if not isinstance(message, dict):
            continue
        if message.get("role") == "assistant":
            break
        if message.get("role") == "user":
            content = message.get("content")
            said.append(content if isinstance(content, str) else json.dumps(content))
    return " | ".join(reversed(said))


def delta_chunk(delta: Any, finish_reason: Any = None, **fields: Any) -> dict[str, Any]:
    """One ``chat.completion.chunk`` whose only choice carries ``delta`` (of any JSON type);
    ``fields`` add or replace top-level keys (``usage=...``, ``choices=...``)."""
    chunk: dict[str, Any] = {
        "id": "chatcmpl-scripted",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
    }
    chunk.update(fields)
    return chunk


def _tool_call(call_id: str, name: str, arguments: str | dict[str, Any]) -> tuple[str, str, str]:
    return call_id, name, arguments if isinstance(arguments, str) else json.dumps(arguments)


def _error_type(status: int) -> str:
    if status == 429:
        return "rate_limit_exceeded"
    return "server_error" if status >= 500 else "invalid_request_error"


def _raw(reply: ScriptedReply) -> Response:
    headers = {"content-encoding": reply.content_encoding} if reply.content_encoding else None
    return Response(
        reply.body, status_code=reply.status, media_type=reply.content_type, headers=headers
    )


def _error(status: int, message: str) -> JSONResponse:
    error = {"message": message, "type": _error_type(status), "code": status}
    return JSONResponse({"error": error}, status_code=status)


def _usage(reply: ScriptedReply) -> dict[str, Any] | None:
    if reply.usage is None and reply.cost is None:
        return None
    prompt, completion = reply.usage or (0, 0)
    usage: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
    if reply.cost is not None:
        usage["cost"] = reply.cost
    return usage


def _whole_completion(completion_id: str, model: str, reply: ScriptedReply) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.content}
    if reply.reasoning is not None:
        message[reply.reasoning_field] = reply.reasoning
    if reply.tool_calls:
        message["tool_calls"] = [
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}
            for call_id, name, args in reply.tool_calls
        ]
    data: dict[str, Any] = {
        "id": completion_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": reply.finish_reason}],
    }
    usage = _usage(reply)
    if usage is not None:
        data["usage"] = usage
    return data


def _chunk(completion_id: str, model: str, delta: dict[str, Any], finish: str | None = None) -> str:
    return json.dumps(
        {
            "id": completion_id,
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
    )


def _stream_content(completion_id: str, model: str, content: str) -> Iterable[str]:
    yield _chunk(completion_id, model, {"role": "assistant", "content": ""})
    for piece in _WORDS.findall(content):
        yield _chunk(completion_id, model, {"content": piece})


def _stream_completion(
    completion_id: str, model: str, reply: ScriptedReply, include_usage: bool
) -> Iterable[str]:
    yield _chunk(completion_id, model, {"role": "assistant", "content": ""})
    for piece in _WORDS.findall(reply.reasoning or ""):
        yield _chunk(completion_id, model, {reply.reasoning_field: piece})
    for piece in _WORDS.findall(reply.content or ""):
        yield _chunk(completion_id, model, {"content": piece})
    for index, (call_id, name, args) in enumerate(reply.tool_calls):
        head = {"index": index, "id": call_id, "type": "function"}
        head["function"] = {"name": name, "arguments": ""}
        yield _chunk(completion_id, model, {"tool_calls": [head]})
        for start in range(0, len(args), _ARGUMENT_FRAGMENT):
            fragment = args[start : start + _ARGUMENT_FRAGMENT]
            part = {"index": index, "function": {"arguments": fragment}}
            yield _chunk(completion_id, model, {"tool_calls": [part]})
    yield _chunk(completion_id, model, {}, reply.finish_reason)
    usage = _usage(reply)
    if include_usage and usage is not None:
        yield json.dumps(
            {
                "id": completion_id,
                "object": "chat.completion.chunk",
                "created": int(time.time()),
                "model": model,
                "choices": [],
                "usage": usage,
            }
        )
    yield "[DONE]"


async def _paused(
    chunks: Iterable[str], words: int, going_on: threading.Event
) -> AsyncIterator[str]:
    """``chunks``, stopped after ``words`` of content until ``going_on`` is set."""
    said = 0
    for chunk in chunks:
        yield chunk
        said += '"content": "' in chunk and '"content": ""' not in chunk
        if said == words:
            await asyncio.get_running_loop().run_in_executor(None, going_on.wait)


async def _then_stall(chunks: Iterable[str], release: asyncio.Event) -> AsyncIterator[str]:
    for chunk in chunks:
        yield chunk
    await release.wait()


def _sse(chunks: Iterable[str] | AsyncIterator[str]) -> StreamingResponse:
    async def events() -> AsyncIterator[bytes]:
        if isinstance(chunks, AsyncIterator):
            async for chunk in chunks:
                yield f"data: {chunk}\n\n".encode()
        else:
            for chunk in chunks:
                yield f"data: {chunk}\n\n".encode()

    return StreamingResponse(events(), media_type="text/event-stream")
