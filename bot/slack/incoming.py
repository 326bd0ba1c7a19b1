"""A Slack message as the adapter handles it, and the sources it belongs to.

``Incoming`` is parsed once from an ``event_callback``'s ``message`` or ``app_mention``
event and stored as JSON in the delivery layer's events (``platform_events``) under the
message's own key, ``<channel>:<ts>``: Slack's retry of an event (a new envelope, the same
``event_id``) and the second event of a mention (``app_mention`` and ``message``, two
event ids for one message) are the same key, so a message reaches the hub once.

Sources: a DM is ``slack:<channel>`` (its ``D…`` id); a thread is
``slack:<channel>:<thread_ts>``, and a mention outside a thread starts one on itself.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "PREFIX",
    "SLACK",
    "Incoming",
    "Place",
    "is_message_id",
    "is_ts",
    "parse_source",
    "readable",
    "source_of",
    "unescape",
]

#: Slack's name in the delivery layer's tables.
SLACK = "slack"
PREFIX = "slack:"

Json = dict[str, Any]

_CHANNEL = re.compile(r"^[CDG][A-Z0-9]{2,30}$")
_TS = re.compile(r"^\d{1,12}\.\d{1,9}$")
_USER = re.compile(r"^[UWB][A-Z0-9]{2,30}$")
#: Messages a person wrote (no subtype), or wrote with a file or broadcast from a thread.
_PEOPLES_SUBTYPES = frozenset({"", "file_share", "thread_broadcast"})


def source_of(channel: str, thread_ts: str | None = None) -> str:
    return f"{PREFIX}{channel}" if thread_ts is None else f"{PREFIX}{channel}:{thread_ts}"


@dataclass(frozen=True, slots=True)
class Place:
    """Where a source's messages are posted: a channel, in a thread or not."""

    channel: str
    thread_ts: str | None = None


def parse_source(source: str) -> Place:
    """The place of a Slack source; a ValueError for anything else."""
    parts = source.removeprefix(PREFIX).split(":") if source.startswith(PREFIX) else []
    if len(parts) not in (1, 2) or not _CHANNEL.match(parts[0]):
        raise ValueError(f"not a Slack source: {source!r}")
    if len(parts) == 2 and not _TS.match(parts[1]):
        raise ValueError(f"not a Slack source: {source!r}")
    return Place(parts[0], parts[1] if len(parts) == 2 else None)


def is_message_id(channel: object, ts: object) -> bool:
    return isinstance(channel, str) and bool(_CHANNEL.match(channel)) and is_ts(ts)


def is_ts(ts: object) -> bool:
    return isinstance(ts, str) and bool(_TS.match(ts))


@dataclass(frozen=True, slots=True)
class Incoming:
    team_id: str | None
    channel: str
    #: ``im`` (a DM), ``channel``, ``group`` (private), ``mpim``.
    channel_type: str
    ts: str
    thread_ts: str | None
    user: str
    text: str
    mentions_me: bool
    #: Files that came with it (only audio is read: docs/slack.md).
    files: int = 0
    subtype: str = ""
    #: Its audio files: ``url`` (``url_private``), ``name``, ``mime``, ``size``,
    #: ``seconds``, ``voice`` (an audio clip recorded in Slack).
    audio: tuple[Json, ...] = ()

    @property
    def key(self) -> str:
        """The message's key in the events store: a channel and a ts name one message."""
        return f"{self.channel}:{self.ts}"

    @property
    def lane(self) -> str:
        """Messages keep their order within their conversation."""
        return self.source

    @property
    def is_dm(self) -> bool:
        return self.channel_type == "im"

    @property
    def source(self) -> str:
        """Its thread's source; a DM's own outside threads; a mention in a channel starts
        a thread on itself."""
        if self.thread_ts is not None:
            return source_of(self.channel, self.thread_ts)
        if self.is_dm:
            return source_of(self.channel)
        return source_of(self.channel, self.ts)

    @property
    def place(self) -> Place:
        return parse_source(self.source)

    @classmethod
    def of(cls, event: Json, team_id: str | None, bot_user_id: str | None) -> Incoming | None:
        """The message a person wrote, or ``None``: a bot's (this one's included), an edit,
        a deletion, a join and the other subtypes, or a malformed event."""
        subtype = event.get("subtype") or ""
        if not isinstance(subtype, str) or subtype not in _PEOPLES_SUBTYPES:
            return None
        if event.get("bot_id") or event.get("bot_profile"):
            return None
        channel, ts, user = event.get("channel"), event.get("ts"), event.get("user")
        if not is_message_id(channel, ts) or not isinstance(user, str) or not _USER.match(user):
            return None
        if bot_user_id is not None and user == bot_user_id:
            return None
        thread_ts = event.get("thread_ts")
        if thread_ts is not None and not is_ts(thread_ts):
            return None
        text = event.get("text")
        text = text if isinstance(text, str) else ""  # too long: the hub says so
        channel_type = event.get("channel_type")
        if not isinstance(channel_type, str):  # app_mention events carry none
            channel_type = "im" if channel.startswith("D") else "channel"
        files = event.get("files")
        return cls(
            team_id=team_id,
            channel=channel,
            channel_type=channel_type,
            ts=ts,
            thread_ts=thread_ts,
            user=user,
            text=text,
            mentions_me=bot_user_id is not None and f"<@{bot_user_id}>" in text,
            files=len(files) if isinstance(files, list) else 0,
            subtype=subtype,
            audio=_audio_of(files),
        )

    @classmethod
    def edited(cls, event: Json, team_id: str | None, bot_user_id: str | None) -> Incoming | None:
        """A ``message_changed`` event's message as it reads now (in its channel), or
        ``None``: a bot's, a file's, a malformed one."""
        message = event.get("message")
        if not isinstance(message, dict):
            return None
        where = {"channel": event.get("channel"), "channel_type": event.get("channel_type")}
        return cls.of({**message, **where}, team_id, bot_user_id)

    def text_without(self, bot_user_id: str | None, names: Mapping[str, str] = {}) -> str:
        """The text without the bot's mention, as the person typed it: Slack's markup
        read (``readable``; ``names``: people's names by id) and its escapes undone."""
        text = self.text
        if bot_user_id is not None:
            text = re.sub(rf"<@{re.escape(bot_user_id)}(\|[^>]*)?>", "", text)
        return readable(text, names).strip()

    def to_json(self) -> Json:
        return {k: getattr(self, k) for k in self.__slots__}

    @classmethod
    def from_json(cls, data: Json) -> Incoming:
        return cls(**{**data, "audio": tuple(data.get("audio") or ())})


def _audio_of(files: object) -> tuple[Json, ...]:
    """The audio files of a message's ``files`` (others, and junk, are left out)."""
    found = []
    for shared in files if isinstance(files, list) else ():
        if not isinstance(shared, dict):
            continue
        url, mime = shared.get("url_private"), shared.get("mimetype")
        if not isinstance(url, str) or not url.startswith(("https://", "http://")):
            continue
        if not isinstance(mime, str) or not mime.startswith(("audio/", "video/")):
            continue
        size, duration = shared.get("size"), shared.get("duration_ms")
        name = shared.get("name")
        found.append(
            {
                "url": url,
                "name": (name if isinstance(name, str) else "audio")[:100],
                "mime": mime,
                "size": size if isinstance(size, int) and not isinstance(size, bool) else None,
                "seconds": duration // 1000
                if isinstance(duration, int) and duration >= 0
                else None,
                "voice": shared.get("subtype") == "slack_audio",
            }
        )
    return tuple(found)


_MARKUP = re.compile(r"<([^<>\n]+)>")
_SPECIAL = {"here": "@here", "channel": "@channel", "everyone": "@everyone"}


def readable(text: str, names: Mapping[str, str] = {}) -> str:
    """Slack's text as the person typed it: its markup for a link (``<url|label>``, what
    a bare ``example.com`` or an e-mail address becomes), a person (``<@U1>``), a channel
    (``<#C1|general>``) and ``<!here>`` read back, its escapes undone. Until 2026-12-07
    the model read the markup and repeated it, and the reply's renderer took
    ``<http://example.com|example.com>`` for one link to ``http://example.com|…``
    (found by review)."""
    return unescape(_MARKUP.sub(lambda found: _read(found.group(1), names), text))


def _read(inside: str, names: Mapping[str, str]) -> str:
    """Still escaped, as the whole text is: it is unescaped once, after."""
    target, _, label = inside.partition("|")
    if target.startswith("@"):
        return "@" + (label or names.get(target[1:]) or target[1:])
    if target.startswith("#"):
        return "#" + (label or target[1:])
    if target.startswith("!"):
        special = target[1:].split("^", 1)[0]
        return label or _SPECIAL.get(special, "@" + special)
    url = target
    if not label or label in (url, url.split(":", 1)[-1].removeprefix("//")):
        return label or url  # a link as typed: the address itself
    return f"[{label}]({url})"


def unescape(text: str) -> str:
    """Slack's three escapes undone (its text arrives with ``&lt;``, ``&gt;``, ``&amp;``)."""
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
