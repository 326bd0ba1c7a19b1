"""Matrix: the homeserver reached (``/versions``) and the bot's token checked (``whoami``).

Plain ``httpx`` against the client-server API: two read-only calls, no sync, no device.
A refusal is one sentence with its fix; the homeserver's errcode is kept in it.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import httpx

from bot.checks.result import Problem

__all__ = ["MatrixProbe"]

log = logging.getLogger(__name__)

_TOKEN_FIX = (
    "make a new access token for the bot (Element: Settings → Help & About → Access "
    "Token) and set MATRIX_ACCESS_TOKEN, or set MATRIX_PASSWORD instead"
)


class MatrixProbe:
    def __init__(self, http: httpx.AsyncClient, homeserver: str, *, timeout_s: float) -> None:
        self._http = http
        self._homeserver = homeserver.rstrip("/")
        self._timeout_s = timeout_s

    async def versions(self) -> list[str]:
        """The spec versions the homeserver speaks (it answers, and is a homeserver)."""
        data = await self._get("/_matrix/client/versions", None)
        versions = data.get("versions")
        if not isinstance(versions, list) or not versions:
            raise Problem(
                f"{self._homeserver} answers, but not as a Matrix homeserver",
                fix="set MATRIX_HOMESERVER to the client-server API's base URL",
            )
        return [str(v) for v in versions]

    async def whoami(self, token: str) -> str:
        """Whose ``token`` is (its user id)."""
        data = await self._get("/_matrix/client/v3/account/whoami", token)
        user = data.get("user_id")
        if not isinstance(user, str):
            raise Problem("the homeserver's whoami answer names no user", fix=_TOKEN_FIX)
        return user

    async def _get(self, path: str, token: str | None) -> dict[str, Any]:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        url = self._homeserver + path
        try:
            async with asyncio.timeout(self._timeout_s):  # the whole answer, not each read
                answer = await self._http.get(url, headers=headers, timeout=self._timeout_s)
        except (httpx.TimeoutException, TimeoutError):
            raise Problem(
                f"{self._homeserver} did not answer within {self._timeout_s:g} s",
                kind="timeout",
                fix="check MATRIX_HOMESERVER and the network",
            ) from None
        except httpx.HTTPError as exc:
            log.info("Matrix probe %s: %s", url, exc)
            raise Problem(
                f"{self._homeserver} cannot be reached",
                kind="unreachable",
                fix="check MATRIX_HOMESERVER and the network",
            ) from None
        try:
            data = answer.json()
        except ValueError:
            data = {}
        data = data if isinstance(data, dict) else {}
        if answer.status_code == 200:
            return data
        code = str(data.get("errcode") or f"HTTP {answer.status_code}")
        if code == "M_UNKNOWN_TOKEN" or answer.status_code == 401:
            raise Problem(
                f"the homeserver does not accept MATRIX_ACCESS_TOKEN ({code})",
                kind="auth",
                fix=_TOKEN_FIX,
            )
        if code == "M_LIMIT_EXCEEDED":
            raise Problem("the homeserver asks to wait (M_LIMIT_EXCEEDED)", kind="rate_limited")
        if answer.status_code == 404:
            raise Problem(
                f"{self._homeserver} has no Matrix client-server API ({code})",
                kind="refused",
                fix="set MATRIX_HOMESERVER to the client-server API's base URL",
            )
        raise Problem(f"the homeserver answered {code}", kind="refused")
