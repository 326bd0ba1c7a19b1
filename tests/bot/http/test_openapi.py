"""The OpenAPI document comes from the request and response models, and the routes agree.

Schemathesis (``test_fuzz.py``) mostly reaches empty lists and unknown ids; here real
answers with data in them (a session, a pending approval and question, a job) are
checked against the document's schemas, and the document against the models.
"""

from __future__ import annotations

import asyncio

import jsonschema
import pytest

from bot.http.api import openapi_document
from bot.http.models import ApprovalDecision, SessionsQuery
from engine.session import events as ev
from tests.bot.http.test_api import AUTH, ORIGIN, ask, client, shell, waiting_turn

__all__ = ["client"]


@pytest.fixture(scope="module")
def document() -> dict:
    return openapi_document()


def _check(document: dict, path: str, method: str, response) -> None:
    declared = document["paths"][path][method]["responses"][str(response.status_code)]
    schema = declared["content"]["application/json"]["schema"]
    resolver = {"components": document["components"], **schema}
    jsonschema.validate(response.json(), resolver)


def test_bodies_and_query_come_from_the_models(document):
    schemas = document["components"]["schemas"]
    expected = ApprovalDecision.model_json_schema()
    assert schemas["ApprovalDecision"] == expected
    [sessions] = [document["paths"]["/api/sessions"]["get"]]
    names = [p["name"] for p in sessions["parameters"] if p["in"] == "query"]
    assert names == list(SessionsQuery.model_fields)
    for path, operations in document["paths"].items():
        if path == "/healthz":  # its 503 is the health report itself
            continue
        for operation in operations.values():
            for code, answer in operation["responses"].items():
                if int(code) >= 400:
                    assert answer["content"]["application/json"]["schema"] == {
                        "$ref": "#/components/schemas/ErrorBody"
                    }, (path, code)


async def test_real_answers_match_the_document(client, engine, model, scheduler, document):
    model.add(shell("echo hi"))
    handler = await engine.new_session(ORIGIN)
    turn, request = await waiting_turn(handler, "say hi", ev.ApprovalRequired)
    model.add(ask("Which city?"))
    asker = await engine.new_session("console")
    question_turn, question = await waiting_turn(asker, "book", ev.Question)
    await scheduler.create_cron(ORIGIN, "Morning", "0 8 * * *", "news")

    for path, url in [
        ("/api/sessions", "/api/sessions"),
        ("/api/sessions/{session_id}", f"/api/sessions/{handler.session.id}"),
        ("/api/inbox", "/api/inbox"),
        ("/api/jobs", "/api/jobs"),
        ("/api/sessions/{session_id}", "/api/sessions/99999"),
        ("/api/sessions", "/api/sessions?page=0"),
    ]:
        response = await client.get(url, headers=AUTH)
        _check(document, path, "get", response)
    inbox = (await client.get("/api/inbox", headers=AUTH)).json()
    assert inbox["approvals"] and inbox["clarifications"]

    approve = await client.post(
        f"/api/inbox/approvals/{request.tool_call_id}/resolve",
        json={"action": "approve"},
        headers=AUTH,
    )
    _check(document, "/api/inbox/approvals/{tool_call_id}/resolve", "post", approve)
    again = await client.post(
        f"/api/inbox/approvals/{request.tool_call_id}/resolve",
        json={"action": "approve"},
        headers=AUTH,
    )
    assert again.status_code == 409
    _check(document, "/api/inbox/approvals/{tool_call_id}/resolve", "post", again)
    answered = await client.post(
        f"/api/inbox/clarifications/{question.request_id}/resolve",
        json={"answer": "Rome"},
        headers=AUTH,
    )
    _check(document, "/api/inbox/clarifications/{request_id}/resolve", "post", answered)
    await asyncio.wait_for(turn, 5)
    await asyncio.wait_for(question_turn, 5)
    [job] = (await client.get("/api/jobs", headers=AUTH)).json()["items"]
    deleted = await client.delete(f"/api/jobs/{job['id']}", headers=AUTH)
    _check(document, "/api/jobs/{job_id}", "delete", deleted)
