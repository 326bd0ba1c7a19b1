"""OpenAICompatModel against the fake OpenAI server, over real HTTP."""

from __future__ import annotations

import itertools
import json
import socket

import httpx
import pytest

from engine.config import ModelConfig
from engine.llm.client import OpenAICompatModel
from engine.llm.types import (
    LlmConnectionError,
    LlmContextOverflow,
    LlmEndpointError,
    LlmError,
    LlmProtocolError,
    LlmRateLimited,
    LlmRequestError,
    LlmServerError,
    LlmTimeout,
    ToolCallRequest,
    Usage,
)
from engine.session.turn.cancel import CancelScope
from engine.session.turn.emitter import TurnEmitter
from engine.session.turn.llm_round import TurnFailed, call_llm_round
from tests.fakes.openai_server import FakeOpenAIServer, ScriptedReply, delta_chunk

USER = [{"role": "user", "content": "Hello?"}]
READ_FILE = {
    "type": "function",
    "function": {
        "name": "read_file",
        "description": "Read a file.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
    },
}
both_modes = pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])


def make_model(
    http: httpx.AsyncClient,
    base_url: str,
    *,
    stream: bool = True,
    timeout_s: float = 5.0,
    api_key: str = "",
    name: str = "fake-model",
) -> OpenAICompatModel:
    config = ModelConfig(
        name=name, base_url=base_url, api_key=api_key, timeout_s=timeout_s, stream=stream
    )
    return OpenAICompatModel(config, http)


# -- answers -------------------------------------------------------------------------


@both_modes
async def test_text_answer_carries_usage_and_cost(
    fake_openai: FakeOpenAIServer, http: httpx.AsyncClient, stream: bool
) -> None:
    fake_openai.reply_text("Hello there, friend.", usage=(12, 4), cost=0.00021)
    model = make_model(http, fake_openai.base_url, stream=stream)

    response = await model.complete(USER, [])

    assert response.content == "Hello there, friend."
    assert response.tool_calls == ()
    assert response.usage == Usage(input_tokens=12, output_tokens=4, cost=0.00021)
    assert response.finish_reason == "stop"
    assert response.model == "fake-model"
    sent = fake_openai.requests[0]
    assert sent["model"] == "fake-model"
    assert sent["messages"] == USER
    assert sent["stream"] is stream
    assert "tools" not in sent  # some servers reject an empty tools list
    assert ("stream_options" in sent) is stream
    if stream:
        assert sent["stream_options"] == {"include_usage": True}


async def test_usage_is_empty_when_the_server_sends_none(
    fake_openai: FakeOpenAIServer, http: httpx.AsyncClient
) -> None:
    fake_openai.reply_text("ok")
    response = await make_model(http, fake_openai.base_url).complete(USER, [])
    assert response.usage == Usage()


async def test_api_key_goes_as_bearer_token_only_when_configured(
    fake_openai: FakeOpenAIServer, http: httpx.AsyncClient
) -> None:
    fake_openai.reply_text("one")
    fake_openai.reply_text("two")

    await make_model(http, fake_openai.base_url, api_key="sk-test").complete(USER, [])
    await make_model(http, fake_openai.base_url).complete(USER, [])

    assert fake_openai.headers[0]["authorization"] == "Bearer sk-test"
    assert "authorization" not in fake_openai.headers[1]


@both_modes
async def test_several_tool_calls_come_back_with_raw_arguments(
    fake_openai: FakeOpenAIServer, http: httpx.AsyncClient, stream: bool
) -> None:
    fake_openai.reply_tool_calls(
        ("call_a", "read_file", '{"path": "notes/today.md"}'),
        ("call_b", "list_files", {"path": "."}),
        ("call_c", "write_file", '{"path": "x.txt", "content": '),  # malformed on purpose
        content="Let me look.",
        usage=(50, 30),
    )
    model = make_model(http, fake_openai.base_url, stream=stream)

    response = await model.complete(USER, [READ_FILE])

    assert response.tool_calls == (
        ToolCallRequest("call_a", "read_file", '{"path": "notes/today.md"}'),
        ToolCallRequest("call_b", "list_files", '{"path": "."}'),
        ToolCallRequest("call_c", "write_file", '{"path": "x.txt", "content": '),
    )
    assert response.content == "Let me look."
    assert response.finish_reason == "tool_calls"
    assert response.usage.input_tokens == 50
    assert fake_openai.requests[0]["tools"] == [READ_FILE]


async def test_streamed_deltas_arrive_in_order_and_add_up_to_the_content(
    fake_openai: FakeOpenAIServer, http: httpx.AsyncClient
) -> None:
    text = "The quick brown fox jumps over the lazy dog.\nTwice, even."
    fake_openai.reply_text(text)
    deltas: list[str] = []

    response = await make_model(http, fake_openai.base_url).complete(
        USER, [], on_delta=deltas.append
    )

    assert len(deltas) > 5
    assert "".join(deltas) == text == response.content


async def test_without_streaming_the_content_arrives_as_one_delta(
    fake_openai: FakeOpenAIServer, http: httpx.AsyncClient
) -> None:
    fake_openai.reply_text("All at once.")
    deltas: list[str] = []

    await make_model(http, fake_openai.base_url, stream=False).complete(
        USER, [], on_delta=deltas.append
    )

    assert deltas == ["All at once."]


@both_modes
@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
async def test_reasoning_is_kept_apart_from_the_content(
    fake_openai: FakeOpenAIServer, http: httpx.AsyncClient, stream: bool, field: str
) -> None:
    fake_openai.reply_text(
        "It is 4.", reasoning="Two plus two... carry nothing... four.", reasoning_field=field
    )
    deltas: list[str] = []

    response = await make_model(http, fake_openai.base_url, stream=stream).complete(
        USER, [], on_delta=deltas.append
    )

    assert response.reasoning_content == "Two plus two... carry nothing... four."
    assert response.content == "It is 4."
    assert "".join(deltas) == "It is 4."  # reasoning never leaks into the visible text


async def test_reasoning_in_history_is_sent_back_as_given(
    fake_openai: FakeOpenAIServer, http: httpx.AsyncClient
) -> None:
    history = [
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "4", "reasoning_content": "add them"},
        {"role": "user", "content": "and 3+3?"},
    ]
    fake_openai.reply_text("6")

    await make_model(http, fake_openai.base_url).complete(history, [])

    assert fake_openai.requests[0]["messages"] == history


@both_modes
async def test_an_empty_answer_has_no_content_and_no_tool_calls(
    fake_openai: FakeOpenAIServer, http: httpx.AsyncClient, stream: bool
) -> None:
    fake_openai.reply_empty()

    response = await make_model(http, fake_openai.base_url, stream=stream).complete(USER, [])

    assert response.content is None
    assert response.tool_calls == ()
    assert response.reasoning_content is None


async def test_a_server_that_ignores_stream_is_still_understood(
    fake_openai: FakeOpenAIServer, http: httpx.AsyncClient
) -> None:
    completion = {
        "choices": [{"message": {"role": "assistant", "content": "plain"}, "finish_reason": "stop"}]
    }
    fake_openai.reply_raw(json.dumps(completion))
    deltas: list[str] = []

    response = await make_model(http, fake_openai.base_url).complete(
        USER, [], on_delta=deltas.append
    )

    assert response.content == "plain"
    assert deltas == ["plain"]


async def test_a_lone_surrogate_from_the_server_becomes_a_replacement_character(
    fake_openai: FakeOpenAIServer, http: httpx.AsyncClient
) -> None:
    """JSON's "\\ud83d" is valid (a server writes one when a token cuts an emoji) but no
    character: storing it failed the turn (found by review). A pair is joined."""
    completion = {
        "choices": [
            {
                "message": {
                    "role": "assistant",
                    "content": "smile \ud83d and \ud83d\ude00",
                    "reasoning_content": "hm \udc00",
                    "tool_calls": [
                        {
                            "id": "c1",
                            "type": "function",
                            "function": {"name": "read_file", "arguments": '{"path": "a\udfff"}'},
                        }
                    ],
                },
                "finish_reason": "tool_calls",
            }
        ]
    }
    fake_openai.reply_raw(json.dumps(completion))

    response = await make_model(http, fake_openai.base_url).complete(USER, [])

    assert response.content == "smile \ufffd and \U0001f600"
    assert response.reasoning_content == "hm \ufffd"
    assert response.tool_calls[0].arguments == '{"path": "a\ufffd"}'
    for text in (response.content, response.reasoning_content, response.tool_calls[0].arguments):
        text.encode("utf-8")  # storable


async def test_a_pair_split_across_streamed_deltas_is_joined(
    fake_openai: FakeOpenAIServer, http: httpx.AsyncClient
) -> None:
    """A token that cuts an emoji sends its halves in two deltas: each became U+FFFD
    (found by review). A half that never finds its pair is one U+FFFD at the end."""
    fake_openai.reply_chunks(
        delta_chunk({"role": "assistant", "content": "smile \ud83d"}),
        delta_chunk({"content": "\ude00 ok \ud83d"}, "stop"),
    )
    deltas: list[str] = []
    model = make_model(http, fake_openai.base_url, stream=True)
    response = await model.complete(USER, [], on_delta=deltas.append)
    assert response.content == "smile \U0001f600 ok \ufffd"
    assert "".join(deltas) == "smile \U0001f600 ok "


# -- failures ------------------------------------------------------------------------


@both_modes
@pytest.mark.parametrize(
    ("status", "kind", "retriable"),
    [
        (429, LlmRateLimited, True),
        (408, LlmTimeout, True),
        (500, LlmServerError, True),
        (503, LlmServerError, True),
        (400, LlmRequestError, False),
        # The endpoint refuses whatever is asked (a key revoked, credit gone, a model
        # removed): the next model is tried (until 2026-12-07 the turn ended; found by
        # review).
        (401, LlmEndpointError, True),
        (402, LlmEndpointError, True),
        (403, LlmEndpointError, True),
        (404, LlmEndpointError, True),
    ],
)
async def test_http_errors_map_to_llm_errors(
    fake_openai: FakeOpenAIServer,
    http: httpx.AsyncClient,
    stream: bool,
    status: int,
    kind: type[LlmError],
    retriable: bool,
) -> None:
    fake_openai.reply_error(status, "the server explains why")
    model = make_model(http, fake_openai.base_url, stream=stream)

    with pytest.raises(kind) as caught:
        await model.complete(USER, [])

    assert caught.value.retriable is retriable
    assert caught.value.status == status
    assert caught.value.model == "fake-model"
    assert "the server explains why" in str(caught.value)


async def test_a_stream_of_keep_alive_comments_alone_times_out(
    fake_openai: FakeOpenAIServer, http: httpx.AsyncClient
) -> None:
    """A provider queueing the request sends ``: PROCESSING`` comments: each reset httpx's
    read timeout, and the turn hung until /stop (found by review on 2026-12-07). Here each
    line takes a second on the stream's clock."""
    keep_alive = ": OPENROUTER PROCESSING\n\n" * 30
    fake_openai.reply_raw(keep_alive + 'data: {"x": 1}\n\n', content_type="text/event-stream")
    ticks = itertools.count()
    config = ModelConfig(name="m", base_url=fake_openai.base_url, timeout_s=4, stream=True)
    model = OpenAICompatModel(config, http, clock=lambda: float(next(ticks)))

    with pytest.raises(LlmTimeout, match="no answer within 20 s"):  # 5 × timeout_s
        await model.complete(USER, [])


@pytest.mark.parametrize("status", [401, 403, 404])
async def test_a_key_or_model_the_endpoint_refuses_falls_back_to_the_next_model(
    fake_openai: FakeOpenAIServer, http: httpx.AsyncClient, status: int
) -> None:
    """A key revoked, a model removed: until 2026-12-07 the turn ended with the configured
    fallback (another endpoint, another key) never asked (found by review)."""
    fake_openai.reply_error(status, "Incorrect API key provided", model="primary")
    fake_openai.reply_text("Hello from the backup.", model="backup")
    models = [make_model(http, fake_openai.base_url, name=n) for n in ("primary", "backup")]

    result = await call_llm_round(
        models, lambda _hints: list(USER), [], CancelScope(), TurnEmitter(None)
    )

    assert result.model == "backup" and result.response.content == "Hello from the backup."


#: Gemini's OpenAI-compatible endpoint answers errors as a JSON list; a bad key is a 400.
GEMINI_BAD_KEY = [
    {
        "error": {
            "code": 400,
            "message": "API key not valid. Please pass a valid API key.",
            "status": "INVALID_ARGUMENT",
            "details": [
                {
                    "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                    "reason": "API_KEY_INVALID",
                    "domain": "googleapis.com",
                    "metadata": {"service": "generativelanguage.googleapis.com"},
                },
                {
                    "@type": "type.googleapis.com/google.rpc.LocalizedMessage",
                    "locale": "en-US",
                    "message": "API key not valid. Please pass a valid API key.",
                },
            ],
        }
    }
]
GEMINI_QUOTA = [
    {
        "error": {
            "code": 429,
            "message": "You exceeded your current quota, please check your plan and billing "
            "details.",
            "status": "RESOURCE_EXHAUSTED",
            "details": [
                {
                    "@type": "type.googleapis.com/google.rpc.QuotaFailure",
                    "violations": [
                        {
                            "quotaMetric": "generativelanguage.googleapis.com/"
                            "generate_content_free_tier_requests",
                            "quotaId": "GenerateRequestsPerMinutePerProjectPerModel-FreeTier",
                        }
                    ],
                },
                {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "37s"},
            ],
        }
    }
]


def _gemini(status: int, body: object) -> ScriptedReply:
    return ScriptedReply("error", status=status, body=json.dumps(body, indent=2).encode())


async def test_a_gemini_error_is_told_in_its_own_sentence_not_as_raw_json(
    fake_openai: FakeOpenAIServer, http: httpx.AsyncClient
) -> None:
    """Its list was shown as it came, 500 characters of JSON (found by review on
    2026-12-07)."""
    fake_openai.enqueue(_gemini(429, GEMINI_QUOTA), model="gemini-2.5-flash")
    model = make_model(http, fake_openai.base_url, name="gemini-2.5-flash")

    with pytest.raises(TurnFailed) as caught:
        await call_llm_round([model], lambda _h: list(USER), [], CancelScope(), TurnEmitter(None))

    shown = str(caught.value)
    assert "You exceeded your current quota" in shown
    assert "@type" not in shown and "[" not in shown and "{" not in shown, shown


async def test_a_gemini_key_that_is_not_valid_falls_back_to_the_next_model(
    fake_openai: FakeOpenAIServer, http: httpx.AsyncClient
) -> None:
    """Gemini says a bad key with a 400: the turn ended with "the model rejected the
    request", the configured fallback never asked (found by review on 2026-12-07)."""
    fake_openai.enqueue(_gemini(400, GEMINI_BAD_KEY), model="gemini-2.5-flash")
    fake_openai.reply_text("Hello from the backup.", model="backup")
    models = [
        make_model(http, fake_openai.base_url, name=n) for n in ("gemini-2.5-flash", "backup")
    ]

    result = await call_llm_round(
        models, lambda _hints: list(USER), [], CancelScope(), TurnEmitter(None)
    )

    assert result.model == "backup"


async def test_a_short_retry_after_on_the_last_model_is_waited_out_once(
    fake_openai: FakeOpenAIServer, http: httpx.AsyncClient
) -> None:
    """A one-model install met every brief rate limit as a failed turn, though the
    endpoint said when to ask again (found by review on 2026-12-07)."""
    fake_openai.reply_error(429, "Rate limit reached", model="only", retry_after="0")
    fake_openai.reply_text("Hi!", model="only")
    model = make_model(http, fake_openai.base_url, name="only")

    result = await call_llm_round(
        [model], lambda _hints: list(USER), [], CancelScope(), TurnEmitter(None)
    )

    assert result.response.content == "Hi!" and len(fake_openai.requests) == 2


@pytest.mark.parametrize("retry_after", [None, "60", "Wed, 21 Oct 2026 07:28:00 GMT"])
async def test_a_rate_limit_without_a_short_wait_ends_the_turn_at_once(
    fake_openai: FakeOpenAIServer, http: httpx.AsyncClient, retry_after: str | None
) -> None:
    fake_openai.reply_error(429, "Rate limit reached", model="only", retry_after=retry_after)
    model = make_model(http, fake_openai.base_url, name="only")

    with pytest.raises(TurnFailed, match="Rate limit reached"):
        await call_llm_round(
            [model], lambda _hints: list(USER), [], CancelScope(), TurnEmitter(None)
        )

    assert len(fake_openai.requests) == 1


async def test_a_rate_limited_model_with_a_fallback_moves_on_at_once(
    fake_openai: FakeOpenAIServer, http: httpx.AsyncClient
) -> None:
    fake_openai.reply_error(429, "Rate limit reached", model="primary", retry_after="0")
    fake_openai.reply_text("Hello from the backup.", model="backup")
    models = [make_model(http, fake_openai.base_url, name=n) for n in ("primary", "backup")]

    result = await call_llm_round(
        models, lambda _hints: list(USER), [], CancelScope(), TurnEmitter(None)
    )

    assert result.model == "backup" and len(fake_openai.requests) == 2


async def test_a_web_page_for_an_answer_is_said_so_not_shown(
    fake_openai: FakeOpenAIServer, http: httpx.AsyncClient
) -> None:
    """A base URL that is a web server's: its HTML error page reached the chat."""
    page = b"<!DOCTYPE html><html><head><title>404 Not Found</title></head></html>"
    fake_openai.enqueue(ScriptedReply("error", status=404, body=page), model="primary")
    model = make_model(http, fake_openai.base_url, name="primary")

    with pytest.raises(TurnFailed) as caught:
        await call_llm_round(
            [model], lambda _hints: list(USER), [], CancelScope(), TurnEmitter(None)
        )

    assert "<" not in str(caught.value) and "a web page, not an API's answer" in str(caught.value)


@both_modes
@pytest.mark.parametrize(
    ("status", "said"),
    [
        (400, "This model's maximum context length is 8192 tokens. However, you requested 9001"),
        (400, "the request exceeds the available context size, try increasing it"),  # llama.cpp
        (400, "prompt is too long: 210000 tokens > 200000 maximum"),
        (422, "Input is too long for requested model."),
        (413, "Request Entity Too Large"),
    ],
)
async def test_a_request_over_the_context_window_is_told_apart(
    fake_openai: FakeOpenAIServer,
    http: httpx.AsyncClient,
    stream: bool,
    status: int,
    said: str,
) -> None:
    """The turn leaves older tool output out and asks again only for this error."""
    fake_openai.reply_error(status, said)
    with pytest.raises(LlmContextOverflow) as caught:
        await make_model(http, fake_openai.base_url, stream=stream).complete(USER, [])
    assert caught.value.status == status and said in str(caught.value)
    assert not caught.value.retriable


async def test_other_request_errors_and_in_band_overflows(
    fake_openai: FakeOpenAIServer, http: httpx.AsyncClient
) -> None:
    fake_openai.reply_error(400, "Invalid schema for function 'echo'")
    with pytest.raises(LlmRequestError) as caught:
        await make_model(http, fake_openai.base_url).complete(USER, [])
    assert not isinstance(caught.value, LlmContextOverflow)
    error = {"message": "This endpoint's maximum context length is 4096 tokens", "code": 400}
    fake_openai.reply_raw(json.dumps({"error": error}))  # OpenRouter: in a 200 answer
    with pytest.raises(LlmContextOverflow):
        await make_model(http, fake_openai.base_url, stream=False).complete(USER, [])


async def test_a_long_error_text_is_truncated(
    fake_openai: FakeOpenAIServer, http: httpx.AsyncClient
) -> None:
    fake_openai.reply_error(400, "bad " * 5000)

    with pytest.raises(LlmRequestError) as caught:
        await make_model(http, fake_openai.base_url).complete(USER, [])

    assert 100 < len(str(caught.value)) < 1000


async def test_an_error_object_inside_a_200_answer_is_an_error(
    fake_openai: FakeOpenAIServer, http: httpx.AsyncClient
) -> None:
    fake_openai.reply_raw(json.dumps({"error": {"message": "upstream overloaded", "code": 502}}))

    with pytest.raises(LlmServerError, match="upstream overloaded"):
        await make_model(http, fake_openai.base_url, stream=False).complete(USER, [])


async def test_an_error_chunk_mid_stream_is_an_error(
    fake_openai: FakeOpenAIServer, http: httpx.AsyncClient
) -> None:
    chunk = {"choices": [{"index": 0, "delta": {"content": "Hal"}}]}
    error = {"error": {"message": "rate limit hit mid-stream", "code": 429}}
    body = f"data: {json.dumps(chunk)}\n\ndata: {json.dumps(error)}\n\n"
    fake_openai.reply_raw(body, content_type="text/event-stream")

    with pytest.raises(LlmRateLimited, match="mid-stream"):
        await make_model(http, fake_openai.base_url).complete(USER, [])


@both_modes
async def test_a_hanging_server_times_out(
    fake_openai: FakeOpenAIServer, http: httpx.AsyncClient, stream: bool
) -> None:
    fake_openai.reply_hang()
    model = make_model(http, fake_openai.base_url, stream=stream, timeout_s=0.3)

    with pytest.raises(LlmTimeout) as caught:
        await model.complete(USER, [])

    assert caught.value.retriable


async def test_a_stream_that_stalls_midway_times_out(
    fake_openai: FakeOpenAIServer, http: httpx.AsyncClient
) -> None:
    fake_openai.reply_hang(partial="I was about to say")
    deltas: list[str] = []
    model = make_model(http, fake_openai.base_url, timeout_s=0.3)

    with pytest.raises(LlmTimeout):
        await model.complete(USER, [], on_delta=deltas.append)

    assert "".join(deltas) == "I was about to say"


@both_modes
async def test_a_key_no_header_can_carry_is_an_llm_error(
    fake_openai: FakeOpenAIServer, http: httpx.AsyncClient, stream: bool
) -> None:
    """A key pasted with a typographic dash raised UnicodeEncodeError out of the client,
    which promises an LlmError for every failure (found by review)."""
    model = make_model(http, fake_openai.base_url, stream=stream, api_key="sk\u2010live0123")
    with pytest.raises(LlmConnectionError, match="address or API key cannot be used"):
        await model.complete(USER, [])


@both_modes
async def test_an_answer_that_does_not_decode_is_an_llm_error(
    fake_openai: FakeOpenAIServer, http: httpx.AsyncClient, stream: bool
) -> None:
    """A Content-Encoding the body has not (a proxy's) raised httpx.DecodingError out of
    the client, and the fallback model was never asked (found by review on 2026-12-07)."""
    fake_openai.reply_raw(b"not gzip at all", content_encoding="gzip")
    model = make_model(http, fake_openai.base_url, stream=stream)
    with pytest.raises(LlmConnectionError, match="could not be read") as caught:
        await model.complete(USER, [])
    assert caught.value.retriable


async def test_a_refused_connection_is_a_connection_error(http: httpx.AsyncClient) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    model = make_model(http, f"http://127.0.0.1:{port}/v1", timeout_s=2)

    with pytest.raises(LlmConnectionError) as caught:
        await model.complete(USER, [])

    assert caught.value.retriable


@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        ("<html>Bad gateway</html>", "text/html"),
        ("{not json", "application/json"),
        ('{"id": "chatcmpl-1", "object": "chat.completion"}', "application/json"),
        ('{"choices": []}', "application/json"),
        ('{"choices": [{"message": "hi"}]}', "application/json"),
        ("data: {oops\n\n", "text/event-stream"),
        ("data: [DONE]\n\n", "text/event-stream"),
        ('data: {"choices": [{"delta": {"content": "cut"}}]}\n\n', "text/event-stream"),
    ],
    ids=[
        "html",
        "broken-json",
        "no-choices",
        "empty-choices",
        "message-not-object",
        "broken-chunk",
        "no-chunks",
        "cut-short",
    ],
)
async def test_a_body_that_is_not_a_completion_is_a_protocol_error(
    fake_openai: FakeOpenAIServer, http: httpx.AsyncClient, body: str, content_type: str
) -> None:
    fake_openai.reply_raw(body, content_type=content_type)
    stream = content_type == "text/event-stream"

    with pytest.raises(LlmProtocolError) as caught:
        await make_model(http, fake_openai.base_url, stream=stream).complete(USER, [])

    assert caught.value.retriable


async def test_an_unscripted_request_fails_loudly(
    fake_openai: FakeOpenAIServer, http: httpx.AsyncClient
) -> None:
    with pytest.raises(LlmServerError, match="no scripted response"):
        await make_model(http, fake_openai.base_url).complete(USER, [])
