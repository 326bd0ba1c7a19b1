"""Helpers for tests that run ``chathub serve`` as a real process."""

from __future__ import annotations

import asyncio
import os
import random
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

ALICE = 111


#: Ports handed out, below the kernel's range for outgoing connections (32768 and up here):
#: a port ``bind(0)`` had just given was taken by another test's outgoing connection before
#: the service bound it ("HTTP port … is taken by another program", 2026-12-07).
_PORTS = range(20_000, 32_000)


def free_port() -> int:
    """A port free now, that no outgoing connection takes meanwhile."""
    for _ in range(100):
        port = random.choice(_PORTS)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue  # held by a listener: another one
            return port
    raise AssertionError("no free port")


#: The first and the longest pause between two polls: a predicate may start a process
#: (``psql``) or scan a fake's whole log, and a wait of seconds polled every 20 ms spent
#: more CPU than the processes it waited for on the two cores the suite runs on.
POLL_FIRST_S, POLL_MOST_S = 0.02, 0.1


#: How long a subprocess's effect is waited for: a guard against a hang, never a timing
#: assertion. A service that starts, fails a call and retries it takes 8 s here alone;
#: 20 s ran out while the suite's first files started three workers' processes at once
#: (on 2026-12-07, a slow day of this machine).
WAIT_MOST_S = 60.0


def wait_for(predicate: Callable[[], Any], within_s: float = WAIT_MOST_S) -> Any:
    """Poll ``predicate`` (a subprocess's effects cannot be awaited) until it is truthy,
    soon at first, then at most every ``POLL_MOST_S``."""
    deadline = time.monotonic() + within_s
    pause = POLL_FIRST_S
    while not (value := predicate()):
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(pause)
        pause = min(pause * 1.5, POLL_MOST_S)
    return value


def service_env(home: Path, model_url: str, **extra: str) -> dict[str, str]:
    """The environment of a ``chathub`` process living in ``home`` with the fake model."""
    return {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(home),
        "LLM_BASE_URL": model_url,
        "LLM_MODEL": "fake-model",
        "DATABASE_URL": f"sqlite+aiosqlite:///{home / 'chathub.db'}",
        "CHATHUB_WORKSPACE": str(home / "workspace"),
        "CHATHUB_TIMEZONE": "UTC",
        "MEMORY_DERIVE_FACTS": os.environ.get("MEMORY_DERIVE_FACTS", "false"),
        **extra,
    }


def wait_for_http(port: int, within_s: float = WAIT_MOST_S) -> None:
    """Until ``chathub serve``'s HTTP app answers on ``port``: it starts once Telegram
    polling has begun (its modules load meanwhile), a moment after the bot answers."""

    def answers() -> bool:
        try:
            return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code < 500
        except httpx.HTTPError:
            return False

    wait_for(answers, within_s)


async def until_up(base: str, child: subprocess.Popen[str]) -> None:
    """Until ``chathub serve``'s app answers ``/healthz`` at ``base`` (asserting the child
    still runs, with its stderr when it ended)."""
    async with httpx.AsyncClient(base_url=base) as client:
        while True:
            assert child.poll() is None, child.stderr.read() if child.stderr else ""
            try:
                if (await client.get("/healthz")).status_code in (200, 503):
                    return
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.05)
