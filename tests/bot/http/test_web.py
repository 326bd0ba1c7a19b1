"""The Agent Inbox page over a real engine, hub and scheduler, driven with httpx."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator

import httpx
import pytest

from bot.http.app import create_app
from bot.http.operations import Operations
from bot.http.web import WEB_DECIDER, WebInbox
from engine.core import Engine
from engine.hub import ChatHub, DecisionMade
from engine.session import events as ev
from scheduler.service import Scheduler
from tests.bot.http.test_api import ORIGIN, TOKEN, ask, shell


@pytest.fixture
async def web(
    engine: Engine, hub: ChatHub, scheduler: Scheduler
) -> AsyncIterator[httpx.AsyncClient]:
    inbox = WebInbox(Operations(engine, hub, scheduler), token=TOKEN)
    app = create_app(web=inbox, host="0.0.0.0")
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://inbox.test") as client:
        yield client


async def signed_in(web: httpx.AsyncClient) -> str:
    """Sign in with the token; the CSRF field of the page."""
    response = await web.post("/login", data={"token": TOKEN})
    assert response.status_code == 303 and response.headers["location"] == "/"
    page = await web.get("/")
    assert page.status_code == 200
    return csrf_of(page.text)


def csrf_of(html: str) -> str:
    match = re.search(r'name="csrf" value="([0-9a-f]+)"', html)
    assert match, "no csrf field on the page"
    return match.group(1)


async def next_event(events, kind: type, within: float = 5):
    async def find():
        async for item in events:
            if isinstance(item.event, kind):
                return item.event

    return await asyncio.wait_for(find(), within)


async def test_the_page_wants_a_sign_in_and_the_cookie_is_not_the_token(web):
    assert (await web.get("/")).status_code == 303
    assert (await web.get("/login")).status_code == 200
    wrong = await web.post("/login", data={"token": "nope"})
    assert wrong.status_code == 401 and "not right" in wrong.text
    assert (await web.get("/")).headers["location"] == "/login"
    await signed_in(web)
    cookie = web.cookies.get("chathub_web")
    assert cookie and TOKEN not in cookie
    headers = (await web.post("/login", data={"token": TOKEN})).headers
    assert "httponly" in headers["set-cookie"].lower()
    assert "samesite=strict" in headers["set-cookie"].lower()
    # A bearer header works too (curl, monitoring).
    web.cookies.clear()
    bearer = await web.get("/", headers={"authorization": f"Bearer {TOKEN}"})
    assert bearer.status_code == 200 and "Pending approvals" in bearer.text


async def test_approving_on_the_page_runs_the_tool_and_closes_the_chat_card(
    web, hub, model, tmp_path
):
    csrf = await signed_in(web)
    events = hub.events(ORIGIN)
    model.add(shell("echo from-the-page > page.txt"))
    await hub.send_message(ORIGIN, "write it")
    request = await next_event(events, ev.ApprovalRequired)

    page = (await web.get("/")).text
    assert f'id="approval-{request.tool_call_id}"' in page
    assert "echo from-the-page &gt; page.txt" in page  # the full command, escaped

    response = await web.post(
        f"/approvals/{request.tool_call_id}", data={"csrf": csrf, "action": "approve"}
    )
    assert response.status_code == 303
    decided = await next_event(events, DecisionMade)
    assert decided == DecisionMade(request.tool_call_id, "approve", WEB_DECIDER)
    done = await next_event(events, ev.Done)
    assert (tmp_path / "workspace" / "page.txt").read_text() == "from-the-page\n"
    assert done.content

    after = await web.get(response.headers["location"])
    assert f"Approved call #{request.tool_call_id}." in after.text
    assert f'id="approval-{request.tool_call_id}"' not in after.text
    again = await web.post(
        f"/approvals/{request.tool_call_id}", data={"csrf": csrf, "action": "reject"}
    )
    followed = await web.get(again.headers["location"])
    assert "already decided elsewhere" in followed.text
    events.close()


async def test_reject_with_a_reason_15_min_and_answering_a_question(web, hub, model, engine):
    csrf = await signed_in(web)
    events = hub.events(ORIGIN)
    model.add(shell("rm -rf data"))
    await hub.send_message(ORIGIN, "clean up")
    request = await next_event(events, ev.ApprovalRequired)
    await web.post(
        f"/approvals/{request.tool_call_id}",
        data={"csrf": csrf, "action": "reject", "note": "keep the data"},
    )
    decided = await next_event(events, DecisionMade)
    assert (decided.outcome, decided.note) == ("reject", "keep the data")
    await next_event(events, ev.Done)

    model.add(shell("echo a"), shell("echo b", "c2"))
    await hub.send_message(ORIGIN, "two commands")
    first = await next_event(events, ev.ApprovalRequired)
    await web.post(f"/approvals/{first.tool_call_id}", data={"csrf": csrf, "action": "bypass_15m"})
    assert (await next_event(events, DecisionMade)).outcome == "bypass_15m"
    await next_event(events, ev.Done)  # the second command was not asked for

    model.add(ask("Which city?"))
    await hub.send_message(ORIGIN, "book a table")
    question = await next_event(events, ev.Question)
    page = (await web.get("/")).text
    assert "Which city?" in page
    empty = await web.post(f"/questions/{question.request_id}", data={"csrf": csrf, "answer": " "})
    assert "cannot be empty" in (await web.get(empty.headers["location"])).text
    await web.post(f"/questions/{question.request_id}", data={"csrf": csrf, "answer": "Rome"})
    await next_event(events, ev.Done)
    assert "Which city?" not in (await web.get("/")).text
    events.close()


async def test_forms_without_the_csrf_field_or_from_another_site_change_nothing(web, hub, model):
    csrf = await signed_in(web)
    events = hub.events(ORIGIN)
    model.add(shell("echo x"))
    await hub.send_message(ORIGIN, "go")
    request = await next_event(events, ev.ApprovalRequired)
    url = f"/approvals/{request.tool_call_id}"

    assert (await web.post(url, data={"action": "approve"})).status_code == 403
    assert (await web.post(url, data={"csrf": "0" * 64, "action": "approve"})).status_code == 403
    cross = await web.post(
        url, data={"csrf": csrf, "action": "approve"}, headers={"origin": "https://evil.test"}
    )
    assert cross.status_code == 403
    huge = await web.post(url, data={"csrf": csrf, "action": "approve", "note": "x" * 70_000})
    assert huge.status_code == 413
    bad = await web.post(url, data={"csrf": csrf, "action": "launch"})
    assert "not valid" in (await web.get(bad.headers["location"])).text
    web.cookies.clear()
    assert (await web.post(url, data={"csrf": csrf, "action": "approve"})).status_code == 401
    assert [a.tool_call_id for a in await hub.engine.pending_approvals()] == [request.tool_call_id]
    events.close()


async def test_session_detail_shows_messages_tool_calls_and_reasoning_collapsed(web, hub, model):
    await signed_in(web)
    events = hub.events(ORIGIN)
    await hub.send_message(ORIGIN, "hello <b>there</b>")
    await next_event(events, ev.Done)
    [session] = (await hub.engine.store.views.list_sessions())["items"]
    page = await web.get(f"/sessions/{session['id']}")
    assert page.status_code == 200
    assert "hello &lt;b&gt;there&lt;/b&gt;" in page.text  # escaped, never markup
    assert "echo: hello" in page.text
    assert (await web.get("/sessions/999999")).status_code == 404
    assert (await web.get("/sessions/99999999999999999999999")).status_code == 404
    for page in ("0", "-3", "abc", "99999999999999999999999"):  # a bad page shows a page
        assert (await web.get(f"/?page={page}")).status_code == 200, page
    inbox = (await web.get("/")).text
    assert f'href="/sessions/{session["id"]}"' in inbox
    events.close()


async def test_jobs_pause_resume_and_delete_from_the_page(web, scheduler):
    csrf = await signed_in(web)
    job = await scheduler.create_cron(
        ORIGIN, title="Morning briefing", spec="0 8 * * 1-5", prompt="Brief me"
    )
    page = (await web.get("/")).text
    assert "Morning briefing" in page and "Pause" in page
    await web.post(f"/jobs/{job.id}/toggle", data={"csrf": csrf})
    assert (await scheduler.store.get(job.id)).enabled is False
    assert "Resume" in (await web.get("/")).text
    await web.post(f"/jobs/{job.id}/toggle", data={"csrf": csrf})
    assert (await scheduler.store.get(job.id)).enabled is True
    await web.post(f"/jobs/{job.id}/delete", data={"csrf": csrf})
    assert "Morning briefing" not in (await web.get("/")).text
    gone = await web.post(f"/jobs/{job.id}/delete", data={"csrf": csrf})
    assert "no longer exists" in (await web.get(gone.headers["location"])).text


async def test_without_a_token_the_page_is_loopback_only(engine):
    inbox = WebInbox(Operations(engine), token=None)
    with pytest.raises(ValueError, match="CHATHUB_API_TOKEN"):
        create_app(web=inbox, host="0.0.0.0")
    app = create_app(web=inbox, host="127.0.0.1")
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
        page = await c.get("/")
        assert page.status_code == 200 and "not running in this process" in page.text
        # Still no cross-site form posts: the CSRF field is a per-process secret.
        assert (await c.post("/approvals/1", data={"action": "approve"})).status_code == 403
