"""What a validated client frame does, on the hub, for one conversation.

Decisions are the platform's (``bot.platform.cards.decide``) and taken as the operator:
whoever opens a socket holds the service's keys, as in the web inbox. A failure of ours
is logged under an id and said in one sentence (``bot.platform.failures``).
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from bot.platform.cards import (
    EXPIRED,
    NOT_ALLOWED,
    Choice,
    decide,
    question_answered,
)
from bot.platform.commands import COMMAND, CommandContext, CommandRegistry, shared_commands
from bot.platform.failures import SORRY_MESSAGE, SORRY_TAP, report_failure
from bot.platform.memory import MemoryFront, memory_commands
from bot.platform.open_cards import with_files
from bot.platform.tasks import Background
from bot.platform.voice_notes import VoiceNotes
from bot.webchat.conversations import PREFIX
from bot.webchat.protocol import (
    Accepted,
    AnswerQuestion,
    ApproveTool,
    ErrorFrame,
    Notice,
    Ping,
    Pong,
    QueuedMessageFrame,
    RejectTool,
    Resume,
    SendMessage,
    ServerFrame,
    Stop,
)
from bot.webchat.rooms import Rooms
from bot.webchat.translate import BYPASS_SECS, attachments_of
from bot.webchat.uploads import AttachmentError, Uploads
from bot.webchat.voice import carries_sound, hear
from engine.approval import OPERATOR
from engine.hub import ChatHub, HubError, SendOptions
from engine.store import InboxError
from memory.service import MemoryService

__all__ = ["WEB_CHAT_DECIDER", "Actions", "Reply", "web_commands"]

log = logging.getLogger(__name__)

#: Who a decision taken in the web chat is shown as.
WEB_CHAT_DECIDER = "the web chat"
QUESTION_CLOSED = "That question is no longer open."
NOTHING_TO_RESUME = "Nothing to resume."
NOTHING_HEARD = "⚠️ 🎤 Nothing in that message could be heard."

#: The choice an ``approve_tool``'s ``bypass_secs`` stands for (the cards' map, reversed).
_CHOICE_OF_BYPASS: dict[int | None, Choice] = {
    secs: choice for choice, secs in BYPASS_SECS.items() if choice != "reject"
}


class Reply(Protocol):
    async def send(self, frame: ServerFrame) -> None: ...


def web_commands(memory: MemoryService | None = None) -> CommandRegistry:
    """The shared commands and ``/search``, ``/memory``, ``/forget_me``, in the same words
    as everywhere (``memory`` None: those say long-term memory is switched off)."""
    registry = CommandRegistry()
    for command in shared_commands(registry.help_text):
        registry.register(command)
    for command in memory_commands(MemoryFront(memory)):
        registry.register(command)
    return registry


class Actions:
    def __init__(
        self,
        hub: ChatHub,
        rooms: Rooms,
        commands: CommandRegistry,
        background: Background,
        uploads: Uploads,
        voice: VoiceNotes | None = None,
    ) -> None:
        """``voice``: how voice notes and audio files are heard (``None``: a voice note is
        told that nobody transcribes it)."""
        self._hub = hub
        self._rooms = rooms
        self.commands = commands
        self._background = background
        self._uploads = uploads
        self._voice = voice

    async def run(self, source: str, frame: Any, reply: Reply) -> None:
        """Act on ``frame``; what the socket must be told goes to ``reply``."""
        try:
            match frame:
                case SendMessage():
                    await self._message(source, frame, reply)
                case Stop():
                    await self._command(source, "stop", "", frame.ref, reply)
                case Resume():
                    self._resume(source, frame.ref, reply)
                case ApproveTool():
                    choice = _CHOICE_OF_BYPASS[frame.bypass_secs]
                    await self._decide(source, frame.tool_call_id, choice, "", frame.ref, reply)
                case RejectTool():
                    await self._decide(
                        source, frame.tool_call_id, "reject", frame.reason, frame.ref, reply
                    )
                case AnswerQuestion():
                    await self._answer(source, frame.request_id, frame.answer, frame.ref, reply)
                case Ping():
                    await reply.send(Pong(ref=frame.ref))
        except Exception:
            is_message = isinstance(frame, SendMessage)
            error = report_failure(log, f"web chat {type(frame).__name__} on {source}")
            sorry = (SORRY_MESSAGE if is_message else SORRY_TAP).format(error=error)
            await reply.send(ErrorFrame(code="internal", message=sorry, ref=frame.ref))

    async def _message(self, source: str, frame: SendMessage, reply: Reply) -> None:
        text, files = frame.text, []
        if frame.attachments:  # files make it a message: no command
            attached = await self._attached(source, frame, reply)
            if attached is None:
                return  # the page was told why
            text, files = attached
        else:
            # A command as every front end reads one: "/etc/hosts: what is this?" is a
            # message (until 2026-12-07 it was "Unknown command" and the draft was lost).
            command = COMMAND.match(text.strip())
            if command is not None:
                name, argument = command.group(1).lower(), text.strip()[command.end() :]
                if not await self._command(source, name, argument.strip(), frame.ref, reply):
                    await reply.send(Accepted(ref=frame.ref))  # done: every message is answered
                return
        # The whole message answers an open question, a voice note heard and its files
        # named, as on every platform (until 2026-12-07 one with files was queued behind
        # the turn that waited for that very answer; found by review).
        answer = with_files(text, files)
        if await self._answers_question(source, answer, frame.ref, reply, acknowledge=bool(files)):
            return
        await self._send(source, text, files, frame.ref, reply)

    async def _attached(
        self, source: str, frame: SendMessage, reply: Reply
    ) -> tuple[str, list[dict[str, Any]]] | None:
        """The message's words and files, sound heard first as on every platform
        (voice.py); ``None``: nothing to send, the page told why."""
        conversation_id = source.removeprefix(PREFIX)
        try:
            found = self._uploads.attachments(conversation_id, list(frame.attachments))
        except AttachmentError as exc:
            await reply.send(ErrorFrame(code="attachment", message=str(exc), ref=frame.ref))
            return None
        if not carries_sound(found):
            return frame.text, found
        heard = await hear(self._voice, frame.text, found)
        if heard.quotes:  # every tab sees what was heard before the answer
            await self._rooms.broadcast(source, Notice(text=heard.quotes))
        if not heard.text and not heard.attachments:  # nothing left to send
            said = heard.warning or NOTHING_HEARD
            await reply.send(ErrorFrame(code="voice", message=said, ref=frame.ref))
            return None
        if heard.warning:
            await reply.send(Notice(text=heard.warning, ref=frame.ref))
        return heard.text, list(heard.attachments)

    async def _send(
        self,
        source: str,
        text: str,
        files: list[dict[str, Any]],
        ref: str | None,
        reply: Reply,
    ) -> None:
        options = SendOptions(metadata={"attachments": files}) if files else None
        waits = self._hub.is_processing(source)  # behind the running turn
        try:
            queued = await self._hub.send_message(source, text, options)
        except HubError as exc:  # the hub's refusals are sentences meant for people
            await reply.send(ErrorFrame(code="refused", message=str(exc), ref=ref))
            return
        if waits and queued is not None:
            # Every tab shows it waiting, as a tab opened now does: until 2026-12-07 the
            # open ones (the sender's too) showed nothing until its turn came (review).
            # Before the turn's own frames: the page moves it when its turn takes it.
            waiting = QueuedMessageFrame(
                queued_id=queued, text=text, attachments=attachments_of(files)
            )
            await self._rooms.broadcast(source, waiting)
        await reply.send(Accepted(ref=ref, queued_id=queued))

    async def _answers_question(
        self, source: str, answer: str, ref: str | None, reply: Reply, *, acknowledge: bool
    ) -> bool:
        """A message while a question is open answers it (``question_answered``, every
        platform's rule); a question is open only while its turn waits (here, or in a
        fleet in the process running it). ``acknowledge``: its ref is answered too (the
        page knows plain words by the answer's text; not words heard or files named)."""
        if not await self._hub.is_busy(source):
            return False
        session_id = await self._hub.session_id(source)
        open_questions = await self._hub.pending_questions(session_id)
        question = question_answered(open_questions, is_command=False)
        if question is None:
            return False
        if await self._answer(source, question.tool_call_id, answer, ref, reply) and acknowledge:
            # The page drops the draft it keeps for the message and ends the microphone's
            # "Transcribing…" (until 2026-12-07 neither happened for an answer with files
            # or a voice note; found by review).
            await reply.send(Accepted(ref=ref))
        return True  # its question_answered (to every tab) or its error tells the page

    async def _command(
        self, source: str, name: str, argument: str, ref: str | None, reply: Reply
    ) -> bool:
        """Whether the socket was told (its notice or error, under ``ref``)."""
        context = CommandContext(self._hub, source, argument, None, is_owner=True)
        try:
            text = await self.commands.run(name, context)
        except HubError as exc:
            await reply.send(ErrorFrame(code="refused", message=str(exc), ref=ref))
            return True
        if text is not None:
            await reply.send(Notice(text=text, ref=ref))
            return True
        return False

    def _resume(self, source: str, ref: str | None, reply: Reply) -> None:
        """The turn runs on a task of its own: it outlives this socket."""
        if self._hub.is_processing(source):
            return  # the live stream already shows it

        async def resume() -> None:
            try:
                if await self._hub.resume(source) is None:
                    await reply.send(Notice(text=NOTHING_TO_RESUME, ref=ref))
            except Exception:
                error = report_failure(log, f"web chat resume on {source}")
                sorry = SORRY_TAP.format(error=error)
                await reply.send(ErrorFrame(code="internal", message=sorry, ref=ref))

        self._background.spawn(resume())

    async def _decide(
        self,
        source: str,
        tool_call_id: int,
        choice: Choice,
        note: str,
        ref: str | None,
        reply: Reply,
    ) -> None:
        # Announced by the hub to every tab, on whichever process of a fleet serves it (a
        # broadcast here reached this process's tabs only; found by review).
        decided = await decide(
            self._hub, source, tool_call_id, choice, OPERATOR, note, by=WEB_CHAT_DECIDER
        )
        if decided in ("expired", "taken"):  # gone, or decided by another tap first
            await reply.send(ErrorFrame(code="expired", message=EXPIRED, ref=ref))
        elif decided == "kept":
            await reply.send(ErrorFrame(code="not_allowed", message=NOT_ALLOWED, ref=ref))

    async def _answer(
        self, source: str, request_id: int, answer: str, ref: str | None, reply: Reply
    ) -> bool:
        """Whether it is the question's answer (given now, or these very words before);
        the page was told why not."""
        try:
            await self._hub.answer(request_id, answer, source=source, by=WEB_CHAT_DECIDER)
        except InboxError as exc:  # answered, gone, or another conversation's
            if exc.code == "repeated":  # these very words again (a double submit): answered
                return True  # until 2026-12-07 "no longer open", in red (found by review)
            await reply.send(ErrorFrame(code="expired", message=QUESTION_CLOSED, ref=ref))
            return False
        except HubError as exc:  # empty or too long
            await reply.send(ErrorFrame(code="refused", message=str(exc), ref=ref))
            return False
        return True
