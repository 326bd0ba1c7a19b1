"""The HTTP port: free, or held by this service (its ``/healthz`` answers as chathub's)."""

from __future__ import annotations

import asyncio
import socket

import httpx

from bot.checks.result import Check

__all__ = ["check_port", "free_port"]


async def check_port(
    host: str, port: int, http: httpx.AsyncClient, *, timeout_s: float = 3.0
) -> Check:
    where = f"{host}:{port}"
    try:
        with socket.socket(_family(host), socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
            sock.bind((host, port))
    except OSError as exc:
        if (
            exc.errno is not None
            and exc.errno in _IN_USE
            and await _is_chathub(host, port, http, timeout_s)
        ):
            return Check("http.port", True, f"HTTP port {where} is held by chathub serve")
        if exc.errno is not None and exc.errno in _IN_USE:
            return Check(
                "http.port",
                False,
                f"HTTP port {where} is taken by another program",
                "stop that program or set HTTP_PORT to a free port",
            )
        return Check(
            "http.port",
            False,
            f"HTTP port {where} cannot be used ({exc.strerror or 'bind failed'})",
            "set HTTP_HOST to an address of this machine and HTTP_PORT to a free port",
        )
    return Check("http.port", True, f"HTTP port {where} is free")


_IN_USE = {98, 48}  # EADDRINUSE on Linux, macOS


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


async def _is_chathub(host: str, port: int, http: httpx.AsyncClient, timeout_s: float) -> bool:
    """chathub's ``/healthz`` is JSON with ``ok`` and ``database``, whatever its health."""
    shown = f"[{host}]" if ":" in host else host
    if host in ("0.0.0.0", "::"):
        shown = "127.0.0.1"
    try:
        async with asyncio.timeout(timeout_s):  # the whole answer, not each read
            response = await http.get(f"http://{shown}:{port}/healthz", timeout=timeout_s)
        body = response.json()
    except (httpx.HTTPError, ValueError, TimeoutError):
        return False
    return isinstance(body, dict) and "ok" in body and "database" in body


def free_port(start: int, *, host: str = "127.0.0.1") -> int:
    """The first port from ``start`` that can be bound on ``host`` now."""
    for port in range(start, min(start + 100, 65536)):
        with socket.socket() as sock:
            try:
                sock.bind((host, port))
            except OSError:
                continue
            return port
    with socket.socket() as sock:  # a hundred taken in a row: any free one
        sock.bind((host, 0))
        return int(sock.getsockname()[1])
