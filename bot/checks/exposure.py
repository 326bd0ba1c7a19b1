"""The API's exposure rule: without ``CHATHUB_API_TOKEN`` it serves on loopback only.

Shared by the HTTP app (which refuses to start otherwise) and ``chathub doctor`` (which
reports it), so neither has to import the other.
"""

from __future__ import annotations

__all__ = ["LOOPBACK_HOSTS", "ApiExposureError", "check_api_exposure"]

#: Without ``CHATHUB_API_TOKEN`` the API only serves on these.
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "::1", "localhost"})


class ApiExposureError(ValueError):
    """The API would be reachable beyond this machine without a token."""


def check_api_exposure(host: str, token: str | None, *, public: str | None = None) -> None:
    """Raise ``ApiExposureError`` when ``host`` is not loopback and there is no token, or
    when the service is reached from outside (``public``: the setting that says so, a
    webhook's URL). Then a proxy on this machine passes the world's requests on, each
    from loopback: without a token any of them was the operator (until 2026-12-07; a
    proxy that names the client, ``X-Forwarded-For``, was refused already; found by
    review)."""
    if token:
        return
    if host not in LOOPBACK_HOSTS:
        raise ApiExposureError("CHATHUB_API_TOKEN: required when HTTP_HOST is not 127.0.0.1")
    if public is not None:
        raise ApiExposureError(
            f"CHATHUB_API_TOKEN: required with {public} (the service is reached through a "
            "proxy on this machine, so every request would come from here)"
        )
