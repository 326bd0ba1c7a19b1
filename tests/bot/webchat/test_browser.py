"""The web chat page in a real browser: Debian's Chromium driven by Playwright.

Sign in as for the inbox, send, watch the answer stream and render (HTML in it shown as
text), approve a card, answer a question, press STOP, stop with Esc, reload in the middle
of a turn and see STOP still shown and then the answer, open a second tab on the same
conversation. Screenshots at desktop and phone widths go to ``test-artifacts/`` (or
``$CHATHUB_TEST_ARTIFACTS``).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from bot.http.operations import Operations
from bot.http.web import WEB_DECIDER
from bot.webchat.conversations import source_of
from bot.webchat.limits import SocketLimits
from engine.core import Engine
from engine.hub import ChatHub, Choice
from scheduler.service import Scheduler
from tests.bot.webchat.conftest import TOKEN, ChatServer
from tests.browser import ARTIFACTS, CHROMIUM, OFFLINE, needs_chromium
from tests.clock import FakeClock
from tests.fakes.openai_server import FakeOpenAIServer

WAIT_MS = 60_000  # a guard against a hang, never a timing assertion (20 s once ran out
# for the first answer on the loaded 2-core CI machine)

# A whole page's scenario, each step guarded by WAIT_MS: more than the suite's 60 s.
pytestmark = [needs_chromium, pytest.mark.timeout(240)]


@pytest.fixture
def artifacts() -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS


@asynccontextmanager
async def chromium(*extra: str) -> AsyncIterator[Any]:
    """Debian's Chromium (never a downloaded browser), headless, offline, with ``extra``."""
    from playwright.async_api import async_playwright

    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=[*OFFLINE, *extra]
        )
        try:
            yield browser
        finally:
            await browser.close()


@pytest.fixture
async def browser() -> AsyncIterator[Any]:
    async with chromium() as browser:
        yield browser


@asynccontextmanager
async def _evidence_on_failure(page: Any, artifacts: Path, name: str) -> AsyncIterator[None]:
    """Keep a screenshot and the page's address and text when a step fails, to read later."""
    try:
        yield
    except Exception as error:
        await page.screenshot(path=str(artifacts / f"{name}-failed.png"), full_page=True)
        text = await page.evaluate("document.body ? document.body.innerText : ''")
        error.add_note(f"the page at {page.url} showed: {text[:500]!r}")
        raise


async def _sign_in(page: Any, base: str, artifacts: Path) -> None:
    """From the sign-in page the chat sent us to, back to the chat."""
    await page.fill("input[name=token]", TOKEN)
    # Listen before clicking: on a loaded machine the page can load and set its #c= hash
    # before the click returns, and a wait_for_url begun after that waits for ever.
    signing_in = page.expect_navigation(url=f"{base}/chat")
    async with _evidence_on_failure(page, artifacts, "webchat-sign-in"), signing_in:
        await page.click('form[action="/login"] button')


async def _send(page: Any, text: str) -> None:
    await page.fill("#input", text)
    await page.press("#input", "Enter")


async def _taken(server: ChatServer, text: str) -> None:
    """Until the server has taken the message (stored, waiting for its turn)."""
    queue = server.hub.engine.store.queue
    for _ in range(1000):
        if any(row.content == text for row in await queue.pending()):
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{text!r} was never taken")


async def test_the_page_in_chromium(
    browser: Any, make_server, fake_openai: FakeOpenAIServer, artifacts: Path
):
    server: ChatServer = await make_server(page=True)
    base = server.http
    context = await browser.new_context(viewport={"width": 1200, "height": 900})
    context.set_default_timeout(WAIT_MS)
    page = await context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))

    # Signed out: the page sends you to the inbox's sign-in, and the sign-in back here.
    await page.goto(f"{base}/chat")
    assert page.url.endswith("/login?next=/chat")
    await _sign_in(page, base, artifacts)
    await page.wait_for_selector("#conversations li.current")

    # A streamed answer, rendered from the server's HTML; the model's HTML is text.
    fake_openai.reply_text(
        "**Hello** from the web. <script>window.hacked = 1</script>\n\n```python\nprint('hi')\n```"
    )
    await _send(page, "hi <b>there</b>")
    await page.wait_for_selector(".msg.assistant strong:text('Hello')")
    assert await page.text_content(".msg.user") == "hi <b>there</b>"
    assert "<script>window.hacked = 1</script>" in await page.text_content(".msg.assistant")
    assert await page.evaluate("window.hacked") is None
    assert await page.locator(".msg.assistant pre .copy").count() == 1
    assert await page.text_content("#send") == "Send"

    # A card: approve it by clicking.
    hostile = "<img src=x onerror=window.hacked=3>"
    fake_openai.reply_tool_calls(("w1", "write_file", {"path": "page.txt", "content": hostile}))
    fake_openai.reply_text("Wrote page.txt.")
    await _send(page, "write page.txt")
    await page.wait_for_selector(".card .choice.approve")
    assert await page.text_content("#send") == "Stop"
    await page.screenshot(path=str(artifacts / "webchat-card-desktop.png"), full_page=True)
    assert hostile in await page.text_content(".card pre")  # tool arguments are text
    assert hostile in await page.text_content(".tool")
    await page.click(".card .choice.approve")
    await page.wait_for_selector(".card.closed .outcome:has-text('Approved')")
    assert await page.evaluate("window.hacked") is None
    await page.wait_for_selector(".msg.assistant:has-text('Wrote page.txt.')")

    # A question: answer it in its box.
    fake_openai.reply_tool_calls(("q1", "ask_user_clarification", {"question": "Which colour?"}))
    fake_openai.reply_text("Blue, then.")
    await _send(page, "paint it")
    await page.fill(".question textarea", "blue")
    await page.click(".question button")
    await page.wait_for_selector(".question.closed .outcome:has-text('blue')")
    await page.wait_for_selector(".msg.assistant:has-text('Blue, then.')")

    # STOP while the answer streams; then Esc stops the next one.
    fake_openai.reply_hang(partial="Working on it ")
    await _send(page, "take your time")
    await page.wait_for_selector(".msg.assistant.streaming:has-text('Working on it')")
    assert await page.text_content("#send") == "Stop"
    await page.click("#send")
    await page.wait_for_selector(".notice.error:has-text('Interrupted by user.')")
    await page.wait_for_selector("#send:text('Send')")
    fake_openai.reply_hang(partial="Again ")
    await _send(page, "once more")
    await page.wait_for_selector(".msg.assistant.streaming:has-text('Again')")
    await page.keyboard.press("Escape")
    await page.locator(".notice.error:has-text('Interrupted by user.')").nth(1).wait_for()
    await page.wait_for_selector("#send:text('Send')")

    # Reload in the middle of a turn: STOP is still shown, the card too, and the message
    # sent behind it, waiting for its turn; then the answers.
    fake_openai.reply_tool_calls(("w2", "write_file", {"path": "reload.txt", "content": "y\n"}))
    fake_openai.reply_text("Written after the reload.")
    await _send(page, "write reload.txt")
    await page.wait_for_selector(".card:not(.closed) .choice.approve")
    await _send(page, "and then that")
    await _taken(server, "and then that")
    await page.reload()
    await page.wait_for_selector("#send:text('Stop')")
    await page.wait_for_selector(".card:not(.closed) .choice.approve")
    await page.wait_for_selector(".msg.user.queued:has-text('and then that')")

    # A second tab on the same conversation shows the same thread and the same card.
    second = await context.new_page()
    await second.goto(page.url)
    await second.wait_for_selector(".msg.user:has-text('write reload.txt')")
    await second.wait_for_selector(".card:not(.closed) .choice.approve")
    await second.click(".card:not(.closed) .choice.approve")  # decided in tab two...
    await page.wait_for_selector(".msg.assistant:has-text('Written after the reload.')")
    # The turn took it once it went on (the model read it beside the call's result).
    assert await page.locator(".msg.user:has-text('and then that')").count() == 1
    assert await page.locator(".msg.user.queued").count() == 0
    await page.wait_for_selector("#send:text('Send')")
    assert await page.locator(".card:not(.closed)").count() == 0  # ...closed in tab one
    await second.wait_for_selector(".msg.assistant:has-text('Written after the reload.')")

    # Titles are text too.
    await page.evaluate(
        "fetch('/chat/conversations', {method: 'POST', credentials: 'same-origin', headers:"
        " {'Content-Type': 'application/json', 'X-CSRF-Token':"
        " document.querySelector('meta[name=csrf]').content},"
        " body: JSON.stringify({title: '<img src=x onerror=window.hacked=2>'})})"
    )
    await page.reload()
    await page.wait_for_selector("#conversations li:has-text('<img src=x')")
    assert await page.evaluate("window.hacked") is None

    await page.screenshot(path=str(artifacts / "webchat-desktop.png"), full_page=True)
    light = await page.evaluate("getComputedStyle(document.body).backgroundColor")
    phone = await browser.new_page(viewport={"width": 390, "height": 844}, color_scheme="dark")
    await phone.context.add_cookies(await context.cookies())
    await phone.goto(page.url)
    await phone.wait_for_selector(".msg.assistant:has-text('Written after the reload.')")
    assert await phone.is_hidden("#sidebar")
    dark = await phone.evaluate("getComputedStyle(document.body).backgroundColor")
    assert light == "rgb(255, 255, 255)" and dark != light  # the OS's scheme is followed
    await phone.screenshot(path=str(artifacts / "webchat-phone-dark.png"), full_page=True)
    await phone.click("#menu")
    assert await phone.is_visible("#sidebar")
    await phone.screenshot(path=str(artifacts / "webchat-phone-sidebar.png"))
    await phone.close()
    assert errors == []
    await context.close()


async def _signed_in(
    browser: Any, server: ChatServer, *, init_script: str | None = None
) -> tuple[Any, Any]:
    context = await browser.new_context(viewport={"width": 1200, "height": 900})
    context.set_default_timeout(WAIT_MS)
    if init_script is not None:
        await context.add_init_script(init_script)
    page = await context.new_page()
    await page.goto(f"{server.http}/chat")
    await _sign_in(page, server.http, ARTIFACTS)
    await page.wait_for_selector("#conversations li.current")
    return context, page


async def _choose(page: Any, *files: tuple[str, bytes]) -> None:
    """Through the paperclip button and the browser's file chooser, as a person would."""
    async with page.expect_file_chooser() as chooser:
        await page.click("#attach")
    chosen = [
        {"name": name, "mimeType": "application/octet-stream", "buffer": body}
        for name, body in files
    ]
    await (await chooser.value).set_files(chosen)


async def test_attachments_in_chromium(
    browser: Any, make_server, fake_openai: FakeOpenAIServer, artifacts: Path
):
    limit = 1000
    server: ChatServer = await make_server(page=True, upload_limit=limit)
    context, page = await _signed_in(browser, server)
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    conversation = page.url.split("#c=")[1]
    folder = server.hub.engine.workspace.root / "uploads" / "web" / conversation

    # Two files chosen, uploaded as chips; one removed; the other sent with the text.
    await _choose(page, ("notes.txt", b"remember the milk"), ("<b>cat</b>.png", b"\x89PNG"))
    await page.locator("#chips .chip:not(.uploading)").nth(1).wait_for()
    assert await page.text_content("#chips") == "notes.txt✕<b>cat</b>.png✕"  # as text
    await page.click("#chips .chip:has-text('cat') button")
    assert await page.locator("#chips .chip").count() == 1
    await page.screenshot(path=str(artifacts / "webchat-attachments-desktop.png"))
    fake_openai.reply_text("Milk noted.")
    await _send(page, "read this")
    await page.wait_for_selector(".msg.user .files span:text('notes.txt')")
    await page.wait_for_selector(".msg.assistant:has-text('Milk noted.')")
    assert await page.locator("#chips .chip").count() == 0
    [notes] = [p for p in folder.iterdir() if p.name.endswith("_notes.txt")]
    assert notes.read_bytes() == b"remember the milk"
    asked = [m for m in fake_openai.requests[-1]["messages"] if m["role"] == "user"][-1]
    assert f"uploads/web/{conversation}/{notes.name}" in asked["content"]

    # Files and no text: Enter sends them.
    fake_openai.reply_text("A picture.")
    await _choose(page, ("cat.png", b"\x89PNG"))
    await page.wait_for_selector("#chips .chip:not(.uploading)")
    await page.press("#input", "Enter")
    await page.wait_for_selector(".msg.assistant:has-text('A picture.')")
    assert await page.locator(".msg.user .files span").count() == 2

    # A reload shows the files from the history.
    await page.reload()
    await page.wait_for_selector(".msg.user .files span:text('cat.png')")
    assert await page.locator(".msg.user .files span").count() == 2
    await page.set_viewport_size({"width": 390, "height": 844})  # and at phone width
    await _choose(page, ("a-rather-long-name-for-a-phone-screen.csv", b"a,b"))
    await page.wait_for_selector("#chips .chip:not(.uploading)")
    await page.screenshot(path=str(artifacts / "webchat-attachments-phone.png"))
    await page.click("#chips .chip button")

    # Too large: refused before it is sent; a refusal of the server: its sentence.
    await _choose(page, ("big.bin", b"x" * (limit + 1)))
    await page.wait_for_selector(
        f".notice.error:text('big.bin is over the limit of {limit} bytes.')"
    )
    await page.evaluate(
        f"fetch('/chat/conversations/{conversation}', {{method: 'DELETE', credentials:"
        " 'same-origin', headers: {'X-CSRF-Token':"
        " document.querySelector('meta[name=csrf]').content}})"
    )
    await _choose(page, ("late.txt", b"late"))
    await page.wait_for_selector(".notice.error:text('No such conversation.')")
    assert await page.locator("#chips .chip").count() == 0
    assert not [p for p in folder.iterdir() if "late" in p.name or "big" in p.name]
    assert errors == []
    await context.close()


async def test_a_refused_message_keeps_its_draft_in_chromium(
    browser: Any, make_server, fake_openai: FakeOpenAIServer, artifacts: Path
):
    """The server refuses the message (too long): the text and the file come back to the
    composer instead of vanishing with the send (they did); an accepted one leaves it empty."""
    server: ChatServer = await make_server(page=True)
    context, page = await _signed_in(browser, server)
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    limit = server.hub.config.max_message_chars
    too_long = "word " * (limit // 5) + "end"
    await _choose(page, ("notes.txt", b"remember the milk"))
    await page.wait_for_selector("#chips .chip:not(.uploading)")

    async with _evidence_on_failure(page, artifacts, "webchat-refused-draft"):
        await _send(page, too_long)
        await page.wait_for_selector(f".notice.error:has-text('the limit is {limit}')")
        assert await page.input_value("#input") == too_long
        assert await page.text_content("#chips") == "notes.txt✕"

        fake_openai.reply_text("Short is better.")
        await _send(page, "in short: milk")
        await page.wait_for_selector(".msg.assistant:has-text('Short is better.')")
        assert await page.input_value("#input") == ""
        assert await page.locator("#chips .chip").count() == 0
    assert errors == []
    await context.close()


#: Keeps the page's sockets reachable, so a test can drop one as a network would.
KEEP_SOCKETS = """
(() => {
  const Native = window.WebSocket;
  window.__sockets = [];
  window.WebSocket = function (...args) {
    const socket = new Native(...args);
    window.__sockets.push(socket);
    return socket;
  };
  window.WebSocket.prototype = Native.prototype;
  Object.assign(window.WebSocket, { CONNECTING: 0, OPEN: 1, CLOSING: 2, CLOSED: 3 });
})();
"""


async def test_what_the_server_took_is_not_put_back_at_a_later_drop_in_chromium(
    browser: Any, make_server, fake_openai: FakeOpenAIServer, artifacts: Path
):
    """A command (answered by its notice) and a plain message that answers a question are
    taken: a socket that drops later puts neither back in the composer (both came back,
    with "the connection dropped as the message left"; found by review)."""
    server: ChatServer = await make_server(page=True)
    context, page = await _signed_in(browser, server, init_script=KEEP_SOCKETS)

    async def drop_the_socket() -> None:  # its close handler runs before the status shows
        await page.evaluate("window.__sockets.at(-1).close()")
        await page.wait_for_selector("#status:has-text('reconnecting')")

    async with _evidence_on_failure(page, artifacts, "webchat-taken-drafts"):
        await _send(page, "/cost")
        await page.wait_for_selector(".notice:has-text('This conversation')")
        await drop_the_socket()
        assert await page.input_value("#input") == ""
        from playwright.async_api import expect

        await expect(page.locator("#status")).not_to_contain_text("reconnecting")

        fake_openai.reply_tool_calls(("q1", "ask_user_clarification", {"question": "Colour?"}))
        fake_openai.reply_text("Blue, then.")
        await _send(page, "paint it")
        await page.wait_for_selector(".question textarea")
        await _send(page, "blue")  # a plain message while the question is open: its answer
        await page.wait_for_selector(".msg.assistant:has-text('Blue, then.')")
        await drop_the_socket()
        assert await page.input_value("#input") == ""
        assert await page.locator(".notice.error").count() == 0
    await context.close()


#: Holds the page's sockets in their connecting state until ``window.__openSockets()``:
#: a slow network, or a loaded machine, as the page sees it.
HOLD_SOCKETS = """
(() => {
  const Native = window.WebSocket;
  const held = [];
  window.__openSockets = () => held.splice(0).forEach((open) => open());
  window.WebSocket = function (url) {
    const socket = new EventTarget();
    socket.readyState = Native.CONNECTING;
    socket.send = () => { throw new DOMException("Still connecting", "InvalidStateError"); };
    socket.close = () => { socket.readyState = Native.CLOSED; };
    held.push(() => {
      if (socket.readyState === Native.CLOSED) return;
      const real = new Native(url);
      socket.send = (data) => real.send(data);
      socket.close = () => real.close();
      for (const type of ["open", "message", "close"]) {
        real.addEventListener(type, (event) => {
          socket.readyState = real.readyState;
          const copy = type === "message"
            ? new MessageEvent("message", { data: event.data }) : new Event(type);
          socket.dispatchEvent(copy);
          socket[`on${type}`]?.(copy);
        });
      }
    });
    return socket;
  };
  Object.assign(window.WebSocket, { CONNECTING: 0, OPEN: 1, CLOSING: 2, CLOSED: 3 });
})();
"""


async def test_a_message_sent_while_the_socket_connects_goes_when_it_opens_in_chromium(
    browser: Any, make_server, fake_openai: FakeOpenAIServer, artifacts: Path
):
    """Sent as the page loads, before its socket is open: it leaves when the socket opens
    (it was refused with "Not connected", the draft left in the box; CI's slow machine met
    it in the voice test)."""
    server: ChatServer = await make_server(page=True)
    context, page = await _signed_in(browser, server, init_script=HOLD_SOCKETS)
    async with _evidence_on_failure(page, artifacts, "webchat-sent-while-connecting"):
        fake_openai.reply_text("Heard you.")
        await _send(page, "typed at once")
        assert await page.input_value("#input") == ""
        await page.evaluate("window.__openSockets()")
        await page.wait_for_selector(".msg.assistant:has-text('Heard you.')")
        assert await page.text_content(".msg.user") == "typed at once"
        assert await page.locator(".notice.error").count() == 0
    await context.close()


async def test_a_message_sent_while_connecting_goes_though_another_conversation_is_chosen(
    browser: Any, make_server, fake_openai: FakeOpenAIServer, artifacts: Path
):
    """Sent while the socket connects, then another conversation chosen before it opened:
    the socket was closed at once, and the message was neither sent nor given back
    (found by review). It goes to the conversation it was written in."""
    server: ChatServer = await make_server(page=True)
    context, page = await _signed_in(browser, server, init_script=HOLD_SOCKETS)
    first = page.url.split("#c=")[1]
    async with _evidence_on_failure(page, artifacts, "webchat-sent-then-switched"):
        fake_openai.reply_text("Heard you.")
        await _send(page, "typed at once")
        await page.click("#new")
        await page.wait_for_selector(f"#conversations li.current:not([data-id='{first}'])")
        await page.evaluate("window.__openSockets()")
        # Stored in its own conversation, and answered there (read as the page reads it).
        said = (
            f"fetch('/chat/conversations/{first}/messages', {{credentials: 'same-origin'}})"
            ".then((r) => r.json()).then((page) => page.messages.map((m) => m.text))"
        )
        for _ in range(240):
            if await page.evaluate(said) == ["typed at once", "Heard you."]:
                break
            await asyncio.sleep(0.25)
        assert await page.evaluate(said) == ["typed at once", "Heard you."]
    await context.close()


async def test_a_tab_whose_socket_opens_late_shows_what_happened_meanwhile(
    browser: Any, make_server, fake_openai: FakeOpenAIServer, artifacts: Path
):
    """A socket's handshake slower than the history's fetch (a new TLS connection beside
    the page's kept one): what happened between the history's read and the subscription
    was in neither, until the next reload (found by review on 2026-12-06). The history
    is read once the server said hello."""
    server: ChatServer = await make_server(page=True)
    context, page = await _signed_in(browser, server)
    conversation = page.url.split("#c=")[1]
    slow = await browser.new_context(viewport={"width": 1000, "height": 700})
    slow.set_default_timeout(WAIT_MS)
    await slow.add_cookies(await context.cookies())
    await slow.add_init_script(HOLD_SOCKETS)
    second = await slow.new_page()
    async with _evidence_on_failure(second, artifacts, "webchat-late-socket"):
        await second.goto(f"{server.http}/chat#c={conversation}")
        await second.wait_for_load_state("networkidle")  # its socket still connecting
        fake_openai.reply_text("The answer is 42.")
        await _send(page, "what is the answer?")
        await page.wait_for_selector(".msg.assistant:has-text('42')")
        await second.evaluate("window.__openSockets()")
        await second.wait_for_selector(".msg.assistant:has-text('42')")
        assert await second.text_content(".msg.user") == "what is the answer?"
    await slow.close()
    await context.close()


async def test_a_stop_closes_the_card_and_the_question_and_a_double_click_decides_once(
    browser: Any, make_server, fake_openai: FakeOpenAIServer, artifacts: Path
):
    """After Stop a card offered its buttons and a question took text, each only an
    error then; a double click on Approve showed "This button has expired." though the
    call was approved (found by review on 2026-12-06)."""
    server: ChatServer = await make_server(page=True)
    context, page = await _signed_in(browser, server)
    async with _evidence_on_failure(page, artifacts, "webchat-stop-closes"):
        fake_openai.reply_tool_calls(("w1", "write_file", {"path": "x.txt", "content": "x"}))
        await _send(page, "write x")
        await page.wait_for_selector(".card .choice.approve")
        await page.click("#send")  # Stop
        await page.wait_for_selector(".card.closed .outcome")
        fake_openai.reply_tool_calls(
            ("q1", "ask_user_clarification", {"question": "Which colour?"})
        )
        await _send(page, "paint it")
        await page.wait_for_selector(".question textarea")
        await page.click("#send")
        await page.wait_for_selector(".question.closed .outcome")
        assert await page.locator(".card:not(.closed), .question:not(.closed)").count() == 0

        fake_openai.reply_tool_calls(("w2", "write_file", {"path": "y.txt", "content": "y"}))
        fake_openai.reply_text("Done writing.")
        await _send(page, "write y")
        await page.wait_for_selector(".card:not(.closed) .choice.approve")
        await page.dblclick(".card:not(.closed) .choice.approve")
        await page.wait_for_selector(".msg.assistant:has-text('Done writing.')")
        errors = await page.locator(".notice.error").all_text_contents()
        assert not any("expired" in error for error in errors), errors
    await context.close()


def _card_frame(tool_call_id: int) -> str:
    choices = [
        {"choice": "approve", "label": "✅ Approve", "bypass_secs": None},
        {"choice": "reject", "label": "❌ Reject", "bypass_secs": None},
    ]
    frame = {
        "type": "approval_required",
        "tool_call_id": tool_call_id,
        "tool": "execute_cmd",
        "label": "Command",
        "content": f"echo {tool_call_id}",
        "depth": 0,
        "choices": choices,
    }
    return json.dumps(frame)


async def test_a_refused_decision_gives_back_the_buttons_of_its_own_card_only(
    browser: Any, make_server, fake_openai: FakeOpenAIServer, artifacts: Path
):
    """Any refusal gave back the buttons of every card, one whose decision was still on
    its way too (found by review of the change on 2026-12-06)."""
    server: ChatServer = await make_server(page=True)
    context, page = await _signed_in(browser, server, init_script=HOLD_SOCKETS)
    async with _evidence_on_failure(page, artifacts, "webchat-refused-card"):
        for call in (1, 2):
            await page.evaluate(f"handle({_card_frame(call)})")
        await page.click(".card[data-call='1'] .choice.approve")
        await page.click(".card[data-call='2'] .choice.approve")
        refused = {"type": "error", "code": "expired", "message": "gone", "ref": "card-1"}
        await page.evaluate(f"handle({json.dumps(refused)})")
        assert await page.is_enabled(".card[data-call='1'] .choice.approve")
        assert await page.is_disabled(".card[data-call='2'] .choice.approve")
    await context.close()


async def test_a_question_does_not_take_the_keys_of_a_message_being_typed(
    browser: Any, make_server, fake_openai: FakeOpenAIServer, artifacts: Path
):
    """The box took the focus: the rest of the sentence and its Enter became the answer
    (found by review on 2026-12-06)."""
    server: ChatServer = await make_server(page=True)
    context, page = await _signed_in(browser, server)
    conversation = page.url.split("#c=")[1]
    async with _evidence_on_failure(page, artifacts, "webchat-question-focus"):
        await page.click("#input")
        await page.keyboard.type("also paint the ga")
        other = await server.client(conversation)  # a turn asked from another tab
        fake_openai.reply_tool_calls(
            ("q1", "ask_user_clarification", {"question": "Which colour?"})
        )
        await other.send(type="message", text="paint the fence", ref="m1")
        await page.wait_for_selector(".question textarea")
        await page.keyboard.type("rage door")
        assert await page.input_value("#input") == "also paint the garage door"
        assert await page.input_value(".question textarea") == ""
        await other.close()
    await context.close()


RECORD_SENT = """
(() => {
  const send = WebSocket.prototype.send;
  window.__sent = [];
  WebSocket.prototype.send = function (data) {
    window.__sent.push(JSON.parse(data).type);
    return send.call(this, data);
  };
})();
"""


async def test_the_composers_keys_and_button_do_what_they_say_in_chromium(
    browser: Any, make_server, fake_openai: FakeOpenAIServer, artifacts: Path
):
    """A second Enter (nothing typed) stopped the turn it had just started; the button
    labelled Stop sent the draft being typed, and the turn went on; Esc in a card's reason
    box stopped the whole turn (found by review on 2026-12-07)."""
    server: ChatServer = await make_server(page=True)
    context, page = await _signed_in(browser, server, init_script=RECORD_SENT)
    sent = "window.__sent.filter((type) => type === 'stop').length"
    async with _evidence_on_failure(page, artifacts, "webchat-composer-keys"):
        fake_openai.reply_hang(partial="Thinking about it ")
        await _send(page, "a long question")
        await page.wait_for_selector(".msg.assistant.streaming")
        assert await page.text_content("#send") == "Stop"
        await page.press("#input", "Enter")  # pressed twice: nothing more to send
        assert await page.evaluate(sent) == 0

        await page.fill("#input", "and also")  # a follow-up: the button sends it
        assert await page.text_content("#send") == "Send"
        await page.fill("#input", "")
        assert await page.text_content("#send") == "Stop"

        await page.evaluate(f"handle({_card_frame(7)})")
        await page.click(".card[data-call='7'] .choice.reject")
        await page.fill(".card[data-call='7'] .reason input", "hm, no wait")
        await page.press(".card[data-call='7'] .reason input", "Escape")
        assert await page.evaluate(sent) == 0
        assert not await page.evaluate("document.activeElement.matches('.reason input')")

        await page.press("#input", "Escape")  # Esc in the composer stops
        assert await page.evaluate(sent) == 1
        await page.wait_for_selector(".notice.error:has-text('Interrupted')")
        assert await page.text_content("#send") == "Send"
    await context.close()


async def test_a_jobs_card_neither_makes_the_conversation_busy_nor_closes_with_its_turn(
    browser: Any, make_server, fake_openai: FakeOpenAIServer, artifacts: Path
):
    """A scheduled job's card showed STOP and "working…" in a conversation running
    nothing, and the conversation's own turn, stopped, closed it though its call still
    waited (found by review on 2026-12-07)."""
    server: ChatServer = await make_server(page=True)
    # The frames are the test's alone: the socket's own (turn_running) could come between.
    context, page = await _signed_in(browser, server, init_script=HOLD_SOCKETS)
    async with _evidence_on_failure(page, artifacts, "webchat-job-card"):
        await page.wait_for_selector("#send:text('Send')")
        job = {**json.loads(_card_frame(8)), "asked_by": "Notes"}
        await page.evaluate(f"handle({json.dumps(job)})")
        await page.evaluate(f"handle({_card_frame(9)})")  # the conversation's own
        assert await page.text_content("#send") == "Stop"  # by its own card only
        ended = {"type": "error", "code": "turn", "message": "Interrupted by user."}
        await page.evaluate(f"handle({json.dumps(ended)})")
        assert await page.locator(".card[data-call='9'] .choices button").count() == 0
        assert await page.locator(".card[data-call='8'] .choices button").count() == 2
        assert await page.text_content("#send") == "Send"

        await page.reload()
        await page.wait_for_selector("#send:text('Send')")
        await page.evaluate(f"handle({json.dumps(job)})")
        assert await page.text_content("#send") == "Send"
        assert await page.text_content("#status") == ""
    await context.close()


async def test_a_sign_in_that_ended_leads_back_to_the_chat_with_its_draft(
    browser: Any, make_server, fake_openai: FakeOpenAIServer, artifacts: Path
):
    """Ended on /signins (or idle): signing in again led to the inbox, and what was
    being typed was gone (found by review on 2026-12-06)."""
    server: ChatServer = await make_server(page=True, limits=SocketLimits(signin_check_s=0.1))
    context, page = await _signed_in(browser, server)
    await page.click("#new")
    await page.wait_for_selector("#conversations li:nth-child(2)")
    second = page.url.split("#c=")[1]
    async with _evidence_on_failure(page, artifacts, "webchat-signed-out"):
        await page.fill("#input", "a long message I was writing")
        await server.signins.revoke_others(None)
        await page.wait_for_url("**/login?next=/chat")
        await _sign_in(page, server.http, artifacts)
        await page.wait_for_selector(f"#conversations li.current[data-id='{second}']")
        assert await page.input_value("#input") == "a long message I was writing"
    await context.close()


#: Each node of the thread as "kind: its first line".
_THREAD = (
    "[...document.querySelectorAll('#thread > *')]"
    ".map((n) => n.className.split(' ')[0] + ': ' + n.textContent.split('\\n')[0])"
)


async def test_text_beside_tool_calls_is_rendered_and_keeps_its_place_after_a_reload(
    browser: Any, make_server, fake_openai: FakeOpenAIServer, artifacts: Path
):
    """Live it stayed raw Markdown, and after a reload it came below the calls it
    introduced (found by review on 2026-12-06)."""
    server: ChatServer = await make_server(page=True)
    context, page = await _signed_in(browser, server)
    async with _evidence_on_failure(page, artifacts, "webchat-text-beside-tools"):
        fake_openai.reply_tool_calls(
            ("r1", "read_file", {"path": "notes.txt"}), content="Let me **look** at it first."
        )
        fake_openai.reply_text("The file is *missing*.")
        await _send(page, "check the file")
        await page.click(".card .choice.approve")
        await page.wait_for_selector(".msg.assistant em:text('missing')")
        await page.wait_for_selector(".msg.assistant strong:text('look')")
        live = [n for n in await page.evaluate(_THREAD) if not n.startswith("card")]
        live_tool = await page.text_content("#thread .tool")
        await page.reload()
        await page.wait_for_selector(".msg.assistant em:text('missing')")
        await page.wait_for_selector(".msg.assistant strong:text('look')")
        kinds = [n.split(":")[0] for n in await page.evaluate(_THREAD)]
        assert kinds == [n.split(":")[0] for n in live] == ["msg", "msg", "tool", "msg"]
        assert "**" not in await page.text_content("#thread")
        # The call as live: its arguments and how it ended (until 2026-12-07 its name
        # and status only: a question's answer was gone after a reload; found by review).
        tool = await page.text_content("#thread .tool")
        assert tool == live_tool and tool.startswith('⚙ read_file {"path": "notes.txt"}\n  ')
    await context.close()


@pytest.fixture
async def microphone_browser() -> AsyncIterator[Any]:
    """Chromium with a fake microphone (a beep) that needs no one to allow it."""
    async with chromium(
        "--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream"
    ) as browser:
        yield browser


#: What a browser without a microphone, or a person saying no, looks like to the page.
_DENIED = (
    "navigator.mediaDevices.getUserMedia = () =>"
    " Promise.reject(new DOMException('Permission denied', 'NotAllowedError'));"
)
_NO_MEDIA = "Object.defineProperty(navigator, 'mediaDevices', {value: undefined});"


async def test_a_voice_message_in_chromium(
    microphone_browser: Any,
    make_server,
    voice_notes,
    fake_openai: FakeOpenAIServer,
    artifacts: Path,
):
    server: ChatServer = await make_server(page=True, voice=voice_notes())
    context, page = await _signed_in(microphone_browser, server)
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    mic = page.locator("#mic")
    assert await mic.get_attribute("aria-label") == "Record a voice message"

    # The page's start ends by putting the keyboard in the composer: on a loaded machine
    # that came after the test's focus on the microphone, and Space went to the composer.
    await page.wait_for_selector("#input:focus")
    # Esc while recording throws the recording away: nothing is uploaded.
    await mic.focus()
    await page.keyboard.press("Enter")  # a button: the keyboard works as a click does
    await page.wait_for_selector("#mic.recording[aria-pressed=true]")
    await page.keyboard.press("Escape")
    await page.wait_for_selector(".notice:text('Voice message cancelled.')")
    assert await mic.get_attribute("aria-pressed") == "false"

    # Recorded, stopped with the square: uploaded as a voice note, heard, answered.
    fake_openai.echo = True
    fake_openai.transcribe("hello from the microphone")
    await page.keyboard.press("Space")
    # A second recorded at least: the clock ticks every half second, but a loaded machine
    # can hold the page's timers past 0:01 (it went from 0:00 to 0:02 once, under CI's load).
    async with _evidence_on_failure(page, artifacts, "webchat-voice-recording"):
        await page.wait_for_selector(
            "#recording:text-matches('Recording 0:(0[1-9]|[1-5][0-9])')", timeout=20_000
        )
    label = "Stop recording and send the voice message"
    assert await mic.get_attribute("aria-label") == label
    await page.screenshot(path=str(artifacts / "webchat-voice-recording.png"))
    await mic.click()
    heard = ".notice.heard:text('🎤 “hello from the microphone”')"
    async with _evidence_on_failure(page, artifacts, "webchat-voice"):
        await page.wait_for_selector(heard)
        await page.wait_for_selector(".msg.assistant:has-text('echo: hello from the microphone')")
    await page.wait_for_selector("#recording", state="hidden")
    chip = await page.text_content(".msg.user .files span")
    assert chip in ("🎤 voice-message.ogg", "🎤 voice-message.webm")
    assert await page.text_content(".msg.user") == f"hello from the microphone{chip}"
    [request] = fake_openai.transcription_requests
    assert request["filename"] == chip.removeprefix("🎤 ")
    magic = {"audio/ogg": b"OggS", "audio/webm": b"\x1aE\xdf\xa3"}
    assert request["audio"].startswith(magic[request["content_type"]])
    asked = [m for m in fake_openai.requests[-1]["messages"] if m["role"] == "user"][-1]
    assert asked["content"].startswith("hello from the microphone\n\n[SYSTEM INFO]")
    assert f"uploads/web/{page.url.split('#c=')[1]}/" in asked["content"]
    await page.screenshot(path=str(artifacts / "webchat-voice-heard.png"))
    assert errors == []
    await context.close()

    # No microphone allowed, or none to be had: one plain line, and the page goes on.
    for script, said in (
        (_DENIED, "The microphone was not allowed; allow it for this page to record"),
        (_NO_MEDIA, "Voice messages need a microphone, which this browser does not offer"),
    ):
        context, page = await _signed_in(microphone_browser, server, init_script=script)
        page.on("pageerror", lambda error: errors.append(str(error)))
        await page.click("#mic")
        await page.wait_for_selector(f".notice.error:has-text('{said}')")
        assert await page.locator(".notice.error").count() == 1
        assert await page.get_attribute("#mic", "aria-pressed") == "false"
        assert await page.get_attribute("#mic", "aria-disabled") == "false"
        fake_openai.reply_text("Typed still works.")
        await _send(page, "typed instead")
        await page.wait_for_selector(".msg.assistant:has-text('Typed still works.')")
        await context.close()
    assert errors == []
    assert len(fake_openai.transcription_requests) == 1


async def test_a_conversation_chosen_while_another_loads_shows_only_its_own_in_chromium(
    browser: Any, make_server, fake_openai: FakeOpenAIServer, artifacts: Path
):
    """Choosing B while A's history was still on its way: A's history arrived into B's
    thread, under B's title (found by review)."""
    server: ChatServer = await make_server(page=True)
    context, page = await _signed_in(browser, server)
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    first = page.url.split("#c=")[1]
    fake_openai.reply_text("answer in A")
    await _send(page, "secret of A")
    await page.wait_for_selector(".msg.assistant:has-text('answer in A')")
    second = await page.evaluate(
        "fetch('/chat/conversations', {method: 'POST', credentials: 'same-origin', headers:"
        " {'X-CSRF-Token': document.querySelector('meta[name=csrf]').content,"
        " 'Content-Type': 'application/json'}, body: '{\"title\": \"B\"}'})"
        ".then((r) => r.json()).then((c) => c.id)"
    )
    await page.goto(f"{server.http}/chat#c={second}")
    await page.reload()
    await page.wait_for_selector(f"#conversations li.current[data-id='{second}']")

    held, asked = asyncio.Event(), asyncio.Event()

    async def hold(route: Any) -> None:
        asked.set()
        await held.wait()
        await route.continue_()

    await page.route(f"**/chat/conversations/{first}/messages*", hold)
    async with _evidence_on_failure(page, artifacts, "webchat-switch-race"):
        await page.click(f"#conversations li[data-id='{first}']")
        await asked.wait()
        await page.click(f"#conversations li[data-id='{second}']")
        await page.wait_for_selector(f"#conversations li.current[data-id='{second}']")
        async with page.expect_response(f"**/chat/conversations/{first}/messages*"):
            held.set()
        await page.evaluate("new Promise((done) => setTimeout(done, 0))")  # its handlers ran
        assert await page.text_content("#title") == "B"
        assert "secret of A" not in (await page.text_content("#thread") or "")
    assert errors == []
    await context.close()


async def test_new_leaves_a_waiting_jobs_card_on_the_page(
    browser: Any,
    make_server,
    engine: Engine,
    hub: ChatHub,
    fake_openai: FakeOpenAIServer,
    artifacts: Path,
):
    """The conversation's own stop leaves a job's card open (its call still waits); /new
    dropped it, and nobody was shown the decision until its wait ran out (found by review
    on 2026-12-07)."""
    server: ChatServer = await make_server(page=True)
    context, page = await _signed_in(browser, server)
    conversation = page.url.split("#c=")[1]
    source = source_of(conversation)
    (engine.workspace.root / "notes.txt").write_text("Buy milk.")
    clock = FakeClock()
    scheduler = Scheduler(engine, hub, timezone="UTC", clock=clock, owner="web-test")
    try:
        async with _evidence_on_failure(page, artifacts, "new-keeps-job-card"):
            job = await scheduler.create_cron(source, "Notes", "0 8 * * *", "Brief me.")
            fake_openai.reply_tool_calls(("r1", "read_file", {"path": "notes.txt"}))
            fake_openai.reply_text("Brief: done")
            assert job.next_run_at is not None
            clock.now = job.next_run_at + timedelta(seconds=1)
            await scheduler.dispatcher.step()
            await page.wait_for_selector(".card[data-job='1'] .choice.approve")

            await _send(page, "/new")
            await page.wait_for_selector(".notice:has-text('New conversation.')")
            # The job's call still waits for a decision in this conversation ...
            waiting = await hub.pending_approvals(shown_in=source)
            assert [item.name for item in waiting] == ["read_file"]
            # ... and the page no longer shows it: nobody can decide it here.
            shown = await page.locator(".card[data-job='1'] .choices button").count()
            assert shown > 0, (
                "after /new the job's card is gone from the page, though its call still "
                f"waits ({len(waiting)} pending in {source})"
            )
    finally:
        await scheduler.close()
        await context.close()


_TOOL_LINES = "[...document.querySelectorAll('#thread .tool')].map((n) => n.textContent)"


async def test_a_call_made_while_the_history_loads_is_shown_once(
    browser: Any,
    make_server,
    fake_openai: FakeOpenAIServer,
    artifacts: Path,
):
    server: ChatServer = await make_server(page=True)
    context, page = await _signed_in(browser, server)
    conversation = page.url.split("#c=")[1]
    source = f"web:{conversation}"
    fake_openai.reply_tool_calls(("w1", "write_file", {"path": "a.txt", "content": "x\n"}))
    fake_openai.reply_tool_calls(("r1", "read_file", {"path": "a.txt"}))  # asks too
    async with _evidence_on_failure(page, artifacts, "reload-tools-once"):
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
        # Meanwhile the card is approved elsewhere (the inbox) and the turn goes on.
        [waiting] = await server.hub.pending_approvals(await server.hub.session_id(source))
        await Operations(server.hub.engine, server.hub).decide(
            waiting.tool_call_id, Choice.named("approve"), by=WEB_DECIDER
        )
        session_id = await server.hub.session_id(source)
        for _ in range(1500):  # until the next call (read_file) started and asks
            if [i.name for i in await server.hub.pending_approvals(session_id)] == ["read_file"]:
                break
            await asyncio.sleep(0.01)
        held.set()
        await page.wait_for_selector(".card:has-text('read_file') .choice.approve")
        await page.evaluate("new Promise((done) => setTimeout(done, 100))")
        lines = await page.evaluate(_TOOL_LINES)
        reads = [line for line in lines if "read_file" in line]
        writes = [line for line in lines if "write_file" in line]
        assert (len(writes), len(reads)) == (1, 1), f"tool lines shown: {lines}"
    await context.close()


async def test_a_paste_over_the_frame_size_is_refused_in_a_sentence_not_a_dropped_socket(
    browser: Any,
    make_server,
    fake_openai: FakeOpenAIServer,
    artifacts: Path,
):
    """A pasted log past the socket's frame size dropped the connection, and the page
    advised sending it again, which dropped it again (found by review on 2026-12-07)."""
    server: ChatServer = await make_server(page=True)
    context, page = await _signed_in(browser, server)
    async with _evidence_on_failure(page, artifacts, "large-paste"):
        await page.wait_for_selector("#send:text('Send')")
        pasted = "log line 0123456789\n" * 30_000  # 600 000 characters, as many bytes
        await page.evaluate("(text) => { document.getElementById('input').value = text; }", pasted)
        await page.press("#input", "Enter")
        said = await page.wait_for_selector(".notice.error")
        text = await said.text_content()
        assert "send it again" not in text, f"the page said: {text!r}"
        assert "at most" in text and "Attach it as a file" in text, text
        kept = await page.evaluate("document.getElementById('input').value")
        assert kept == pasted  # the draft stays
    await context.close()


async def test_the_mic_is_usable_again_after_a_voice_note_answered_a_question(
    microphone_browser: Any,
    make_server,
    voice_notes,
    fake_openai,
    artifacts: Path,
):
    """The page ends the microphone's "Transcribing…" when its voice note's ref is
    answered: an answer to the open question gave it nothing, and the mic stayed busy
    (found by review on 2026-12-07)."""
    server: ChatServer = await make_server(page=True, voice=voice_notes())
    context, page = await _signed_in(microphone_browser, server)
    fake_openai.reply_tool_calls(("q1", "ask_user_clarification", {"question": "Which size?"}))
    fake_openai.reply_text("Large it is.")
    await _send(page, "order a coffee")
    await page.wait_for_selector(".question textarea")
    fake_openai.transcribe("large")
    async with _evidence_on_failure(page, artifacts, "voice-answer-mic"):
        await page.click("#mic")
        await page.wait_for_selector(
            "#recording:text-matches('Recording 0:(0[1-9]|[1-5][0-9])')", timeout=20_000
        )
        await page.click("#mic")
        await page.wait_for_selector(".question.closed")
        await page.wait_for_selector(".msg.assistant:has-text('Large it is.')")
        await page.wait_for_function(
            "document.getElementById('mic').getAttribute('aria-disabled') === 'false'"
        )
    await context.close()
