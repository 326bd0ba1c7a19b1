"""Who may open a web chat socket: checked on the handshake, before any frame is read.

The same keys as the web inbox: its signed-in browser's cookie (``bot.http.signins``,
cookie ``bot.http.web.COOKIE``), or ``Authorization: Bearer <CHATHUB_API_TOKEN>`` for API
clients, counted by the inbox's ``LoginThrottle`` like its own sign-in attempts. Never a
token in the query string. A browser always names the page that opens a socket
(``Origin``); one that is not this host is refused first, so another site cannot talk
through a signed-in browser (cross-site WebSocket hijacking). Without a token the app
serves loopback only (``create_app``) and every local client is let in, as in the inbox.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlparse

from starlette.requests import HTTPConnection

from bot.http.credentials import bearer_token, from_this_machine, peer_of, token_matches
from bot.http.signins import LoginThrottle, SignIns, csrf_token
from bot.http.web import COOKIE

__all__ = ["Access", "Refusal", "SocketAuth"]

Refusal = Literal["foreign_origin", "signed_out", "throttled"]


@dataclass(frozen=True, slots=True)
class Access:
    """Let in. ``csrf``: what a write must carry in ``X-CSRF-Token`` (a browser's sign-in
    or loopback without a token); ``None`` for a bearer header, which no other site can
    make a browser send."""

    csrf: str | None


class SocketAuth:
    """Checks a socket's handshake (or an HTTP request of the chat's JSON routes)."""

    def __init__(
        self,
        *,
        token: str | None,
        signins: SignIns | None,
        throttle: LoginThrottle,
    ) -> None:
        if token and signins is None:
            raise ValueError("a token needs its sign-ins (bot.http.signins.SignIns)")
        self.token = token or None
        self._token = token.encode() if token else None
        self._signins = signins
        self._throttle = throttle
        self._loopback_csrf = secrets.token_hex(32)  # per process, as the inbox's

    async def refusal(self, connection: HTTPConnection) -> Refusal | None:
        """Why ``connection`` may not open a socket; ``None``: it may."""
        access = await self.check(connection)
        return access if isinstance(access, str) else None

    async def check(self, connection: HTTPConnection) -> Access | Refusal:
        if not same_origin(connection):
            return "foreign_origin"
        if self._token is None or self._signins is None:
            if not from_this_machine(connection.headers, peer=peer_of(connection)):
                return "foreign_origin"  # a DNS rebinding's page names its own host
            return Access(self._loopback_csrf)
        address = connection.client.host if connection.client else None
        given = bearer_token(connection.headers)
        if given is not None:
            if self._throttle.retry_after(address) is not None:
                return "throttled"
            if token_matches(given, self._token):
                return Access(None)
            self._throttle.failed(address)
            return "signed_out"
        secret = connection.cookies.get(COOKIE, "")
        if secret and await self._signins.lookup(secret) is not None:
            return Access(csrf_token(secret))
        return "signed_out"

    async def still_signed_in(self, connection: HTTPConnection, *, touch: bool) -> bool:
        """Whether the sign-in an open socket was let in with is still live (signed out,
        ended on /signins or expired: no longer). Only the cookie's: a bearer token was
        checked at the handshake (a new one takes a restart), and the address's
        throttle is not the socket's doing (someone else's wrong tokens cut it, found by
        review). ``touch``: a frame the person sent is a use of the sign-in; a check of
        a tab left open is none (it kept an idle sign-in alive)."""
        if self._signins is None or bearer_token(connection.headers) is not None:
            return True
        secret = connection.cookies.get(COOKIE, "")
        return bool(secret) and await self._signins.lookup(secret, touch=touch) is not None


def same_origin(connection: HTTPConnection) -> bool:
    """No ``Origin`` (not a browser), or this very host over http(s)."""
    origin = connection.headers.get("origin")
    if origin is None:
        return True
    parsed = urlparse(origin)
    return parsed.scheme in ("http", "https") and parsed.netloc == connection.headers.get(
        "host", ""
    )
