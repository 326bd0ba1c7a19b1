"""Local model servers: which of the usual ports on this machine answer the OpenAI API.

The list is a parameter (``chathub setup --probe URL``), so tests point it at their
fakes and never at whatever happens to run on the machine.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

import httpx

from bot.checks.model import Endpoint, list_models
from bot.checks.result import Problem

__all__ = ["DEFAULT_SERVERS", "Found", "LocalServer", "discover"]


@dataclass(frozen=True, slots=True)
class LocalServer:
    name: str
    base_url: str


DEFAULT_SERVERS = (
    LocalServer("Ollama", "http://127.0.0.1:11434/v1"),
    LocalServer("LM Studio", "http://127.0.0.1:1234/v1"),
    LocalServer("vLLM", "http://127.0.0.1:8000/v1"),
    LocalServer("llama.cpp server", "http://127.0.0.1:8080/v1"),
)


@dataclass(frozen=True, slots=True)
class Found:
    """What one probe saw: ``models`` when it listed them, ``needs_key`` on 401/403."""

    server: LocalServer
    models: tuple[str, ...] = ()
    needs_key: bool = False
    problem: str = ""

    @property
    def usable(self) -> bool:
        return not self.problem or self.needs_key


async def discover(
    http: httpx.AsyncClient, servers: Sequence[LocalServer], timeout_s: float
) -> list[Found]:
    """Probe every server at once (a closed port answers at once, a firewalled one in
    ``timeout_s``), results in the order given."""
    return list(await asyncio.gather(*(_probe(http, s, timeout_s) for s in servers)))


async def _probe(http: httpx.AsyncClient, server: LocalServer, timeout_s: float) -> Found:
    try:
        models = await list_models(http, Endpoint(server.base_url), timeout_s)
    except Problem as problem:
        if problem.kind == "auth":
            return Found(server, needs_key=True, problem=str(problem))
        if problem.kind in ("unreachable", "timeout"):
            return Found(server, problem="nothing there")
        return Found(server, problem="something else answers there")
    return Found(server, tuple(models))
