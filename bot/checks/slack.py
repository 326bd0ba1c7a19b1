"""Slack: the bot token checked with ``auth.test``, the app-level token with
``apps.connections.open`` (Socket Mode).

Plain ``httpx`` against the Web API rather than slack-sdk: two read-only calls, and the
doctor and the wizard need no client, session or retry state to make them. Slack answers
most errors with HTTP 200 and ``{"ok": false, "error": "…"}``; each is one sentence here.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import httpx

from bot.checks.result import Problem

__all__ = [
    "DEFAULT_API_URL",
    "SlackIdentity",
    "SlackProbe",
    "app_token_problem",
    "token_problem",
]

log = logging.getLogger(__name__)

DEFAULT_API_URL = "https://slack.com/api/"
#: Errors meaning the token itself is dead or wrong: only a new one helps.
_REFUSED_TOKEN = frozenset(
    {"invalid_auth", "not_authed", "account_inactive", "token_revoked", "token_expired"}
)
_BOT_TOKEN_FIX = (
    "reinstall the app to the workspace (the app's Install App page) and copy its Bot User "
    "OAuth Token (xoxb-) into SLACK_BOT_TOKEN"
)
_APP_TOKEN_FIX = (
    "create an app-level token with the connections:write scope (Basic Information → "
    "App-Level Tokens → Generate) and set SLACK_APP_TOKEN to it (xapp-)"
)
_SOCKET_MODE_FIX = (
    "turn on Socket Mode in the app settings (Socket Mode → Enable Socket Mode), or unset "
    "SLACK_APP_TOKEN and use the HTTP Events API with SLACK_SIGNING_SECRET"
)
_API_URL_FIX = f"set SLACK_API_URL to {DEFAULT_API_URL} (or remove it)"


def token_problem(token: str) -> str | None:
    """Why ``token`` cannot be a bot token (``xoxb-``), or ``None`` when it may be one."""
    text = token.strip()
    if text.startswith("xoxb-") and _one_word(text):
        return None
    if text.startswith("xapp-"):
        return "that is the app-level token (xapp-): the bot token starts with xoxb-"
    return (
        "that is not a Slack bot token: it starts with xoxb- (the app's Install App page → "
        "Bot User OAuth Token)"
    )


def app_token_problem(token: str) -> str | None:
    """Why ``token`` cannot be an app-level token (``xapp-``), or ``None``."""
    text = token.strip()
    if text.startswith("xapp-") and _one_word(text):
        return None
    if text.startswith("xoxb-"):
        return "that is the bot token (xoxb-): the app-level token starts with xapp-"
    return (
        "that is not a Slack app-level token: it starts with xapp- (Basic Information → "
        "App-Level Tokens)"
    )


def _one_word(text: str) -> bool:
    # A header value: a pasted space or a non-ASCII quote would break the request itself.
    return text.isascii() and text.isprintable() and " " not in text


@dataclass(frozen=True, slots=True)
class SlackIdentity:
    """Who the bot token speaks for, as ``auth.test`` names it."""

    user_id: str
    user: str
    team: str
    team_id: str
    bot_id: str


class SlackProbe:
    """The Web API at ``SLACK_API_URL`` for one bot token; a failure is a ``Problem``."""

    def __init__(
        self, http: httpx.AsyncClient, api_url: str, token: str, *, timeout_s: float = 10.0
    ) -> None:
        self._http = http
        # SLACK_API_URL ends with "/" (its validator): methods are appended, as slack-sdk does.
        self._base = api_url if api_url.endswith("/") else api_url + "/"
        self._token = token.strip()
        self._timeout_s = timeout_s

    async def auth_test(self) -> SlackIdentity:
        """``POST auth.test`` with the bot token: the bot's identity."""
        body = await self._call("auth.test", self._token)
        if not body.get("ok"):
            error = body.get("error")
            if error in _REFUSED_TOKEN:
                raise Problem(
                    f"Slack does not accept this bot token ({error})",
                    kind="auth",
                    fix=_BOT_TOKEN_FIX,
                )
            if error == "not_allowed_token_type":
                raise Problem(
                    "Slack does not take this token as a bot token (an app-level xapp- "
                    "token where the xoxb- one belongs?)",
                    kind="auth",
                    fix=_BOT_TOKEN_FIX,
                )
            raise Problem(
                f"Slack refused auth.test ({_said(error)})", kind="refused", fix=_BOT_TOKEN_FIX
            )
        user_id, user = body.get("user_id"), body.get("user")
        if not (isinstance(user_id, str) and user_id and isinstance(user, str)):
            raise Problem(
                "Slack's auth.test answer names no bot (is SLACK_API_URL right?)",
                kind="protocol",
                fix=_API_URL_FIX,
            )
        return SlackIdentity(
            user_id=user_id,
            user=user,
            team=_text(body.get("team")),
            team_id=_text(body.get("team_id")),
            bot_id=_text(body.get("bot_id")),
        )

    async def apps_connections_open(self, app_token: str) -> None:
        """``POST apps.connections.open`` with ``app_token``: Socket Mode answers.

        The WebSocket URL it returns is not connected to: the running bot's socket must not
        be disturbed, and the answer alone shows the token and the switch are right.
        """
        body = await self._call("apps.connections.open", app_token.strip())
        if body.get("ok"):
            return
        error = body.get("error")
        if error in _REFUSED_TOKEN:
            raise Problem(
                f"Slack does not accept this app-level token ({error})",
                kind="auth",
                fix=_APP_TOKEN_FIX,
            )
        if error == "not_allowed_token_type":
            raise Problem(
                "Slack does not take this token for Socket Mode (the bot's xoxb- token "
                "where the app-level xapp- one belongs?)",
                kind="auth",
                fix=_APP_TOKEN_FIX,
            )
        if error == "missing_scope":
            raise Problem(
                "the app-level token lacks the connections:write scope Socket Mode needs",
                kind="auth",
                fix=_APP_TOKEN_FIX,
            )
        # Slack does not document its answer when Socket Mode is off; any other refusal
        # of a valid app-level token comes down to that switch.
        raise Problem(
            f"Slack refused Socket Mode ({_said(error)}): is it turned on for this app?",
            kind="refused",
            fix=_SOCKET_MODE_FIX,
        )

    async def _call(self, method: str, token: str) -> dict[str, Any]:
        url = self._base + method
        try:
            response = await self._http.post(
                url, headers={"Authorization": f"Bearer {token}"}, timeout=self._timeout_s
            )
        except httpx.TimeoutException:
            raise Problem(
                f"Slack did not answer within {self._timeout_s:g} s",
                kind="timeout",
                fix="check the network and SLACK_API_URL",
            ) from None
        except httpx.HTTPError as exc:  # the exception's name goes to the log only
            log.info("Slack %s failed: %s: %s", method, type(exc).__name__, exc)
            raise Problem(
                "Slack cannot be reached from here",
                kind="unreachable",
                fix="check the network and SLACK_API_URL",
            ) from None
        status = response.status_code
        if status == 404:
            raise Problem(
                f"the Slack API answered 404 at {url}: SLACK_API_URL is wrong",
                kind="protocol",
                fix=_API_URL_FIX,
            )
        if status == 429:
            wait = response.headers.get("retry-after", "").strip()
            raise Problem(
                "Slack asks to slow down (HTTP 429)",
                kind="rate_limited",
                fix=f"try again in {wait} s" if wait.isdigit() else "try again in a minute",
            )
        if status >= 500:
            raise Problem(
                f"Slack cannot be reached from here (HTTP {status})",
                kind="unreachable",
                fix="try again in a minute; https://slack-status.com says whether Slack is down",
            )
        try:
            body = response.json()
        except (ValueError, RecursionError):
            body = None
        if not isinstance(body, dict):
            raise Problem(
                f"the Slack API answered HTTP {status} with something that is not Slack's "
                "JSON (is SLACK_API_URL right?)",
                kind="protocol",
                fix=_API_URL_FIX,
            )
        return body


def _said(error: object) -> str:
    return error if isinstance(error, str) and error else "no reason given"


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""
