"""The operator's JSON API over a real engine, hub and scheduler (SQLite, default rules)."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from datetime import timedelta

import httpx
import pytest
import sqlalchemy as sa
from prometheus_client.parser import text_string_to_metric_families

from bot.delivery import OutboundStats
from bot.http.api import ApiRoutes
from bot.http.app import create_app
from bot.http.operations import Operations
from bot.http.web import WebInbox
from engine.approval.deciders import OPERATOR
from engine.core import Engine
from engine.llm.scripted import text, tool_call
from engine.session import events as ev
from engine.session.outcomes import Final
from engine.store.schema import utcnow
from scheduler.service import Scheduler
from scheduler.tables import job_runs

TOKEN = "s3cret-token"
AUTH = {"authorization": f"Bearer {TOKEN}"}
ORIGIN = "telegram:1"


@pytest.fixture
async def client(engine: Engine, scheduler: Scheduler) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(
        api=ApiRoutes(Operations(engine, None, scheduler), token=TOKEN), host="0.0.0.0"
    )
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        yield client


def shell(command: str, call_id: str = "c1"):
    return tool_call("execute_cmd", json.dumps({"command": command}), call_id)


def ask(question: str, call_id: str = "q1"):
    return tool_call("ask_user_clarification", json.dumps({"question": question}), call_id)


async def waiting_turn(handler, message: str, kind: type) -> tuple[asyncio.Task, object]:
    """Start a turn and wait until it emits ``kind`` (an approval request or a question)."""
    seen = asyncio.Event()
    found: list = []

    def emit(event) -> None:
        if isinstance(event, kind):
            found.append(event)
            seen.set()

    turn = asyncio.create_task(handler.handle_message(message, emit=emit))
    await asyncio.wait_for(seen.wait(), 5)
    return turn, found[0]


# -- auth ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/api/sessions"),
        ("GET", "/api/sessions/1"),
        ("GET", "/api/inbox"),
        ("POST", "/api/inbox/approvals/1/resolve"),
        ("POST", "/api/inbox/clarifications/1/resolve"),
        ("GET", "/api/jobs"),
        ("POST", "/api/jobs/1/toggle"),
        ("DELETE", "/api/jobs/1"),
        ("POST", "/api/jobs/1/kill"),
        ("GET", "/metrics"),
        ("GET", "/api/openapi.json"),
    ],
)
async def test_every_route_wants_the_bearer_token(client, method, path):
    for headers in ({}, {"authorization": "Bearer wrong"}, {"authorization": f"Basic {TOKEN}"}):
        response = await client.request(method, path, headers=headers, json={"answer": "x"})
        assert response.status_code == 401, (method, path, headers)
        assert response.json() == {"error": "missing or wrong bearer token"}


async def test_healthz_stays_open(client):
    assert (await client.get("/healthz")).status_code == 200


def test_without_a_token_the_api_serves_only_on_loopback(engine):
    api = ApiRoutes(Operations(engine), token=None)
    with pytest.raises(ValueError, match="CHATHUB_API_TOKEN: required"):
        create_app(api=api, host="0.0.0.0")
    create_app(api=api, host="127.0.0.1")  # allowed
    create_app(api=ApiRoutes(Operations(engine), token=TOKEN), host="0.0.0.0")


async def test_without_a_token_on_loopback_no_header_is_needed(engine):
    app = create_app(api=ApiRoutes(Operations(engine), token=None), host="127.0.0.1")
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1"
    ) as c:
        assert (await c.get("/api/inbox")).status_code == 200
        assert (await c.get("/api/jobs")).status_code == 503  # no scheduler here
        # Any web page the owner visits can send this (a text/plain POST needs no
        # preflight): it approved a command with a bypass for everything.
        forged = await c.post(
            "/api/inbox/approvals/1/resolve",
            content='{"action": "approve", "bypass_scope": "all"}',
            headers={"origin": "https://evil.example", "content-type": "text/plain"},
        )
        assert forged.status_code == 401
        # Nor a GET another site's page makes with no Origin (an <img>): it reran the
        # paid health checks at will (found by review).
        for path in ("/api/inbox", "/api/health/details?fresh=true"):
            img = await c.get(path, headers={"sec-fetch-site": "cross-site"})
            assert img.status_code == 401, path
        assert (await c.get("/api/inbox", headers={"sec-fetch-site": "none"})).status_code == 200


# -- sessions -----------------------------------------------------------------------------------


async def test_sessions_list_and_detail(client, engine):
    handler = await engine.new_session("tic")
    await handler.handle_message("hello")
    await engine.new_session("console")

    listing = (await client.get("/api/sessions", params={"source": "tic"}, headers=AUTH)).json()
    assert set(listing) == {"items", "total", "page", "per_page"}
    assert (listing["total"], listing["page"], listing["per_page"]) == (1, 1, 20)
    [item] = listing["items"]
    assert item["id"] == handler.session.id and item["source"] == "tic"
    assert {"agent_id", "is_ephemeral", "is_interactive", "created_at", "message_count",
            "last_message_at"} <= set(item)  # fmt: skip

    everything = await client.get("/api/sessions?page=1&per_page=1", headers=AUTH)
    assert everything.json()["total"] == 2 and len(everything.json()["items"]) == 1

    detail = (await client.get(f"/api/sessions/{handler.session.id}", headers=AUTH)).json()
    assert detail["session"]["id"] == handler.session.id
    assert [m["kind"] for m in detail["messages"]] == ["user", "assistant"]
    assert detail["messages"][1]["content"] == "echo: hello"


async def test_unknown_session_and_bad_paging(client):
    missing = await client.get("/api/sessions/999", headers=AUTH)
    assert missing.status_code == 404 and "999" in missing.json()["error"]
    for query in ("page=0", "per_page=0", "per_page=5000", "page=abc"):
        response = await client.get(f"/api/sessions?{query}", headers=AUTH)
        assert response.status_code == 422, query
        assert response.json()["error"]


# -- the inbox ----------------------------------------------------------------------------------


async def test_inbox_approve_runs_the_tool_and_a_second_decision_conflicts(
    client, engine, model, tmp_path
):
    model.add(shell("echo hi > out.txt"))
    handler = await engine.new_session(ORIGIN)
    turn, request = await waiting_turn(handler, "write hi", ev.ApprovalRequired)
    model.add(ask("Which city?"))
    asker = await engine.new_session("console")
    question_turn, question = await waiting_turn(asker, "book", ev.Question)

    inbox = (await client.get("/api/inbox", headers=AUTH)).json()
    [approval] = inbox["approvals"]
    assert approval["tool_call_id"] == request.tool_call_id
    assert approval["tool"] == "execute_cmd"
    assert approval["arguments"] == {"command": "echo hi > out.txt"}
    assert approval["session_id"] == handler.session.id and approval["source"] == ORIGIN
    assert approval["age_s"] >= 0 and approval["requested_at"]
    [clarification] = inbox["clarifications"]
    assert clarification["request_id"] == question.request_id
    assert clarification["question"] == "Which city?" and clarification["source"] == "console"

    url = f"/api/inbox/approvals/{request.tool_call_id}/resolve"
    resolved = await client.post(url, json={"action": "approve"}, headers=AUTH)
    assert resolved.status_code == 200
    assert resolved.json() == {
        "tool_call_id": request.tool_call_id,
        "session_id": handler.session.id,
        "action": "approve",
        "live": True,
    }
    assert isinstance(await asyncio.wait_for(turn, 5), Final)
    assert (tmp_path / "workspace" / "out.txt").read_text() == "hi\n"

    again = await client.post(url, json={"action": "reject"}, headers=AUTH)
    assert again.status_code == 409 and again.json()["code"] == "resolved"

    answer_url = f"/api/inbox/clarifications/{question.request_id}/resolve"
    answered = await client.post(answer_url, json={"answer": "Rome"}, headers=AUTH)
    assert answered.status_code == 200 and answered.json()["live"] is True
    assert isinstance(await asyncio.wait_for(question_turn, 5), Final)
    assert (await client.post(answer_url, json={"answer": "x"}, headers=AUTH)).status_code == 409
    assert (await client.get("/api/inbox", headers=AUTH)).json() == {
        "approvals": [],
        "clarifications": [],
    }


async def test_reject_with_a_note_and_bad_decisions(client, engine, model):
    model.add(shell("rm -rf data"))
    handler = await engine.new_session(ORIGIN)
    turn, request = await waiting_turn(handler, "clean up", ev.ApprovalRequired)
    url = f"/api/inbox/approvals/{request.tool_call_id}/resolve"

    bad = [
        {"action": "maybe"},
        {"action": "approve", "bypass_secs": -5},
        {"action": "approve", "bypass_scope": "everything"},
        {"action": "approve", "surprise": 1},
        # A bypass's value is what its scope takes, and nothing where it takes none.
        {"action": "approve", "bypass_scope": "category", "bypass_value": "Nope"},
        {"action": "approve", "bypass_scope": "category"},
        {"action": "approve", "bypass_scope": "mcp_server", "bypass_value": "a__b"},
        {"action": "approve", "bypass_scope": "mcp_server", "bypass_value": ""},
        {"action": "approve", "bypass_scope": "all", "bypass_value": "x"},
        {"action": "approve", "bypass_value": "x"},
        {"action": "approve", "bypass_secs": 0},
        {"action": "reject", "bypass_secs": 60},
        [{"action": "reject"}],
    ]
    for body in bad:
        response = await client.post(url, json=body, headers=AUTH)
        assert response.status_code == 422, body
    detail = (await client.post(url, json={"action": "maybe"}, headers=AUTH)).json()["detail"]
    assert detail[0]["loc"] == ["action"]
    malformed = await client.post(url, content=b"{not json", headers=AUTH)
    assert malformed.status_code == 422 and malformed.json()["error"] == "body is not valid JSON"
    huge = await client.post(url, content=b"x" * (10 * 1024 * 1024), headers=AUTH)
    assert huge.status_code == 413

    rejected = await client.post(
        url, json={"action": "reject", "note": "keep the data"}, headers=AUTH
    )
    assert rejected.status_code == 200 and rejected.json()["action"] == "reject"
    assert isinstance(await asyncio.wait_for(turn, 5), Final)
    call = await engine.store.history.get_tool_call(request.tool_call_id)
    assert call is not None and call.status == "rejected" and "keep the data" in call.result

    unknown = await client.post(
        "/api/inbox/approvals/99999/resolve", json={"action": "approve"}, headers=AUTH
    )
    assert unknown.status_code == 404 and unknown.json()["code"] == "not_found"
    unknown_q = await client.post(
        "/api/inbox/clarifications/99999/resolve", json={"answer": "x"}, headers=AUTH
    )
    assert unknown_q.status_code == 404
    empty = await client.post(
        "/api/inbox/clarifications/99999/resolve", json={"answer": ""}, headers=AUTH
    )
    assert empty.status_code == 422


async def test_approve_with_a_category_bypass_lets_the_next_call_through(client, engine, model):
    model.add(shell("echo one", "c1"))
    model.add(shell("echo two", "c2"))
    handler = await engine.new_session(ORIGIN)
    asked: list[ev.ApprovalRequired] = []
    seen = asyncio.Event()

    def emit(event) -> None:
        if isinstance(event, ev.ApprovalRequired):
            asked.append(event)
            seen.set()

    turn = asyncio.create_task(handler.handle_message("run both", emit=emit))
    await asyncio.wait_for(seen.wait(), 5)
    body = {"action": "approve", "bypass_scope": "category", "bypass_value": "Shell"}
    url = f"/api/inbox/approvals/{asked[0].tool_call_id}/resolve"
    resolved = await client.post(url, json={**body, "bypass_secs": 900}, headers=AUTH)
    assert resolved.status_code == 200, resolved.text
    assert isinstance(await asyncio.wait_for(turn, 5), Final)
    assert len(asked) == 1  # the second command ran without asking


# -- jobs ---------------------------------------------------------------------------------------


async def test_a_jobs_grants_are_listed_and_can_only_be_narrowed(client, engine, scheduler):
    (engine.workspace.root / "notes").mkdir(parents=True, exist_ok=True)
    grants = scheduler.grants.check({"tools": ["execute_cmd"], "read": ["notes"]})
    job = await scheduler.create_cron(ORIGIN, "Brief", "0 8 * * *", "brief me", grants=grants)

    [listed] = (await client.get("/api/jobs", headers=AUTH)).json()["items"]
    assert listed["grants"]["tools"] == ["execute_cmd"]
    assert listed["grant_lines"] == ["may read notes", "may call execute_cmd"]

    narrowed = await client.put(
        f"/api/jobs/{job.id}/grants", json={"read": ["notes"]}, headers=AUTH
    )
    assert narrowed.status_code == 200 and narrowed.json()["grant_lines"] == ["may read notes"]
    wider = await client.put(
        f"/api/jobs/{job.id}/grants",
        json={"read": ["notes"], "tools": ["execute_cmd"]},
        headers=AUTH,
    )
    assert wider.status_code == 422 and "only narrowing" in wider.json()["error"]
    for bad in ({"tools": ["*"]}, {"read": ["../etc"]}, {"read": ["x"] * 10_000}, {"x": 1}):
        refused = await client.put(f"/api/jobs/{job.id}/grants", json=bad, headers=AUTH)
        assert refused.status_code == 422, bad
    revoked = await client.put(f"/api/jobs/{job.id}/grants", json={}, headers=AUTH)
    assert revoked.json()["grant_lines"] == [] and revoked.json()["run_context"] is None
    missing = await client.put("/api/jobs/999/grants", json={}, headers=AUTH)
    assert missing.status_code == 404


async def test_a_jobs_grants_as_listed_can_be_sent_back_narrower(client, engine, scheduler):
    """With a working directory, the grants ``GET /api/jobs`` shows (paths from the
    workspace's root) were read from that directory when sent back: the job's own read
    grant became ``reports/reports/notes.txt`` and was refused as a widening (found by
    review on 2026-12-07)."""
    (engine.workspace.root / "reports").mkdir(parents=True, exist_ok=True)
    (engine.workspace.root / "reports" / "notes.txt").write_text("x")
    grants = scheduler.grants.check(
        {"read": ["notes.txt"], "tools": ["execute_cmd"], "working_directory": "reports"}
    )
    job = await scheduler.create_cron(ORIGIN, "Brief", "0 8 * * *", "brief me", grants=grants)

    [listed] = (await client.get("/api/jobs", headers=AUTH)).json()["items"]
    assert listed["grants"]["read"] == ["reports/notes.txt"]
    narrowed = await client.put(
        f"/api/jobs/{job.id}/grants", json={**listed["grants"], "tools": []}, headers=AUTH
    )
    assert narrowed.status_code == 200, narrowed.json()
    assert narrowed.json()["grants"]["read"] == ["reports/notes.txt"]
    assert narrowed.json()["grants"]["tools"] == []


async def claimed_not_started(engine, job_id: int) -> None:
    """A run of the job claimed by a worker (``worker-x``) and waiting in its queue."""
    now = utcnow()
    await engine.store.db.run(
        lambda conn: conn.execute(
            sa.insert(job_runs).values(
                job_id=job_id, scheduled_for=now, status="running", lease_owner="worker-x",
                created_at=now,
            )
        )
    )  # fmt: skip


async def test_a_kill_of_a_run_waiting_in_its_workers_queue_is_a_stop(client, engine, scheduler):
    """A run claimed by a worker but not started yet: the kill stops it (it ends as it
    would start), and the API said "no run in flight" (found by review on 2026-12-07)."""
    job = await scheduler.create_cron(ORIGIN, "Morning", "0 8 * * *", "summarise the news")
    await claimed_not_started(engine, job.id)
    killed = await client.post(f"/api/jobs/{job.id}/kill", headers=AUTH)
    assert killed.status_code == 200 and killed.json()["cancelled_sessions"] == []
    assert await scheduler.store.stopping_unstarted(job.id) == 1


async def test_a_kill_whose_queued_run_is_given_back_meanwhile_is_still_a_stop(
    client, engine, scheduler, monkeypatch
):
    """The stop was asked, then (a deploy) the worker gave the run back, which ends a
    stopped queued run, before the kill counted the queued ones: it answered 409 "no run
    in flight" for a run it had stopped (found by review on 2026-12-07)."""
    job = await scheduler.create_cron(ORIGIN, "Morning", "0 8 * * *", "summarise the news")
    await claimed_not_started(engine, job.id)
    asked = scheduler.store.request_stop

    async def asked_then_given_back(job_id: int) -> list[int]:
        sessions = await asked(job_id)
        await engine.store.db.run(
            lambda conn: conn.execute(
                sa.update(job_runs).where(job_runs.c.job_id == job_id).values(status="failed")
            )
        )
        return sessions

    monkeypatch.setattr(scheduler.store, "request_stop", asked_then_given_back)
    killed = await client.post(f"/api/jobs/{job.id}/kill", headers=AUTH)
    assert killed.status_code == 200, killed.json()


async def test_jobs_list_toggle_kill_delete(client, engine, scheduler):
    job = await scheduler.create_cron(ORIGIN, "Morning", "0 8 * * *", "summarise the news")

    [listed] = (await client.get("/api/jobs", headers=AUTH)).json()["items"]
    assert listed["id"] == job.id and listed["title"] == "Morning" and listed["enabled"] is True
    assert listed["origin_source"] == ORIGIN and listed["running"] is False

    paused = await client.post(f"/api/jobs/{job.id}/toggle", headers=AUTH)
    assert paused.status_code == 200 and paused.json()["enabled"] is False
    resumed = await client.post(f"/api/jobs/{job.id}/toggle", json={"enabled": True}, headers=AUTH)
    assert resumed.status_code == 200 and resumed.json()["enabled"] is True
    bad = await client.post(f"/api/jobs/{job.id}/toggle", json={"enabled": "yes"}, headers=AUTH)
    assert bad.status_code == 422

    idle = await client.post(f"/api/jobs/{job.id}/kill", headers=AUTH)
    assert idle.status_code == 409 and "no run in flight" in idle.json()["error"]

    session = await engine.new_session("cron:test")
    now = utcnow()
    await engine.store.db.run(
        lambda conn: conn.execute(
            sa.insert(job_runs).values(
                job_id=job.id, scheduled_for=now, status="running", session_id=session.session.id,
                created_at=now,
            )
        )
    )  # fmt: skip
    # A run row nobody executes never stops: the API says so instead of claiming it did.
    scheduler.stop_wait_s = 0.1
    killed = await client.post(f"/api/jobs/{job.id}/kill", headers=AUTH)
    assert killed.status_code == 504
    assert "had not stopped" in killed.json()["error"]

    deleted = await client.delete(f"/api/jobs/{job.id}", headers=AUTH)
    assert deleted.status_code == 200
    assert deleted.json() == {"id": job.id, "deleted": True, "runs_stopped": False}
    assert (await client.get("/api/jobs", headers=AUTH)).json() == {"items": []}
    for method, path in (
        ("DELETE", f"/api/jobs/{job.id}"),
        ("POST", f"/api/jobs/{job.id}/toggle"),
        ("POST", f"/api/jobs/{job.id}/kill"),
    ):
        assert (await client.request(method, path, headers=AUTH)).status_code == 404


# -- metrics and the document -------------------------------------------------------------------


async def test_metrics_count_from_the_database(client, engine, model):
    model.add(shell("echo ok"))
    handler = await engine.new_session(ORIGIN)
    turn, request = await waiting_turn(handler, "run", ev.ApprovalRequired)

    text = (await client.get("/metrics", headers=AUTH)).text
    assert "chathub_approvals_pending 1" in text
    assert 'chathub_tool_calls_total{status="pending"} 1' in text

    await engine.approve(request.tool_call_id, decider=OPERATOR)
    await asyncio.wait_for(turn, 5)
    response = await client.get("/metrics", headers=AUTH)
    assert response.headers["content-type"].startswith("text/plain")
    text = response.text
    assert 'chathub_tool_calls_total{status="done"} 1' in text
    assert "chathub_approvals_pending 0" in text
    assert "chathub_turns_total 1" in text
    assert "# TYPE chathub_job_runs_total counter" in text


async def test_metrics_include_model_latency_tokens_and_telegram_counters(engine, model):
    model.add(text("first", input_tokens=120, output_tokens=30))
    model.add(text("second", input_tokens=200, output_tokens=50))
    handler = await engine.new_session(ORIGIN)
    await handler.handle_message("one")
    await handler.handle_message("two")
    stats = OutboundStats(sent=7, retry_after=3, retried_errors=1, failed=0)
    app = create_app(api=ApiRoutes(Operations(engine), token=TOKEN, telegram=stats))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
        body = (await c.get("/metrics", headers=AUTH)).text

    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(body)
        for sample in family.samples
    }
    labels = (("model", "primary"),)
    assert samples[("chathub_llm_request_duration_seconds_count", labels)] == 2
    assert samples[("chathub_llm_request_duration_seconds_bucket", (("le", "+Inf"), *labels))] == 2
    assert samples[("chathub_llm_request_duration_seconds_bucket", (("le", "60.0"), *labels))] == 2
    assert samples[("chathub_llm_tokens_total", (("kind", "input"), *labels))] == 320
    assert samples[("chathub_llm_tokens_total", (("kind", "output"), *labels))] == 80
    assert samples[("chathub_telegram_sends_total", ())] == 7
    assert samples[("chathub_telegram_429_total", ())] == 3
    assert samples[("chathub_turns_total", ())] == 2


async def test_the_openapi_document_lists_the_routes(client):
    response = await client.get("/api/openapi.json", headers=AUTH)
    document = response.json()
    assert document["openapi"].startswith("3.")
    assert {
        "/api/sessions",
        "/api/sessions/{session_id}",
        "/api/inbox",
        "/api/inbox/approvals/{tool_call_id}/resolve",
        "/api/inbox/clarifications/{request_id}/resolve",
        "/api/jobs",
        "/api/jobs/{job_id}",
        "/api/jobs/{job_id}/toggle",
        "/api/jobs/{job_id}/kill",
        "/metrics",
        "/healthz",
    } <= set(document["paths"])
    resolve = document["paths"]["/api/inbox/approvals/{tool_call_id}/resolve"]["post"]
    assert resolve["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith(
        "ApprovalDecision"
    )
    assert "ApprovalDecision" in document["components"]["schemas"]


# -- a route that fails -------------------------------------------------------------------------


class _Broken(Operations):
    """Operations whose inbox listing fails as an unforeseen bug would."""

    async def approvals(self):
        raise RuntimeError("secret sauce: /srv/db.sqlite")


async def test_an_unexpected_exception_is_a_plain_500_with_an_error_id(engine, caplog):
    broken = _Broken(engine)
    app = create_app(
        api=ApiRoutes(broken, token=TOKEN), web=WebInbox(broken, token=TOKEN), host="0.0.0.0"
    )
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=True)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
        for path in ("/api/inbox", "/metrics"):
            response = await c.get(path, headers=AUTH)
            assert response.status_code == 500, path
            assert response.headers["content-type"] == "application/json"
            [error] = response.json().values()
            assert re.fullmatch(r"internal error \(id [0-9a-f]{12}\)", error), error
            assert error.split("id ")[1].rstrip(")") in caplog.text
        page = await c.get("/", headers=AUTH)
    assert page.status_code == 500 and page.headers["content-type"].startswith("text/plain")
    assert re.fullmatch(r"Sorry, an internal error \(id [0-9a-f]{12}\)\.", page.text), page.text
    for answer in (response.text, page.text):
        assert "secret" not in answer and "RuntimeError" not in answer
    assert "secret sauce" in caplog.text and "RuntimeError" in caplog.text


# -- guessing the token ----------------------------------------------------------------------


async def test_wrong_bearer_tokens_are_throttled_with_the_page_sign_in(engine):
    """The API and the page share one count per address: guessing through either is slow."""
    from bot.http.signins import LoginThrottle

    now = [utcnow()]
    throttle = LoginThrottle(clock=lambda: now[0])
    ops = Operations(engine)
    app = create_app(
        api=ApiRoutes(ops, token=TOKEN, throttle=throttle),
        web=WebInbox(ops, token=TOKEN, throttle=throttle),
        host="0.0.0.0",
    )
    transport = httpx.ASGITransport(app=app, client=("203.0.113.7", 5000))
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
        wrong = {"authorization": "Bearer guess"}
        statuses = [(await c.get("/api/inbox", headers=wrong)).status_code for _ in range(12)]
        assert statuses[:10] == [401] * 10 and statuses[10:] == [429, 429]
        refused = await c.get("/api/inbox", headers=AUTH)  # the right one waits too
        assert refused.status_code == 429 and int(refused.headers["retry-after"]) > 0
        assert "Too many wrong tokens" in refused.json()["error"]
        login = await c.post("/login", data={"token": TOKEN}, headers={"origin": "http://t"})
        assert login.status_code == 429  # the page counts the same failures
    other = httpx.ASGITransport(app=app, client=("198.51.100.9", 5000))
    async with httpx.AsyncClient(transport=other, base_url="http://t") as c:
        assert (await c.get("/api/inbox", headers=AUTH)).status_code == 200
    now[0] += timedelta(minutes=16)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
        assert (await c.get("/api/inbox", headers=AUTH)).status_code == 200


async def test_without_a_token_a_request_a_proxy_passes_on_is_not_this_machines(engine):
    """A TLS proxy on this machine (a webhook needs one) that passes the client's Host on
    made anyone sending ``Host: localhost`` the operator until 2026-12-07 (found by review):
    approving pending calls, reading every session."""
    app = create_app(api=ApiRoutes(Operations(engine), token=None), host="127.0.0.1")
    proxy = httpx.ASGITransport(app=app, client=("127.0.0.1", 40000))
    async with httpx.AsyncClient(transport=proxy, base_url="http://localhost") as c:
        assert (await c.get("/api/inbox")).status_code == 200  # this machine itself
        passed_on = {"x-forwarded-for": "203.0.113.7"}
        assert (await c.get("/api/inbox", headers=passed_on)).status_code == 401
    afar = httpx.ASGITransport(app=app, client=("203.0.113.7", 40000))
    async with httpx.AsyncClient(transport=afar, base_url="http://localhost") as c:
        assert (await c.get("/api/inbox")).status_code == 401


async def test_a_method_a_path_lacks_is_405_naming_every_method_it_has(client):
    for method, path, allowed in (
        ("OPTIONS", "/api/memory/users/1/facts", {"GET", "HEAD", "POST"}),
        ("PUT", "/api/memory/facts/1", {"PATCH", "DELETE"}),
        ("GET", "/api/jobs/1/kill", {"POST"}),
    ):
        answer = await client.request(method, path, headers=AUTH)
        assert answer.status_code == 405, (method, path)
        assert set(answer.headers["allow"].split(", ")) == allowed, (method, path)


async def test_wrong_tokens_on_the_events_endpoint_are_throttled_with_the_rest(engine, tmp_path):
    """``POST /api/events`` counts wrong tokens with the API's: guessing through it is as
    slow as through any other route (it checked each guess at full speed)."""
    from bot.http.app import EventsEndpoint
    from bot.http.signins import LoginThrottle
    from scheduler.events import EventStore

    throttle = LoginThrottle(clock=utcnow)
    app = create_app(
        api=ApiRoutes(Operations(engine), token=TOKEN, throttle=throttle),
        events=EventsEndpoint(EventStore(engine.store.db), TOKEN, throttle),
        host="0.0.0.0",
    )
    transport = httpx.ASGITransport(app=app, client=("203.0.113.8", 5000))
    event = {"source": "mail", "type": "new_mail", "payload": {}}
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
        wrong = {"authorization": "Bearer guess"}
        statuses = [
            (await c.post("/api/events", json=event, headers=wrong)).status_code for _ in range(12)
        ]
        assert statuses[:10] == [401] * 10 and statuses[10:] == [429, 429]
        refused = await c.get("/api/inbox", headers=AUTH)  # one count for every route
        assert refused.status_code == 429


async def test_a_call_whose_arguments_hold_nan_does_not_break_the_session_detail(
    client, engine, model
):
    """``json.loads`` takes ``NaN``, no JSON encoder writes it: one call the model (or a
    prompt injection) wrote made the session's detail a 500 (found by review on
    2026-12-07). Its arguments are shown as written, as any that are not JSON."""
    written = '{"command": "echo hi", "timeout": NaN}'
    model.add(tool_call("execute_cmd", written, "c1"))
    handler = await engine.new_session(ORIGIN)
    await asyncio.wait_for(handler.handle_message("run it", emit=lambda _e: None), 5)

    detail = await client.get(f"/api/sessions/{handler.session.id}", headers=AUTH)
    assert detail.status_code == 200, detail.text
    [call] = [row for row in detail.json()["messages"] if row["kind"] == "tool"]
    assert call["name"] == "execute_cmd" and call["arguments"] == written
