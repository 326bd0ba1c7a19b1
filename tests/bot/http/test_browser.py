"""The Agent Inbox in a real browser: headless Chromium against ``chathub serve``.

The service runs as a process with the fake Bot API and the fake model; a Telegram user's
message leads to a gated ``execute_cmd``; the owner approves it by clicking on the page;
the command runs, the chat's approval card is edited to say who approved, and the answer
arrives in the chat; then the page lists its sign-in, signs out, and the old cookie opens
nothing. Screenshots are kept in ``test-artifacts/`` (or ``$CHATHUB_TEST_ARTIFACTS``).
"""

from __future__ import annotations

import json

import pytest

from tests.bot.process import ALICE, free_port, wait_for, wait_for_http
from tests.browser import ARTIFACTS, CHROMIUM, OFFLINE, needs_chromium

TOKEN = "browser-test-token"

pytestmark = needs_chromium


@pytest.fixture
def browser_page():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM,
            headless=True,
            args=list(OFFLINE),
        )
        page = browser.new_page(viewport={"width": 1200, "height": 900})
        page.set_default_timeout(20_000)
        try:
            yield page
        finally:
            browser.close()


def _asked_to_run(serve, telegram, fake_openai, command: str, written: str) -> int:
    """The service on a port of its own; Alice asks for ``command``, which writes
    ``written``: its card waits. Returns the port."""
    port = free_port()
    serve(HTTP_PORT=str(port), CHATHUB_API_TOKEN=TOKEN)
    fake_openai.reply_tool_calls(("call_1", "execute_cmd", json.dumps({"command": command})))
    fake_openai.reply_text(f"Done: {written} is written.")
    telegram.user_message(ALICE, ALICE, f"please write {written}")
    return port


def test_approving_an_execute_cmd_by_clicking_runs_it_and_edits_the_telegram_card(
    serve, telegram, fake_openai, tmp_path, browser_page
):
    command = "echo clicked-in-a-browser > clicked.txt"
    port = _asked_to_run(serve, telegram, fake_openai, command, "clicked.txt")

    card = wait_for(
        lambda: next(
            (m for m in telegram.messages(ALICE) if m.reply_markup and command in (m.text or "")),
            None,
        )
    )

    page = browser_page
    wait_for_http(port)
    page.goto(f"http://127.0.0.1:{port}/")
    assert page.url.endswith("/login")
    page.fill("input[name=token]", TOKEN)
    page.get_by_role("button", name="Sign in").click()
    approval = page.locator("section.approval").first
    approval.wait_for()
    assert command in approval.locator("pre").inner_text()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "inbox-pending.png"), full_page=True)

    approval.get_by_role("button", name="✅ Approve").click()
    page.get_by_role("status").filter(has_text="Approved call").wait_for()
    page.screenshot(path=str(ARTIFACTS / "inbox-approved.png"), full_page=True)
    assert page.locator("section.approval").count() == 0

    workspace = tmp_path / "workspace"
    wait_for(lambda: (workspace / "clicked.txt").exists())
    assert (workspace / "clicked.txt").read_text() == "clicked-in-a-browser\n"
    wait_for(
        lambda: any(
            "Done: clicked.txt is written." in (m.text or "") for m in telegram.messages(ALICE)
        )
    )
    edited = telegram.message(ALICE, card.message_id)
    assert edited.edits, "the card was never edited"
    assert "Approved" in (edited.text or "") and "by the web inbox" in (edited.text or "")
    assert not edited.reply_markup or not edited.reply_markup.get("inline_keyboard")
    edit_calls = [
        c
        for c in telegram.calls_to("editMessageText")
        if c.params.get("message_id") == card.message_id
    ]
    assert edit_calls

    # The reverse: a tap on the Telegram card empties the open page (it refreshes itself).
    second = "echo tapped-in-telegram > tapped.txt"
    fake_openai.reply_tool_calls(("call_2", "execute_cmd", json.dumps({"command": second})))
    fake_openai.reply_text("Done: tapped.txt is written.")
    telegram.user_message(ALICE, ALICE, "and tapped.txt")
    page.locator("section.approval").first.wait_for()  # appears without a reload
    assert second in page.locator("section.approval pre").first.inner_text()
    card = wait_for(
        lambda: next(
            (m for m in telegram.messages(ALICE) if m.reply_markup and second in (m.text or "")),
            None,
        )
    )
    buttons = card.reply_markup["inline_keyboard"][0]
    approve = next(b["callback_data"] for b in buttons if b["callback_data"].endswith(":a"))
    telegram.callback(ALICE, ALICE, card.message_id, approve)
    page.locator("section.approval").first.wait_for(state="detached")
    wait_for(lambda: (workspace / "tapped.txt").exists())
    page.screenshot(path=str(ARTIFACTS / "inbox-after-telegram-tap.png"), full_page=True)

    # Sign-ins: this browser is listed and marked; after signing out its cookie opens nothing.
    page.get_by_role("link", name="Sign-ins").click()
    mine = page.locator("tr.signin.this")
    mine.wait_for()
    assert "this one" in mine.inner_text() and "127.0.0.1" in mine.inner_text()
    page.screenshot(path=str(ARTIFACTS / "signins.png"), full_page=True)
    cookie = next(c for c in page.context.cookies() if c["name"] == "chathub_web")
    page.get_by_role("button", name="Sign out", exact=True).click()
    page.wait_for_url("**/login")
    page.context.add_cookies([cookie])  # the old cookie, replayed
    page.goto(f"http://127.0.0.1:{port}/")
    assert page.url.endswith("/login")


def test_a_click_after_the_sign_in_ended_leads_to_the_sign_in_and_loses_nothing(
    serve, telegram, fake_openai, tmp_path, browser_page
):
    command = "echo after-signing-in-again > again.txt"
    port = _asked_to_run(serve, telegram, fake_openai, command, "again.txt")
    wait_for(lambda: any(m.reply_markup for m in telegram.messages(ALICE)))

    page = browser_page
    wait_for_http(port)
    page.goto(f"http://127.0.0.1:{port}/")
    page.fill("input[name=token]", TOKEN)
    page.get_by_role("button", name="Sign in").click()
    approval = page.locator("section.approval").first
    approval.wait_for()

    # A stale form token: the server's sentence is shown, and the buttons work again.
    page.eval_on_selector_all("input[name=csrf]", "els => els.forEach(e => e.value = 'stale')")
    approval.get_by_role("button", name="✅ Approve").click()
    page.get_by_role("status").filter(has_text="reload the page").wait_for()
    assert approval.get_by_role("button", name="✅ Approve").is_enabled()

    # The sign-in ends (the cookie is gone): a click leads to the sign-in page.
    page.context.clear_cookies()
    approval.get_by_role("button", name="✅ Approve").click()
    page.wait_for_url("**/login")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "inbox-signed-out-click.png"), full_page=True)
    assert not (tmp_path / "workspace" / "again.txt").exists()

    page.fill("input[name=token]", TOKEN)
    page.get_by_role("button", name="Sign in").click()
    approval = page.locator("section.approval").first
    approval.wait_for()  # still pending: nothing was decided while signed out
    approval.get_by_role("button", name="✅ Approve").click()
    page.get_by_role("status").filter(has_text="Approved call").wait_for()
    wait_for(lambda: (tmp_path / "workspace" / "again.txt").exists())
