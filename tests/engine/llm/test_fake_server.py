"""The fake OpenAI-compatible server is shared by a worker's tests: what one test sets up
must not answer the next one's requests."""

from __future__ import annotations

import httpx

from tests.fakes.openai_server import FakeOpenAIServer, ScriptedReply


def _ask(fake: FakeOpenAIServer, text: str) -> httpx.Response:
    body = {"model": "m", "messages": [{"role": "user", "content": text}]}
    return httpx.post(f"{fake.base_url}/chat/completions", json=body, timeout=10)


def _said(text: str) -> ScriptedReply:
    return ScriptedReply("completion", content=text, finish_reason="stop")


def test_a_reset_forgets_the_answering_function_as_well_as_the_scripts(
    fake_openai: FakeOpenAIServer,
) -> None:
    fake_openai.respond = lambda messages: _said("from an earlier test")
    fake_openai.reply_text("scripted by an earlier test")
    fake_openai.reset()

    assert _ask(fake_openai, "hello").status_code == 500  # nothing scripted
    fake_openai.echo = True
    answer = _ask(fake_openai, "hello").json()
    assert answer["choices"][0]["message"]["content"] == "echo: hello"
