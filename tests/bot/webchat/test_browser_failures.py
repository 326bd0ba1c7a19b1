"""The page in Chromium when something goes wrong (found by review on 2026-12-07).

Each test says what the page did before."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from bot.http.operations import Operations
from bot.http.web import WEB_DECIDER
from engine.hub import Choice
from tests.bot.webchat.conftest import TOKEN, ChatServer
from tests.bot.webchat.test_browser import (
    KEEP_SOCKETS,
    RECORD_SENT,
    WAIT_MS,
    _evidence_on_failure,
    _send,
    _signed_in,
    chromium,
)
from tests.browser import ARTIFACTS, needs_chromium
from tests.fakes.openai_server import FakeOpenAIServer

pytestmark = [needs_chromium, pytest.mark.timeout(240)]
BEARER = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
async def browser() -> AsyncIterator[Any]:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    async with chromium() as browser:
        yield browser


async def _until(check: Any, what: str, seconds: float = 15.0) -> None:
    """Until ``check()`` (awaited) is true; a guard against a hang, not a timing test."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while not await check():
        assert loop.time() < deadline, f"never: {what}"
        await asyncio.sleep(0.01)


async def test_an_answer_with_a_fence_and_a_no_break_space_finishes_and_reloads(
    browser: Any, make_server, fake_openai: FakeOpenAIServer
):
    """Before: the answer stayed raw text under "working…" (the socket's events had died)
    and after a reload the history could not be read (HTTP 500)."""
    server: ChatServer = await make_server(page=True)
    context, page = await _signed_in(browser, server)
    fake_openai.reply_text("Here:\n\n```\u00a0\nprint('hi')\n```\n")
    async with _evidence_on_failure(page, ARTIFACTS, "webchat-fence-nbsp"):
        await _send(page, "show me code")
        await page.wait_for_selector(".msg.assistant:not(.streaming) pre code")
        await page.wait_for_selector("#send:text('Send')")
        await page.reload()
        await page.wait_for_selector(".msg.assistant pre code")
        assert await page.locator(".notice.error").count() == 0
    await context.close()


async def test_text_beside_a_call_made_while_the_history_loads_is_shown_once(
    browser: Any, make_server, fake_openai: FakeOpenAIServer
):
    """Before: the history showed it, and so did the frames replayed after it."""
    server: ChatServer = await make_server(page=True)
    context, page = await _signed_in(browser, server)
    conversation = page.url.split("#c=")[1]
    source = f"web:{conversation}"
    fake_openai.reply_tool_calls(("w1", "write_file", {"path": "a.txt", "content": "x\n"}))
    fake_openai.reply_tool_calls(
        ("r1", "read_file", {"path": "a.txt"}), content="Now let me read it back."
    )
    async with _evidence_on_failure(page, ARTIFACTS, "webchat-reload-beside-once"):
        await _send(page, "write a.txt then read it")
        await page.wait_for_selector(".card .choice.approve")

        held, asked = asyncio.Event(), asyncio.Event()

        async def hold(route: Any) -> None:
            asked.set()
            await held.wait()
            await route.continue_()

        await page.route(f"**/chat/conversations/{conversation}/messages*", hold)
        await page.reload()  # subscribed; its history read is held
        await asked.wait()
        [waiting] = await server.hub.pending_approvals(await server.hub.session_id(source))
        await Operations(server.hub.engine, server.hub).decide(
            waiting.tool_call_id, Choice.named("approve"), by=WEB_DECIDER
        )
        session_id = await server.hub.session_id(source)

        async def next_round_asks() -> bool:  # the text and read_file stored, the call asks
            pending = await server.hub.pending_approvals(session_id)
            return [item.name for item in pending] == ["read_file"]

        await _until(next_round_asks, "read_file asks")
        held.set()
        # The card comes after the text and the call: all three are handled by then.
        await page.wait_for_selector(".card:has-text('read_file') .choice.approve")
        bubbles = await page.evaluate(
            "[...document.querySelectorAll('#thread .msg.assistant')].map((n) => n.textContent)"
        )
        said = [bubble for bubble in bubbles if "Now let me read it back." in bubble]
        assert len(said) == 1, f"answer bubbles shown: {bubbles}"
    await context.close()


async def test_esc_stops_only_from_the_composer_or_with_nothing_focused(
    browser: Any, make_server, fake_openai: FakeOpenAIServer
):
    """Before: the first Esc in the ❌ reason box left it (for the page), and a second one
    stopped the whole turn, the card with it."""
    server: ChatServer = await make_server(page=True)
    context, page = await _signed_in(browser, server, init_script=RECORD_SENT)
    stops = "window.__sent.filter((type) => type === 'stop').length"
    for call in ("w1", "w2"):
        fake_openai.reply_tool_calls((call, "write_file", {"path": "a.txt", "content": "x\n"}))
    async with _evidence_on_failure(page, ARTIFACTS, "webchat-escape-twice"):
        await _send(page, "write a.txt")
        await page.click(".card .choice.reject")  # ❌: the reason box opens, focused
        await page.wait_for_selector(".card .reason input:focus")
        await page.keyboard.press("Escape")  # leaves the box, for its card
        assert not await page.evaluate("document.activeElement.matches('.reason input')")
        await page.keyboard.press("Escape")  # still in the card
        assert await page.evaluate(stops) == 0, "a second Esc in the card stopped the turn"
        await page.focus(".card .choice.approve")
        await page.keyboard.press("Escape")  # on a card's button
        assert await page.evaluate(stops) == 0
        assert await page.locator(".card:not(.closed) .choice.approve").count() == 1

        await page.evaluate("document.activeElement.blur()")  # nothing focused: it stops
        await page.keyboard.press("Escape")
        assert await page.evaluate(stops) == 1
        await page.wait_for_selector(".notice.error:has-text('Interrupted by user.')")

        # Sent with a click: SEND keeps the focus, in the composer, and Esc stops (the
        # first version of this rule stopped from the message box alone; found by review).
        await page.wait_for_selector("#send:text('Send')")
        await page.fill("#input", "write a.txt")
        await page.click("#send")
        await page.wait_for_selector(".card:not(.closed) .choice.approve")
        assert await page.evaluate("!!document.activeElement.closest('#composer')")
        await page.keyboard.press("Escape")
        await page.wait_for_function(f"{stops} === 2")
    await context.close()


async def _loopback_page(browser: Any, server: ChatServer) -> tuple[Any, Any]:
    context = await browser.new_context(viewport={"width": 1200, "height": 900})
    context.set_default_timeout(WAIT_MS)
    page = await context.new_page()
    await page.goto(f"{server.http}/chat")
    await page.wait_for_selector("#conversations li.current")
    await page.wait_for_selector("#send:text('Send')")
    return context, page


async def test_a_refused_new_or_delete_is_said_in_the_page(browser: Any, make_server):
    """Before: after a restart of the service (a loopback page's form token is drawn per
    process) New and Delete were refused with 403 and the page said nothing at all."""
    server: ChatServer = await make_server(page=True, token=None)  # loopback, no token
    context, page = await _loopback_page(browser, server)
    page.on("dialog", lambda dialog: asyncio.ensure_future(dialog.accept()))
    async with _evidence_on_failure(page, ARTIFACTS, "webchat-new-refused"):
        server.webchat.auth._loopback_csrf = secrets.token_hex(32)  # what a restart does
        await page.click("#new")
        await page.wait_for_selector(".notice.error:has-text('form token')")
        assert await page.locator("#conversations li").count() == 1

        await page.click("#delete")
        await page.locator(".notice.error:has-text('form token')").nth(1).wait_for()
        assert await page.locator("#conversations li").count() == 1
    await context.close()


async def test_a_tab_of_a_conversation_deleted_elsewhere_stops_reconnecting(
    browser: Any, make_server
):
    """Before: once its socket dropped, the tab showed "reconnecting…" and "Could not load
    the history: No such conversation." every 10 s, for ever."""
    server: ChatServer = await make_server(page=True)
    context, page = await _signed_in(browser, server, init_script=KEEP_SOCKETS)
    conversation = page.url.split("#c=")[1]
    await page.wait_for_selector("#send:text('Send')")
    async with httpx.AsyncClient(base_url=server.http, headers=BEARER) as http:
        other = (await http.post("/chat/conversations", json={"title": "Other"})).json()
        gone = await http.delete(f"/chat/conversations/{conversation}")  # another tab
        assert gone.status_code == 204
    async with _evidence_on_failure(page, ARTIFACTS, "webchat-deleted-reconnect"):
        await page.evaluate("window.__sockets.at(-1).close()")  # the network drops it
        await page.wait_for_selector(f"#conversations li.current[data-id='{other['id']}']")
        await page.wait_for_selector(".notice:has-text('was deleted')")
        await page.wait_for_selector("#send:text('Send')")
        assert page.url.endswith(f"#c={other['id']}")
        assert await page.locator(f"#conversations li[data-id='{conversation}']").count() == 0
        assert "reconnecting" not in (await page.text_content("#status") or "")
    await context.close()
