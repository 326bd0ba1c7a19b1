"""Telegram: the token's shape, ``getMe`` (the bot's @name), the webhook, ``/start`` senders.

Plain ``httpx`` against the Bot API rather than a binding: these are three read-only
calls, and a wizard should not need the service's adapter, store or retries to make them.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any

import httpx

from bot.checks.result import Problem

__all__ = ["BotIdentity", "StartSender", "TelegramProbe", "token_problem"]

log = logging.getLogger(__name__)

#: ``<bot id>:<secret>`` as @BotFather hands it out (the secret is 35 characters today).
_TOKEN = re.compile(r"^\d{3,}:[A-Za-z0-9_-]{30,}$")


def token_problem(token: str) -> str | None:
    """Why ``token`` cannot be a bot token, or ``None`` when its shape is right."""
    if _TOKEN.match(token.strip()):
        return None
    return (
        "that is not a bot token: @BotFather's look like 123456789:AAH…, digits, a colon, "
        "then about 35 letters, digits, - or _"
    )


@dataclass(frozen=True, slots=True)
class BotIdentity:
    id: int
    username: str


@dataclass(frozen=True, slots=True)
class StartSender:
    """Someone who sent ``/start`` to the bot in a private chat."""

    update_id: int
    user_id: int
    name: str


class TelegramProbe:
    """Bot API calls for one token; every failure is a ``Problem`` with a plain sentence."""

    def __init__(
        self, http: httpx.AsyncClient, api_url: str, token: str, *, timeout_s: float = 10.0
    ) -> None:
        self._http = http
        self._root = f"{api_url.rstrip('/')}/bot{token.strip()}"
        self._timeout_s = timeout_s

    async def get_me(self) -> BotIdentity:
        result = await self._call("getMe", {})
        if not isinstance(result, dict) or not isinstance(result.get("id"), int):
            raise Problem("Telegram's getMe answer has no bot in it", kind="protocol")
        return BotIdentity(result["id"], str(result.get("username") or ""))

    async def webhook_info(self) -> dict[str, Any]:
        result = await self._call("getWebhookInfo", {})
        return result if isinstance(result, dict) else {}

    async def last_update_id(self) -> int:
        """The newest pending update's id (0 when none): a later ``/start`` is new.

        No ``offset``: a negative one would make Telegram forget every update before the
        last, and those belong to the service."""
        updates = await self._call("getUpdates", {"timeout": 0})
        ids = [u.get("update_id") for u in updates if isinstance(u, dict)] if updates else []
        return max((i for i in ids if isinstance(i, int)), default=0)

    async def start_senders(self, after: int, wait_s: int) -> list[StartSender]:
        """Private ``/start`` messages with an update id above ``after``, waiting up to
        ``wait_s`` for one. No ``offset`` past them is sent: the updates stay for the
        service, which greets the owner when it starts."""
        params = {"timeout": wait_s}
        updates = await self._call("getUpdates", params, extra_s=wait_s)
        found = []
        for update in updates if isinstance(updates, list) else []:
            sender = _start_sender(update)
            if sender is not None and sender.update_id > after:
                found.append(sender)
        return found

    async def _call(self, method: str, params: dict[str, Any], *, extra_s: float = 0.0) -> Any:
        try:
            response = await self._http.post(
                f"{self._root}/{method}", json=params, timeout=self._timeout_s + extra_s
            )
        except httpx.TimeoutException:
            raise Problem(
                f"Telegram did not answer within {self._timeout_s + extra_s:g} s", kind="timeout"
            ) from None
        except httpx.HTTPError as exc:
            log.info("Telegram %s failed: %s: %s", method, type(exc).__name__, exc)
            raise Problem("Telegram cannot be reached from here", kind="unreachable") from None
        try:
            body = response.json()
        except (ValueError, RecursionError):
            body = None
        if not isinstance(body, dict):
            raise Problem(
                f"the Bot API answered HTTP {response.status_code} with something that is not "
                "Telegram's JSON (is TELEGRAM_API_URL right?)",
                kind="protocol",
            )
        if response.status_code == 401:
            raise Problem(
                "Telegram does not accept this token (revoked, or mistyped)",
                kind="auth",
                fix="get the current token from @BotFather (/token) and set TELEGRAM_BOT_TOKEN",
            )
        if response.status_code == 404:
            raise Problem(
                "the Bot API answered 404: the token's shape or TELEGRAM_API_URL is wrong",
                kind="auth",
                fix="check TELEGRAM_BOT_TOKEN and TELEGRAM_API_URL",
            )
        if not body.get("ok"):
            said = body.get("description") or f"HTTP {response.status_code}"
            raise Problem(f"Telegram refused {method}: {said}", kind="refused")
        return body.get("result")


def _start_sender(update: Any) -> StartSender | None:
    if not isinstance(update, dict) or not isinstance(update.get("update_id"), int):
        return None
    message = update.get("message")
    if not isinstance(message, dict):
        return None
    chat, sender, text = message.get("chat"), message.get("from"), message.get("text")
    if not (isinstance(chat, dict) and chat.get("type") == "private"):
        return None
    if not (isinstance(sender, dict) and isinstance(sender.get("id"), int)):
        return None
    if not (isinstance(text, str) and text.split("@")[0].split(" ")[0] == "/start"):
        return None
    name = " ".join(str(sender[k]) for k in ("first_name", "last_name") if sender.get(k))
    if sender.get("username"):
        name = f"{name} (@{sender['username']})".strip()
    return StartSender(update["update_id"], sender["id"], name or str(sender["id"]))
