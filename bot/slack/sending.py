"""Slack's side of the delivery layer: its client (``SlackClient``: one try of a recorded
message, ``chat.postMessage``) and its sender (``SlackSender``).

Every call goes through ``Outbound`` (``bot.delivery``): replies are cut on safe Markdown
boundaries (``bot.platform.chunks``), converted to mrkdwn (``bot.slack.mrkdwn``) within
Slack's advised 4,000 characters a message, recorded as outbox rows of the ``slack``
platform under their channel (Slack's pace is per channel), with the thread in the
payload, and sent once from them; cards, edits and ephemeral answers go through it too.
slack_sdk retries nothing here (``retry_handlers=[]``): a 429 is ``RetryLater`` with its
``Retry-After``, which the outbox's pacing honours for the whole fleet.

In a chat with voice on (``/voice on``) a reply is recorded as voice rows
(``bot.platform.voice_out``), each spoken when it is sent and uploaded as an OGG/Opus file
into the conversation (its thread) with the Web API's external upload
(``files_upload_v2``: ``files.getUploadURLExternal``, the bytes POSTed to the URL it
gives, ``files.completeUploadExternal``); any speech failure, or an upload Slack refuses
(an app without ``files:write``), sends the row's text instead.

Nothing the model writes pings anyone: its text is escaped (``<!channel>`` stays text)
and sent with ``link_names`` off.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import Any, TypeVar

import aiohttp
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.web.async_client import AsyncWebClient

from bot.delivery import (
    OTHER,
    Cap,
    Gone,
    Outbound,
    Pacing,
    PacingPolicy,
    PlatformError,
    Rate,
    Refused,
    RetryLater,
    Unavailable,
    clamp_retry_after,
)
from bot.platform.chunks import link_definitions, split_markdown
from bot.platform.outbox import RowSender, last_lines
from bot.platform.protocols import MessageRef
from bot.platform.voice_mode import VoiceMode
from bot.platform.voice_out import VOICE, Speak, audio_of, text_instead, voice_payloads
from bot.slack.incoming import SLACK, Place, parse_source
from bot.slack.mrkdwn import escape, escape_within, to_mrkdwn
from bot.slack.settings import SlackSettings

__all__ = [
    "MESSAGE_LIMIT",
    "SlackClient",
    "SlackError",
    "SlackSender",
    "mrkdwn_parts",
    "per_method",
    "slack_call",
    "slack_pacing",
]

log = logging.getLogger(__name__)

T = TypeVar("T")
Json = dict[str, Any]

#: Slack's advice for a message's text (it takes 40,000 and cuts longer ones).
MESSAGE_LIMIT = 4000
#: A progress line's most characters, escapes counted.
PROGRESS_LINE = 300
#: Errors that mean Slack, not the request, failed.
_SLACK_DOWN = frozenset(
    {"internal_error", "fatal_error", "service_unavailable", "request_timeout", "ratelimited"}
)
#: A rate limit told in the answer's body (200): chat.postMessage's "Application has
#: posted too many messages" failed the reply for good until 2026-12-07 (found by review).
_SLOW_DOWN = frozenset({"rate_limited", "ratelimited"})


class SlackError(PlatformError):
    """A Slack call failed; ``description`` is Slack's error code when it sent one."""


class SlackRetryLater(SlackError, RetryLater):
    pass


class SlackUnavailable(SlackError, Unavailable):
    pass


class SlackRefused(SlackError, Refused):
    pass


class SlackGone(SlackRefused, Gone):
    """The channel is gone or archived, or the bot was removed from it: nothing sent
    there gets through."""


#: Slack's error codes of a conversation that takes nothing from the bot (not
#: ``account_inactive``: that is the bot's own token, every conversation alike).
GONE_ERRORS = frozenset({"channel_not_found", "is_archived", "not_in_channel"})


class SpeechFailed(SlackRefused):
    """A voice reply that could not be spoken: its text goes instead (``fallback``)."""


async def slack_call(op: Callable[[], Awaitable[T]]) -> T:
    """One slack_sdk call with its failures as the delivery layer's errors."""
    try:
        return await op()
    except SlackApiError as exc:
        # Slack's edge answers a 5xx in plain text (slack_sdk's ``data`` is then a string),
        # and a body that is no JSON comes as aiohttp's own response (``status``): both
        # read as an outage, never as a refusal (until 2026-12-07 an AttributeError failed
        # the reply for good; found by review).
        response = exc.response
        status = int(getattr(response, "status_code", None) or getattr(response, "status", 0))
        data = getattr(response, "data", None)
        error = str((data.get("error") if isinstance(data, dict) else None) or f"HTTP {status}")
        if status == 429 or error in _SLOW_DOWN:
            raw = getattr(response, "headers", None) or {}
            headers = {str(k).lower(): v for k, v in raw.items()}
            raise SlackRetryLater(clamp_retry_after(headers.get("retry-after")), error) from None
        if status >= 500 or status == 0 or error in _SLACK_DOWN:
            raise SlackUnavailable(error) from None
        raise (SlackGone if error in GONE_ERRORS else SlackRefused)(error) from None
    except (aiohttp.ClientError, OSError, TimeoutError, SlackClientError) as exc:
        raise SlackUnavailable(f"{type(exc).__name__}: {exc}") from None


#: Slack's chat.postMessage limit in a channel: about one a second, short bursts allowed;
#: never more than 5 in any 5 s here.
CHANNEL_WINDOW = Cap(5, 5.0)


def slack_pacing(settings: SlackSettings) -> Pacing:
    """Slack's limits (docs/slack.md, "Pacing"): per channel a burst then a rate within a
    window; edits (``chat.update``, Tier 3: 50 a minute) one per 2 s per channel; the
    whole app at most ``SLACK_GLOBAL_PER_SECOND``, shared by a fleet."""
    channel = Rate(settings.slack_channel_burst, settings.slack_channel_per_second)
    return Pacing(
        policy=PacingPolicy(
            private=channel,
            group=channel,
            group_cap=CHANNEL_WINDOW,
            overall=Cap.per_second(settings.slack_global_per_second),
            edits=Rate(2, 0.5),
        )
    )


def per_method(pacing: Pacing) -> Pacing:
    """``pacing`` with Slack's rule that each method is limited apart (its tiers): a 429
    on a modal, a DM opened or an edit holds no channel's messages (until 2026-12-07 one
    paused the channel, or the whole app; found by review). Any pacing passed in too."""
    return replace(pacing, policy=replace(pacing.policy, per_method=True))


def mrkdwn_parts(markdown: str, limit: int = MESSAGE_LIMIT) -> list[str]:
    """``markdown`` as mrkdwn messages of at most ``limit`` characters, cut where the
    Markdown may be cut (a code block closed and opened again at a cut)."""
    parts: list[str] = []
    references = link_definitions(markdown)
    pending = split_markdown(markdown, limit * 7 // 8)
    while pending:
        chunk = pending.pop(0)
        converted = to_mrkdwn(chunk, references)
        if len(converted) <= limit:
            if converted.strip():
                parts.append(converted)
            continue
        smaller = split_markdown(chunk, max(1, len(chunk) // 2))
        if len(smaller) < 2:  # nothing left to cut safely: cut the text itself
            parts.extend(converted[i : i + limit] for i in range(0, len(converted), limit))
            continue
        pending[:0] = smaller
    return parts


#: A voice reply's file, as Slack lists it.
VOICE_FILENAME = "voice-message.ogg"
VOICE_TITLE = "Voice message"


class SlackClient:
    """A recorded message, posted to its channel, or spoken and uploaded as an audio file
    when it is a voice reply (``bot.delivery.PlatformClient``)."""

    name = SLACK

    def __init__(self, web: AsyncWebClient, speak: Speak | None = None) -> None:
        """``speak``: text to OGG/Opus bytes (raising ``SpeechError``) for voice replies."""
        self.web = web
        self.speak = speak

    def is_group(self, conversation: str) -> bool:
        return True  # every channel, a DM too, has Slack's per-channel pace

    async def send(self, conversation: str, payload: Json) -> Json:
        if payload.get(VOICE):
            return await self._send_voice(conversation, payload)
        arguments: Json = {
            "channel": conversation,
            "text": payload.get("text") or "",
            "unfurl_links": False,
            "unfurl_media": False,
        }
        if payload.get("blocks"):
            arguments["blocks"] = payload["blocks"]
        if payload.get("thread_ts"):
            arguments["thread_ts"] = payload["thread_ts"]
        answer = await slack_call(lambda: self.web.chat_postMessage(**arguments))
        return dict(answer.data) if isinstance(answer.data, dict) else {}

    async def _send_voice(self, conversation: str, payload: Json) -> Json:
        """The row's words spoken and uploaded into the conversation (its thread)."""
        audio = await audio_of(self.speak, str(payload[VOICE]), SpeechFailed)
        arguments: Json = {
            "channel": conversation,
            "file": audio,
            "filename": VOICE_FILENAME,
            "title": VOICE_TITLE,
        }
        if payload.get("thread_ts"):
            arguments["thread_ts"] = payload["thread_ts"]
        answer = await slack_call(lambda: self.web.files_upload_v2(**arguments))
        data = answer.data if isinstance(answer.data, dict) else {}
        return {"ts": _shared_ts(data.get("file"), conversation)}

    def message_id(self, answer: Any) -> str | None:
        ts = answer.get("ts") if isinstance(answer, dict) else None
        return ts if isinstance(ts, str) else None

    def fallback(self, payload: Json, error: Refused) -> Json | None:
        """A voice reply not spoken (or its upload refused): its text. Blocks Slack
        refused: the message's text alone."""
        if payload.get(VOICE):
            return text_instead(payload)
        if payload.get("blocks") and error.description.startswith("invalid_blocks"):
            return {k: v for k, v in payload.items() if k != "blocks"}
        return None


class SlackSender(RowSender):
    """The outbox's sender (``OutboxSender``) and every other call the adapter makes."""

    def __init__(
        self, web: AsyncWebClient, outbound: Outbound, voice_mode: VoiceMode | None = None
    ) -> None:
        """``voice_mode``: the chats whose replies are spoken (``/voice on``)."""
        super().__init__(outbound, lambda source: parse_source(source).channel, voice_mode)
        self.web = web

    # -- the outbox's sender ----------------------------------------------------------------

    def written(self, source: str, text: str) -> list[Json]:
        thread_ts = parse_source(source).thread_ts
        return [_payload(part, thread_ts) for part in mrkdwn_parts(text)]

    def spoken(self, source: str, text: str) -> list[Json]:
        """One audio file per few sentences."""
        thread_ts = parse_source(source).thread_ts
        return voice_payloads(text, lambda said: _payload(to_mrkdwn(said), thread_ts))

    async def say(self, source: str, text: str) -> None:
        await self.say_at(parse_source(source), text)

    def progress_text(self, lines: Sequence[str]) -> str:
        return last_lines([escape_within(line, PROGRESS_LINE) for line in lines], MESSAGE_LIMIT)

    async def send_progress(self, source: str, text: str) -> MessageRef | None:
        place = parse_source(source)
        return await self.post(place, text)

    async def edit_progress(self, source: str, ref: MessageRef, text: str) -> None:
        await self.edit(parse_source(source).channel, str(ref), text, None)

    # -- what else is sent ------------------------------------------------------------------

    async def post(self, place: Place, text: str, blocks: list[Json] | None = None) -> str | None:
        """Post a mrkdwn message now (not recorded); its ts, or ``None`` when it failed
        (logged)."""
        try:
            return await self.post_now(place, text, blocks)
        except SlackError as exc:
            log.warning("posting to %s failed: %s", place.channel, exc.description)
            return None

    async def post_now(
        self, place: Place, text: str, blocks: list[Json] | None = None
    ) -> str | None:
        """``post``, its failure raised (``SlackError``: a card is posted again after an
        outage, not lost)."""
        payload = _payload(text, place.thread_ts)
        if blocks:
            payload["blocks"] = blocks
        answer = await self.outbound.send(place.channel, payload)
        return self.outbound.client.message_id(answer)

    async def say_at(self, place: Place, markdown: str) -> None:
        """Markdown as one or more messages; a failure is logged, not raised."""
        for part in mrkdwn_parts(markdown):
            if await self.post(place, part) is None:
                return

    async def edit(self, channel: str, ts: str, text: str, blocks: list[Json] | None) -> None:
        """Replace a message of the bot's (``blocks=None``: none); failures are logged."""

        async def update() -> Any:
            return await self.web.chat_update(
                channel=channel, ts=ts, text=text, blocks=blocks or []
            )

        try:
            await self.outbound.edit(channel, ts, lambda: slack_call(update))
        except SlackError as exc:
            log.warning("updating message %s in %s failed: %s", ts, channel, exc.description)

    async def ephemeral(
        self, channel: str, user: str, text: str, thread_ts: str | None = None
    ) -> None:
        """A message only ``user`` sees (a refusal, a command's answer); failures logged."""
        arguments: Json = {"channel": channel, "user": user, "text": escape(text)}
        if thread_ts:
            arguments["thread_ts"] = thread_ts
        await self._other(
            channel, "chat.postEphemeral", lambda: self.web.chat_postEphemeral(**arguments)
        )

    async def status(self, place: Place, text: str) -> bool:
        """The thread's "is thinking…" status (``assistant.threads.setStatus``; empty
        clears it); False when Slack refused it (not an assistant thread, no scope), not
        when it was away (a 5xx, a 429: the next turn asks again)."""
        if place.thread_ts is None:
            return False
        thread_ts = place.thread_ts

        async def set_status() -> Any:
            return await self.web.assistant_threads_setStatus(
                channel_id=place.channel, thread_ts=thread_ts, status=text
            )

        try:
            await self.outbound.call(place.channel, lambda: slack_call(set_status), kind=OTHER)
        except SlackError as exc:
            log.debug("setting the status in %s failed: %s", place.channel, exc.description)
            # One channel gone (the bot removed, the channel archived) is not the feature
            # refused: until 2026-12-07 it turned the status off in every channel.
            return isinstance(exc, SlackGone) or not isinstance(exc, SlackRefused)
        return True

    async def open_dm(self, user: str) -> str | None:
        """The DM channel with ``user`` (opened when needed); ``None`` when Slack refused."""
        try:
            answer = await self.outbound.call(
                None,
                lambda: slack_call(lambda: self.web.conversations_open(users=user)),
                kind=OTHER,
            )
        except SlackError as exc:
            log.warning("could not open a DM with %s: %s", user, exc.description)
            return None
        channel = (answer.get("channel") or {}).get("id")
        return channel if isinstance(channel, str) else None

    async def open_view(self, trigger_id: str, view: Json) -> bool:
        """A modal, opened within the trigger's 3 s; False when Slack refused it."""
        try:
            await self.outbound.call(
                None,
                lambda: slack_call(lambda: self.web.views_open(trigger_id=trigger_id, view=view)),
                kind=OTHER,
            )
        except SlackError as exc:
            log.info("opening a modal failed: %s", exc.description)
            return False
        return True

    async def _other(self, channel: str, what: str, op: Callable[[], Awaitable[Any]]) -> None:
        try:
            await self.outbound.call(channel, lambda: slack_call(op), kind=OTHER)
        except SlackError as exc:
            log.info("%s in %s failed: %s", what, channel, exc.description)


def _payload(text: str, thread_ts: str | None) -> Json:
    payload: Json = {"text": text}
    if thread_ts is not None:
        payload["thread_ts"] = thread_ts
    return payload


def _shared_ts(file: Any, channel: str) -> str | None:
    """The ``ts`` of the message that shared an uploaded file in ``channel``, when
    Slack's answer already lists the share (it may come later)."""
    shares = file.get("shares") if isinstance(file, dict) else None
    if not isinstance(shares, dict):
        return None
    for kind in ("public", "private"):
        found = (shares.get(kind) or {}).get(channel)
        if isinstance(found, list) and found and isinstance(found[0], dict):
            ts = found[0].get("ts")
            if isinstance(ts, str):
                return ts
    return None
