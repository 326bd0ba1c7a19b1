"""Slack: the bot token checked with ``auth.test``, the app token with
``apps.connections.open`` (Socket Mode).

Plain ``httpx`` against the Web API rather than slack-sdk: two read-only calls, and the
doctor and the wizard need no client, session or retry state to make them. Slack answers
errors with HTTP 200 and ``{"ok": false, "error": "…"}``; each is one sentence here.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import httpx

from bot.checks.result import Problem

__all__ = ["DEFAULT_API_URL", "SlackIdentity", "SlackProbe", "app_token_problem", "token_problem"]

log = logging.getLogger(__name__)

DEFAULT_API_URL = "https://slack.com/api/"
_REVOKED = frozenset(
    {"invalid_auth", "not_authed", "account_inactive", "token_revoked", "token_expired"}
)
_REINSTALL = "copy the Bot User OAuth Token again (the app's Install App page) into SLACK_BOT_TOKEN"
_APP_TOKEN = (
    "create an app-level token with the connections:write scope (Basic Information → "
    "App-Level Tokens) and set SLACK_APP_TOKEN"
)


def token_problem(token: str) -> str | None:
    """Why ``token`` cannot be a bot token (``xoxb-``), or ``None``."""
    text = token.strip()
    if text.startswith("xoxb-") and " " not in text and text.isascii():
        return None
    if text.startswith("xapp-"):
        return "that is the app-level token (xapp-): the bot token starts with xoxb-"
    return (
        "that is not a Slack bot token: it starts with xoxb- (Install App → Bot User OAuth Token)"
    )


def app_token_problem(token: str) -> str | None:
    """Why ``token`` cannot be an app-level token (``xapp-``), or ``None``."""
    text = token.strip()
    if text.startswith("xapp-") and " " not in text and text.isascii():
        return None
    if text.startswith("xoxb-"):
        return "that is the bot token (xoxb-): the app-level token starts with xapp-"
    return "that is not a Slack app-level token: it starts with xapp-"


@dataclass(frozen=True, slots=True)
class SlackIdentity:
    user_id: str
    user: str
    team: str
    team_id: str


class SlackProbe:
    """The Web API at ``SLACK_API_URL`` for one token; a failure is a ``Problem``."""

    def __init__(self, http: httpx.AsyncClient, api_url: str, *, timeout_s: float = 10.0) -> None:
        self._http = http
        self._base = api_url if api_url.endswith("/") else api_url + "/"
        self._timeout_s = timeout_s

    async def auth_test(self, bot_token: str) -> SlackIdentity:
        body = await self._call("auth.test", bot_token.strip())
        error = body.get("error")
        if not body.get("ok"):
            if error in _REVOKED:
                raise Problem(
                    f"Slack does not accept this bot token ({error})", kind="auth", fix=_REINSTALL
                )
            if error == "not_allowed_token_type":
                raise Problem(
                    "Slack wants the bot token (xoxb-) here, not this one",
                    kind="auth",
                    fix=_REINSTALL,
                )
            raise Problem(f"Slack refused auth.test: {error}", kind="refused", fix=_REINSTALL)
        user_id, user = body.get("user_id"), body.get("user")
        if not (isinstance(user_id, str) and isinstance(user, str)):
            raise Problem("Slack's auth.test answer names no bot", kind="protocol")
        return SlackIdentity(
            user_id, user, str(body.get("team") or ""), str(body.get("team_id") or "")
        )

    async def socket_mode(self, app_token: str) -> None:
        """Whether Socket Mode answers for ``app_token`` (the URL it gives is not used)."""
        body = await self._call("apps.connections.open", app_token.strip())
        if body.get("ok"):
            return
        error = body.get("error")
        if error in _REVOKED:
            raise Problem(
                f"Slack does not accept this app-level token ({error})",
                kind="auth",
                fix=_APP_TOKEN,
            )
        if error == "not_allowed_token_type":
            raise Problem(
                "Slack wants an app-level token (xapp-) for Socket Mode, not this one",
                kind="auth",
                fix=_APP_TOKEN,
            )
        raise Problem(
            f"Slack refused Socket Mode ({error})",
            kind="refused",
            fix="turn Socket Mode on in the app's settings (Socket Mode → Enable), or unset "
            "SLACK_APP_TOKEN and use the HTTP Events API",
        )

    async def _call(self, method: str, token: str) -> dict[str, Any]:
        url = self._base + method
        try:
            response = await self._http.post(
                url, headers={"Authorization": f"Bearer {token}"}, timeout=self._timeout_s
            )
        except httpx.TimeoutException:
            raise Problem(
                f"Slack did not answer within {self._timeout_s:g} s", kind="timeout"
            ) from None
        except httpx.HTTPError as exc:
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
                fix=f"set SLACK_API_URL to {DEFAULT_API_URL} (or remove it)",
            )
        if status == 429:
            raise Problem(
                "Slack asks to slow down (HTTP 429)",
                kind="unreachable",
                fix="try again in a minute",
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
                fix=f"set SLACK_API_URL to {DEFAULT_API_URL} (or remove it)",
            )
        return body
