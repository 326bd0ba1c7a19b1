"""Schemathesis fuzzes every operation of the OpenAPI document against the app in-process.

The app is the one ``chathub serve`` builds (API, events endpoint, ``/healthz``) over a real
engine, hub and scheduler on a SQLite file, with a session, a job, a gated call and a
question in it; it runs as an ASGI app in Schemathesis's event loop (opened and closed by
the ASGI lifespan). Each operation gets schema-valid requests (which must be accepted: 2xx,
or 404/409 for an id that names nothing, a call already decided or a job with no run) and
schema-invalid ones (which must be refused with a 4xx). Every answer must be one the
document declares (status code, content type, schema). The app itself counts the requests
and the 5xx answers: the bar is 0.

``CHATHUB_FUZZ_EXAMPLES`` sets how many cases to generate in all (2,000 by default; 10,000
for the issue's bar: ``CHATHUB_FUZZ_EXAMPLES=10000 .venv/bin/pytest -q -s
tests/bot/http/test_fuzz.py``).
"""

from __future__ import annotations

import asyncio
import math
import os
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import AsyncExitStack
from pathlib import Path

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.config import SchemathesisConfig
from schemathesis.python import asgi
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from bot.completions import CompletionsApi, talkable_agents
from bot.http.api import ApiRoutes
from bot.http.app import EventsEndpoint, create_app
from bot.http.health_details import HealthDetails, service_checks
from bot.http.operations import Operations
from bot.schema import LAYERS
from bot.settings import load_settings
from engine.config import AppConfig, EngineConfig, HubConfig
from engine.core import Engine
from engine.hub import ChatHub
from engine.llm.registry import ModelRegistry
from engine.session import events as ev
from engine.store import Store
from memory.service import MemoryService
from memory.users import Identity
from providers import Provider, ProviderRegistry, ProviderStore
from scheduler.service import Scheduler
from tests.bot.http.test_api import ask, shell, waiting_turn
from tests.clock import FakeClock
from tests.engine.hub.conftest import EchoModel, ManualSleep

TOKEN = "fuzz-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
#: Requests to generate over the whole API (``CHATHUB_FUZZ_EXAMPLES``).
EXAMPLES = int(os.environ.get("CHATHUB_FUZZ_EXAMPLES", "2000"))
MODES = (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
#: An unknown query parameter is ignored, not refused (the document cannot say so): invalid
#: query strings of ``GET /api/sessions`` and ``/api/health/details`` are bad values, not
#: extra names.
#: A request the schema allows may still be refused by ``/v1/chat/completions`` with 400 (a
#: last message that is not the user's or is blank, a content part that is not text: rules a
#: JSON schema cannot state), or 404 for a model that is not an agent.
CONFIG = SchemathesisConfig.from_dict(
    {
        "operations": [
            *(
                {"include-path": path, "generation": {"allow-extra-parameters": False}}
                for path in ("/api/sessions", "/api/health/details")
            ),
            {
                "include-path": "/v1/chat/completions",
                "checks": {"positive_data_acceptance": {"expected-statuses": ["2xx", 400, 404]}},
            },
        ]
    }
)


class FuzzedService:
    """The served app over a real engine, hub and scheduler, opened in the ASGI lifespan.

    Everything lives in the event loop that runs the app (Schemathesis's), so the engine's
    connections and tasks never cross loops. Counts every request and every 5xx answer.
    """

    def __init__(self, home: Path) -> None:
        self.home = home
        self.requests = 0
        self.server_errors: list[str] = []
        self.statuses: Counter[int] = Counter()
        self._app: ASGIApp | None = None
        self._stack = AsyncExitStack()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        assert self._app is not None, "the lifespan did not start"
        self.requests += 1

        async def counted(message: Message) -> None:
            if message["type"] == "http.response.start":
                self.statuses[message["status"]] += 1
                if message["status"] >= 500:
                    self.server_errors.append(f"{scope['method']} {scope['path']}")
            await send(message)

        await self._app(scope, receive, counted)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self._app = await self._open()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self._stack.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _open(self) -> ASGIApp:
        settings = load_settings(
            database_url=f"sqlite+aiosqlite:///{self.home / 'chathub.db'}",
            chathub_workspace=self.home / "workspace",
            chathub_timezone="UTC",
            _env_file=None,
        )
        config = AppConfig(
            settings=settings,
            models=(),
            engine=EngineConfig(max_tool_rounds=6, command_timeout_s=5),
        )
        model = EchoModel(name="primary")
        store = await Store.open(settings.database_url, LAYERS)  # every layer's tables
        engine = await Engine.open(config, models=ModelRegistry([model]), store=store)
        self._stack.push_async_callback(engine.close)
        hub = ChatHub(engine, HubConfig(idle_evict_s=60), sleep=ManualSleep())
        await hub.start()
        self._stack.push_async_callback(hub.close)
        scheduler = Scheduler(engine, hub, timezone="UTC", clock=FakeClock(), owner="fuzz")
        self._stack.push_async_callback(scheduler.close)
        # Data for the ids the fuzzer tries first (1 is the minimum of every path id): a
        # session with messages, a job, a gated call and a question waiting for a human.
        handler = await engine.new_session("telegram:1")
        await handler.handle_message("hello")
        await scheduler.create_cron("telegram:1", "Morning", "0 8 * * *", "news")
        waiting: list[asyncio.Task] = []
        self._stack.push_async_callback(_cancel, waiting)
        for reply, kind in ((shell("echo fuzz"), ev.ApprovalRequired), (ask("Why?"), ev.Question)):
            model.add(reply)
            turn, _ = await waiting_turn(await engine.new_session("console"), "go", kind)
            waiting.append(turn)
        http = httpx.AsyncClient()
        self._stack.push_async_callback(http.aclose)
        details = HealthDetails(service_checks(config, http, timeout_s=2), lambda _r: True)
        memory = MemoryService(engine.store.db, engine.bus)
        self._stack.push_async_callback(memory.close)
        user = await memory.user_for(Identity("telegram", "1", "Fuzz"))
        await memory.facts.add(user, "likes fuzz", origin_source="telegram:1", created_by="user")
        providers = ProviderRegistry(ProviderStore(engine.store.db), engine.system_bus)
        await providers.add(  # a name the fuzzer may find; nothing listens at its URL
            Provider.checked("a", "http://127.0.0.1:9/v1", "sk-fuzz", "transcription", "m")
        )
        completions = CompletionsApi(
            hub, engine.store.db, lambda: talkable_agents(engine.agents), token=TOKEN
        )
        return create_app(
            completions=completions,
            api=ApiRoutes(
                Operations(engine, hub, scheduler),
                token=TOKEN,
                health_details=details,
                memory=memory,
                providers=providers,
            ),
            events=EventsEndpoint(scheduler.tic.events, TOKEN),
            host="0.0.0.0",
        )


async def _cancel(turns: list[asyncio.Task]) -> None:
    for turn in turns:
        turn.cancel()
    await asyncio.gather(*turns, return_exceptions=True)


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FuzzedService]:
    service = FuzzedService(tmp_path_factory.mktemp("fuzz"))
    yield service
    asgi.shutdown_lifespans()  # closes the engine, hub and scheduler


@pytest.fixture(scope="module")
def api_schema(service: FuzzedService) -> schemathesis.BaseSchema:
    served = schemathesis.openapi.from_asgi("/api/openapi.json", service, headers=AUTH)
    # Loaded again without its location, so the document's own route is fuzzed as well.
    schema = schemathesis.openapi.from_dict(served.raw_schema, config=CONFIG)
    schema.app = service
    return schema


def operations(api_schema: schemathesis.BaseSchema) -> list[schemathesis.APIOperation]:
    found = [result.ok() for result in api_schema.get_all_operations()]
    return sorted(found, key=lambda op: op.label)


# A hang guard: about 100 cases a second on one core alone, half that on a slow day
# beside two other workers (100 s ran out on 2026-12-07).
@pytest.mark.timeout(max(300, EXAMPLES // 5))
def test_no_request_gets_a_server_error_and_every_answer_is_documented(
    api_schema: schemathesis.BaseSchema, service: FuzzedService
) -> None:
    """Each operation in turn (Schemathesis's pytest plugin does not run on pytest 9)."""
    started = time.monotonic()
    checked = operations(api_schema)
    # An empty document would make this pass vacuously.
    assert len(checked) == 28, " | ".join(operation.label for operation in checked)
    runs = [(operation, mode) for operation in checked for mode in _modes(operation)]
    # An operation without inputs has one request to make; the others share the count.
    with_inputs = sum(1 for operation, _ in runs if _has_inputs(operation))
    per_run = math.ceil(EXAMPLES / with_inputs)
    cases = sum(
        _fuzz(operation, mode, per_run if _has_inputs(operation) else 1) for operation, mode in runs
    )
    elapsed = time.monotonic() - started
    print(
        f"\nfuzz: {cases} generated cases, {service.requests} requests (with the checks' own),"
        f" {len(service.server_errors)} 5xx, {elapsed:.1f} s; by status {sorted(service.statuses.items())}"
    )
    assert service.server_errors == []
    assert cases >= EXAMPLES, cases


def _has_inputs(operation: schemathesis.APIOperation) -> bool:
    raw = operation.definition.raw
    return bool(raw.get("parameters") or raw.get("requestBody"))


def _modes(operation: schemathesis.APIOperation) -> tuple[GenerationMode, ...]:
    """Both modes, but only valid requests where there is nothing to make invalid."""
    return MODES if _has_inputs(operation) else MODES[:1]


def _fuzz(operation: schemathesis.APIOperation, mode: GenerationMode, examples: int) -> int:
    """Run ``examples`` cases of ``operation`` in ``mode``; how many were sent."""
    sent = 0

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    def fuzz(case: schemathesis.Case) -> None:
        nonlocal sent
        sent += 1
        # Every check: no 5xx, documented status codes, content types and schemas, valid
        # data accepted (an invented id answers 404, a job with no run 409), invalid refused.
        case.call_and_validate(headers=AUTH)

    fuzz()
    return sent
