"""An answer the server fails to turn into a frame (found by review on 2026-12-07).

Before: a code fence whose info string is only Unicode whitespace (``"```\\u00a0"``, as
pasted text often has) raised in the Markdown writer (``"\\xa0".split()[0]``); the
socket's event pump died with it (no ``done``, nothing after it: the page stayed on
"working…") and the conversation's history answered 500 on every reload. Now such a
fence is a plain code block, and a frame the server still fails to build is logged under
an id and said in one sentence, the socket going on."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

import bot.webchat.transport as transport
from bot.webchat.markdown import render_markdown
from engine.session import Done, TextDelta
from tests.bot.webchat.conftest import TOKEN, ChatServer
from tests.fakes.openai_server import FakeOpenAIServer

ANSWER = "Here it is:\n\n```\u00a0\nprint('hi')\n```\n"


@pytest.mark.parametrize("space", ["\u00a0", "\u2003", "\u3000"])
def test_a_fence_with_only_a_unicode_space_as_its_info_string_is_a_plain_code_block(space: str):
    rendered = render_markdown(f"```{space}\nprint('hi')\n```")
    assert "<pre><code>print(&#x27;hi&#x27;)\n</code></pre>" in rendered


def test_a_language_after_a_unicode_space_is_still_named():
    assert '<code class="language-py">' in render_markdown("```\u00a0py\nx\n```")


def test_a_text_the_writer_fails_on_is_shown_escaped(monkeypatch: pytest.MonkeyPatch):
    """Any other fault of the writer: the text as it is, never a failed history page."""
    import bot.webchat.markdown as markdown

    def broken(self: Any, event: Any) -> None:
        raise IndexError("no")

    monkeypatch.setattr(markdown._Writer, "event", broken)
    assert render_markdown("a <b> *c*") == "<pre>a &lt;b&gt; *c*</pre>\n"


async def test_such_an_answer_reaches_the_tab_and_the_socket_goes_on(
    server: ChatServer, fake_openai: FakeOpenAIServer
):
    fake_openai.reply_text(ANSWER)
    client = await server.client()
    await client.send(type="message", text="show me code", ref="m1")
    frames = await client.until("done")
    assert frames[-1]["content"] == ANSWER
    assert "<pre><code>" in frames[-1]["html"]
    fake_openai.reply_text("Still here.")
    await client.send(type="message", text="and now?")
    assert (await client.until("done"))[-1]["content"] == "Still here."


async def test_the_history_holding_such_an_answer_still_loads(
    make_server, fake_openai: FakeOpenAIServer
):
    server: ChatServer = await make_server(stored=True)
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    async with httpx.AsyncClient(base_url=server.http, headers=bearer) as http:
        conversation = (await http.post("/chat/conversations", json={})).json()["id"]
        fake_openai.reply_text(ANSWER)
        await server.hub.send_message(f"web:{conversation}", "show me code")
        path = f"/chat/conversations/{conversation}/messages"
        deadline = asyncio.get_running_loop().time() + 15
        while asyncio.get_running_loop().time() < deadline:  # until the answer is stored
            page = await http.get(path)
            if page.status_code != 200 or len(page.json()["messages"]) == 2:
                break
            await asyncio.sleep(0.02)
    assert page.status_code == 200, page.text
    assert [m["text"] for m in page.json()["messages"]] == ["show me code", ANSWER]


async def test_a_frame_that_cannot_be_built_is_said_and_the_pump_goes_on(
    server: ChatServer, fake_openai: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch, caplog
):
    """Any fault of ours building one frame: a streamed part, then the answer itself."""
    real = transport.to_frame
    broken = [True]

    def failing(event: Any) -> Any:
        if broken[0] and isinstance(event, TextDelta | Done):
            raise RuntimeError("secret detail")
        return real(event)

    monkeypatch.setattr(transport, "to_frame", failing)
    fake_openai.reply_text("doomed answer")
    client = await server.client()
    await client.send(type="message", text="hi", ref="m1")
    frames = await client.until("error", code="turn")
    internal = [f for f in frames if f["type"] == "error" and f["code"] == "internal"]
    assert internal and "could not be shown" in internal[0]["message"]
    said = frames[-1]["message"]
    assert "could not be shown" in said and "secret" not in said
    assert any("web chat: showing a" in r.getMessage() for r in caplog.records)
    broken[0] = False
    fake_openai.reply_text("Still here.")
    await client.send(type="message", text="and now?")
    assert (await client.until("done"))[-1]["content"] == "Still here."
