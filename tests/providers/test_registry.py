"""The provider registry: what a person may register, the table, and the announcements on
the SystemEventBus (this process's changes and another process's)."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from bot.settings import load_settings
from engine.bus import JobCompleted, ProviderRegistered, ProviderUnregistered
from engine.bus.broadcast import DEFAULT_CAPACITY
from providers import Provider, ProviderError, masked, probe
from tests.fakes.dripping_server import dripping_server
from voice import Transcription

KEY = "gsk_live_0123456789abcdef"


def groq(**changes) -> Provider:
    values = {
        "name": "Groq",
        "base_url": "https://api.groq.com/openai/v1/",
        "api_key": KEY,
        "serves": "transcription, chat",
        "models": "whisper-large-v3",
    }
    return Provider.checked(**{**values, **changes})


def test_a_provider_is_checked_and_never_shows_its_key():
    provider = groq()
    assert (provider.name, provider.base_url) == ("groq", "https://api.groq.com/openai/v1")
    assert provider.serves == ("transcription", "chat")
    assert KEY not in repr(provider) and KEY not in str(provider.shown())
    assert provider.shown()["key"] == "gsk…cdef" == masked(KEY)
    assert masked("") == "(none)" and masked("short") == "………"
    # A local server's short key shows nothing of itself (7 of its 12 characters showed).
    assert masked("sk-local-123") == masked("sk-local-12345678") == "………"


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"name": "Two words"}, "name:"),
        ({"name": ""}, "name:"),
        ({"base_url": "ftp://example.org"}, "base_url:"),
        ({"base_url": "api.groq.com"}, "base_url:"),
        ({"serves": "singing"}, "serves:"),
        ({"serves": ""}, "serves:"),
        ({"api_key": "two words"}, "api_key:"),
        # Mistyped ports and brackets, a space, no host: they passed until 2026-12-06 and
        # broke each request with an error nothing expected (found by review).
        ({"base_url": "http://localhost:80a0/v1"}, "base_url:"),
        ({"base_url": "http://127.0.0.1:99999/v1"}, "base_url:"),
        ({"base_url": "http://[::1/v1"}, "base_url:"),
        ({"base_url": "http://exa mple.org/v1"}, "base_url:"),
        ({"base_url": "https:///v1"}, "base_url:"),
        # A path appended to it would land in the query (found by review on 2026-12-06).
        ({"base_url": "https://generativelanguage.example/v1?key=x"}, "base_url:"),
        ({"base_url": "https://api.example/v1#models"}, "base_url:"),
        # A password in the address would be shown in lists, pages and logs.
        ({"base_url": "https://user:secret@proxy.example/v1"}, "base_url:"),
        # A key pasted with a typographic dash cannot go in a header.
        ({"api_key": "sk\u2010live0123456789"}, "api_key:"),
        ({"models": ",".join(f"m{n}" for n in range(60))}, "models:"),
    ],
)
def test_what_is_refused_names_its_field(changes, named):
    with pytest.raises(ProviderError) as refused:
        groq(**changes)
    assert str(refused.value).startswith(named)
    assert KEY not in str(refused.value)


async def test_a_change_is_announced_here_and_noticed_in_another_process(two_processes):
    (here, there), (bus_here, bus_there) = two_processes
    heard_here, heard_there = bus_here.subscribe(), bus_there.subscribe()
    watching = asyncio.create_task(there.watch(every_s=0.01))
    try:
        await here.add(groq())
        assert await asyncio.wait_for(heard_here.recv(), 1) == ProviderRegistered("groq")
        assert await asyncio.wait_for(heard_there.recv(), 2) == ProviderRegistered("groq")
        assert [p.name for p in there.current] == ["groq"]

        with pytest.raises(ProviderError, match="exists"):
            await here.add(groq())
        assert (await here.remove("groq")) is not None
        assert await asyncio.wait_for(heard_there.recv(), 2) == ProviderUnregistered("groq")
        assert there.current == [] and await here.remove("groq") is None
    finally:
        watching.cancel()


async def test_transcription_follows_the_providers(two_processes):
    (registry, _), (bus, _) = two_processes
    transcription = Transcription(settings(), registry)
    assert transcription.endpoint().origin == "TRANSCRIBE_MODEL"
    following = asyncio.create_task(transcription.follow(bus))
    await asyncio.sleep(0)
    try:
        await registry.add(groq(models=""))
        await asyncio.sleep(0.01)
        chosen = transcription.endpoint()
        assert (chosen.origin, chosen.model, chosen.api_key) == ("groq", "whisper-1", KEY)
        assert KEY not in repr(chosen)
        await registry.remove("groq")
        await asyncio.sleep(0.01)
        assert transcription.endpoint().origin == "TRANSCRIBE_MODEL"
    finally:
        following.cancel()


async def test_a_lagging_follower_still_ends_with_the_right_provider(two_processes):
    """The announcement itself lost in a flood: the follower lagged, and reloads for it."""
    (registry, _), (bus, _) = two_processes
    transcription = Transcription(settings(), registry)
    following = asyncio.create_task(transcription.follow(bus))
    await asyncio.sleep(0)
    try:
        await registry.store.add(groq())
        await registry.load()  # the snapshot changed; nothing announced it
        for n in range(DEFAULT_CAPACITY + 10):
            bus.publish(JobCompleted(n, n, "ok"))
        await asyncio.sleep(0.01)
        assert transcription.endpoint().origin == "groq"
    finally:
        following.cancel()


def settings():
    return load_settings(_env_file=None, transcribe_model="whisper-1", llm_base_url="http://llm/v1")


async def test_offered_models_are_chosen_by_name_never_fallbacks_never_shadowing(two_processes):
    import httpx

    from engine.llm.registry import ModelRegistry
    from providers.chat import ChatModels
    from tests.engine.hub.conftest import EchoModel

    (registry, _), _buses = two_processes
    configured = EchoModel(name="primary")
    models = ModelRegistry([configured])
    async with httpx.AsyncClient() as http:
        chat = ChatModels(registry, models, http)
        await registry.store.add(groq(serves="chat", models="llama-x, primary"))
        await registry.load()
        chat.offer()
        assert models.names == ("primary", "llama-x")
        assert models.get("primary") is configured  # a provider's name never shadows
        assert models.candidates() == [configured]  # offered models are no fallbacks
        assert [m.name for m in models.candidates("llama-x")] == ["llama-x", "primary"]
        assert KEY not in repr(models.get("llama-x"))


async def test_changes_made_at_once_by_two_processes_are_each_counted_once(two_processes):
    """On PostgreSQL two changes at once read the same version and wrote the same next
    one (a process watching the registry missed one for good), and one name added twice
    at once was a primary-key error, a 500 (found by review on 2026-12-07)."""
    (first, second), _buses = two_processes
    stores = first.store, second.store
    await stores[0].add(groq(name="seed"))  # the version's row exists
    before = await stores[0].version()
    added = await asyncio.gather(
        *(
            store.add(groq(name=f"p{side}x{i}"))
            for i in range(10)
            for side, store in enumerate(stores)
        )
    )
    assert added == [None] * 20
    assert await stores[0].version() == before + 20
    twice = await asyncio.gather(
        *(store.add(groq(name="same")) for store in stores), return_exceptions=True
    )
    assert sorted(type(result).__name__ for result in twice) == ["NoneType", "ProviderError"]


async def test_a_name_holding_a_nul_is_no_provider(two_processes):
    """PostgreSQL refuses a NUL in a query: ``DELETE /api/providers/a%00b`` was a 500."""
    (first, _second), _buses = two_processes
    assert await first.store.get("a\x00b") is None
    assert await first.store.remove("a\x00b") is None


async def test_a_listing_nested_past_pythons_depth_is_a_listing_of_none() -> None:
    """It escaped the provider test as a RecursionError (a 500; found by review)."""
    deep = b'{"data": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    transport = httpx.MockTransport(lambda _request: httpx.Response(200, content=deep))
    async with httpx.AsyncClient(transport=transport) as http:
        line = await probe(http, Provider("deep", "http://deep.example/v1", "", ("chat",), ("m",)))
    assert line == "deep answers (0 models listed)"


async def test_a_web_page_answering_the_listing_is_no_provider() -> None:
    """A web UI answering every path with its page, a base URL short of its /v1: it was
    "answers (0 models listed)", and every call through it failed later (found by review
    on 2026-12-07)."""
    page = httpx.Response(200, html="<!doctype html><html><body>Open WebUI</body></html>")
    transport = httpx.MockTransport(lambda _request: page)
    async with httpx.AsyncClient(transport=transport) as http:
        with pytest.raises(ProviderError, match="no API's answer: is the base URL the API's"):
            await probe(http, Provider("local", "http://127.0.0.1:3000", "", ("chat",), ()))


async def test_a_probe_of_a_server_that_drips_its_answer_ends_at_its_timeout() -> None:
    """httpx bounds each read: a server sending a byte now and then held the test (the
    CLI's, the page's, the API's) far past its timeout (found by review on 2026-12-06)."""
    async with dripping_server() as base, httpx.AsyncClient() as http:
        slow = Provider.checked("slow", f"{base}/v1", "", "chat", "m")
        with pytest.raises(ProviderError, match=r"did not answer within 0\.3 s"):
            await asyncio.wait_for(probe(http, slow, timeout_s=0.3), timeout=10)
