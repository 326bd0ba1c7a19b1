"""One verified TLS context for every HTTP client of the process.

Each ``httpx`` client otherwise builds its own context and loads the CA bundle into it
(about 25 ms each at start-up: the model client, and two for python-telegram-bot's
polling and sending). A context is safe to share; this one is httpx's own default
(certifi's bundle, or ``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` when set), made on first use.
"""

from __future__ import annotations

import functools
import ssl

import httpx

__all__ = ["shared_tls_context"]


@functools.cache
def shared_tls_context() -> ssl.SSLContext:
    return httpx.create_ssl_context()
