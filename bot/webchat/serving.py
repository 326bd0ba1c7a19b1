"""The web chat as the HTTP app serves it: its socket, page and conversation routes over
the hub (``bot/http/serving.py`` builds it on the first request that needs it)."""

from __future__ import annotations

from bot.http.signins import LoginThrottle, SignIns
from bot.platform.voice_notes import VoiceNotes
from bot.webchat.auth import SocketAuth
from bot.webchat.page import ChatPage
from bot.webchat.routes import ConversationRoutes
from bot.webchat.store import ConversationStore
from bot.webchat.transport import WebChat
from engine.hub import ChatHub
from engine.store import Database
from memory.service import MemoryService

__all__ = ["web_chat"]


def web_chat(
    hub: ChatHub,
    db: Database,
    token: str | None,
    signins: SignIns | None,
    throttle: LoginThrottle,
    memory: MemoryService | None = None,
    voice: VoiceNotes | None = None,
) -> WebChat:
    """``voice``: the service's voice notes (the one transcription path of every platform);
    without it a voice note recorded in the page is told nobody transcribes it."""
    auth = SocketAuth(token=token, signins=signins, throttle=throttle)
    conversations = ConversationStore(db)
    return WebChat(
        hub,
        auth,
        conversations,
        pages=[
            *ConversationRoutes(conversations, hub, auth, voice=voice).routes(),
            *ChatPage(auth).routes(),
        ],
        memory=memory,
        voice=voice,
    )
