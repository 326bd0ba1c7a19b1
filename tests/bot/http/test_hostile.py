"""Hand-made hostile requests on every JSON route (the Telegram webhook too), the page's forms
and the login: never a 5xx.

Non-finite numbers, nesting far past any need, lone UTF-16 surrogates, integers and ids of
thousands of digits, bodies over the limit (declared and streamed), invalid UTF-8 and
repeated query parameters: each is a 4xx with one plain sentence (no exception's name or
text), and the app keeps answering afterwards.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import httpx
import pytest

from bot.http.api import ApiRoutes
from bot.http.app import (
    DEFAULT_WEBHOOK_PATH,
    SECRET_HEADER,
    EventsEndpoint,
    TelegramWebhook,
    create_app,
)
from bot.http.operations import Operations
from bot.http.web import WebInbox
from bot.telegram.store import TelegramStore
from engine.core import Engine
from scheduler.service import Scheduler

TOKEN = "hostile-token"
AUTH = {"authorization": f"Bearer {TOKEN}"}
HUGE = "9" * 5000
DEEP = b"[" * 100_000 + b"]" * 100_000
#: Deeper than the bound (32) yet shallow enough for every parser: the walk must catch it.
NESTED_50 = b'{"a":' * 50 + b"1" + b"}" * 50
LEAKS = ("Error", "Exception", "Traceback", "ValueError", "Unicode", "Recursion", "limit (4300")


class Tally:
    def __init__(self) -> None:
        self.requests = 0
        self.server_errors: list[str] = []

    def check(self, what: str, response: httpx.Response, *, statuses: range = range(400, 500)):
        self.requests += 1
        if response.status_code >= 500:
            self.server_errors.append(f"{what}: {response.status_code}")
        assert response.status_code in statuses, (what, response.status_code, response.text)
        text = response.text
        assert not any(leak in text for leak in LEAKS), (what, text)
        return response


@pytest.fixture
def tally() -> Iterator[Tally]:
    tally = Tally()
    yield tally
    assert tally.server_errors == [], tally.server_errors


@pytest.fixture
async def client(engine: Engine, scheduler: Scheduler) -> AsyncIterator[httpx.AsyncClient]:
    operations = Operations(engine, None, scheduler)
    app = create_app(
        api=ApiRoutes(operations, token=TOKEN),
        web=WebInbox(operations, token=TOKEN),
        events=EventsEndpoint(scheduler.tic.events, TOKEN),
        host="0.0.0.0",
    )
    # A crash is answered 500 (and counted) instead of raised into the test.
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        yield client


def _hostile_bodies() -> list[tuple[str, bytes, str | None]]:
    """(name, body, a word the error must contain)."""
    bodies: list[tuple[str, bytes, str | None]] = [
        ("NaN", b'{"action": "approve", "bypass_secs": NaN}', "finite"),
        ("Infinity", b'{"action": "approve", "bypass_secs": Infinity}', "finite"),
        ("-Infinity", b'{"action": "approve", "bypass_secs": -Infinity}', "finite"),
        ("1e400", b'{"action": "approve", "bypass_secs": 1e400}', "finite"),
        ("NaN alone", b"NaN", "finite"),
        ("deep body", DEEP, "nested"),
        ("deep field", b'{"action": "reject", "note": ' + DEEP + b"}", "nested"),
        ("deep payload", b'{"source": "s", "type": "t", "payload": ' + DEEP + b"}", "nested"),
        ("50 levels", b'{"source": "s", "type": "t", "payload": ' + NESTED_50 + b"}", "nested"),
        ("surrogate action", b'{"action": "\\ud800"}', "surrogate"),
        ("surrogate note", b'{"action": "reject", "note": "\\udc00"}', "surrogate"),
        ("surrogate answer", b'{"answer": "\\ud800"}', "surrogate"),
        ("surrogate key", b'{"\\ud800": 1}', "surrogate"),
        ("surrogate source", b'{"source": "\\ud83d", "type": "t"}', "surrogate"),
        ("5000-digit int", b'{"enabled": ' + HUGE.encode() + b"}", "digits"),
        ("5000-digit bypass", b'{"action": "approve", "bypass_secs": ' + HUGE.encode() + b"}",
         "digits"),
        ("invalid UTF-8", b'{"answer": "\xff\xfe"}', "JSON"),
        ("not JSON", b"{nope", "JSON"),
        ("a list", b"[1, 2]", None),
        ("a string", b'"approve"', None),
    ]  # fmt: skip
    return bodies


async def _routes(client: httpx.AsyncClient, scheduler: Scheduler) -> list[str]:
    job = await scheduler.create_cron("telegram:1", "Morning", "0 8 * * *", "news")
    return [
        "/api/inbox/approvals/1/resolve",
        "/api/inbox/clarifications/1/resolve",
        f"/api/jobs/{job.id}/toggle",
        "/api/events",
    ]


async def test_hostile_bodies_on_every_json_route_are_refused_plainly(client, scheduler, tally):
    routes = await _routes(client, scheduler)
    for route in routes:
        for name, body, word in _hostile_bodies():
            response = tally.check(
                f"{name} → {route}",
                await client.post(
                    route, content=body, headers={**AUTH, "content-type": "application/json"}
                ),
            )
            error = response.json()["error"]
            assert isinstance(error, str) and error, (name, route)
            if word is not None:
                assert word in error, (name, route, error)
    # Still serving, and a good event still goes in.
    good = await client.post("/api/events", json={"source": "s", "type": "t"}, headers=AUTH)
    assert good.status_code == 201
    assert tally.requests == len(routes) * len(_hostile_bodies())


async def test_oversized_bodies_are_refused_before_parsing(client, scheduler, tally):
    routes = await _routes(client, scheduler)
    big = b'{"answer": "' + b"x" * (2 * 1024 * 1024) + b'"}'

    async def streamed() -> AsyncIterator[bytes]:  # no content-length: counted as it arrives
        for _ in range(40):
            yield b"[" * 64 * 1024

    for route in routes:
        declared = await client.post(route, content=big, headers=AUTH)
        assert tally.check(f"declared {route}", declared).status_code == 413
        chunked = await client.post(route, content=streamed(), headers=AUTH)
        assert tally.check(f"chunked {route}", chunked).status_code == 413
        lying = await client.post(
            route, content=b"{}", headers={**AUTH, "content-length": HUGE[:30]}
        )
        assert tally.check(f"huge content-length {route}", lying).status_code in (400, 413)
        assert "limit" in declared.json()["error"], declared.text


async def test_ids_of_thousands_of_digits_are_not_found(client, tally):
    for method, path in [
        ("GET", f"/api/sessions/{HUGE}"),
        ("POST", f"/api/inbox/approvals/{HUGE}/resolve"),
        ("POST", f"/api/inbox/clarifications/{HUGE}/resolve"),
        ("POST", f"/api/jobs/{HUGE}/toggle"),
        ("DELETE", f"/api/jobs/{HUGE}"),
        ("POST", f"/api/jobs/{HUGE}/kill"),
        ("GET", f"/api/sessions/{2**63}"),
        ("GET", f"/api/sessions/{'0' * 5000}1"),  # leading zeros: the id 1 (no session)
        ("GET", "/api/sessions/0"),
    ]:
        response = await client.request(method, path, headers=AUTH, json={"action": "approve"})
        assert tally.check(f"{method} {path[:40]}", response).status_code == 404, path[:40]
    for path in (f"/sessions/{HUGE}", f"/approvals/{HUGE}", f"/jobs/{HUGE}/delete"):
        method = "GET" if path.startswith("/sessions") else "POST"
        response = await client.request(method, path, headers=AUTH, data={"action": "approve"})
        tally.check(f"web {method} {path[:30]}", response, statuses=range(400, 500))


async def test_repeated_or_bad_query_parameters_are_refused(client, tally):
    for query in (
        "per_page=abc&per_page=2",
        "per_page=2&per_page=2",
        "page=1&page=2",
        "source=a&source=b",
        f"page={HUGE}",
        f"per_page=-{HUGE}",
        "page=1e3",
        "page=NaN",
        "page=",  # an integer parameter given empty is not an integer
        f"source={'x' * 300}",
    ):
        response = tally.check(query[:30], await client.get(f"/api/sessions?{query}", headers=AUTH))
        assert response.status_code == 422, query
        error = response.json()["error"]
        if "&" in query:
            assert "more than once" in error, (query, error)
    # Unknown parameters are ignored; a surrogate's percent-escape is decoded as U+FFFD; an
    # empty source is a string (every source).
    for query in ("other=1&other=2", "source=%ED%A0%80", "source="):
        response = await client.get(f"/api/sessions?{query}", headers=AUTH)
        assert tally.check(query, response, statuses=range(200, 201)).status_code == 200


async def test_the_page_refuses_a_null_origin_repeated_fields_and_a_huge_password(client, tally):
    refused = await client.post(
        "/approvals/1", headers={**AUTH, "origin": "null"}, data={"action": "approve"}
    )
    assert tally.check("Origin: null", refused).status_code == 403
    login_null = await client.post("/login", headers={"origin": "null"}, data={"token": TOKEN})
    assert tally.check("login Origin: null", login_null).status_code == 403
    twice = await client.post(
        "/approvals/1",
        headers=AUTH,
        content=b"csrf=a&csrf=b&action=approve",
    )
    assert tally.check("repeated csrf", twice).status_code == 400
    huge = await client.post("/login", data={"token": "x" * 1024 * 1024})
    assert tally.check("1 MB password", huge).status_code == 413
    wrong = await client.post("/login", data={"token": "nope"})
    assert tally.check("wrong password", wrong).status_code == 401


# -- the Telegram webhook -----------------------------------------------------------------------

SECRET = "webhook-secret"
HOOK = {"x-telegram-bot-api-secret-token": SECRET, "content-type": "application/json"}


class Submitted(list):
    """The webhook's sink: updates handed on for handling."""

    def submit(self, update: dict) -> None:
        self.append(update)


@pytest.fixture
async def webhook(engine: Engine) -> AsyncIterator[tuple[httpx.AsyncClient, Submitted]]:
    submitted = Submitted()
    app = create_app(webhook=TelegramWebhook(TelegramStore(engine.store.db), submitted, SECRET))
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        yield client, submitted


def _hostile_updates() -> list[tuple[str, bytes]]:
    return [
        ("NaN", b'{"update_id": NaN}'),
        ("Infinity", b'{"update_id": 1, "message": {"date": Infinity}}'),
        ("-Infinity", b'{"update_id": 1, "message": {"date": -Infinity}}'),
        ("1e400", b'{"update_id": 1, "message": {"date": 1e400}}'),
        ("deep body", DEEP),
        ("deep message", b'{"update_id": 1, "message": ' + DEEP + b"}"),
        ("50 levels", b'{"update_id": 1, "message": ' + NESTED_50 + b"}"),
        ("5000-digit update_id", b'{"update_id": ' + HUGE.encode() + b"}"),
        ("update_id beyond 64 bits", b'{"update_id": ' + str(2**70).encode() + b"}"),
        ("boolean update_id", b'{"update_id": true}'),
        ("no update_id", b'{"message": {}}'),
        ("invalid UTF-8", b'{"update_id": 1, "message": {"text": "\xff\xfe"}}'),
        ("not JSON", b"{nope"),
        ("a list", b"[1, 2]"),
    ]


async def test_hostile_updates_on_the_webhook_are_refused_plainly(webhook, tally):
    client, submitted = webhook
    path = DEFAULT_WEBHOOK_PATH
    for name, body in _hostile_updates():
        response = tally.check(name, await client.post(path, content=body, headers=HOOK))
        assert response.status_code == 400, (name, response.status_code)
        assert isinstance(response.json()["error"], str), name
    big = b'{"update_id": 1, "text": "' + b"x" * (2 * 1024 * 1024) + b'"}'

    async def streamed() -> AsyncIterator[bytes]:
        for _ in range(40):
            yield b"[" * 64 * 1024

    declared = await client.post(path, content=big, headers=HOOK)
    assert tally.check("declared 2 MB", declared).status_code == 413
    chunked = await client.post(path, content=streamed(), headers=HOOK)
    assert tally.check("chunked 2.5 MB", chunked).status_code == 413
    lying = await client.post(path, content=b"{}", headers={**HOOK, "content-length": HUGE[:30]})
    assert tally.check("huge content-length", lying).status_code in (400, 413)
    wrong = await client.post(
        path, content=b'{"update_id": 1}', headers={**HOOK, SECRET_HEADER: "x"}
    )
    assert tally.check("wrong secret", wrong).status_code == 401
    assert submitted == []

    # Deliberately let through: Telegram escapes a lone surrogate and a chat may hold one.
    lone = await client.post(
        path, content=b'{"update_id": 7, "message": {"text": "\\ud800"}}', headers=HOOK
    )
    assert tally.check("lone surrogate", lone, statuses=range(200, 201)).status_code == 200
    ok = await client.post(path, content=b'{"update_id": 8}', headers=HOOK)
    assert tally.check("a good update", ok, statuses=range(200, 201)).status_code == 200
    assert tally.requests == len(_hostile_updates()) + 6
    assert [update["update_id"] for update in submitted] == [7, 8]
    assert submitted[0]["message"]["text"] == "\ud800"


async def test_a_nul_character_is_stored_as_a_replacement_on_postgresql(tmp_path) -> None:
    """PostgreSQL stores no NUL in text: one in a query value or a JSON string was a 500
    there (SQLite takes it; found by review). It reads as U+FFFD, as a form's does."""
    from bot.schema import LAYERS
    from bot.settings import load_settings
    from engine.config import AppConfig, EngineConfig
    from engine.llm.registry import ModelRegistry
    from engine.store import Store
    from scheduler.events import EventStore
    from tests.bot.http.test_api import AUTH, TOKEN
    from tests.engine.hub.conftest import EchoModel
    from tests.pg import fresh_postgres_database

    async with fresh_postgres_database(migrated=True) as url:
        settings = load_settings(
            database_url=url,
            chathub_workspace=tmp_path / "ws",
            chathub_timezone="UTC",
            _env_file=None,
        )
        store = await Store.open(url, LAYERS)
        engine = await Engine.open(
            AppConfig(settings=settings, models=(), engine=EngineConfig()),
            models=ModelRegistry([EchoModel(name="primary")]),
            store=store,
        )
        events = EventStore(engine.store.db)
        app = create_app(
            api=ApiRoutes(Operations(engine), token=TOKEN),
            events=EventsEndpoint(events, TOKEN),
            host="0.0.0.0",
        )
        try:
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
                listed = await client.get("/api/sessions?source=a%00b", headers=AUTH)
                assert listed.status_code == 200, listed.text
                event = {"source": "a\u0000b", "type": "t", "payload": {"x": "y"}}
                sent = await client.post("/api/events", json=event, headers=AUTH)
                assert sent.status_code < 300, sent.text
            [taken] = await events.take()
            assert taken.source == "a\ufffdb"
        finally:
            await engine.close()
