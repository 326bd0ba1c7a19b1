"""The one way a request's bearer token is read and checked: the JSON API, ``/healthz``'s
details, the events endpoint, the web inbox and the web chat's socket.

``Authorization: Bearer <CHATHUB_API_TOKEN>``, compared in constant time. Without a
configured token everyone passes ``has_token``: the app is then bound to loopback only
(``check_api_exposure``).
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping

__all__ = ["bearer_token", "has_token", "token_matches"]


def bearer_token(headers: Mapping[str, str]) -> str | None:
    """The token of an ``Authorization: Bearer`` header; ``None`` without one (or with
    another scheme)."""
    scheme, _, value = headers.get("authorization", "").partition(" ")
    return value.strip() if scheme.lower() == "bearer" else None


def token_matches(given: str, expected: bytes) -> bool:
    return hmac.compare_digest(given.encode(), expected)


def has_token(headers: Mapping[str, str], expected: bytes | None) -> bool:
    """Whether the request may pass: no token is configured, or its header carries it."""
    if expected is None:
        return True
    given = bearer_token(headers)
    return given is not None and token_matches(given, expected)
