"""What ``/v1`` refuses, in OpenAI's error shape, before anything reaches the model; and
what it takes although it is odd (content parts, parameters it ignores)."""

from __future__ import annotations

import asyncio
import base64
import json
import socket
from typing import Any

import httpx
import openai
import pytest

from bot.checks.exposure import ApiExposureError
from bot.completions import CompletionsApi, ExchangeLimits
from bot.completions.asked import MAX_BODY_BYTES
from bot.http.app import create_app
from tests.bot.completions.conftest import GUARD_S, V1Server, until, user_messages
from tests.bot.completions.test_completions import WRITE, approve_the_card
from tests.fakes.openai_server import FakeOpenAIServer

HI = [{"role": "user", "content": "hi"}]


async def post(v1: V1Server, body: object, **kwargs) -> httpx.Response:
    async with v1.http() as http:
        return await http.post("/v1/chat/completions", json=body, **kwargs)


def refused(answer: httpx.Response, status: int, code: str | None = None) -> str:
    assert answer.status_code == status, answer.text
    error = answer.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert "Error" not in error["message"] and "Traceback" not in error["message"]
    if code is not None:
        assert error["code"] == code
    return error["message"]


@pytest.mark.parametrize(
    ("body", "said"),
    [
        ({"model": "main", "messages": []}, "at least one message"),
        ({"model": "main"}, "messages"),
        ({"model": "main", "messages": [{"role": "user", "content": "   "}]}, "empty"),
        ({"model": "main", "messages": [{"role": "wizard", "content": "hi"}]}, "role"),
        ({"model": "main", "messages": [{"role": "assistant", "content": "hi"}]}, "user's"),
        ({"model": "main", "messages": HI, "n": 2}, "n must be 1"),
        ({"model": "main", "messages": HI, "stream": "maybe"}, "stream"),
        ({"model": "", "messages": HI}, "model"),
        (["not", "an", "object"], "JSON object"),
        ({"model": "main", "messages": [{"role": "user", "content": 42}]}, "content"),
    ],
)
async def test_a_malformed_request_is_400_and_reaches_no_model(
    v1: V1Server, fake_openai: FakeOpenAIServer, body: object, said: str
):
    message = refused(await post(v1, body), 400)
    assert said in message
    assert fake_openai.requests == []


@pytest.mark.parametrize(
    ("body", "param", "said"),
    [
        (
            {"model": "main", "messages": [{"role": "user", "content": {"type": "text"}}]},
            "messages[0].content",
            "must be a string or a list of content parts",
        ),
        ({"model": "main", "messages": [*HI, "hi"]}, "messages[1]", "role and its content"),
        ({"model": "main", "messages": HI, "stream": "yes"}, "stream", "boolean"),
        ({"model": "main", "messages": HI, "stream": 1}, "stream", "boolean"),
        ({"model": "main", "messages": HI, "n": "1"}, "n", "integer"),
    ],
)
async def test_a_refusal_names_its_place_as_openai_does_and_nothing_of_pydantic(
    v1: V1Server, fake_openai: FakeOpenAIServer, body: object, param: str, said: str
):
    """``messages.0.content.str`` and "instance of ChatMessage" reached the client, and
    ``"stream": "yes"`` was taken as ``true`` (found by review on 2026-12-07)."""
    answer = await post(v1, body)
    message = refused(answer, 400)
    assert answer.json()["error"]["param"] == param
    assert message.startswith(f"{param}: ") and said in message
    assert "ChatMessage" not in message and ".str" not in message
    assert fake_openai.requests == []


async def test_a_model_that_is_not_an_agent_is_404_model_not_found(
    v1: V1Server, fake_openai: FakeOpenAIServer
):
    async with v1.client() as client:
        with pytest.raises(openai.NotFoundError) as missing:
            await client.chat.completions.create(model="gpt-4o", messages=HI)
    assert missing.value.code == "model_not_found"
    assert "main" in str(missing.value)
    assert fake_openai.requests == []


async def test_a_body_over_the_limit_is_413(v1: V1Server, fake_openai: FakeOpenAIServer):
    over = "x" * (MAX_BODY_BYTES + 1024)
    big = {"model": "main", "messages": [{"role": "user", "content": over}]}
    refused(await post(v1, big), 413, "request_too_large")
    reader, writer = await asyncio.open_connection("127.0.0.1", v1.port)
    writer.write(  # the body is never sent: refused from its content-length alone
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n"
        b"authorization: Bearer " + v1.api.token.encode() + b"\r\n"
        b"content-length: " + str(MAX_BODY_BYTES + 1).encode() + b"\r\n\r\n"
    )
    head = await asyncio.wait_for(reader.read(200), GUARD_S)
    writer.close()
    assert head.startswith(b"HTTP/1.1 413")
    assert fake_openai.requests == []


async def test_json_that_is_not_json_is_400(v1: V1Server):
    async with v1.http() as http:
        for raw in (b"{", b"NaN", b'{"model": 1e400}', b"[" * 100_000):
            answer = await http.post(
                "/v1/chat/completions", content=raw, headers={"content-type": "application/json"}
            )
            refused(answer, 400)


async def test_text_parts_are_taken_and_an_image_is_kept_as_an_attachment(
    v1: V1Server, fake_openai: FakeOpenAIServer, tmp_path
):
    fake_openai.reply_text("Read both parts.")
    fake_openai.reply_text("I see the file.")
    parts = [{"type": "text", "text": "first part"}, {"type": "text", "text": "second part"}]
    png = base64.b64encode(b"\x89PNG\r\n\x1a\nfake image bytes").decode()
    image = {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{png}"}}
    async with v1.client() as client:
        answer = await client.chat.completions.create(
            model="main", messages=[{"role": "user", "content": parts}]
        )
        await client.chat.completions.create(
            model="main",
            messages=[{"role": "user", "content": [{"type": "text", "text": "look"}, image]}],
        )
    assert answer.choices[0].message.content == "Read both parts."
    assert user_messages(fake_openai.requests[0]) == ["first part\nsecond part"]
    asked = json.dumps(fake_openai.requests[1]["messages"])
    kept = list((tmp_path / "workspace" / "uploads" / "api").rglob("*_image.png"))
    assert len(kept) == 1 and kept[0].read_bytes().startswith(b"\x89PNG")
    assert kept[0].name in asked  # the model is told the file's path


async def test_what_openais_clients_send_that_was_refused_is_taken(
    v1: V1Server, fake_openai: FakeOpenAIServer, tmp_path
):
    """Found by review, each answered 400 (a long name 400, not 404): ``"stream": null``
    (OpenAI's "not set"), an assistant's refusal part in the history, an image typed
    ``image/PNG`` or ``image/jpg``, and a photo of 1.5 MB (over a 1 MiB body)."""
    for _ in range(4):
        fake_openai.reply_text("ok")
    refusal = {"role": "assistant", "content": [{"type": "refusal", "refusal": "I can't"}]}
    history = [{"role": "user", "content": "a"}, refusal, {"role": "user", "content": "b"}]
    photo = base64.b64encode(b"\xff\xd8\xff\xe0" + b"x" * 1_500_000).decode()
    png = base64.b64encode(b"\x89PNG\r\n\x1a\nfake image bytes").decode()

    def image(url: str) -> list[dict[str, object]]:
        part = {"type": "image_url", "image_url": {"url": url}}
        return [{"role": "user", "content": [{"type": "text", "text": "look"}, part]}]

    for body in (
        {"model": "main", "messages": HI, "stream": None},
        {"model": "main", "messages": history},
        {"model": "main", "messages": image(f"data:image/PNG;base64,{png}")},
        {"model": "main", "messages": image(f"data:image/jpg;base64,{photo}"), "user": "p"},
    ):
        answer = await post(v1, body)
        assert answer.status_code == 200, answer.text
    kept = (tmp_path / "workspace" / "uploads" / "api").rglob("*_image.*")
    assert sorted(path.suffix for path in kept) == [".jpg", ".png"]
    refused(await post(v1, {"model": "x" * 70, "messages": HI}), 404, "model_not_found")


@pytest.mark.parametrize(
    ("part", "said"),
    [
        ({"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}, "data: URLs"),
        ({"type": "image_url", "image_url": {"url": "data:text/html;base64,PGI+"}}, "PNG"),
        ({"type": "image_url", "image_url": {"url": "data:image/png;base64,@@@"}}, "base64"),
        ({"type": "image_url", "image_url": {"url": "data:image/png;base64,"}}, "empty"),
        ({"type": "input_audio", "input_audio": {}}, "input_audio"),
        # It said text parts were not taken (found by review).
        ({"type": "text", "text": 42}, "'text' must be a string"),
    ],
)
async def test_a_part_that_cannot_be_taken_is_refused_clearly(
    v1: V1Server, fake_openai: FakeOpenAIServer, part: dict, said: str
):
    body = {"model": "main", "messages": [{"role": "user", "content": [part]}]}
    assert said in refused(await post(v1, body), 400)
    assert fake_openai.requests == []


async def test_parameters_for_a_model_are_ignored(v1: V1Server, fake_openai: FakeOpenAIServer):
    """The agent's model, sampling and tools are chathub's (docs/openai-api.md)."""
    fake_openai.reply_text("Still me.")
    async with v1.client() as client:
        answer = await client.chat.completions.create(
            model="main",
            messages=HI,
            temperature=1.7,
            max_tokens=5,
            top_p=0.1,
            stop=["x"],
            n=1,
            tools=[{"type": "function", "function": {"name": "f", "parameters": {}}}],
            response_format={"type": "json_object"},
            stream_options=None,
        )
    assert answer.choices[0].message.content == "Still me."
    sent = fake_openai.requests[-1]
    assert sent.get("temperature") != 1.7
    assert "f" not in [t["function"]["name"] for t in sent.get("tools", [])]


async def test_unknown_routes_and_methods_under_v1(v1: V1Server):
    async with v1.http() as http:
        refused(await http.get("/v1/embeddings"), 404, "unknown_url")
        wrong = await http.get("/v1/chat/completions")
        refused(wrong, 405, "method_not_allowed")
        assert wrong.headers["allow"] == "POST"
        wrong = await http.delete("/v1/models/main")  # was "no route" (found by review)
        refused(wrong, 405, "method_not_allowed")
        assert wrong.headers["allow"] == "GET"
        refused(await http.get("/v1/models/main/x"), 404, "unknown_url")
        refused(await http.get("/v1/models/"), 404, "unknown_url")  # no name: no route


async def test_a_conversation_name_that_is_not_printable_is_refused(v1: V1Server):
    body = {"model": "main", "messages": HI, "user": "a\x00b"}
    refused(await post(v1, body), 400)


async def test_a_nul_in_a_message_is_taken_as_a_replacement(
    v1: V1Server, fake_openai: FakeOpenAIServer
):
    """PostgreSQL stores no NUL in text: a message holding one was a 500 there."""
    fake_openai.reply_text("ok")
    body = {"model": "main", "messages": [{"role": "user", "content": "a\x00b"}]}
    assert (await post(v1, body)).status_code == 200
    assert user_messages(fake_openai.requests[-1])[-1] == "a\ufffdb"


async def test_a_retry_count_that_is_no_count_marks_no_retry(
    v1: V1Server, fake_openai: FakeOpenAIServer
):
    """``X-Stainless-Retry-Count`` of 0 or junk: the same words again are a new message."""
    body = {"model": "main", "messages": HI, "user": "carol"}
    for count in ("", "0", "-1", "one", "²", "9" * 400):
        fake_openai.reply_text(f"answer to {count!r}")
        answer = await post(v1, body, headers={"x-stainless-retry-count": count.encode()})
        assert answer.json()["choices"][0]["message"]["content"] == f"answer to {count!r}"
    assert user_messages(fake_openai.requests[-1]) == ["hi"] * 6


async def test_a_stream_whose_client_reads_nothing_is_bounded_and_the_turn_ends(
    v1: V1Server, fake_openai: FakeOpenAIServer
):
    """The answer is large and the client never reads: the server's writes wait on the
    socket (flow control), its buffer of the turn's events is bounded (it lags), and the
    turn still ends with its answer in the conversation."""
    answer = "word " * 20_000  # 100 KB in 20,000 deltas: about 4 MB of events
    fake_openai.reply_text(answer)
    body = json.dumps({"model": "main", "user": "silent", "stream": True, "messages": HI}).encode()
    with socket.create_connection(("127.0.0.1", v1.port)) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n"
            b"authorization: Bearer " + v1.api.token.encode() + b"\r\n"
            b"content-type: application/json\r\n"
            b"content-length: " + str(len(body)).encode() + b"\r\n\r\n" + body
        )

        async def ended() -> bool:
            said = await v1.api.last_answer("api:1")
            return bool(said) and not await v1.hub.is_busy("api:1")

        await until(ended, 3 * GUARD_S)
    assert (await v1.api.last_answer("api:1")).strip() == answer.strip()


async def test_without_a_token_v1_is_served_on_loopback_only(v1: V1Server, make_v1):
    api = CompletionsApi(v1.hub, v1.engine.store.db, lambda: ["main"], token=None)
    with pytest.raises(ApiExposureError):
        create_app(completions=api, host="0.0.0.0")
    local = await make_v1(token=None)  # on 127.0.0.1 any local client is let in
    async with httpx.AsyncClient(base_url=local.base) as http:
        assert (await http.get("/v1/models")).status_code == 200


async def test_an_internal_failure_answers_in_openais_error_shape(
    v1: V1Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug of ours on /v1: a 500 an OpenAI client can read (it was ``{"error": "..."}``,
    a string), with an error id and nothing of the exception."""
    from bot.completions.conversations import ConversationMap

    async def broken(*_args: Any, **_kwargs: Any) -> Any:
        raise RuntimeError("secret detail: connection refused")

    monkeypatch.setattr(ConversationMap, "find", broken)
    async with v1.http() as http:
        answer = await http.post(
            "/v1/chat/completions",
            json={"model": "main", "messages": [{"role": "user", "content": "hi"}]},
        )
    assert answer.status_code == 500
    error = answer.json()["error"]
    assert error["type"] == "server_error" and error["code"] == "internal_error"
    assert "internal error (id " in error["message"] and "secret" not in answer.text


@pytest.mark.parametrize("busy", [False, True], ids=["idle", "busy"])
async def test_a_message_too_long_is_a_400_whether_or_not_its_conversation_is_busy(
    make_v1: Any, fake_openai: FakeOpenAIServer, busy: bool
) -> None:
    """Queued behind a busy conversation, a streamed request has its 200 sent before it is
    read: the refusal came as an error event in a 200 stream, which the SDK raises as a
    bare ``APIError`` (found by review). It is read before it waits now."""
    v1 = await make_v1(limits=ExchangeLimits(decision_wait_s=60, keepalive_s=0.05))
    fake_openai.reply_tool_calls(WRITE)
    fake_openai.reply_text("Written.")
    async with v1.client() as client, v1.http() as http:
        if busy:
            first = await client.chat.completions.create(
                model="main",
                user="tabs",
                stream=True,
                messages=[{"role": "user", "content": "write"}],
            )
            async for piece in first:
                if "waits for approval" in (piece.choices[0].delta.content or ""):
                    break
        with pytest.raises(openai.BadRequestError) as refused:
            stream = await client.chat.completions.create(
                model="main",
                user="tabs",
                stream=True,
                messages=[{"role": "user", "content": "x" * 32_001}],
            )
            async for _ in stream:
                pass
        if busy:
            await approve_the_card(http)
            async for _ in first:
                pass
    assert "32,001 characters long; the limit is 32,000" in str(refused.value)
    assert refused.value.status_code == 400
