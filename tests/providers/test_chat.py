"""The providers' chat models as the engine's model registry offers them."""

from __future__ import annotations

import json

import httpx
import pytest

from engine.llm import LlmError, ModelRegistry
from providers import Provider
from providers.chat import ChatModels
from tests.engine.hub.conftest import EchoModel

KEY = "gsk_live_0123456789abcdef"

# What an MCP server built with pydantic or zod offers: $schema, $defs and a $ref.
MCP_TOOL = {
    "type": "function",
    "function": {
        "name": "mcp__news__search",
        "description": "search the news",
        "parameters": {
            "$schema": "http://json-schema.org/draft-07/schema#",
            "type": "object",
            "properties": {"query": {"$ref": "#/$defs/Query"}},
            "required": ["query"],
            "$defs": {"Query": {"type": "string"}},
        },
    },
}


async def test_a_providers_chat_model_gets_portable_tool_schemas_like_a_configured_one(
    two_processes,
):
    """A model chosen with /model from a provider (e.g. Gemini's OpenAI endpoint, which
    answers 400 to $defs/$ref) must get the same portable schemas a configured model
    gets (strict_tool_schemas is on by default; found by review)."""
    (registry, _), _buses = two_processes
    sent: list[dict] = []

    def server(request: httpx.Request) -> httpx.Response:
        sent.append(json.loads(request.content))
        return httpx.Response(400, json={"error": {"message": "Invalid JSON payload: $ref"}})

    models = ModelRegistry([EchoModel(name="primary")])
    async with httpx.AsyncClient(transport=httpx.MockTransport(server)) as http:
        chat = ChatModels(registry, models, http)
        await registry.store.add(
            Provider.checked("gemini", "https://gemini.example/v1", KEY, "chat", "gemini-2.0")
        )
        await registry.load()
        chat.offer()
        model = models.get("gemini-2.0")
        assert model is not None
        with pytest.raises(LlmError):
            await model.complete([{"role": "user", "content": "news?"}], [MCP_TOOL])
    [body] = sent
    parameters = body["tools"][0]["function"]["parameters"]
    assert "$defs" not in json.dumps(parameters) and "$ref" not in json.dumps(parameters)


async def test_a_provider_serving_chat_and_audio_offers_only_its_chat_models(two_processes):
    """``/model`` lists what can chat: a provider's whisper, tts and embedding models
    were offered beside its chat models (found by review)."""
    (registry, _), _buses = two_processes
    models = ModelRegistry([EchoModel(name="primary")])
    async with httpx.AsyncClient() as http:
        chat = ChatModels(registry, models, http)
        await registry.store.add(
            Provider.checked(
                "openai",
                "https://openai.example/v1",
                KEY,
                "chat,transcription,speech,embeddings",
                "gpt-4o,whisper-1,gpt-4o-mini-tts,tts-1-hd,text-embedding-3-small,o3-mini",
            )
        )
        await registry.store.add(
            Provider.checked("local", "http://127.0.0.1:9/v1", "", "chat", "whisper-chat-7b")
        )
        await registry.load()
        chat.offer()
    assert list(models.names) == ["primary", "gpt-4o", "o3-mini", "whisper-chat-7b"]


@pytest.mark.parametrize(
    ("model", "job"),
    [
        ("gpt-4o", "chat"),
        ("gpt-4o-audio-preview", "chat"),
        ("speechless-llama2-13b", "chat"),
        ("llama3.1", "chat"),
        ("whisper-large-v3-turbo", "transcription"),
        ("gpt-4o-mini-transcribe", "transcription"),
        ("tts-1-hd", "speech"),
        ("xtts-v2", "speech"),
        ("melotts", "speech"),
        ("kokoro", "speech"),
        ("orpheus", "speech"),
        ("text-embedding-3-small", "embeddings"),
        ("bge-m3", "embeddings"),
        ("all-minilm", "embeddings"),
        ("voyage-3", "embeddings"),
        ("omni-moderation-latest", None),
        ("dall-e-3", None),
        ("gpt-realtime", None),
        ("rerank-2", None),
    ],
)
def test_a_models_name_tells_the_job_it_is_offered_for(model: str, job: str | None) -> None:
    """Found by review: local speech and embedding models were offered to /model, and
    the speech or embeddings job asked the chat model listed first."""
    both = Provider.checked(
        "mixed",
        "https://mixed.example/v1",
        KEY,
        "chat,transcription,speech,embeddings",
        f"{model},other-chat-7b,whisper-1,tts-1,text-embedding-3-small",
    )
    for service in ("chat", "transcription", "speech", "embeddings"):
        assert (model in both.models_for(service)) == (service == job), service
