"""The inbox's Memory page: search one chat, every person's facts, edited and deleted
through forms with the inbox's sign-in, same-origin and CSRF checks."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from bot.http.app import create_app
from bot.http.operations import Operations
from bot.http.web import WebInbox
from engine.core import Engine
from memory.facts import FactLimits
from memory.service import MemoryService
from memory.users import Identity
from tests.bot.http.test_api import TOKEN
from tests.bot.http.test_web import csrf_of, signed_in
from tests.memory.conftest import write_history


@pytest.fixture
async def memory(engine: Engine) -> AsyncIterator[MemoryService]:
    service = MemoryService(engine.store.db, engine.bus, fact_limits=FactLimits(max_chars=60))
    yield service
    await service.close()


def client_for(inbox: WebInbox) -> httpx.AsyncClient:
    app = create_app(web=inbox, host="0.0.0.0")
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://inbox.test")


@pytest.fixture
async def web(engine: Engine, memory: MemoryService) -> AsyncIterator[httpx.AsyncClient]:
    async with client_for(WebInbox(Operations(engine), token=TOKEN, memory=memory)) as client:
        yield client


async def test_the_page_wants_a_sign_in_and_lists_everyone_s_facts(web, memory):
    assert (await web.get("/memory")).headers["location"] == "/login"
    alice = await memory.user_for(Identity("telegram", "111", "Alice <b>"))
    await memory.facts.add(
        alice, "Likes <script>tea</script>", origin_source="telegram:111", created_by="deriver"
    )
    bob = await memory.user_for(Identity("telegram", "222", "Bob"))
    await memory.facts.add(bob, "Plays chess", origin_source="telegram:-5", created_by="tool")
    await signed_in(web)
    page = await web.get("/memory")
    assert page.status_code == 200
    html = page.text
    assert 'href="/memory"' in html  # in the nav
    assert "Alice &lt;b&gt;" in html and "telegram 111" in html and "Bob" in html
    assert "Likes &lt;script&gt;tea&lt;/script&gt;" in html and "<script>tea" not in html
    assert "Plays chess" in html and "from telegram:-5" in html
    assert "Nothing is indexed yet" in html


async def test_edit_delete_and_add_through_the_forms(web, memory):
    alice = await memory.user_for(Identity("telegram", "111", "Alice"))
    fact = await memory.facts.add(
        alice, "Likes tea", origin_source="telegram:111", created_by="user"
    )
    await signed_in(web)
    csrf = csrf_of((await web.get("/memory")).text)

    saved = await web.post(
        f"/memory/facts/{fact.id}/edit", data={"csrf": csrf, "body": "Likes green tea"}
    )
    assert saved.status_code == 303 and saved.headers["location"].startswith("/memory?done=edited")
    assert f"Fact #{fact.id} saved." in (await web.get(saved.headers["location"])).text
    assert [f.body for f in await memory.facts.list(alice)] == ["Likes green tea"]

    too_long = await web.post(
        f"/memory/facts/{fact.id}/edit", data={"csrf": csrf, "body": "x" * 61}
    )
    assert too_long.status_code == 422
    assert "A fact is at most 60 characters; this one is 61." in too_long.text
    empty = await web.post(f"/memory/facts/{fact.id}/edit", data={"csrf": csrf, "body": "  "})
    assert empty.status_code == 422 and "A fact cannot be empty." in empty.text
    assert [f.body for f in await memory.facts.list(alice)] == ["Likes green tea"]

    added = await web.post(
        f"/memory/users/{alice}/facts", data={"csrf": csrf, "body": "Lives in Turin"}
    )
    assert added.status_code == 303 and "done=added" in added.headers["location"]
    assert (
        (await web.post("/memory/users/999/facts", data={"csrf": csrf, "body": "x"}))
        .headers["location"]
        .startswith("/memory?done=not_found")
    )

    gone = await web.post(f"/memory/facts/{fact.id}/delete", data={"csrf": csrf})
    assert gone.status_code == 303 and "done=deleted" in gone.headers["location"]
    again = await web.post(f"/memory/facts/{fact.id}/delete", data={"csrf": csrf})
    assert "done=not_found" in again.headers["location"]
    assert "no longer exists" in (await web.get(again.headers["location"])).text
    assert [f.body for f in await memory.facts.list(alice)] == ["Lives in Turin"]


async def test_the_forms_refuse_other_sites_and_missing_tokens(web, memory):
    alice = await memory.user_for(Identity("telegram", "111"))
    fact = await memory.facts.add(
        alice, "Likes tea", origin_source="telegram:111", created_by="user"
    )
    anonymous = await web.post(f"/memory/facts/{fact.id}/delete", data={"csrf": "x"})
    assert anonymous.status_code == 401
    csrf = await signed_in(web)
    other_site = await web.post(
        f"/memory/facts/{fact.id}/delete",
        data={"csrf": csrf},
        headers={"origin": "https://evil.test"},
    )
    assert other_site.status_code == 403
    no_token = await web.post(f"/memory/facts/{fact.id}/edit", data={"body": "pwned"})
    assert no_token.status_code == 403
    twice = await web.post(
        f"/memory/facts/{fact.id}/edit",
        content=f"csrf={csrf}&body=a&body=b",
        headers={"content-type": "application/x-www-form-urlencoded"},
    )
    assert twice.status_code == 400
    huge_id = await web.post(f"/memory/facts/{2**63}/delete", data={"csrf": csrf})
    assert huge_id.status_code == 404
    assert [f.body for f in await memory.facts.list(alice)] == ["Likes tea"]


async def test_search_picks_a_chat_and_links_the_sessions(web, engine, memory):
    mine = await engine.store.sessions.create("telegram:111", title="Trip <planning>")
    await write_history(engine.store, mine.id, [("user", "Lisbon in May, then <b>Porto</b>")])
    other = await engine.store.sessions.create("telegram:222", title="Other")
    await write_history(engine.store, other.id, [("user", "Lisbon too")])
    await memory.indexer.catch_up()
    await signed_in(web)
    page = (await web.get("/memory")).text
    assert '<option value="telegram:111"' in page and '<option value="telegram:222"' in page
    found = (await web.get("/memory", params={"source": "telegram:111", "q": "lisbon porto"})).text
    assert f'href="/sessions/{mine.id}"' in found and f'href="/sessions/{other.id}"' not in found
    assert "Trip &lt;planning&gt;" in found and "[Lisbon]" in found and "<b>Porto" not in found
    nothing = (await web.get("/memory", params={"source": "telegram:111", "q": "zanzibar"})).text
    assert "Nothing found in telegram:111" in nothing


async def test_with_memory_switched_off_the_page_says_so(engine):
    async with client_for(WebInbox(Operations(engine), token=TOKEN)) as web:
        await signed_in(web)
        page = await web.get("/memory")
        assert page.status_code == 200 and "Long-term memory is switched off" in page.text
        refused = await web.post("/memory/facts/1/delete", data={"csrf": csrf_of(page.text)})
        assert refused.status_code == 200 and "switched off" in refused.text
