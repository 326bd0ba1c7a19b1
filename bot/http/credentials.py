"""The one way a request's bearer token is read and checked: the JSON API, ``/healthz``'s
details, the events endpoint, the web inbox and the web chat's socket.

``Authorization: Bearer <CHATHUB_API_TOKEN>``, compared in constant time. Without a
configured token the app is bound to loopback only (``check_api_exposure``), and a request
passes only when it comes from this machine in a browser's eyes too
(``from_this_machine``): a loopback peer, no proxy's word of another client, a loopback ``Host`` (a DNS rebinding names the attacker's host)
and, when a browser sends an ``Origin``, a loopback one (any web page the owner visits can
send a request to 127.0.0.1, and until 2026-12-05 it could approve a command that way).
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol
from urllib.parse import urlsplit

from bot.checks.exposure import LOOPBACK_HOSTS

if TYPE_CHECKING:
    from starlette.requests import HTTPConnection

__all__ = [
    "Refusal",
    "Throttle",
    "bearer_refusal",
    "bearer_token",
    "from_this_machine",
    "has_token",
    "peer_of",
    "token_matches",
]


def bearer_token(headers: Mapping[str, str]) -> str | None:
    """The token of an ``Authorization: Bearer`` header; ``None`` without one (or with
    another scheme)."""
    scheme, _, value = headers.get("authorization", "").partition(" ")
    return value.strip() if scheme.lower() == "bearer" else None


def token_matches(given: str, expected: bytes) -> bool:
    return hmac.compare_digest(given.encode(), expected)


def has_token(headers: Mapping[str, str], expected: bytes | None, *, peer: str | None) -> bool:
    """Whether the request may pass: its header carries the token, or none is configured
    and it comes from this machine (``from_this_machine``)."""
    if expected is None:
        return from_this_machine(headers, peer=peer)
    given = bearer_token(headers)
    return given is not None and token_matches(given, expected)


def peer_of(connection: HTTPConnection) -> str | None:
    """The address the request came from (``None``: the server does not say)."""
    return connection.client.host if connection.client else None


#: What a proxy adds to say whom it passes a request on for.
_PROXIED = ("forwarded", "x-forwarded-for", "x-real-ip")


def from_this_machine(headers: Mapping[str, str], *, peer: str | None) -> bool:
    """A loopback peer that passes on no one else's request (a proxy's ``Forwarded``,
    ``X-Forwarded-For``, ``X-Real-IP``), a loopback ``Host``, and no ``Origin`` (not a
    browser) or a loopback one; never what a browser says another site sent
    (``Sec-Fetch-Site``): an ``<img>`` on any page the owner visits sends no ``Origin``,
    and reran the paid health checks at will (until 2026-12-06; found by review). Until
    2026-12-07 the peer was not looked at: a TLS proxy on this machine (a webhook needs
    one) that passes the client's ``Host`` on, as deploy/nginx.conf does, made anyone
    sending ``Host: localhost`` the operator (found by review)."""
    if not _loopback_address(peer) or any(name in headers for name in _PROXIED):
        return False
    if not _loopback(headers.get("host", "")):
        return False
    if headers.get("sec-fetch-site", "").lower() in ("cross-site", "same-site"):
        return False
    origin = headers.get("origin")
    if origin is None:
        return True
    parts = urlsplit(origin)
    return parts.scheme in ("http", "https") and _loopback(parts.netloc)


def _loopback_address(peer: str | None) -> bool:
    try:
        address = ipaddress.ip_address(peer or "")
    except ValueError:  # none, or a name (a test transport's "testclient")
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback


def _loopback(netloc: str) -> bool:
    try:
        parts = urlsplit(f"//{netloc}")
        parts.port  # noqa: B018 (read to check it: a port that is not a number raises)
    except ValueError:  # a port that is not a number, a bracket left open
        return False
    return parts.hostname in LOOPBACK_HOSTS


class Throttle(Protocol):
    """Wrong tokens counted per address (``bot.http.signins.LoginThrottle``)."""

    def retry_after(self, address: str | None) -> int | None: ...

    def failed(self, address: str | None) -> None: ...


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a request may not pass: 429 (too many wrong tokens from its address: try again
    in ``retry_after`` s) or 401 (its token); each surface says it in its own shape."""

    status: int
    retry_after: int | None = None


def bearer_refusal(
    request: HTTPConnection, expected: bytes | None, throttle: Throttle | None
) -> Refusal | None:
    """``None`` when the request may pass. An address over the throttle is refused before
    its token is even looked at; a wrong token counts against its address, a request
    without one does not (guesses a token nobody: until 2026-12-07 ten scrapes of a
    monitor not yet given the token locked the owner out of every surface from that
    address for 15 minutes; found by review)."""
    headers = request.headers
    address = peer_of(request)
    wait = throttle.retry_after(address) if throttle is not None else None
    if wait is not None:
        return Refusal(429, wait)
    if has_token(headers, expected, peer=address):
        return None
    if throttle is not None and expected is not None and bearer_token(headers) is not None:
        throttle.failed(address)
    return Refusal(401)
