"""``/v1`` in ``chathub serve`` as it runs: the official client over the service's port,
and a conversation that survives ``kill -9`` of the service."""

from __future__ import annotations

import asyncio
import os
import signal

import openai

from tests.bot.completions.conftest import user_messages
from tests.bot.process import free_port, until_up
from tests.fakes.openai_server import FakeOpenAIServer

TOKEN = "served-v1-token-0123456789"
GUARD_S = 30.0  # against a hang, never a timing assertion


async def test_a_conversation_survives_kill_9_of_the_service(serve, fake_openai: FakeOpenAIServer):
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = {"HTTP_PORT": str(port), "CHATHUB_API_TOKEN": TOKEN}
    child = serve(**env)
    await asyncio.wait_for(until_up(base, child), GUARD_S)
    client = openai.AsyncOpenAI(base_url=f"{base}/v1", api_key=TOKEN, max_retries=0)
    fake_openai.reply_text("I will remember the number 7.")
    first = await client.chat.completions.create(
        model="main", user="keeper", messages=[{"role": "user", "content": "remember 7"}]
    )
    assert first.choices[0].message.content == "I will remember the number 7."
    os.kill(child.pid, signal.SIGKILL)
    child.wait(timeout=GUARD_S)

    child = serve(**env)
    await asyncio.wait_for(until_up(base, child), GUARD_S)
    fake_openai.reply_text("It was 7.")
    stream = await client.chat.completions.create(
        model="main",
        user="keeper",
        stream=True,
        messages=[
            {"role": "user", "content": "remember 7"},
            {"role": "assistant", "content": "I will remember the number 7."},
            {"role": "user", "content": "which number?"},
        ],
    )
    text = "".join([c.choices[0].delta.content or "" async for c in stream])
    assert text == "It was 7."
    request = fake_openai.requests[-1]
    assert user_messages(request) == ["remember 7", "which number?"]  # nothing twice
    assert "I will remember the number 7." in [m.get("content") for m in request["messages"]]
    listed = await client.models.list()
    assert "main" in [model.id for model in listed.data]
    await client.close()
