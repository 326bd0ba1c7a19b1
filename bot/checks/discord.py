"""Discord: the bot token checked with ``GET /users/@me`` (the bot's own user).

Plain ``httpx`` against the REST API rather than discord.py: one read-only call, and the
doctor and the wizard should not need the library's client, session or rate-limit state
to make it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import httpx

from bot.checks.result import Problem

__all__ = ["DEFAULT_API_URL", "DiscordIdentity", "DiscordProbe", "invite_url", "token_problem"]

log = logging.getLogger(__name__)

DEFAULT_API_URL = "https://discord.com/api/v10"
#: View Channels, Send Messages, Create Public Threads (a thread channel's answers: until
#: 2026-12-07 missing, and in a server whose everyone role lacks it Discord refused every
#: thread the bot started, so it answered in the channel), Send Messages in Threads, Read Message History, Attach Files, Send
#: Voice Messages (spoken replies in server channels; docs/discord.md).
PERMISSIONS = (1 << 10) | (1 << 11) | (1 << 35) | (1 << 38) | (1 << 16) | (1 << 15) | (1 << 46)


def token_problem(token: str) -> str | None:
    """Why ``token`` cannot be a bot token, or ``None`` when it may be one (only Discord
    knows: its shape is not promised)."""
    text = token.strip()
    if text and text.isascii() and text.isprintable() and " " not in text:
        return None
    return (
        "that is not a Discord bot token: copy it from the developer portal "
        "(Bot → Reset Token); it is one word, without `Bot ` in front"
    )


def invite_url(application_id: str) -> str:
    """The OAuth2 link that adds the bot to a server with the scopes and permissions it
    needs. ``client_id`` is the application's id, which a bot's user id equals for any
    application of recent years (the portal's OAuth2 URL Generator gives it either way)."""
    return (
        f"https://discord.com/oauth2/authorize?client_id={application_id}"
        f"&scope=bot+applications.commands&permissions={PERMISSIONS}"
    )


@dataclass(frozen=True, slots=True)
class DiscordIdentity:
    id: str
    username: str


class DiscordProbe:
    """``GET {DISCORD_API_URL}/users/@me`` for one token; a failure is a ``Problem``."""

    def __init__(
        self, http: httpx.AsyncClient, api_url: str, token: str, *, timeout_s: float = 10.0
    ) -> None:
        self._http = http
        self._url = f"{api_url.rstrip('/')}/users/@me"
        self._token = token.strip()
        self._timeout_s = timeout_s

    async def get_me(self) -> DiscordIdentity:
        try:
            response = await self._http.get(
                self._url,
                headers={"Authorization": f"Bot {self._token}"},
                timeout=self._timeout_s,
            )
        except httpx.TimeoutException:
            raise Problem(
                f"Discord did not answer within {self._timeout_s:g} s", kind="timeout"
            ) from None
        except httpx.HTTPError as exc:
            log.info("Discord GET /users/@me failed: %s: %s", type(exc).__name__, exc)
            raise Problem(
                "Discord cannot be reached from here",
                kind="unreachable",
                fix="check the network and DISCORD_API_URL",
            ) from None
        status = response.status_code
        if status == 401:
            raise Problem(
                "Discord does not accept this bot token (reset, or mistyped)",
                kind="auth",
                fix="reset the token in the Discord developer portal (Bot → Reset Token) "
                "and set DISCORD_BOT_TOKEN",
            )
        if status == 404:
            raise Problem(
                f"the Discord API answered 404 at {self._url}: DISCORD_API_URL is wrong",
                kind="protocol",
                fix=f"set DISCORD_API_URL to {DEFAULT_API_URL} (or remove it)",
            )
        if status >= 500:
            raise Problem(
                f"Discord cannot be reached from here (HTTP {status})",
                kind="unreachable",
                fix="try again in a minute; https://discordstatus.com says whether Discord is down",
            )
        try:
            body = response.json()
        except (ValueError, RecursionError):
            body = None
        if not isinstance(body, dict):
            raise Problem(
                f"the Discord API answered HTTP {status} with something that is not "
                "Discord's JSON (is DISCORD_API_URL right?)",
                kind="protocol",
                fix=f"set DISCORD_API_URL to {DEFAULT_API_URL} (or remove it)",
            )
        if status >= 400:
            said = body.get("message") or f"HTTP {status}"
            raise Problem(f"Discord refused GET /users/@me: {said}", kind="refused")
        user_id, username = body.get("id"), body.get("username")
        if not (isinstance(user_id, str) and user_id.isdigit() and isinstance(username, str)):
            raise Problem("Discord's /users/@me answer has no bot in it", kind="protocol")
        discriminator = body.get("discriminator")
        if isinstance(discriminator, str) and discriminator not in ("", "0"):
            username = f"{username}#{discriminator}"
        return DiscordIdentity(user_id, username)
