"""``GET /ws/chat?conversation=<id>``: the web chat's WebSocket endpoint.

The handshake is checked before it is accepted (``auth.py``: Origin, then the cookie or
bearer header; a refusal is an HTTP 403 and no frame is ever read). Then the socket
subscribes to its conversation's hub events, says ``hello`` and ``turn_running``, shows
what waits for a decision, and from then on streams the conversation's events while it
reads the client's frames. Closing the socket stops nothing: the turn runs in the hub
and every other socket of the conversation keeps receiving it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence

from starlette.routing import BaseRoute, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketState

from bot.platform.failures import report_failure
from bot.platform.tasks import Background
from bot.platform.voice_notes import VoiceNotes
from bot.webchat.actions import Actions, web_commands
from bot.webchat.auth import SocketAuth
from bot.webchat.conversations import ConversationDirectory, is_conversation_id, source_of
from bot.webchat.limits import FrameRate, SocketLimits
from bot.webchat.protocol import (
    ErrorFrame,
    FrameError,
    Hello,
    LaggedFrame,
    Limits,
    QueuedMessageFrame,
    SendMessage,
    ServerFrame,
    TurnRunning,
    parse_client_frame,
)
from bot.webchat.rooms import Rooms
from bot.webchat.translate import (
    approval_frame,
    attachments_of,
    pending_approval_event,
    pending_question_frame,
    to_frame,
)
from bot.webchat.uploads import Uploads
from engine.bus import Lagged
from engine.hub import ChatHub, SourceEvents
from engine.session import ApprovalRequired, Done
from memory.service import MemoryService

__all__ = ["CLOSE_TOO_BIG", "WebChat"]

log = logging.getLogger(__name__)

CLOSE_TOO_BIG = 1009
CLOSE_POLICY = 1008
#: A frame on a socket whose conversation was deleted since it opened (until 2026-12-06 it
#: went on: a message was answered in a conversation nobody could list; found by review).
DELETED = "This conversation was deleted; nothing was done. Open another one."
RATE_LIMITED = "Too many frames; slow down (this one was not taken)."
BINARY = "Frames are JSON text; a binary frame is not taken."
UNSHOWN = "Part of this turn could not be shown here (error {}); reload the page to see it."
UNSHOWN_ANSWER = "The answer could not be shown here (error {}); reload the page to read it."


class WebChat:
    """The endpoint and what its sockets share (rooms, the resume tasks)."""

    def __init__(
        self,
        hub: ChatHub,
        auth: SocketAuth,
        conversations: ConversationDirectory,
        *,
        limits: SocketLimits | None = None,
        clock: Callable[[], float] = time.monotonic,
        pages: Sequence[BaseRoute] = (),
        uploads: Uploads | None = None,
        memory: MemoryService | None = None,
        voice: VoiceNotes | None = None,
    ) -> None:
        """``pages``: the chat's HTTP routes (the conversations, the page), served beside;
        ``uploads``: where a message's attachments are found (default: the workspace's);
        ``voice``: the service's voice notes, which hear a message's sound (``voice.py``)."""
        self.hub = hub
        self._pages = tuple(pages)
        self.auth = auth
        self.conversations = conversations
        self.limits = limits or SocketLimits()
        self._clock = clock
        self.rooms = Rooms()
        self._open = 0
        self._background = Background()
        self._uploads = uploads or Uploads(hub.workspace_root)
        self._voice = voice
        self.actions = Actions(
            hub, self.rooms, web_commands(memory), self._background, self._uploads, voice
        )

    @property
    def open_sockets(self) -> int:
        return self._open

    @property
    def token(self) -> str | None:
        return self.auth.token

    def routes(self) -> list[BaseRoute]:
        return [WebSocketRoute("/ws/chat", self.endpoint, name="web_chat_socket"), *self._pages]

    async def close(self) -> None:
        await self._background.close()

    async def endpoint(self, websocket: WebSocket) -> None:
        refusal = await self.auth.refusal(websocket)
        if refusal is not None:
            log.info("web chat socket refused: %s", refusal)
            await websocket.close(code=CLOSE_POLICY)  # before accept: an HTTP 403
            return
        conversation = websocket.query_params.get("conversation", "")
        if not is_conversation_id(conversation) or not await self.conversations.is_open(
            conversation
        ):
            await websocket.close(code=CLOSE_POLICY)
            return
        if self._open >= self.limits.max_sockets:
            log.warning("web chat socket refused: %d sockets are open", self._open)
            await websocket.close(code=CLOSE_POLICY)
            return
        self._open += 1
        try:
            await self._serve(websocket, conversation)
        finally:
            self._open -= 1

    async def _serve(self, websocket: WebSocket, conversation: str) -> None:
        await websocket.accept()
        source = source_of(conversation)
        socket = ChatSocket(websocket)
        # Subscribed before turn_running is read; with the turns other processes of a fleet
        # run (a gap in those is a RemoteLagged: the lagged frame below reloads the page).
        events = self.hub.events(source, remote=True)
        self.rooms.join(source, socket)
        pump: asyncio.Task[None] | None = None
        watch: asyncio.Task[None] | None = None
        try:
            session_id = await self.hub.session_id(source)
            await socket.send(
                Hello(conversation_id=conversation, session_id=session_id, limits=self._limits())
            )
            await socket.send(TurnRunning(running=await self.hub.is_busy(source)))
            await self._show_pending(socket, session_id, source)
            pump = asyncio.create_task(self._pump(events, socket), name=f"ws:{source}")
            watch = asyncio.create_task(self._watch(websocket, socket), name=f"ws-auth:{source}")
            await self._read(conversation, websocket, socket)
        finally:
            self.rooms.leave(source, socket)
            events.close()
            for task in (pump, watch):
                if task is not None:
                    task.cancel()
                    await asyncio.gather(task, return_exceptions=True)

    def _limits(self) -> Limits:
        voice = self._voice
        return Limits(
            max_frame_bytes=self.limits.max_frame_bytes,
            max_message_chars=self.hub.config.max_message_chars,
            frames_per_second=self.limits.frames_per_second,
            burst=self.limits.burst,
            max_upload_bytes=self._uploads.max_bytes,
            max_voice_bytes=None
            if voice is None
            else min(voice.max_bytes, self._uploads.max_bytes),
            max_voice_seconds=None if voice is None else voice.max_seconds,
        )

    async def _show_pending(self, socket: ChatSocket, session_id: int, source: str) -> None:
        """Cards and questions already waiting (a reload, a second tab, a restart), those
        of a scheduled job's run asking here included."""
        hub = self.hub
        for item in await hub.pending_approvals(session_id):
            event = pending_approval_event(item, await hub.preview(item))
            await socket.send(await self._card(event))
        for item in await hub.pending_approvals(shown_in=source):
            if item.session_id != session_id:
                event = pending_approval_event(item, await hub.preview(item), visiting=True)
                await socket.send(await self._card(event))
        for item in await hub.pending_questions(session_id):
            await socket.send(pending_question_frame(item))
        # Taken, waiting for their turn: until 2026-12-07 a reload showed them nowhere until
        # their turn came, and a message whose "accepted" was lost looked lost (the page
        # asks to send it again; found by review).
        for row in await hub.waiting_messages(source):
            attachments = attachments_of((row.metadata or {}).get("attachments"))
            await socket.send(
                QueuedMessageFrame(queued_id=row.id, text=row.content, attachments=attachments)
            )

    async def _card(self, event: ApprovalRequired) -> ServerFrame:
        """The card with who may decide it; without that line when it cannot be read (the
        database away for a moment: the card itself still reaches the tab, which would
        otherwise hear nothing more of its conversation)."""
        try:
            deciders = await self.hub.who_may_decide(event.tool_call_id)
        except Exception:
            log.warning(
                "who may decide call %s could not be read", event.tool_call_id, exc_info=True
            )
            deciders = None
        return approval_frame(event, deciders)

    async def _pump(self, events: SourceEvents, socket: ChatSocket) -> None:
        async for item in events:
            if isinstance(item, Lagged):
                await socket.send(LaggedFrame(missed=item.missed))
                continue
            frame = await self._frame(item.event)
            if frame is not None:
                await socket.send(frame)
            if socket.gone:
                return

    async def _frame(self, event: object) -> ServerFrame | None:
        """The frame of one event; a fault of ours building it is logged under an id and
        the tab is told in a sentence, the pump goes on (until 2026-12-07 it ended: the
        tab heard nothing more, not even the turn's end; found by review)."""
        try:
            if isinstance(event, ApprovalRequired):
                return await self._card(event)
            return to_frame(event)
        except Exception:
            failure = report_failure(log, f"web chat: showing a {type(event).__name__}")
            if isinstance(event, Done):  # the turn ended: the tab stops waiting for it
                return ErrorFrame(code="turn", message=UNSHOWN_ANSWER.format(failure))
            return ErrorFrame(code="internal", message=UNSHOWN.format(failure))

    async def _signed_out(
        self, websocket: WebSocket, socket: ChatSocket, *, touch: bool = True
    ) -> bool:
        """Whether the sign-in that opened the socket has ended (signed out, ended on
        /signins, expired) since its handshake; the socket is then closed, and the page's
        reconnect goes to the sign-in page (until 2026-12-06 the socket kept every right it
        had: it sent messages and approved calls; found by review)."""
        try:
            if await self.auth.still_signed_in(websocket, touch=touch):
                return False
        except Exception:  # the database away for a moment: a live socket is not cut for it
            log.warning("checking a web chat socket's sign-in failed", exc_info=True)
            return False
        log.info("web chat socket closed: its sign-in has ended")
        await socket.close(CLOSE_POLICY, "signed out")
        return True

    async def _deleted(self, conversation: str) -> bool:
        """Whether the conversation was deleted since the socket opened (in another tab);
        a failed look (the database away) lets the frame go on, to its own failure."""
        try:
            return not await self.conversations.is_open(conversation)
        except Exception:
            log.warning("checking web chat conversation %s failed", conversation, exc_info=True)
            return False

    async def _used(self, conversation: str) -> None:
        """The sidebar's order noted; a failed note (the database away) cuts no socket: the
        message itself was accepted."""
        try:
            await self.conversations.used(conversation)
        except Exception:
            log.warning("web chat conversation %s: its use not noted", conversation, exc_info=True)

    async def _watch(self, websocket: WebSocket, socket: ChatSocket) -> None:
        """A socket that only listens is checked now and then: it receives the
        conversation's events."""
        while not socket.gone:
            await asyncio.sleep(self.limits.signin_check_s)
            if await self._signed_out(websocket, socket, touch=False):
                return

    async def _read(self, conversation: str, websocket: WebSocket, socket: ChatSocket) -> None:
        source = source_of(conversation)
        limits = self.limits
        rate = FrameRate(limits.frames_per_second, limits.burst, self._clock)
        refused = 0
        while True:
            message = await websocket.receive()
            if message["type"] == "websocket.disconnect":
                return
            text, data = message.get("text"), message.get("bytes")
            size = len(data) if text is None else _utf8_size(text, limits.max_frame_bytes)
            if size > limits.max_frame_bytes:
                await socket.close(CLOSE_TOO_BIG, "frame too big")
                return
            try:
                if text is None:
                    raise FrameError("binary", BINARY)
                frame = parse_client_frame(text)
                if not rate.allow():
                    raise FrameError("rate_limited", RATE_LIMITED, frame.ref)
            except FrameError as bad:
                if bad.code != "rate_limited" and not rate.allow():  # junk counts too
                    bad = FrameError("rate_limited", RATE_LIMITED, bad.ref)
                if bad.code == "rate_limited":
                    refused += 1
                    if refused > limits.max_refused:
                        await socket.close(CLOSE_POLICY, "too many refused frames")
                        return
                await socket.send(ErrorFrame(code=bad.code, message=bad.message, ref=bad.ref))
                continue
            refused = 0
            if await self._signed_out(websocket, socket):
                return
            # Only a message: a deleted conversation's running turn may still be stopped
            # or decided from the tab that shows it.
            if isinstance(frame, SendMessage) and await self._deleted(conversation):
                await socket.send(ErrorFrame(code="deleted", message=DELETED, ref=frame.ref))
                continue
            await self.actions.run(source, frame, socket)
            if isinstance(frame, SendMessage):
                await self._used(conversation)


def _utf8_size(text: str, limit: int) -> int:
    """The UTF-8 size of ``text``, exact only near ``limit`` (encoding is skipped when it
    cannot matter: a character takes one to four bytes)."""
    if len(text) > limit:
        return len(text)
    if len(text) * 4 <= limit:
        return len(text)
    return len(text.encode("utf-8", errors="surrogatepass"))


class ChatSocket:
    """One accepted socket; frames from the pump and the reader go out one at a time."""

    def __init__(self, websocket: WebSocket) -> None:
        self._websocket = websocket
        self._lock = asyncio.Lock()
        self.gone = False

    async def send(self, frame: ServerFrame) -> None:
        if self.gone:
            return
        try:
            text = frame.dump()
        except Exception:  # a fault of ours in one frame: the socket itself is fine
            log.exception("a %s could not be written; not sent", type(frame).__name__)
            return
        async with self._lock:
            try:
                await self._websocket.send_text(text)
            except Exception:  # closed under us: the reader sees the disconnect
                self.gone = True

    async def close(self, code: int, reason: str) -> None:
        self.gone = True
        async with self._lock:
            if self._websocket.application_state is WebSocketState.CONNECTED:
                with contextlib.suppress(Exception):
                    await self._websocket.close(code=code, reason=reason)
