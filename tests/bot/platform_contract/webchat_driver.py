"""The web chat as a person uses it: the page's HTTP requests and its /ws/chat socket.

The service runs in-process with its HTTP app on 127.0.0.1 (no Telegram token, no API
token: loopback lets every local client in, as ``make run`` does). The driver does what
``bot/webchat/static/chat.js`` does, from the outside only: it loads ``GET /chat`` for the
form token, creates its conversation (``POST /chat/conversations``), opens
``/ws/chat?conversation=<id>`` with the page's ``Origin``, subscribes first and loads the
newest history page after, and builds the thread from the history and the frames as the
page does (``_Thread``: messages by id, cards by ``tool_call_id``, questions by
``request_id``, each shown once). Cards are decided with the page's choices
(``approve_tool`` with the choice's ``bypass_secs``, ``reject_tool`` with the reason
typed), questions answered from their answer box (``answer_question``).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any, TypeVar

import httpx
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from bot.serve import Service
from tests.bot.platform_contract.driver import Prompt, StopAsking

__all__ = ["WebChatDriver"]

T = TypeVar("T")

#: How long a wait for something to be shown lasts, at most (a guard, not a timing).
WAIT_S = 10.0
#: chat.js's ``preview`` of a tool call's arguments and result.
PREVIEW_CHARS = 160


@dataclass(eq=False)
class _Item:
    """One thing in the thread: a message bubble, a tool line, a card, a question, a notice."""

    kind: str  # user, answer, streaming, thinking, tool, card, question, notice, error
    text: str
    #: Appended in this order (kept across a cleared thread, for ``reply_to``).
    seq: int
    #: A card's or question's frame; an error's code.
    frame: dict[str, Any] = field(default_factory=dict)
    closed: bool = False


class _Thread:
    """What the page shows, built as ``chat.js``'s ``handle`` and ``loadHistory`` build it."""

    def __init__(self, counter: itertools.count[int]) -> None:
        self._counter = counter
        self.items: list[_Item] = []
        self.running = False
        self._shown: set[int] = set()  # message ids
        self._cards: dict[int, _Item] = {}
        self._questions: dict[int, _Item] = {}
        self._tools: dict[int, _Item] = {}
        self._streaming: _Item | None = None

    def add(self, kind: str, text: str, frame: dict[str, Any] | None = None) -> _Item:
        item = _Item(kind, text, next(self._counter), frame or {})
        self.items.append(item)
        return item

    def clear(self) -> None:
        self.items.clear()
        self._shown.clear()
        self._cards.clear()
        self._questions.clear()
        self._tools.clear()
        self._streaming = None

    def history(self, page: dict[str, Any]) -> None:
        """The newest history page, in front of what the socket showed meanwhile."""
        loaded = _Thread(self._counter)
        for message in page["messages"]:
            if message["id"] in self._shown:
                continue
            self._shown.add(message["id"])
            if message["role"] == "user":
                loaded.add("user", message["text"])
            else:
                for tool in message["tools"]:
                    loaded.add("tool", f"⚙ {tool['name']} — {tool['status']}")
                if message["html"]:
                    loaded.add("answer", text_of(message["html"]))
        self.items[:0] = loaded.items

    def handle(self, frame: dict[str, Any]) -> None:
        match frame["type"]:
            case "turn_running":
                self.running = frame["running"]
            case "user_message":
                self.running = True
                if frame["id"] not in self._shown:
                    self._shown.add(frame["id"])
                    self.add("user", frame["text"])
            case "text_delta":
                if frame["depth"] != 0:
                    return
                self.running = True
                if self._streaming is None:
                    self._streaming = self.add("streaming", "")
                self._streaming.text += frame["text"]
            case "thinking_delta":
                if frame["depth"] == 0 and self._streaming is None:
                    self.add("thinking", f"· {frame['text']}")
            case "tool_start":
                self.running = True
                self._end_streaming()
                line = self.add("tool", f"⚙ {frame['name']} {preview(frame['arguments'])}")
                self._tools[frame["tool_call_id"]] = line
            case "tool_end":
                icon = {"done": "✓", "failed": "✗", "rejected": "⊘", "cancelled": "⊘"}
                mark = icon.get(frame["status"], "•")
                text = f"  {mark} {frame['name']}: {preview(frame['preview']) or frame['status']}"
                line = self._tools.get(frame["tool_call_id"])
                if line is not None:
                    line.text += f"\n{text}"
                else:
                    self.add("tool", text)
            case "approval_required":
                self.running = True
                self._card(frame)
            case "approval_resolved":
                self._close(self._cards.get(frame["tool_call_id"]), frame["line"])
            case "agent_question":
                self.running = True
                if frame["request_id"] not in self._questions:
                    box = self.add("question", f"? {frame['question']}", frame)
                    self._questions[frame["request_id"]] = box
            case "question_answered":
                self._close(self._questions.get(frame["request_id"]), f"↳ {frame['answer']}")
            case "done":
                if self._streaming is not None:
                    self.items.remove(self._streaming)
                    self._streaming = None
                if frame["message_id"] not in self._shown:
                    self._shown.add(frame["message_id"])
                    self.add("answer", text_of(frame["html"]))
                self.running = False
            case "error":
                self.add("error", frame["message"], {"code": frame["code"]})
                if frame["code"] == "turn":
                    self._end_streaming()
                    self.running = False
            case "notice":
                self.add("notice", frame["text"])
            case "new_session":
                self.clear()
                self.add("notice", "New conversation.")

    def _card(self, frame: dict[str, Any]) -> None:
        if frame["tool_call_id"] in self._cards:
            return
        who = f" (agent {frame['agent']}, depth {frame['depth']})" if frame["depth"] > 0 else ""
        what = f"⚠ {frame['tool']}{who} wants to run with:"
        if frame["label"] == "Command":
            where = f" in {frame['workdir']}" if frame["workdir"] else ""
            what = f"⚠ {frame['tool']}{who} wants to run{where}:"
        if frame["label"] == "Diff":
            new = " (new file)" if frame["new_file"] else ""
            what = f"⚠ {frame['tool']}{who} wants to write {frame['path'] or ''}{new}"
        if frame["asked_by"]:
            what = f"⏰ {frame['asked_by']} wants to run: {frame['tool']}"
        parts = [what, frame["content"]]
        if frame["deciders"]:
            parts.append(frame["deciders"])
        parts.append("  ".join(choice["label"] for choice in frame["choices"]))
        self._cards[frame["tool_call_id"]] = self.add("card", "\n".join(parts), frame)

    @staticmethod
    def _close(item: _Item | None, outcome: str) -> None:
        """A card's choices (a question's answer box) go; the outcome line is added."""
        if item is None or item.closed:
            return
        item.closed = True
        if item.kind == "card":
            item.text = item.text.rsplit("\n", 1)[0]
        item.text += f"\n{outcome}"

    def _end_streaming(self) -> None:
        if self._streaming is not None:
            self._streaming.kind = "answer"  # the streamed text stays, as plain text
            self._streaming = None


class WebChatDriver:
    """A person at ``/chat``, in one conversation of the web chat."""

    name = "webchat"

    def __init__(
        self, start_service: Callable[[], Awaitable[Service]], workspace: Path, port: int
    ) -> None:
        self._start_service = start_service
        self.workspace = workspace
        self.service: Service
        self.port = port
        self.base = f"http://127.0.0.1:{port}"
        self.source = ""
        self.conversation = ""
        self._counter = itertools.count(1)
        self.thread = _Thread(self._counter)
        self.frames: list[dict[str, Any]] = []  # every frame received, for failure messages
        self._http: httpx.AsyncClient | None = None
        self._socket: ClientConnection | None = None
        self._reader: asyncio.Task[None] | None = None
        self._reload: asyncio.Task[None] | None = None
        self._changed = asyncio.Event()
        self._refs = itertools.count(1)
        self._pongs: set[str] = set()
        self._unstarted = 0  # messages accepted whose user_message has not come yet
        self._approvals_seen: set[int] = set()
        self._questions_seen: set[int] = set()
        self._stopped = True

    # -- life cycle ---------------------------------------------------------------------

    async def start(self) -> None:
        """The service, then the page: its form token, its conversation, its socket."""
        self.service = await self._start_service()
        self._stopped = False
        self._http = httpx.AsyncClient(base_url=self.base, headers={"Origin": self.base})
        page = await self._http.get("/chat")
        assert page.status_code == 200, f"GET /chat: {page.status_code} {page.text[:200]}"
        csrf = page.text.split('name="csrf" content="', 1)[1].split('"', 1)[0]
        self._http.headers["X-CSRF-Token"] = csrf
        if not self.conversation:
            created = await self._http.post("/chat/conversations", json={})
            assert created.status_code == 201, created.text
            self.conversation = created.json()["id"]
            self.source = f"web:{self.conversation}"
        await self._open()

    async def restart(self) -> None:
        """The service stops (the page's socket drops with it) and starts again over the
        same database and port; the page reconnects and reloads its conversation."""
        await self._stop_service()
        await self._wait_closed()
        self._approvals_seen.clear()
        self._questions_seen.clear()
        await self.start()

    async def close(self) -> None:
        if self._reload is not None:
            self._reload.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reload
        await self._disconnect()
        await self._stop_service()

    async def _stop_service(self) -> None:
        if not self._stopped:
            self._stopped = True
            await self.service.stop()
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    async def _open(self) -> None:
        """``select`` in chat.js: subscribe first, load the newest history page after;
        the frames that came meanwhile are handled then, what both show shown once."""
        await self._disconnect()
        self.thread = _Thread(self._counter)
        self._unstarted = 0
        url = f"ws://127.0.0.1:{self.port}/ws/chat"
        opened = len(self.frames)
        self._socket = await connect(
            f"{url}?conversation={self.conversation}", origin=self.base, open_timeout=WAIT_S
        )
        waiting: list[dict[str, Any]] = []
        loaded = False

        async def read(socket: ClientConnection) -> None:
            with contextlib.suppress(ConnectionClosed):
                async for raw in socket:
                    frame = json.loads(raw)
                    self.frames.append(frame)
                    if loaded:
                        self._handle(frame)
                    else:
                        waiting.append(frame)
                    self._changed.set()
            self._changed.set()

        self._reader = asyncio.create_task(read(self._socket), name="webchat-page")
        assert self._http is not None
        messages = await self._http.get(
            f"/chat/conversations/{self.conversation}/messages", params={"limit": 50}
        )
        assert messages.status_code == 200, messages.text
        self.thread.history(messages.json())
        loaded = True
        for frame in waiting:
            self._handle(frame)
        self._changed.set()
        # The socket subscribed and said hello (then turn_running, then what waits).
        await self._until(lambda: any(f["type"] == "hello" for f in self.frames[opened:]), "hello")

    async def _disconnect(self) -> None:
        if self._socket is not None:
            await self._socket.close()
        await self._wait_closed()

    async def _wait_closed(self) -> None:
        if self._reader is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._reader), WAIT_S)
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
            self._reader = None
        self._socket = None

    def _handle(self, frame: dict[str, Any]) -> None:
        match frame["type"]:
            case "accepted":
                self._unstarted += 1
            case "user_message":
                self._unstarted = max(0, self._unstarted - 1)
            case "pong":
                self._pongs.add(frame["ref"])
            case "lagged":  # the page opens the conversation again: socket, then history
                if self._reload is None or self._reload.done():
                    self._reload = asyncio.create_task(self._open(), name="webchat-reload")
                return
        self.thread.handle(frame)

    # -- what the person does -----------------------------------------------------------

    async def say(self, text: str) -> None:
        """Typed into the composer and sent (Enter): a ``message`` frame."""
        await self._send({"type": "message", "text": text})

    async def reply_to(self, text: str) -> str:
        """The first thing the page shows after sending ``text`` that is not the user's
        own message (nor an answer still streaming)."""
        mark = next(self._counter)
        await self.say(text)

        def reply() -> str | None:
            return next(
                (
                    item.text
                    for item in self.thread.items
                    if item.seq > mark and item.kind not in ("user", "streaming")
                ),
                None,
            )

        return await self._until(reply, f"the reply to {text!r}")

    async def expect(self, needle: str) -> str:
        def found() -> str | None:
            return next((t for t in self.shown() if needle in t), None)

        return await self._until(found, repr(needle))

    async def expect_message(self, text: str) -> None:
        await self._until(lambda: text in self.shown(), f"the message {text!r}")

    def shown(self) -> list[str]:
        return [item.text for item in self.thread.items]

    async def approval(self) -> Prompt:
        item = await self._until(lambda: self._next("card", self._approvals_seen), "a card")
        return Prompt(item.text, handle=item.frame)

    def approvals_shown(self) -> int:
        return sum(item.kind == "card" for item in self.thread.items)

    async def approve(self, card: Prompt) -> None:
        await self._choose(card, "approve")

    async def approve_and_stop_asking(self, card: Prompt, *, for_: StopAsking) -> None:
        await self._choose(card, "bypass_15m" if for_ == "15m" else "bypass_session")

    async def reject(self, card: Prompt, reason: str = "") -> None:
        """❌ opens the reason field; Reject sends what was typed there (maybe nothing)."""
        choice = _choice(card, "reject")
        assert choice["bypass_secs"] is None
        frame = {"type": "reject_tool", "tool_call_id": card.handle["tool_call_id"]}
        await self._send({**frame, "reason": reason})

    async def question(self) -> Prompt:
        box = await self._until(lambda: self._next("question", self._questions_seen), "a question")
        return Prompt(box.text, handle=box.frame)

    def questions_shown(self) -> int:
        return sum(item.kind == "question" for item in self.thread.items)

    async def answer(self, question: Prompt, text: str) -> None:
        """Typed into the question's answer box (Enter)."""
        frame = {"type": "answer_question", "request_id": question.handle["request_id"]}
        await self._send({**frame, "answer": text})

    async def expect_stopped(self) -> None:
        """The turn ended with ``error`` ``turn`` (SEND shown again)."""

        def stopped() -> bool:
            turn_ended = any(
                item.kind == "error" and item.frame.get("code") == "turn"
                for item in self.thread.items
            )
            return turn_ended and not self.thread.running

        await self._until(stopped, "the turn stopped")

    async def idle(self) -> None:
        """Every frame sent was taken (a ``ping`` after them is answered), every message
        accepted has started its turn, and the page shows SEND again (the turn is over)."""
        ref = await self._send({"type": "ping"})
        await self._until(lambda: ref in self._pongs, "the pong")
        await self._until(
            lambda: self._unstarted == 0 and not self.thread.running, "the turn's end"
        )

    # -- helpers ------------------------------------------------------------------------

    async def _choose(self, card: Prompt, name: str) -> None:
        """A card's button: ``approve_tool`` with its ``bypass_secs`` (none for ✅)."""
        choice = _choice(card, name)
        call = card.handle["tool_call_id"]
        frame: dict[str, Any] = {"type": "approve_tool", "tool_call_id": call}
        if choice["bypass_secs"] is not None:
            frame["bypass_secs"] = choice["bypass_secs"]
        await self._send(frame)

    async def _send(self, frame: dict[str, Any]) -> str:
        assert self._socket is not None, "the page is not connected"
        ref = f"d{next(self._refs)}"
        await self._socket.send(json.dumps({**frame, "ref": ref}))
        return ref

    def _next(self, kind: str, seen: set[int]) -> _Item | None:
        key = "tool_call_id" if kind == "card" else "request_id"
        for item in self.thread.items:
            if item.kind == kind and item.frame[key] not in seen:
                seen.add(item.frame[key])
                return item
        return None

    async def _until(self, found: Callable[[], T | bool | None], what: str) -> T:
        """The first truthy ``found()``, checked after every frame (``WAIT_S`` at most)."""
        deadline = time.monotonic() + WAIT_S
        while not (value := found()):
            self._changed.clear()
            left = deadline - time.monotonic()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), max(left, 0))
            if time.monotonic() >= deadline and not (value := found()):
                shown = "\n".join(f"  [{item.kind}] {item.text}" for item in self.thread.items)
                closed = self._socket.close_code if self._socket is not None else "none"
                raise AssertionError(
                    f"{what} not shown in {WAIT_S:.0f} s; the page shows:\n{shown}\n"
                    f"the last frames: {self.frames[-20:]}\nthe socket's close code: {closed}"
                )
        return value  # type: ignore[return-value]


def _choice(card: Prompt, name: str) -> dict[str, Any]:
    """The card's button for ``name`` (``approve``, ``reject``, ``bypass_15m``, …)."""
    for choice in card.handle["choices"]:
        if choice["choice"] == name:
            return choice
    raise AssertionError(f"the card offers no {name!r}: {card.handle['choices']}")


def preview(text: str) -> str:
    """chat.js's ``preview``: one line, at most 160 characters."""
    flat = " ".join((text or "").split())
    return flat if len(flat) <= PREVIEW_CHARS else flat[: PREVIEW_CHARS - 1] + "…"


class _Text(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []

    def handle_data(self, data: str) -> None:
        self.parts.append(data)


def text_of(html: str) -> str:
    """An answer bubble's text as the page shows it (the server's HTML, its ``textContent``)."""
    parser = _Text()
    parser.feed(html)
    parser.close()
    return "".join(parser.parts).strip()
