"""Junk from the model, streamed and whole, over real HTTP through the fake server.

Every malformed part of an answer is an ``LlmProtocolError`` ("the model sent a malformed
response", retriable: the round falls back to the next model), never an exception of our
parser; harmless junk in side information (usage, reasoning, finish reason) is dropped.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from engine.config import ModelConfig
from engine.llm.client import OpenAICompatModel
from engine.llm.types import LlmProtocolError, LlmResponse, Usage
from engine.session import events as ev
from engine.session.turn.cancel import CancelScope
from engine.session.turn.emitter import TurnEmitter
from engine.session.turn.llm_round import TurnFailed, call_llm_round
from tests.fakes.openai_server import FakeOpenAIServer, delta_chunk

USER = [{"role": "user", "content": "Hello?"}]
FINISH = delta_chunk({}, "stop")
DEEP = "[" * 100_000  # json.loads raises RecursionError, not ValueError


def call(fragment: dict[str, Any]) -> dict[str, Any]:
    """A streamed tool-call fragment inside a delta."""
    return {"tool_calls": [fragment]}


def fn(arguments: Any = "{}", name: Any = "read_file") -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


def make_model(
    http: httpx.AsyncClient, base_url: str, *, stream: bool = True, name: str = "fake-model"
) -> OpenAICompatModel:
    config = ModelConfig(name=name, base_url=base_url, timeout_s=5.0, stream=stream)
    return OpenAICompatModel(config, http)


# -- streamed: each case is the chunks of one answer ---------------------------------

MALFORMED_STREAMS: dict[str, list[Any]] = {
    "content-number": [delta_chunk({"content": 12345}), FINISH],
    "content-after-text": [delta_chunk({"content": "Hi "}), delta_chunk({"content": 7}), FINISH],
    "content-object": [delta_chunk({"content": {"text": "hi"}}), FINISH],
    "content-list": [delta_chunk({"content": ["hi"]}), FINISH],
    "content-true": [delta_chunk({"content": True}), FINISH],
    "tool-calls-object": [delta_chunk({"tool_calls": {"index": 0}}), FINISH],
    "tool-calls-text": [delta_chunk({"tool_calls": "read_file"}), FINISH],
    "tool-call-text": [delta_chunk({"tool_calls": ["read_file"]}), FINISH],
    "tool-call-null": [delta_chunk({"tool_calls": [None]}), FINISH],
    "index-text": [delta_chunk(call({"index": "0", "id": "a", "function": fn()})), FINISH],
    "index-negative": [delta_chunk(call({"index": -1, "id": "a", "function": fn()})), FINISH],
    "index-true": [delta_chunk(call({"index": True, "id": "a", "function": fn()})), FINISH],
    "index-float": [delta_chunk(call({"index": 0.5, "id": "a", "function": fn()})), FINISH],
    "function-text": [delta_chunk(call({"index": 0, "function": "read_file"})), FINISH],
    "name-number": [delta_chunk(call({"index": 0, "function": fn(name=3)})), FINISH],
    "arguments-number": [delta_chunk(call({"index": 0, "function": fn(5)})), FINISH],
    "arguments-list": [delta_chunk(call({"index": 0, "function": fn([1, 2])})), FINISH],
    "arguments-false": [delta_chunk(call({"index": 0, "function": fn(False)})), FINISH],
    "choices-object": [delta_chunk({}, choices={"0": {"delta": {"content": "hi"}}}), FINISH],
    "choices-text": [delta_chunk({}, choices="hi"), FINISH],
    "choice-text": [delta_chunk({}, choices=["hi"]), FINISH],
    "delta-text": [delta_chunk("hi"), FINISH],
    "delta-list": [delta_chunk(["hi"]), FINISH],
    "choices-always-empty": [delta_chunk({}, choices=[]), delta_chunk({}, choices=None)],
    "not-json": ["{oops", FINISH],
    "deeply-nested": [DEEP],
    "number": [12345],
    "list": [[delta_chunk({"content": "hi"})]],
    "json-text": ['"hi"'],
    "null": ["null"],
}


@pytest.mark.parametrize("chunks", MALFORMED_STREAMS.values(), ids=MALFORMED_STREAMS.keys())
async def test_a_malformed_stream_is_a_retriable_protocol_error(
    fake_openai: FakeOpenAIServer, http: httpx.AsyncClient, chunks: list[Any]
) -> None:
    fake_openai.reply_chunks(*chunks)

    with pytest.raises(LlmProtocolError) as caught:
        await make_model(http, fake_openai.base_url).complete(USER, [])

    error = caught.value
    assert error.retriable
    assert str(error).startswith("fake-model: the model sent a malformed response (")
    assert "Error" not in str(error)  # no exception class reaches the message
    assert error.detail  # what was wrong, for the log


HARMLESS_STREAMS: dict[str, tuple[list[Any], LlmResponse]] = {
    "usage-wrong-types": (
        [
            delta_chunk({"content": "ok"}),
            FINISH,
            delta_chunk(
                {},
                choices=[],
                usage={"prompt_tokens": "12", "completion_tokens": -1, "cost": "free"},
            ),
        ],
        LlmResponse("ok", usage=Usage(), finish_reason="stop"),
    ),
    "usage-out-of-range": (
        [
            delta_chunk({"content": "ok"}),
            FINISH,
            delta_chunk(
                {},
                choices=[],
                usage={"prompt_tokens": 2**70, "completion_tokens": True, "cost": 10**400},
            ),
        ],
        LlmResponse("ok", usage=Usage(), finish_reason="stop"),
    ),
    "usage-not-an-object": (
        [delta_chunk({"content": "ok"}), FINISH, delta_chunk({}, choices=[], usage=[1, 2])],
        LlmResponse("ok", finish_reason="stop"),
    ),
    "usage-cost-infinite": (
        [delta_chunk({"content": "ok"}, "stop", usage={"prompt_tokens": 3, "cost": 1e999})],
        LlmResponse("ok", usage=Usage(input_tokens=3), finish_reason="stop"),
    ),
    "reasoning-number": (
        [delta_chunk({"reasoning_content": 7, "content": "ok"}), FINISH],
        LlmResponse("ok", finish_reason="stop"),
    ),
    "finish-reason-number": (
        [delta_chunk({"content": "ok"}), delta_chunk({}, 1)],
        LlmResponse("ok"),  # dropped: the [DONE] line still ends the answer
    ),
    "delta-null": (
        [delta_chunk({"content": "ok"}), delta_chunk(None, "stop")],
        LlmResponse("ok", finish_reason="stop"),
    ),
}


@pytest.mark.parametrize(
    ("chunks", "expected"), HARMLESS_STREAMS.values(), ids=HARMLESS_STREAMS.keys()
)
async def test_junk_in_side_information_of_a_stream_is_dropped(
    fake_openai: FakeOpenAIServer,
    http: httpx.AsyncClient,
    chunks: list[Any],
    expected: LlmResponse,
) -> None:
    fake_openai.reply_chunks(*chunks)

    response = await make_model(http, fake_openai.base_url).complete(USER, [])

    assert response.content == expected.content
    assert response.usage == expected.usage
    assert response.reasoning_content is None
    assert response.finish_reason == expected.finish_reason


async def test_a_streamed_call_id_that_is_not_text_is_replaced(
    fake_openai: FakeOpenAIServer, http: httpx.AsyncClient
) -> None:
    fake_openai.reply_chunks(
        delta_chunk(call({"index": 0, "id": 5, "function": fn('{"path": "a"}')})),
        delta_chunk({}, "tool_calls"),
    )

    response = await make_model(http, fake_openai.base_url).complete(USER, [])

    [request] = response.tool_calls
    assert request.id.startswith("call_") and request.name == "read_file"
    assert request.arguments == '{"path": "a"}'


# -- whole answers -------------------------------------------------------------------


def completion(message: Any = None, **fields: Any) -> dict[str, Any]:
    """A ``chat.completion`` body; ``message`` and ``fields`` may be junk of any type."""
    if message is None:
        message = {"role": "assistant", "content": "ok"}
    body: dict[str, Any] = {"choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}
    body.update(fields)
    return body


def with_calls(*calls: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": list(calls)}


MALFORMED_BODIES: dict[str, Any] = {
    "number": 12345,
    "list": [completion()],
    "text": "hello",
    "null": None,
    "choices-object": completion(choices={"0": {}}),
    "choices-empty": completion(choices=[]),
    "choice-text": completion(choices=["hi"]),
    "message-text": completion("hi"),
    "content-number": completion({"role": "assistant", "content": 12345}),
    "content-object": completion({"role": "assistant", "content": {"text": "hi"}}),
    "tool-calls-object": completion({"content": None, "tool_calls": {"id": "a"}}),
    "tool-call-text": completion(with_calls("read_file")),
    "function-text": completion(with_calls({"id": "a", "function": "read_file"})),
    "name-number": completion(with_calls({"id": "a", "function": fn(name=3)})),
    "arguments-number": completion(with_calls({"id": "a", "function": fn(5)})),
    "arguments-list": completion(with_calls({"id": "a", "function": fn(["x"])})),
}


@pytest.mark.parametrize("body", MALFORMED_BODIES.values(), ids=MALFORMED_BODIES.keys())
async def test_a_malformed_whole_answer_is_a_retriable_protocol_error(
    fake_openai: FakeOpenAIServer, http: httpx.AsyncClient, body: Any
) -> None:
    fake_openai.reply_json(body)

    with pytest.raises(LlmProtocolError) as caught:
        await make_model(http, fake_openai.base_url, stream=False).complete(USER, [])

    assert caught.value.retriable
    assert "the model sent a malformed response" in str(caught.value)


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
async def test_a_deeply_nested_body_is_a_protocol_error(
    fake_openai: FakeOpenAIServer, http: httpx.AsyncClient, stream: bool
) -> None:
    fake_openai.reply_raw(DEEP)  # application/json: a streaming request reads it whole

    with pytest.raises(LlmProtocolError, match="malformed response"):
        await make_model(http, fake_openai.base_url, stream=stream).complete(USER, [])


async def test_junk_in_side_information_of_a_whole_answer_is_dropped(
    fake_openai: FakeOpenAIServer, http: httpx.AsyncClient
) -> None:
    message = {"role": "assistant", "content": "ok", "reasoning_content": ["x"], "reasoning": 1}
    body = completion(message, usage={"prompt_tokens": 1.5, "completion_tokens": "2", "cost": []})
    body["choices"][0]["finish_reason"] = {"why": "stop"}
    fake_openai.reply_json(body)

    response = await make_model(http, fake_openai.base_url, stream=False).complete(USER, [])

    assert response.content == "ok"
    assert response.reasoning_content is None
    assert response.usage == Usage()
    assert response.finish_reason is None


async def test_whole_tool_calls_keep_what_can_be_kept(
    fake_openai: FakeOpenAIServer, http: httpx.AsyncClient
) -> None:
    fake_openai.reply_json(
        completion(
            with_calls(
                {"id": 7, "function": fn({"path": "a"})},  # id replaced, object as JSON text
                {"id": "b", "function": fn(None)},  # no arguments: the dispatcher says so
            )
        )
    )

    response = await make_model(http, fake_openai.base_url, stream=False).complete(USER, [])

    first, second = response.tool_calls
    assert first.id.startswith("call_") and json.loads(first.arguments) == {"path": "a"}
    assert (second.id, second.name, second.arguments) == ("b", "read_file", "")


# -- the round: fallback, then one plain sentence ------------------------------------


async def test_a_malformed_stream_falls_back_to_the_next_model(
    fake_openai: FakeOpenAIServer, http: httpx.AsyncClient
) -> None:
    fake_openai.reply_chunks(delta_chunk({"content": 12345}), FINISH, model="primary")
    fake_openai.reply_text("Hello from the backup.", model="backup")
    models = [make_model(http, fake_openai.base_url, name=n) for n in ("primary", "backup")]
    events: list[ev.TurnEvent] = []

    result = await call_llm_round(
        models, lambda _hints: list(USER), [], CancelScope(), TurnEmitter(events.append)
    )

    assert result.model == "backup" and result.response.content == "Hello from the backup."
    [fallback] = [e for e in events if isinstance(e, ev.ModelFallback)]
    assert (fallback.failed_model, fallback.next_model) == ("primary", "backup")
    assert "malformed response" in fallback.reason


async def test_when_every_model_is_malformed_the_turn_fails_in_plain_words(
    fake_openai: FakeOpenAIServer, http: httpx.AsyncClient
) -> None:
    fake_openai.reply_chunks(delta_chunk({"content": 12345}), FINISH, model="primary")
    fake_openai.reply_json(completion({"content": [1]}), model="backup")
    models = [
        make_model(http, fake_openai.base_url, name="primary"),
        make_model(http, fake_openai.base_url, name="backup", stream=False),
    ]

    with pytest.raises(TurnFailed) as caught:
        await call_llm_round(
            models, lambda _hints: list(USER), [], CancelScope(), TurnEmitter(None)
        )

    message = str(caught.value)
    assert message.count("the model sent a malformed response") == 2
    assert "TypeError" not in message and "Error:" not in message


class BrokenClient:
    """A model client with a bug of its own."""

    name = "broken"
    cache_hints = False

    async def complete(self, messages, tools, *, on_delta=None):  # type: ignore[no-untyped-def]
        return "".join([12345])  # type: ignore[list-item]


async def test_a_bug_in_a_model_client_falls_back_and_never_shows_its_exception(
    fake_openai: FakeOpenAIServer, http: httpx.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    with pytest.raises(TurnFailed) as caught:
        await call_llm_round(
            [BrokenClient()], lambda _hints: list(USER), [], CancelScope(), TurnEmitter(None)
        )

    message = str(caught.value)
    assert "broken: the model call failed unexpectedly (error " in message
    assert "TypeError" not in message
    error_id = message.split("(error ")[1][:6]
    assert any(error_id in r.getMessage() and r.exc_info for r in caplog.records)
