"""``SlackAdapter``: Slack events and interactions into the hub, hub events back.

A bolt ``AsyncApp`` (``process_before_response``: its answer, the ack, goes back when the
listener returns) whose listeners only store and hand over: a message for the bot is
stored once under its key (``platform_events``) before its envelope is acknowledged, then
handled in its source's lane; a click, a modal or a command is acknowledged at once and
handled in the background. A failure to store answers 500: the envelope is not
acknowledged and Slack sends it again. The parts with one job each: ``messages.py``,
``interactions.py``, ``cards.py``, ``activity.py``, and from ``bot/platform`` the event
renderer and the outbox with ``sending.py`` as its sender.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from functools import partial
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from slack_bolt.async_app import AsyncApp
from slack_bolt.authorization import AuthorizeResult
from slack_sdk.web.async_client import AsyncWebClient

from bot.delivery import Pacing, RetrySchedule, Tenure
from bot.platform.access import WELCOME, PairingDesk
from bot.platform.front import Front, FrontConfig
from bot.platform.jobs import Jobs
from bot.platform.protocols import PairingCode
from bot.platform.voice_mode import VoiceMode, voice_command
from bot.platform.voice_notes import TooLarge, VoiceNotes
from bot.platform.voice_out import Speak
from bot.slack.activity import ThreadActivity
from bot.slack.cards import SlackCards
from bot.slack.incoming import SLACK, Incoming, Place
from bot.slack.interactions import Interactions
from bot.slack.messages import MessageHandler, SlackMe
from bot.slack.sending import SlackClient, SlackSender
from engine.approval import Decider
from engine.hub import ChatHub
from engine.store import Database
from memory.service import MemoryService

__all__ = ["SlackAdapter", "SlackConfig"]

log = logging.getLogger(__name__)

Json = dict[str, Any]
_ANY = re.compile(".*")
_CHUNK_BYTES = 256 * 1024


@dataclass(frozen=True, slots=True)
class SlackConfig:
    """What the adapter is told by the service (``bot/slack/service.py``)."""

    bot_token: str
    api_url: str
    #: ``None``: Socket Mode (Slack's socket is authenticated, nothing to verify).
    signing_secret: str | None = None
    front: FrontConfig = field(default_factory=FrontConfig)
    progress_interval_s: float = 5.0


class SlackAdapter:
    def __init__(
        self,
        hub: ChatHub,
        db: Database,
        config: SlackConfig,
        pacing: Pacing,
        *,
        schedule: RetrySchedule | None = None,
        tenure: Tenure | None = None,
        members: Callable[[], int] | None = None,
        jobs: Jobs | None = None,
        memory: MemoryService | None = None,
        desk: PairingDesk | None = None,
        voice: VoiceNotes | None = None,
        voice_mode: VoiceMode | None = None,
        speak: Speak | None = None,
    ) -> None:
        """``tenure`` and ``members``: a fleet member's (its rows' hand-back; how many
        processes share the app's cap); ``desk``: every platform's pairing, for ``/pair``;
        ``voice``: audio files transcribed; ``voice_mode``: the chats whose replies are
        spoken (``/voice``), and ``speak`` what speaks them."""
        self.hub, self.config = hub, config
        self.me = me = SlackMe()
        # One session for every call: its connections are kept alive (slack-sdk opens a
        # connection per call without one). One try per call: the outbox retries, paced,
        # what is worth retrying.
        self._session = aiohttp.ClientSession()
        self.web = web = AsyncWebClient(
            token=config.bot_token,
            base_url=config.api_url,
            session=self._session,
            retry_handlers=[],
        )
        self.front = front = Front(
            SLACK,
            Incoming,
            hub,
            db,
            pacing,
            config.front,
            welcome=self._welcome,
            schedule=schedule,
            tenure=tenure,
            members=members,
            jobs=jobs,
            memory=memory,
            desk=desk,
        )
        self.outbound = front.deliver_with(SlackClient(web, speak))
        self.access, self.commands = front.access, front.commands
        if voice_mode is not None:
            self.commands.register(voice_command(voice_mode))
        self.sender = sender = SlackSender(web, self.outbound, voice_mode)
        self.cards = cards = SlackCards(hub, front.card_store, sender)
        activity = ThreadActivity(sender, front.runtime)
        self._messages = messages = MessageHandler(
            hub,
            me,
            front.access,
            front.commands,
            cards,
            sender,
            activity,
            voice,
            self._download,
        )
        self._interactions = Interactions(hub, me, front.access, cards, messages, sender.open_view)
        front.attach(
            sender, cards, activity, messages.handle, progress_interval_s=config.progress_interval_s
        )
        self.app = self._bolt_app()

    # -- life cycle ----------------------------------------------------------------------

    async def start(self) -> None:
        """Local state and the hub subscription, before the hub recovers; no Slack call."""
        await self.front.start(self.cards)

    async def take_over(self) -> None:
        await self.front.take_over(addressed=self._messages.addressed)

    def identify(self, auth: Json) -> None:
        """Who the bot is, from ``auth.test`` (before any event is taken)."""
        self.me.user_id = auth.get("user_id")
        self.me.bot_id = auth.get("bot_id")
        self.me.team_id = auth.get("team_id")

    async def close(self) -> None:
        await self.front.close()
        await self._session.close()

    async def drain(self) -> None:
        await self.front.drain()

    # -- bolt ------------------------------------------------------------------------------

    def _bolt_app(self) -> AsyncApp:
        config = self.config
        web = self.web
        # Without a token of its own bolt asks ``authorize`` who the bot is, which answers
        # from the service's ``auth.test``: with the token, bolt made a second call at
        # its first envelope, and when Slack failed that one (a 429, a 5xx) it
        # acknowledged the envelope with "reinstall this app" and the message was lost
        # (found by review on 2026-12-06). Its per-request client gets the token back.
        tokenless = AsyncWebClient(
            base_url=web.base_url, session=web.session, headers=web.headers, retry_handlers=[]
        )

        async def authorize() -> AuthorizeResult:  # bolt passes what a function names
            return self.authorized()

        app = AsyncApp(
            client=tokenless,
            authorize=authorize,
            signing_secret=config.signing_secret or "",
            request_verification_enabled=config.signing_secret is not None,
            process_before_response=True,
            raise_error_for_unhandled_request=False,
        )
        app.event("message")(self._on_event)
        app.event("app_mention")(self._on_event)
        app.event(_ANY)(_ignore)  # subscribed but unused: acknowledged, not sent again
        app.action(_ANY)(self._on_action)
        app.view_submission(_ANY)(self._on_view)
        app.view_closed(_ANY)(_acknowledge)
        app.command(_ANY)(self._on_command)
        app.shortcut(_ANY)(_acknowledge)
        app.options(_ANY)(_acknowledge)
        return app

    def authorized(self) -> AuthorizeResult:
        """Bolt's answer to "who is this bot", from the service's ``auth.test``."""
        me = self.me
        return AuthorizeResult(
            enterprise_id=None,
            team_id=me.team_id,
            bot_user_id=me.user_id,
            bot_id=me.bot_id,
            bot_token=self.web.token,
        )

    async def _on_event(self, body: Json, event: Json) -> None:
        """Stored (when it is for the bot and new) before bolt acknowledges it; raising
        here leaves the envelope unacknowledged, for Slack to send again."""
        team = body.get("team_id")
        if event.get("subtype") == "message_changed":
            edited = Incoming.edited(event, team, self.me.user_id)
            if edited is not None:  # after its message, which may still be on its way
                await self.front.edit(edited.key, partial(self._messages.edited, edited))
            return
        if event.get("subtype") == "message_deleted":
            channel, ts = event.get("channel"), event.get("deleted_ts")
            if isinstance(channel, str) and isinstance(ts, str):
                await self.front.deleted(f"{channel}:{ts}", "slack_ts", ts)
            return
        incoming = Incoming.of(event, team, self.me.user_id)
        if incoming is not None:
            await self.take(incoming)

    async def take(self, incoming: Incoming) -> int:
        """Stored and queued when it is for the bot and new, in the order its
        conversation's messages came; 1 when it was."""
        return await self.front.take(incoming, addressed=self._messages.addressed)

    async def _on_action(self, ack: Any, body: Json, respond: Any) -> None:
        await ack()
        self._later(self._interactions.click(body, _ephemeral(respond)))

    async def _on_view(self, ack: Any, body: Json, view: Json) -> None:
        await ack()  # the modal closes; what it decided shows on the card
        self._later(self._interactions.submit(body, view, self._tell))

    async def _on_command(self, ack: Any, body: Json, respond: Any) -> None:
        await ack()
        self._later(self._interactions.command(body, _ephemeral(respond)))

    def _later(self, work: Coroutine[Any, Any, None]) -> None:
        self.front.background.spawn(work)

    async def _tell(self, user: str, text: str) -> None:
        """A line for ``user`` after a modal (no response URL): in their DM."""
        await self._messages.say_to_user(user, text)

    async def _download(self, url: str, limit: int) -> bytes:
        """A shared file's bytes (``url_private``), with the bot token: only from Slack's
        own hosts (or the configured API's), never more than ``limit`` bytes."""
        host = urlsplit(url).hostname or ""
        if not (host == urlsplit(self.config.api_url).hostname or host.endswith(".slack.com")):
            raise ValueError(f"not a Slack file host: {host}")
        headers = {"Authorization": f"Bearer {self.config.bot_token}"}
        try:
            async with self._session.get(url, headers=headers) as answer:
                if answer.status != 200:
                    raise OSError(f"HTTP {answer.status}")
                if (answer.content_length or 0) > limit:
                    raise TooLarge(url)
                # Read to the end: one read gives what has arrived so far (a clip was cut
                # to its first 32 KB until 2026-12-06).
                data = bytearray()
                async for chunk in answer.content.iter_chunked(_CHUNK_BYTES):
                    data += chunk
                    if len(data) > limit:
                        raise TooLarge(url)
        except aiohttp.ClientError as exc:  # cut off, refused: "I could not download it"
            # (until 2026-12-06 it went past that, and the message's words were lost)
            raise OSError(f"the download failed: {exc}") from None
        return bytes(data)

    async def _welcome(self, paired: PairingCode) -> None:
        await self.sender.say_at(Place(paired.chat), WELCOME)

    def decider(self, user_id: str | None) -> Decider:
        return self.front.decider(user_id)

    def is_allowed(self, user_id: str | None) -> bool:
        return self.front.is_allowed(user_id)


async def _ignore() -> None:
    return None


async def _acknowledge(ack: Any) -> None:
    await ack()


def _ephemeral(respond: Any) -> Callable[[str], Coroutine[Any, Any, None]]:
    """A line only the clicking user sees, through the interaction's response URL."""

    async def tell(text: str) -> None:
        try:
            await respond(text=text, response_type="ephemeral", replace_original=False)
        except Exception as exc:  # a response URL used up or gone: the log says so
            log.info("answering a Slack interaction failed: %s", exc)

    return tell
