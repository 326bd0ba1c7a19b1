"""The web chat page in a real browser: Debian's Chromium driven by Playwright.

Sign in as for the inbox, send, watch the answer stream and render (HTML in it shown as
text), approve a card, answer a question, press STOP, stop with Esc, reload in the middle
of a turn and see STOP still shown and then the answer, open a second tab on the same
conversation. Screenshots at desktop and phone widths go to ``test-artifacts/`` (or
``$CHATHUB_TEST_ARTIFACTS``).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.bot.webchat.conftest import TOKEN, ChatServer
from tests.fakes.openai_server import FakeOpenAIServer

CHROMIUM = os.environ.get("CHATHUB_TEST_CHROMIUM", "/usr/bin/chromium")
ARTIFACTS = Path(
    os.environ.get("CHATHUB_TEST_ARTIFACTS", Path(__file__).parents[3] / "test-artifacts")
)
WAIT_MS = 20_000  # a guard against a hang, never a timing assertion

pytestmark = pytest.mark.skipif(
    shutil.which(CHROMIUM) is None,
    reason=f"{CHROMIUM} is missing (Debian packages chromium, chromium-driver)",
)


@pytest.fixture
def artifacts() -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS


@pytest.fixture
async def browser() -> AsyncIterator[Any]:
    from playwright.async_api import async_playwright

    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=CHROMIUM,  # never a downloaded browser
            headless=True,
            # This machine has no internet: keep Chromium from trying to reach it.
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
            ],
        )
        try:
            yield browser
        finally:
            await browser.close()


async def _send(page: Any, text: str) -> None:
    await page.fill("#input", text)
    await page.press("#input", "Enter")


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
    await page.fill("input[name=token]", TOKEN)
    await page.click('form[action="/login"] button')
    await page.wait_for_url(f"{base}/chat")
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

    # Reload in the middle of a turn: STOP is still shown, the card too; then the answer.
    fake_openai.reply_tool_calls(("w2", "write_file", {"path": "reload.txt", "content": "y\n"}))
    fake_openai.reply_text("Written after the reload.")
    await _send(page, "write reload.txt")
    await page.wait_for_selector(".card:not(.closed) .choice.approve")
    await page.reload()
    await page.wait_for_selector("#send:text('Stop')")
    await page.wait_for_selector(".card:not(.closed) .choice.approve")

    # A second tab on the same conversation shows the same thread and the same card.
    second = await context.new_page()
    await second.goto(page.url)
    await second.wait_for_selector(".msg.user:has-text('write reload.txt')")
    await second.wait_for_selector(".card:not(.closed) .choice.approve")
    await second.click(".card:not(.closed) .choice.approve")  # decided in tab two...
    await page.wait_for_selector(".msg.assistant:has-text('Written after the reload.')")
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
