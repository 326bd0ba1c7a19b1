"""ModelRegistry: candidate order, and falling back across models of the fake server."""

from __future__ import annotations

import httpx
import pytest

from engine.config import ModelConfig
from engine.llm.protocols import ChatModel
from engine.llm.registry import ModelRegistry
from engine.llm.types import LlmError, LlmRequestError, LlmResponse
from tests.fakes.openai_server import FakeOpenAIServer

USER = [{"role": "user", "content": "Hi"}]


def configs(base_url: str, *names: str) -> list[ModelConfig]:
    return [ModelConfig(name=n, base_url=base_url, timeout_s=0.3) for n in names]


async def first_answer(candidates: list[ChatModel]) -> LlmResponse:
    """The fallback walk the turn engine does: next model on retriable errors only."""
    for model in candidates:
        try:
            return await model.complete(USER, [])
        except LlmError as exc:
            if not exc.retriable or model is candidates[-1]:
                raise
    raise AssertionError("no candidates")


def names(models: list[ChatModel]) -> list[str]:
    return [m.name for m in models]


async def test_candidates_follow_the_configured_order(http: httpx.AsyncClient) -> None:
    registry = ModelRegistry.from_config(configs("http://x/v1", "main", "backup", "cheap"), http)

    assert registry.names == ("main", "backup", "cheap")
    assert names(registry.candidates()) == ["main", "backup", "cheap"]


async def test_a_preferred_model_goes_first_and_the_rest_keep_their_order(
    http: httpx.AsyncClient,
) -> None:
    registry = ModelRegistry.from_config(configs("http://x/v1", "main", "backup", "cheap"), http)

    assert names(registry.candidates("cheap")) == ["cheap", "main", "backup"]
    assert names(registry.candidates("main")) == ["main", "backup", "cheap"]


async def test_an_unknown_preferred_model_is_ignored(http: httpx.AsyncClient) -> None:
    registry = ModelRegistry.from_config(configs("http://x/v1", "main", "backup"), http)

    assert names(registry.candidates("not-installed")) == ["main", "backup"]


async def test_models_are_found_by_name(http: httpx.AsyncClient) -> None:
    config = ModelConfig(name="main", base_url="http://x/v1", cache_hints=True)
    registry = ModelRegistry.from_config([config], http)

    model = registry.get("main")
    assert model is not None and model.cache_hints
    assert registry.get("other") is None
    assert "main" in registry and len(registry) == 1


async def test_a_model_configured_twice_is_refused(http: httpx.AsyncClient) -> None:
    with pytest.raises(ValueError, match="'main' is configured twice"):
        ModelRegistry.from_config(configs("http://x/v1", "main", "main"), http)


async def test_a_passed_in_client_stays_open_after_aclose(http: httpx.AsyncClient) -> None:
    registry = ModelRegistry.from_config(configs("http://x/v1", "main"), http)
    await registry.aclose()
    assert not http.is_closed


async def test_a_registry_closes_the_client_it_created(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.reply_text("pong")
    registry = ModelRegistry.from_config(configs(fake_openai.base_url, "main"))

    assert (await registry.candidates()[0].complete(USER, [])).content == "pong"
    await registry.aclose()
    await registry.aclose()  # twice is harmless


async def test_a_failing_model_falls_back_to_the_next(
    fake_openai: FakeOpenAIServer, http: httpx.AsyncClient
) -> None:
    fake_openai.reply_error(500, model="main")
    fake_openai.reply_hang(model="backup")
    fake_openai.reply_text("from cheap", model="cheap")
    registry = ModelRegistry.from_config(
        configs(fake_openai.base_url, "main", "backup", "cheap"), http
    )

    response = await first_answer(registry.candidates())

    assert response.content == "from cheap"
    assert response.model == "cheap"
    assert [r["model"] for r in fake_openai.requests] == ["main", "backup", "cheap"]


async def test_a_request_error_does_not_fall_back(
    fake_openai: FakeOpenAIServer, http: httpx.AsyncClient
) -> None:
    fake_openai.reply_error(400, "messages: invalid role", model="main")
    fake_openai.reply_text("never asked", model="backup")
    registry = ModelRegistry.from_config(configs(fake_openai.base_url, "main", "backup"), http)

    with pytest.raises(LlmRequestError, match="invalid role"):
        await first_answer(registry.candidates())

    assert fake_openai.pending("backup") == 1
