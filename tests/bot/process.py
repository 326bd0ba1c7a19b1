"""Helpers for tests that run ``chathub serve`` as a real process."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from typing import Any

ALICE = 111


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for(predicate: Callable[[], Any], within_s: float = 20) -> Any:
    """Poll ``predicate`` (a subprocess's effects cannot be awaited) until it is truthy."""
    deadline = time.monotonic() + within_s
    while not (value := predicate()):
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)
    return value
