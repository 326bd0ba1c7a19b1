"""Every server's dialect × stream mode × tool-call case yields the right calls.

The fake model server speaks each dialect's framing (``tests/fakes/model_dialects.py``)
over real HTTP; the client must read the same calls out of all of them.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import httpx
import pytest

from engine.config import ModelConfig
from engine.llm.client import OpenAICompatModel
from engine.llm.types import (
    LlmProviderError,
    LlmRateLimited,
    LlmResponse,
    LlmServerError,
)
from tests.fakes.model_dialects import DIALECTS, USAGE, Call, Dialect, _choice, sse
from tests.fakes.openai_server import FakeOpenAIServer

USER = [{"role": "user", "content": "Look both up."}]
ARGS_0 = json.dumps({"key": "k0", "limit": 3})
ARGS_1 = json.dumps({"key": "k1", "note": "two words"})

CASES: dict[str, list[Call]] = {
    "single": [("call_a1", "lookup", ARGS_0)],
    "parallel": [("call_a1", "lookup", ARGS_0), ("call_b2", "lookup", ARGS_1)],
    "no-id": [(None, "lookup", ARGS_0)],
}


@pytest.fixture(scope="module")
def server() -> AsyncIterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as fake:
        yield fake


@pytest.fixture
async def http(server: FakeOpenAIServer) -> AsyncIterator[httpx.AsyncClient]:
    server.reset()
    async with httpx.AsyncClient() as client:
        yield client


def model(http: httpx.AsyncClient, server: FakeOpenAIServer, *, stream: bool) -> OpenAICompatModel:
    config = ModelConfig(name="m", base_url=server.base_url, timeout_s=5, stream=stream)
    return OpenAICompatModel(config, http)


async def answer(http, server, body: str, *, stream: bool = True) -> LlmResponse:
    server.reply_raw(body, content_type="text/event-stream" if stream else "application/json")
    return await model(http, server, stream=stream).complete(USER, [])


def assert_calls(response: LlmResponse, expected: list[Call]) -> None:
    got = [(c.name, json.loads(c.arguments)) for c in response.tool_calls]
    assert got == [(name, json.loads(args)) for _, name, args in expected]
    for call, (given_id, _, _) in zip(response.tool_calls, expected, strict=True):
        assert call.id == given_id if given_id else call.id.startswith("call_")
    assert len({c.id for c in response.tool_calls}) == len(response.tool_calls)


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
@pytest.mark.parametrize("dialect", DIALECTS, ids=[d.name for d in DIALECTS])
async def test_every_dialect_yields_the_calls(
    http, server, dialect: Dialect, stream: bool, case: str
) -> None:
    calls = CASES[case]
    body = dialect.stream(calls) if stream else json.dumps(dialect.whole(calls))
    response = await answer(http, server, body, stream=stream)
    assert_calls(response, calls)
    assert response.usage.input_tokens == USAGE["prompt_tokens"]


# -- bad input -----------------------------------------------------------------------


async def test_a_stream_switching_index_conventions_midway(http, server) -> None:
    """Index per call at first, then Ollama-style calls at index 0 with their own ids."""
    a = {"index": 0, "id": "call_a", "function": {"name": "lookup", "arguments": '{"key":'}}
    a_rest = {"index": 0, "function": {"arguments": ' "k0"}'}}
    b = {"index": 1, "id": "call_b", "function": {"name": "lookup", "arguments": '{"key": "k1"}'}}
    c = {"index": 0, "id": "call_c", "function": {"name": "lookup", "arguments": '{"key": "k2"}'}}
    body = sse(
        [_choice({"tool_calls": [p]}) for p in (a, a_rest, b, c)] + [_choice({}, "tool_calls")]
    )
    response = await answer(http, server, body)
    assert [(c.id, json.loads(c.arguments)["key"]) for c in response.tool_calls] == [
        ("call_a", "k0"),
        ("call_b", "k1"),
        ("call_c", "k2"),
    ]


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
async def test_duplicate_ids_become_distinct_calls(http, server, stream: bool) -> None:
    calls: list[Call] = [("call_1", "lookup", ARGS_0), ("call_1", "lookup", ARGS_1)]
    openai = DIALECTS[0]
    body = openai.stream(calls) if stream else json.dumps(openai.whole(calls))
    response = await answer(http, server, body, stream=stream)
    assert [json.loads(c.arguments) for c in response.tool_calls] == [
        json.loads(ARGS_0),
        json.loads(ARGS_1),
    ]
    ids = [c.id for c in response.tool_calls]
    assert ids[0] == "call_1" and ids[1] != "call_1" and ids[1].startswith("call_")


async def test_an_id_with_no_name(http, server) -> None:
    """A lone id announces nothing; an unnamed call with arguments reaches the dispatcher,
    which tells the model the tool is unknown."""
    lone = {"index": 1, "id": "call_lone"}
    unnamed = {"index": 2, "id": "call_x", "function": {"arguments": '{"key": "k9"}'}}
    named = {"index": 0, "id": "call_a", "function": {"name": "lookup", "arguments": ARGS_0}}
    body = sse(
        [_choice({"tool_calls": [p]}) for p in (named, lone, unnamed)] + [_choice({}, "tool_calls")]
    )
    response = await answer(http, server, body)
    assert [(c.id, c.name) for c in response.tool_calls] == [("call_a", "lookup"), ("call_x", "")]


async def test_arguments_split_across_100_chunks(http, server) -> None:
    arguments = json.dumps({"text": "x" * 188})  # 200 characters
    size = -(-len(arguments) // 100)
    parts = [arguments[i : i + size] for i in range(0, len(arguments), size)]
    assert len(parts) == 100
    first = {"index": 0, "id": "call_long", "function": {"name": "note", "arguments": ""}}
    chunks = [_choice({"tool_calls": [first]})]
    chunks += [_choice({"tool_calls": [{"index": 0, "function": {"arguments": p}}]}) for p in parts]
    response = await answer(http, server, sse([*chunks, _choice({}, "tool_calls")]))
    [call] = response.tool_calls
    assert call.arguments == arguments


# -- in-band errors (OpenRouter) -----------------------------------------------------


ERROR = {"code": 502, "message": "Provider returned error: upstream disconnected"}


@pytest.mark.parametrize(
    ("body", "stream"),
    [
        (json.dumps({"error": ERROR}), False),
        (json.dumps({"error": ERROR, "choices": []}), False),
        (
            json.dumps(
                {
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": ""},
                            "finish_reason": "error",
                            "error": ERROR,
                        }
                    ]
                }
            ),
            False,
        ),
        (sse([_choice({"content": ""}), {"error": ERROR, **_choice({}, "error")}]), True),
        (sse([_choice({"content": "Hal"}), _choice({}, "error", error=ERROR)]), True),
    ],
    ids=["whole-error", "whole-error-with-choices", "choice-error", "chunk-error", "choice-chunk"],
)
async def test_an_in_band_error_is_the_providers_message(http, server, body, stream) -> None:
    with pytest.raises(LlmServerError, match="upstream disconnected") as caught:
        await answer(http, server, body, stream=stream)
    assert caught.value.retriable


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        ({"code": 429, "message": "slow down"}, LlmRateLimited),
        ({"code": 400, "message": "context too long for this provider"}, LlmProviderError),
        ({"code": "server_error", "message": "overloaded"}, LlmServerError),
        ({"message": "no code at all"}, LlmServerError),
    ],
)
async def test_in_band_codes(http, server, error, kind) -> None:
    body = sse([_choice({"content": ""}), _choice({}, "error", error=error)])
    with pytest.raises(kind, match=error["message"]) as caught:
        await answer(http, server, body)
    assert caught.value.retriable  # the request was accepted: another model may answer


async def test_finish_reason_error_without_details(http, server) -> None:
    body = sse([_choice({"content": "Hal"}), _choice({}, "error")])
    with pytest.raises(LlmServerError, match="ended the answer with an error"):
        await answer(http, server, body)
