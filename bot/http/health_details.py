"""``GET /api/health/details``: the doctor's checks as JSON, for the inbox (authenticated).

The same checks as ``chathub doctor`` (``bot/doctor.py``), so they cost the same: one
real chat completion per configured model. Hence one run at a time, and a report younger
than ``max_age_s`` is answered again instead of asking every model anew on each reload
(``?fresh=1`` forces a new run). The answer is 200 whatever the checks say: it is a
report, not a liveness probe (that is ``/healthz``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from typing import Any

import httpx
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from bot.checks.result import Check
from bot.doctor import Doctor
from bot.http.credentials import has_token, peer_of
from engine.config import AppConfig

__all__ = ["PATH", "HealthDetails", "bearer", "service_checks"]

log = logging.getLogger(__name__)

PATH = "/api/health/details"

#: The texts pydantic reads as ``True`` (``HealthDetailsQuery.fresh`` when served by the API).
_TRUE = frozenset({"1", "true", "t", "yes", "y", "on"})

Authorized = Callable[[Request], bool]
RunChecks = Callable[[], Awaitable[Sequence[Check]]]


def bearer(token: str | None) -> Authorized:
    """``Authorization: Bearer <CHATHUB_API_TOKEN>``; without a token everyone (the app
    is then bound to loopback only, ``check_api_exposure``), as for the rest of the API."""
    expected = token.encode() if token else None

    def authorized(request: Request) -> bool:
        return has_token(request.headers, expected, peer=peer_of(request))

    return authorized


class HealthDetails:
    def __init__(
        self,
        run_checks: RunChecks,
        authorized: Authorized,
        *,
        max_age_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._run_checks = run_checks
        self._authorized = authorized
        self._max_age_s = max_age_s
        self._clock = clock
        self._now = now
        self._lock = asyncio.Lock()
        self._last: tuple[float, dict[str, Any]] | None = None

    def route(self) -> Route:
        return Route(PATH, self.handle, methods=["GET"], name="api_health_details")

    async def handle(self, request: Request) -> Response:
        if not self._authorized(request):
            return JSONResponse(
                {"error": "missing or wrong bearer token"},
                status_code=401,
                headers={"www-authenticate": "Bearer"},
            )
        fresh = request.query_params.get("fresh", "").lower() in _TRUE
        try:
            report = await self.report(fresh=fresh)
        except Exception:  # a check that crashed is a bug: logged, one sentence out
            log.exception("health details: a check failed unexpectedly")
            return JSONResponse({"error": "the checks could not be run; see the log"}, 500)
        return JSONResponse(report)

    async def report(self, *, fresh: bool = False) -> dict[str, Any]:
        """The report (``ApiRoutes`` may serve it behind its own guard and query model)."""
        async with self._lock:  # concurrent requests share one run
            if self._last is not None and not fresh:
                at, report = self._last
                if self._clock() - at < self._max_age_s:
                    return report
            checks = await self._run_checks()
            report = {
                "ok": all(c.ok for c in checks),
                "checked_at": self._now().isoformat(),
                "checks": [c.as_json() for c in checks],
            }
            self._last = (self._clock(), report)
            return report


def service_checks(
    config: AppConfig, http: httpx.AsyncClient, *, timeout_s: float = 10.0
) -> RunChecks:
    """The doctor's checks for a running service's ``AppConfig`` over its ``httpx`` client.

    The configuration line is "parses" by construction (the service started with it);
    the HTTP port is found held by this very service (its ``/healthz`` answers).
    """

    async def run() -> Sequence[Check]:
        checks = [Check("config", True, "configuration parses")]
        return checks + await Doctor(config, http, timeout_s=timeout_s).run()

    return run
