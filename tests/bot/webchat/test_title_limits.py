"""A pasted title past the body limit (found by review on 2026-12-07).

Before: docs/webchat.md said a title is cut to 200 characters "whatever its length", but a
body over ``MAX_BODY_BYTES`` (8 KiB) is refused with 413 on create and on rename, which
the doc did not say. Now the doc says so; a title under the limit is still cut."""

from __future__ import annotations

from pathlib import Path

import httpx

from bot.webchat.routes import MAX_BODY_BYTES
from tests.bot.webchat.conftest import TOKEN, ChatServer

BEARER = {"Authorization": f"Bearer {TOKEN}"}
DOC = Path(__file__).parents[3] / "docs" / "webchat.md"


async def test_a_long_title_is_cut_and_one_past_the_body_limit_is_refused_as_documented(
    make_server,
):
    server: ChatServer = await make_server(stored=True)
    async with httpx.AsyncClient(base_url=server.http, headers=BEARER) as http:
        created = await http.post("/chat/conversations", json={"title": "t" * 5000})
        assert created.status_code == 201, created.text
        assert created.json()["title"] == "t" * 200
        path = f"/chat/conversations/{created.json()['id']}"
        assert (await http.patch(path, json={"title": "u" * 5000})).json()["title"] == "u" * 200
        pasted = "t" * (MAX_BODY_BYTES + 1)
        for refused in (
            await http.post("/chat/conversations", json={"title": pasted}),
            await http.patch(path, json={"title": pasted}),
        ):
            assert refused.status_code == 413
            assert "Traceback" not in refused.text and refused.json()["error"]
    rows = {
        line.split("|")[1].strip(): line for line in DOC.read_text().splitlines() if "|" in line
    }
    for request in (
        '`POST /chat/conversations` `{"title"?: str}`',
        '`PATCH /chat/conversations/{id}` `{"title": str}`',
    ):
        assert "413" in rows[request], f"docs/webchat.md: {request} does not name its 413"
