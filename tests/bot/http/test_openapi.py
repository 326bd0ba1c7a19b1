"""The OpenAPI document comes from the request and response models, and the routes agree.

Schemathesis (``test_fuzz.py``) mostly reaches empty lists and unknown ids; here real
answers with data in them (a session, a pending approval and question, a job) are
checked against the document's schemas, and the document against the models.
"""

from __future__ import annotations

import asyncio
import re

import httpx
import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from bot.completions import CompletionsApi
from bot.http.api import OPERATIONS, ApiRoutes, openapi_document
from bot.http.app import EventsEndpoint, create_app
from bot.http.models import (
    MCP_SERVER_PATTERN,
    ApprovalDecision,
    JobItem,
    OpenQuestion,
    PendingApproval,
    SessionsQuery,
    SessionSummary,
    SessionTree,
)
from bot.http.operations import Operations
from engine.approval.bypass import validate_bypass
from engine.session import events as ev
from engine.tools.protocols import ToolCategory
from tests.bot.http.test_api import AUTH, ORIGIN, TOKEN, ask, shell, waiting_turn

REF = "#/components/schemas/{model}"


@pytest.fixture(scope="module")
def document() -> dict:
    return openapi_document()


@pytest.fixture
async def client(engine, scheduler):
    """The API with the events endpoint and ``/healthz``: every documented operation."""
    app = create_app(
        api=ApiRoutes(Operations(engine, None, scheduler), token=TOKEN),
        events=EventsEndpoint(scheduler.tic.events, TOKEN),
        host="0.0.0.0",
    )
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        yield client


def _check(document: dict, path: str, method: str, response) -> None:
    declared = document["paths"][path][method]["responses"][str(response.status_code)]
    schema = declared["content"]["application/json"]["schema"]
    resolver = {"components": document["components"], **schema}
    jsonschema.validate(response.json(), resolver)


def _same_fields(model: type[BaseModel], answer: dict) -> None:
    """The answer has exactly the model's fields (the handler and the model agree)."""
    assert set(answer) == set(model.model_fields), (model.__name__, sorted(answer))


def test_every_route_is_a_documented_operation(engine, scheduler, document):
    completions = CompletionsApi(None, engine.store.db, lambda: ["main"], token=TOKEN)
    app = create_app(
        api=ApiRoutes(Operations(engine, None, scheduler), token=TOKEN),
        events=EventsEndpoint(scheduler.tic.events, TOKEN),
        completions=completions,
        host="0.0.0.0",
    )
    served = {
        (route.path.replace(":id}", "}"), method.lower())
        for route in app.routes
        # /v1's fallback answers what is not there in OpenAI's shape (404, 405)
        if route.path != "/v1/{rest:path}"
        for method in route.methods - {"HEAD"}
    }
    documented = {
        (path, method) for path, operations in document["paths"].items() for method in operations
    }
    assert served == documented
    assert len(documented) == len(OPERATIONS) == 28


def test_bodies_and_query_come_from_the_models(document):
    schemas = document["components"]["schemas"]
    for spec in OPERATIONS:
        if spec.body is None:
            continue
        expected = spec.body.model_json_schema(ref_template=REF)
        for name, schema in expected.pop("$defs", {}).items():
            assert schemas[name] == schema, name
        assert schemas[spec.body.__name__] == expected, spec.name
    # A decision is one of four shapes, and a bypass's value is exactly what its scope takes.
    variants = [ref["$ref"].rsplit("/", 1)[1] for ref in schemas["ApprovalDecision"]["oneOf"]]
    assert variants == ["Reject", "Approve", "ApproveCategory", "ApproveMcpServer"]
    assert schemas["ApproveCategory"]["properties"]["bypass_value"]["enum"] == [
        category.value for category in ToolCategory
    ]
    assert ApprovalDecision.model_json_schema()["oneOf"]
    [sessions] = [document["paths"]["/api/sessions"]["get"]]
    names = [p["name"] for p in sessions["parameters"] if p["in"] == "query"]
    assert names == list(SessionsQuery.model_fields)
    for spec in OPERATIONS:
        if spec.path == "/healthz":  # its 503 is the health report itself
            continue
        # /v1 refuses in OpenAI's error shape, the rest in the API's
        body = "OpenAIErrorBody" if spec.path.startswith("/v1/") else "ErrorBody"
        operation = document["paths"][spec.document_path][spec.method.lower()]
        for code, answer in operation["responses"].items():
            if int(code) >= 400:
                assert answer["content"]["application/json"]["schema"] == {
                    "$ref": f"#/components/schemas/{body}"
                }, (spec.path, code)


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
    _same_fields(PendingApproval, inbox["approvals"][0])
    _same_fields(OpenQuestion, inbox["clarifications"][0])
    refused = await client.post(
        f"/api/inbox/approvals/{request.tool_call_id}/resolve",
        json={"action": "approve", "bypass_scope": "category", "bypass_value": "Nope"},
        headers=AUTH,
    )
    assert refused.status_code == 422 and refused.json()["detail"][0]["loc"] == ["bypass_value"]
    _check(document, "/api/inbox/approvals/{tool_call_id}/resolve", "post", refused)

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
    _same_fields(JobItem, job)
    toggled = await client.post(f"/api/jobs/{job['id']}/toggle", headers=AUTH)
    _check(document, "/api/jobs/{job_id}/toggle", "post", toggled)
    assert toggled.json()["enabled"] is False
    _same_fields(JobItem, toggled.json())
    idle = await client.post(f"/api/jobs/{job['id']}/kill", headers=AUTH)
    assert idle.status_code == 409
    _check(document, "/api/jobs/{job_id}/kill", "post", idle)
    deleted = await client.delete(f"/api/jobs/{job['id']}", headers=AUTH)
    _check(document, "/api/jobs/{job_id}", "delete", deleted)

    # After the turns: sessions with messages, a session tree with a tool call in it.
    listing = await client.get("/api/sessions", headers=AUTH)
    _check(document, "/api/sessions", "get", listing)
    for item in listing.json()["items"]:
        _same_fields(SessionSummary, item)
    tree = await client.get(f"/api/sessions/{handler.session.id}", headers=AUTH)
    _check(document, "/api/sessions/{session_id}", "get", tree)
    rows = SessionTree.model_validate(tree.json()).messages
    assert [row.kind for row in rows] == ["user", "thinking", "tool", "assistant"]
    for row, answer in zip(rows, tree.json()["messages"], strict=True):
        _same_fields(type(row), answer)

    event = await client.post("/api/events", json={"source": "s", "type": "t"}, headers=AUTH)
    _check(document, "/api/events", "post", event)
    too_deep = await client.post("/api/events", content=b"[" * 40 + b"]" * 40, headers=AUTH)
    _check(document, "/api/events", "post", too_deep)
    _check(document, "/healthz", "get", await client.get("/healthz"))


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(
    name=st.one_of(
        st.from_regex(MCP_SERVER_PATTERN, fullmatch=True),
        st.text(alphabet="ab_*\n", max_size=8),
        st.text(max_size=300),
    )
)
def test_the_mcp_server_pattern_is_what_the_engine_takes(name):
    """The document's pattern for ``bypass_value`` agrees with ``validate_bypass``."""
    documented = 1 <= len(name) <= 255 and re.search(MCP_SERVER_PATTERN, name) is not None
    try:
        validate_bypass("mcp_server", name)
        taken = len(name) <= 255
    except ValueError:
        taken = False
    assert documented == taken, name
