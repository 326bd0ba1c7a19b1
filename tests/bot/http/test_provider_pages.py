"""The inbox's Providers page: the registry through forms (sign-in, same origin, CSRF),
keys never shown back, a change announced on the SystemEventBus."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from bot.http.operations import Operations
from bot.http.web import WebInbox
from engine.bus import ProviderRegistered, ProviderUnregistered
from engine.core import Engine
from providers import ProviderRegistry, ProviderStore
from tests.bot.http.test_api import TOKEN
from tests.bot.http.test_memory_pages import client_for
from tests.bot.http.test_web import signed_in
from tests.fakes.openai_server import FakeOpenAIServer

KEY = "sk-page-secret-55555555"


@pytest.fixture
async def registry(engine: Engine) -> ProviderRegistry:
    registry = ProviderRegistry(ProviderStore(engine.store.db), engine.system_bus)
    await registry.load()
    return registry


@pytest.fixture
async def web(engine: Engine, registry: ProviderRegistry) -> AsyncIterator[httpx.AsyncClient]:
    inbox = WebInbox(Operations(engine), token=TOKEN, providers=registry)
    async with client_for(inbox) as client:
        yield client


async def test_add_test_and_remove_a_provider(web, engine, fake_openai: FakeOpenAIServer):
    assert (await web.get("/providers")).headers["location"] == "/login"
    csrf = await signed_in(web)
    events = engine.system_bus.subscribe()
    fake_openai.models = ["whisper-1"]
    form = {
        "csrf": csrf,
        "name": "local",
        "base_url": fake_openai.base_url,
        "api_key": KEY,
        "serves_transcription": "1",
        "models": "whisper-1",
    }
    added = await web.post("/providers", data=form, headers={"origin": "http://inbox.test"})
    assert added.status_code == 303
    assert await events.recv() == ProviderRegistered("local")
    page = await web.get(added.headers["location"])
    assert "Provider local added" in page.text and "sk-…5555" in page.text
    assert KEY not in page.text

    tested = await web.post(
        "/providers/local/test", data={"csrf": csrf}, headers={"origin": "http://inbox.test"}
    )
    assert "✓ local answers (1 models listed)" in tested.text

    removed = await web.post(
        "/providers/local/remove", data={"csrf": csrf}, headers={"origin": "http://inbox.test"}
    )
    assert removed.status_code == 303
    assert await events.recv() == ProviderUnregistered("local")
    assert "Provider local removed." in (await web.get(removed.headers["location"])).text


async def test_a_provider_listing_no_models_is_added_saying_when_it_is_used(web, registry):
    """It was added and then passed over without a word when no model was configured for
    its job (found by review on 2026-12-07)."""
    csrf = await signed_in(web)
    form = {
        "csrf": csrf,
        "name": "groq",
        "base_url": "https://api.groq.com/openai/v1",
        "serves_transcription": "1",
    }
    added = await web.post("/providers", data=form, headers={"origin": "http://inbox.test"})
    page = await web.get(added.headers["location"])
    assert "Provider groq added. It lists no models" in page.text
    assert "TRANSCRIBE_MODEL" in page.text


async def test_a_bad_form_says_which_field_and_adds_nothing(web, registry):
    csrf = await signed_in(web)
    form = {"csrf": csrf, "name": "x", "base_url": "ftp://nowhere", "serves_chat": "1"}
    refused = await web.post("/providers", data=form, headers={"origin": "http://inbox.test"})
    assert refused.status_code == 422 and "base_url:" in refused.text
    no_service = {"csrf": csrf, "name": "x", "base_url": "http://h/v1"}
    refused = await web.post("/providers", data=no_service, headers={"origin": "http://inbox.test"})
    assert refused.status_code == 422 and "serves:" in refused.text
    assert await registry.store.all() == []


async def test_forms_without_their_token_or_from_elsewhere_are_refused(web, registry):
    csrf = await signed_in(web)
    form = {"name": "x", "base_url": "http://h/v1", "serves_chat": "1"}
    no_token = await web.post("/providers", data=form, headers={"origin": "http://inbox.test"})
    assert no_token.status_code == 403
    cross = await web.post(
        "/providers", data={**form, "csrf": csrf}, headers={"origin": "http://evil.test"}
    )
    assert cross.status_code == 403
    assert await registry.store.all() == []
