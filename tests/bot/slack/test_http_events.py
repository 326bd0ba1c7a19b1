"""The HTTP Events API: Slack POSTs signed requests to ``/slack/events`` on the service's
HTTP app; forged, stale and unsigned ones are refused with 401 and reach nothing."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest

from bot.serve import Service
from tests.bot.process import free_port
from tests.bot.slack.conftest import ALICE, MakeService, slack_of, texts, until
from tests.fakes.slack_server import FakeSlackServer, sign_request


@pytest.fixture
async def service(make_service: MakeService, fake: FakeSlackServer) -> Service:
    port = free_port()
    service = await make_service(
        http=True,
        http_port=port,
        slack_app_token=None,
        slack_signing_secret=fake.signing_secret,
        chathub_api_token="events-over-http-token",  # reached from outside: a token
    )
    assert service.slack is not None and not service.slack.socket_mode
    fake.request_url = f"http://127.0.0.1:{port}/slack/events"
    return service


async def test_the_url_is_verified_and_a_dm_answered(
    service: Service, fake: FakeSlackServer
) -> None:
    assert await asyncio.to_thread(fake.verify_url)
    fake.dm(ALICE, "over http")
    dm = fake.dm_channel(ALICE)
    await until(lambda: texts(fake, dm) == ["echo: over http"])
    await until(lambda: all(d.acked for d in fake.deliveries))
    assert fake.live_connections == 0  # no socket in this mode


@pytest.mark.parametrize("sign", ["forged", "expired", "missing"])
async def test_a_bad_signature_is_refused_with_401(
    service: Service, fake: FakeSlackServer, sign: str
) -> None:
    fake.dm(ALICE, "let me in", sign=sign)  # type: ignore[arg-type]
    await until(lambda: fake.deliveries and fake.deliveries[-1].attempts)
    await until(lambda: fake.deliveries[-1].attempts[0].status is not None)
    assert fake.deliveries[-1].attempts[0].status == 401
    assert not await asyncio.to_thread(fake.verify_url, sign=sign)  # type: ignore[arg-type]
    assert texts(fake, fake.dm_channel(ALICE)) == []


@pytest.mark.parametrize(
    ("timestamp", "signature"),
    [("abc", "v0=00"), ("1e9", "v0=00"), (None, "v0=é"), (None, "v0=" + "A" * 64)],
    ids=["word", "exponent", "not-ascii", "upper-case"],
)
async def test_junk_signature_headers_are_refused_with_401(
    service: Service, fake: FakeSlackServer, timestamp: str | None, signature: str
) -> None:
    """Bolt's check raised on these: a 500 and an error in the log for each (found by
    review)."""
    body = json.dumps({"type": "event_callback", "team_id": "T1", "event": {"type": "message"}})
    headers = {
        "Content-Type": "application/json",
        "X-Slack-Request-Timestamp": timestamp or str(int(time.time())),
        "X-Slack-Signature": signature.encode("latin-1"),
    }
    assert fake.request_url is not None
    async with httpx.AsyncClient() as client:
        answer = await client.post(fake.request_url, content=body, headers=headers)
    assert answer.status_code == 401


@pytest.mark.parametrize(
    ("body", "kind"),
    [
        (b"\xff\xfe not utf-8", "application/x-www-form-urlencoded"),
        (b"{not json", "application/json"),
        (b"payload=%7Bnot-json", "application/x-www-form-urlencoded"),
        (b"[1, 2]", "application/json"),
    ],
    ids=["not-utf8", "bad-json", "bad-payload", "json-list"],
)
async def test_junk_with_a_wrong_signature_is_refused_with_401(
    service: Service, fake: FakeSlackServer, body: bytes, kind: str
) -> None:
    """Bolt parses the body before it checks the signature: junk in Slack's headers was
    a 500 and a traceback (found by review on 2026-12-06)."""
    headers = {
        "Content-Type": kind,
        "X-Slack-Request-Timestamp": str(int(time.time())),
        "X-Slack-Signature": "v0=" + "0" * 64,  # Slack's shape, a wrong value
    }
    assert fake.request_url is not None
    async with httpx.AsyncClient() as client:
        answer = await client.post(fake.request_url, content=body, headers=headers)
    assert answer.status_code == 401


async def test_a_replayed_request_is_answered_once(service: Service, fake: FakeSlackServer) -> None:
    dm = fake.dm_channel(ALICE)
    fake.dm(ALICE, "only once")
    await until(lambda: texts(fake, dm) == ["echo: only once"])
    first = fake.deliveries[0]
    body = json.dumps(first.payload)
    timestamp = int(time.time())
    headers = {
        "Content-Type": "application/json",
        "X-Slack-Request-Timestamp": str(timestamp),
        "X-Slack-Signature": sign_request(fake.signing_secret, timestamp, body),
    }
    url = fake.request_url
    assert url is not None
    async with httpx.AsyncClient() as client:
        for _ in range(3):  # replayed within the window: validly signed, the same message
            answer = await client.post(url, content=body, headers=headers)
            assert answer.status_code == 200
        stale = {**headers, "X-Slack-Request-Timestamp": str(timestamp - 301)}
        stale["X-Slack-Signature"] = sign_request(fake.signing_secret, timestamp - 301, body)
        assert (await client.post(url, content=body, headers=stale)).status_code == 401
    await slack_of(service).drain()
    assert texts(fake, dm) == ["echo: only once"]
