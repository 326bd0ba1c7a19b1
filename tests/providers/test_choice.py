"""``ServiceChoice``: which endpoint does a job now, for any job a provider serves (the
audio choices and memory's embeddings are this one piece): the oldest provider serving the
job, its model, the settings' endpoint without one, followed on the SystemEventBus of this
process and, through the registry's watch, of another process."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from bot.schema import LAYERS
from engine.bus import JobCompleted, SystemEventBus
from engine.bus.broadcast import DEFAULT_CAPACITY
from engine.store import open_database
from memory.embeddings import EmbeddingChoice, EmbeddingConfig
from providers import Endpoint, Provider, ProviderRegistry, ProviderStore, ServiceChoice
from tests.pg import database_url
from voice import Speech, Transcription

KEY = "sk-embed-live-0123456789abcdef"
SETTINGS = Endpoint("http://settings.example/v1", "sk-settings-key-42", "nomic-embed-text", "S")


def provider(name: str, serves: str = "embeddings", models: str = "", key: str = KEY) -> Provider:
    return Provider.checked(name, f"https://{name}.example/v1", key, serves, models)


@pytest.fixture
def bus() -> SystemEventBus:
    return SystemEventBus()


@pytest.fixture
async def registry(tmp_path: Path, bus: SystemEventBus):
    async with database_url("sqlite", tmp_path, migrated=True) as url:
        db = await open_database(url, LAYERS)
        registry = ProviderRegistry(ProviderStore(db), bus)
        await registry.load()
        yield registry
        await db.close()


async def test_the_oldest_provider_serving_the_job_wins_with_the_model_it_can_serve(registry):
    choice = ServiceChoice("embeddings", registry, model="nomic-embed-text", fallback=SETTINGS)
    assert choice.endpoint() is SETTINGS
    changes: list[Endpoint | None] = []
    choice.on_change(lambda: changes.append(choice.endpoint()))

    await registry.add(provider("chatty", serves="chat", models="llama"))  # not this job
    await registry.add(provider("lists-none"))  # asked with the configured model
    await registry.add(provider("lists-it", models="bge-m3, nomic-embed-text"))
    choice.choose_again()
    chosen = choice.endpoint()
    assert chosen == Endpoint(
        "https://lists-none.example/v1", KEY, "nomic-embed-text", "lists-none"
    )

    await registry.remove("lists-none")
    choice.choose_again()
    assert choice.endpoint().origin == "lists-it"  # listed: its configured model
    assert choice.endpoint().model == "nomic-embed-text"
    choice.choose_again()  # the same choice again: no listener hears of it
    assert [e.origin if e else None for e in changes] == ["lists-none", "lists-it"]

    await registry.remove("lists-it")
    await registry.add(provider("other", models="bge-m3, e5"))
    choice.choose_again()
    assert (choice.endpoint().origin, choice.endpoint().model) == ("other", "bge-m3")
    assert KEY not in repr(choice.endpoint())


async def test_without_a_configured_model_a_provider_listing_none_is_passed_over(registry):
    choice = ServiceChoice("embeddings", registry, model=None, fallback=None)
    await registry.add(provider("lists-none"))
    choice.choose_again()
    assert choice.endpoint() is None
    await registry.add(provider("lists-one", models="bge-m3"))
    choice.choose_again()
    assert choice.endpoint().origin == "lists-one"


async def test_a_failing_listener_does_not_stop_the_choice(registry, caplog):
    choice = ServiceChoice("embeddings", registry, model="m", fallback=None)
    heard: list[str] = []
    choice.on_change(lambda: 1 / 0)
    choice.on_change(lambda: heard.append("second"))
    await registry.add(provider("one"))
    choice.choose_again()
    assert choice.endpoint().origin == "one" and heard == ["second"]
    assert "listener of the choice failed" in caplog.text


async def test_the_audio_choices_are_service_choices(registry):
    from bot.settings import load_settings

    settings = load_settings(
        _env_file=None,
        transcribe_model="whisper-1",
        speech_model="tts-1",
        speech_base_url="http://speech.example/v1/",
        llm_base_url="http://llm/v1",
        llm_api_key="sk-llm",
    )
    transcription, speech = Transcription(settings, registry), Speech(settings, registry)
    assert isinstance(transcription, ServiceChoice) and isinstance(speech, ServiceChoice)
    # The LLM's key only for the LLM's server.
    assert transcription.endpoint() == Endpoint(
        "http://llm/v1", "sk-llm", "whisper-1", "TRANSCRIBE_MODEL"
    )
    assert speech.endpoint() == Endpoint("http://speech.example/v1", "", "tts-1", "SPEECH_MODEL")
    await registry.add(provider("voice", serves="speech", models="kokoro"))
    speech.choose_again()
    transcription.choose_again()
    assert (speech.endpoint().origin, speech.endpoint().model) == ("voice", "kokoro")
    assert transcription.endpoint().origin == "TRANSCRIBE_MODEL"


async def test_embeddings_follow_another_processs_change_through_the_watch(two_processes):
    """``chathub providers add`` in a shell, or another process of a fleet: this process's
    registry notices within its watch, announces it, and its embeddings choose again."""
    (here, there), (_, bus_there) = two_processes
    configured = EmbeddingConfig("nomic-embed-text", "http://settings.example/v1", "sk-settings")
    choice = EmbeddingChoice(configured, there, timeout_s=7)
    assert choice.config() is configured
    watching = asyncio.create_task(there.watch(every_s=0.01))
    following = asyncio.create_task(choice.follow(bus_there))
    await asyncio.sleep(0)
    try:
        await here.add(provider("remote", models="bge-m3"))
        await eventually(lambda: choice.endpoint().origin == "remote")
        config = choice.config()
        assert config == EmbeddingConfig("bge-m3", "https://remote.example/v1", KEY, 7)
        assert KEY not in repr(config) and KEY not in repr(choice.endpoint())

        await here.remove("remote")
        await eventually(lambda: choice.endpoint().origin == "EMBEDDING_MODEL")
        assert choice.config() is configured
    finally:
        following.cancel()
        watching.cancel()


async def test_a_lagging_embeddings_follower_ends_on_the_right_choice(registry, bus):
    """The announcement lost in a flood: the follower lagged, and chooses again for it."""
    choice = EmbeddingChoice(None, registry)
    assert choice.config() is None
    following = asyncio.create_task(choice.follow(bus))
    await asyncio.sleep(0)
    try:
        await registry.store.add(provider("remote", models="bge-m3"))
        await registry.load()  # the snapshot changed; nothing announced it
        for n in range(DEFAULT_CAPACITY + 10):
            bus.publish(JobCompleted(n, n, "ok"))
        await eventually(lambda: choice.endpoint() is not None)
        assert choice.config().model == "bge-m3"

        await registry.store.remove("remote")
        await registry.load()
        for n in range(DEFAULT_CAPACITY + 10):
            bus.publish(JobCompleted(n, n, "ok"))
        await eventually(lambda: choice.endpoint() is None)
        assert choice.config() is None  # no EMBEDDING_MODEL: nobody embeds
    finally:
        following.cancel()


async def eventually(predicate, within_s: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within_s
    while not predicate():
        assert loop.time() < deadline, "not in time"
        await asyncio.sleep(0.01)


async def test_a_provider_serving_several_jobs_gives_each_the_model_named_for_it(registry):
    """One provider for chat, transcription and speech, its models listed together: each
    job takes the model whose name says it does that job (transcription took the first
    listed, a chat model, and failed on every voice note; found by review)."""
    from bot.settings import load_settings

    settings = load_settings(_env_file=None, transcribe_model=None, speech_model=None)
    listed = "gpt-4o,whisper-1,gpt-4o-transcribe,tts-1"
    await registry.add(provider("openai", serves="chat,transcription,speech", models=listed))
    transcription, speech = Transcription(settings, registry), Speech(settings, registry)
    assert transcription.endpoint().model == "whisper-1"
    assert speech.endpoint().model == "tts-1"
    configured = load_settings(_env_file=None, transcribe_model="gpt-4o-transcribe")
    assert Transcription(configured, registry).endpoint().model == "gpt-4o-transcribe"
