"""The agent through the official ``openai`` client: models, completions whole and
streamed, wrong keys, conversations continued by name and by history, approvals that wait
for the inbox, a client that goes away."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from typing import Any

import httpx
import openai
import pytest
import sqlalchemy as sa

from bot.completions import ExchangeLimits
from bot.completions.tables import api_conversations
from engine.store.schema import tool_approvals, utcnow
from tests.bot.completions.conftest import GUARD_S, V1Server, until, user_messages
from tests.fakes.openai_server import FakeOpenAIServer

WRITE = ("w1", "write_file", {"path": "note.txt", "content": "hi\n"})


async def idle(v1: V1Server, source: str) -> bool:
    return await v1.hub.current_session(source) is not None and not await v1.hub.is_busy(source)


async def approve_the_card(http: httpx.AsyncClient) -> None:
    """The one approval waiting, approved through the API."""
    [card] = (await http.get("/api/inbox")).json()["approvals"]
    await http.post(
        f"/api/inbox/approvals/{card['tool_call_id']}/resolve", json={"action": "approve"}
    )


async def answered(v1: V1Server, source: str) -> bool:
    return bool(await v1.api.last_answer(source)) and not await v1.hub.is_busy(source)


async def test_models_are_the_agents_one_may_talk_to(v1: V1Server):
    async with v1.client() as client:
        listed = await client.models.list()
        one = await client.models.retrieve("main")
        with pytest.raises(openai.NotFoundError):
            await client.models.retrieve("gpt-4o")
    ids = [model.id for model in listed.data]
    assert ids[0] == "main"
    assert all(model.object == "model" for model in listed.data)
    assert one.id == "main"


async def test_a_completion_carries_the_agents_answer(v1: V1Server, fake_openai: FakeOpenAIServer):
    fake_openai.reply_text("Hello from the agent.")
    async with v1.client() as client:
        answer = await client.chat.completions.create(
            model="main", messages=[{"role": "user", "content": "  hi *there*\n"}]
        )
    assert answer.choices[0].message.content == "Hello from the agent."
    assert answer.choices[0].finish_reason == "stop"
    assert answer.object == "chat.completion"
    assert user_messages(fake_openai.requests[-1])[-1] == "  hi *there*\n"  # unchanged


async def test_a_streamed_completion_ends_with_stop_then_done(
    v1: V1Server, fake_openai: FakeOpenAIServer
):
    fake_openai.reply_text("One two three four.")
    async with v1.client() as client:
        stream = await client.chat.completions.create(
            model="main", messages=[{"role": "user", "content": "count"}], stream=True
        )
        chunks = [piece async for piece in stream]
    text = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert text == "One two three four."
    assert len(chunks) > 2  # streamed, not one piece
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert all(c.choices[0].finish_reason is None for c in chunks[:-1])
    async with (
        v1.http() as http,
        http.stream(
            "POST",
            "/v1/chat/completions",
            json={"model": "main", "stream": True, "messages": [{"role": "user", "content": "x"}]},
        ) as raw,
    ):
        fake_openai.reply_text("ok")
        lines = [line async for line in raw.aiter_lines() if line]
    assert raw.headers["content-type"].startswith("text/event-stream")
    assert lines[-1] == "data: [DONE]"
    assert json.loads(lines[-2].removeprefix("data: "))["choices"][0]["finish_reason"] == "stop"


async def test_a_wrong_or_missing_key_is_401_and_never_reaches_the_model(
    v1: V1Server, fake_openai: FakeOpenAIServer
):
    async with v1.client(key="wrong") as client:
        with pytest.raises(openai.AuthenticationError) as refused:
            await client.chat.completions.create(
                model="main", messages=[{"role": "user", "content": "hi"}]
            )
        with pytest.raises(openai.AuthenticationError):
            await client.models.list()
    assert refused.value.code == "invalid_api_key"
    async with httpx.AsyncClient(base_url=v1.base) as http:
        bare = await http.post("/v1/chat/completions", json={})
        elsewhere = await http.get("/v1/anything")
    assert bare.status_code == elsewhere.status_code == 401
    assert bare.json()["error"]["code"] == "invalid_api_key"
    assert fake_openai.requests == []


async def test_wrong_keys_are_throttled_with_the_rest_of_the_api(v1: V1Server):
    async with httpx.AsyncClient(base_url=v1.base) as http:
        statuses = []
        for _ in range(12):
            answer = await http.get("/v1/models", headers={"Authorization": "Bearer nope"})
            statuses.append(answer.status_code)
        api = await http.get("/api/inbox", headers={"Authorization": "Bearer nope"})
    assert statuses[0] == 401 and statuses[-1] == 429
    assert answer.json()["error"]["code"] == "rate_limit_exceeded"
    assert int(answer.headers["retry-after"]) > 0
    assert api.status_code == 429  # one count for the API and /v1


async def test_a_conversation_named_by_user_continues_and_adds_nothing_twice(
    v1: V1Server, fake_openai: FakeOpenAIServer
):
    fake_openai.reply_text("First answer.")
    fake_openai.reply_text("Second answer.")
    fake_openai.reply_text("Third answer.")
    async with v1.client() as client:
        first = await client.chat.completions.create(
            model="main", user="alice", messages=[{"role": "user", "content": "one"}]
        )
        # only its new message
        await client.chat.completions.create(
            model="main", user="alice", messages=[{"role": "user", "content": "two"}]
        )
        # the whole history, as Open WebUI sends it
        await client.chat.completions.create(
            model="main",
            user="alice",
            messages=[
                {"role": "user", "content": "one"},
                {"role": "assistant", "content": first.choices[0].message.content},
                {"role": "user", "content": "two"},
                {"role": "assistant", "content": "Second answer."},
                {"role": "user", "content": "three"},
            ],
        )
    assert user_messages(fake_openai.requests[-1]) == ["one", "two", "three"]
    assistant = [
        m["content"] for m in fake_openai.requests[-1]["messages"] if m["role"] == "assistant"
    ]
    assert assistant == ["First answer.", "Second answer."]


async def test_a_named_conversation_goes_on_from_an_edited_message(
    v1: V1Server, fake_openai: FakeOpenAIServer
):
    """Open WebUI's edit of an earlier message: the edited branch was chained after the old
    answer, so every request after it carried the edited messages again as "earlier
    messages" the agent had not seen (found by review)."""
    for answer in ("A1.", "A2.", "A2 edited.", "A3."):
        fake_openai.reply_text(answer)

    def said(role: str, text: str) -> dict[str, str]:
        return {"role": role, "content": text}

    one, a1 = said("user", "one"), said("assistant", "A1.")
    edited, a2 = said("user", "TWO EDITED"), said("assistant", "A2 edited.")
    async with v1.client() as client:
        for messages in (
            [one],
            [one, a1, said("user", "two")],
            [one, a1, edited],  # the person edits "two"
            [one, a1, edited, a2, said("user", "three")],  # and goes on from there
        ):
            await client.chat.completions.create(model="main", user="alice", messages=messages)
    last = fake_openai.requests[-1]["messages"]
    assert last[-2] == said("user", "three")  # the message, before the closing system row
    assert "Earlier messages" not in json.dumps(last)


async def test_different_names_never_share_history(v1: V1Server, fake_openai: FakeOpenAIServer):
    fake_openai.reply_text("A.")
    fake_openai.reply_text("B.")
    async with v1.client() as client:
        await client.chat.completions.create(
            model="main", user="alice", messages=[{"role": "user", "content": "secret of alice"}]
        )
        await client.chat.completions.create(
            model="main",
            messages=[{"role": "user", "content": "who am I"}],
            extra_headers={"X-Chathub-Conversation": "bob"},
        )
    assert user_messages(fake_openai.requests[-1]) == ["who am I"]


async def test_a_history_without_a_name_continues_the_conversation_it_came_from(
    v1: V1Server, fake_openai: FakeOpenAIServer
):
    fake_openai.reply_text("Paris.")
    fake_openai.reply_text("About 2 million.")
    fake_openai.reply_text("Hi.")
    async with v1.client() as client:
        await client.chat.completions.create(
            model="main", messages=[{"role": "user", "content": "capital of France?"}]
        )
        await client.chat.completions.create(
            model="main",
            messages=[
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "capital of France?"},
                {"role": "assistant", "content": "Paris."},
                {"role": "user", "content": "population?"},
            ],
        )
        # a first message elsewhere is a conversation of its own
        await client.chat.completions.create(
            model="main", messages=[{"role": "user", "content": "hello"}]
        )
    second = fake_openai.requests[1]
    assert user_messages(second) == ["capital of France?", "population?"]
    assert "Be brief." in json.dumps(second["messages"])  # the client's instructions
    assert user_messages(fake_openai.requests[2]) == ["hello"]


async def test_a_carried_history_the_conversation_never_held_is_given_with_the_message(
    v1: V1Server, fake_openai: FakeOpenAIServer
):
    """Before it, in the session's history, for this turn and every later one
    (``test_carried_history.py``)."""
    fake_openai.reply_text("Noted.")
    async with v1.client() as client:
        await client.chat.completions.create(
            model="main",
            messages=[
                {"role": "user", "content": "my name is Zoe"},
                {"role": "assistant", "content": "Hello Zoe."},
                {"role": "user", "content": "what is my name?"},
            ],
        )
    [asked] = user_messages(fake_openai.requests[-1])
    assert asked.endswith("my name is Zoe\n\nassistant: Hello Zoe.\n\nwhat is my name?")


async def test_tool_activity_and_an_approval_decided_through_the_inbox_api(
    v1: V1Server, fake_openai: FakeOpenAIServer, tmp_path
):
    fake_openai.reply_tool_calls(WRITE)
    fake_openai.reply_text("Wrote note.txt.")
    async with v1.client() as client:
        stream = await client.chat.completions.create(
            model="main",
            user="writer",
            messages=[{"role": "user", "content": "write note.txt"}],
            stream=True,
        )
        seen: list[str] = []
        async for piece in stream:
            seen.append(piece.choices[0].delta.content or "")
            if "waits for approval" in seen[-1]:
                break
        async with v1.http() as http:
            inbox = (await http.get("/api/inbox")).json()
            call = inbox["approvals"][0]
            assert call["tool"] == "write_file" and "note.txt" in json.dumps(call["arguments"])
            decided = await http.post(
                f"/api/inbox/approvals/{call['tool_call_id']}/resolve", json={"action": "approve"}
            )
            assert decided.status_code == 200, decided.text
        rest = [piece async for piece in stream]
    text = "".join(seen) + "".join(p.choices[0].delta.content or "" for p in rest)
    assert "write_file" in text and "Approved by" in text
    assert text.endswith("Wrote note.txt.")
    assert rest[-1].choices[0].finish_reason == "stop"
    assert not any(p.choices[0].delta.tool_calls for p in rest)  # never for the client to run
    assert (tmp_path / "workspace" / "note.txt").read_text() == "hi\n"


async def test_a_failure_of_ours_mid_stream_is_an_openai_error_event(
    v1: V1Server, fake_openai: FakeOpenAIServer, monkeypatch: Any, caplog: Any
):
    """Once the stream began, a failure of ours (here holding the answer) cut the
    connection: the SDK raised a transport error, never the error's id (found by review on
    2026-12-06). It ends as OpenAI ends a failed stream: an error event."""
    fake_openai.reply_text("Hello there.")

    async def broken(*_args: Any, **_kwargs: Any) -> None:
        raise RuntimeError("database is locked")

    monkeypatch.setattr(v1.api, "finish", broken)
    async with v1.client() as client:
        stream = await client.chat.completions.create(
            model="main", stream=True, messages=[{"role": "user", "content": "hi"}]
        )
        with pytest.raises(openai.APIError) as failed:
            async for _ in stream:
                pass
    assert "internal error (id " in failed.value.message
    assert "database is locked" not in failed.value.message
    assert "database is locked" in caplog.text


async def test_a_request_that_meets_a_long_waiting_card_waits_only_what_is_left(
    make_v1, fake_openai: FakeOpenAIServer
):
    """It waited a whole decision's wait from its own start, whatever the card had waited
    already: after the request before it had waited its own, about twice that (found by
    review on 2026-12-06). Here the card has waited for an hour."""
    v1 = await make_v1(limits=ExchangeLimits(decision_wait_s=60, keepalive_s=0.05))
    fake_openai.reply_tool_calls(WRITE)
    fake_openai.reply_text("Written.")
    first = {"model": "main", "user": "patient", "messages": [{"role": "user", "content": "write"}]}
    later = {**first, "messages": [{"role": "user", "content": "is it done?"}]}
    async with v1.http() as http:
        async with http.stream(
            "POST", "/v1/chat/completions", json={**first, "stream": True}
        ) as raw:
            async for line in raw.aiter_lines():
                if "waits for approval" in line:
                    break  # the client leaves: its turn waits on

        def an_hour_ago(conn: sa.Connection) -> None:
            conn.execute(tool_approvals.update().values(requested_at=utcnow() - timedelta(hours=1)))

        await v1.engine.store.db.run(an_hour_ago)
        again = await asyncio.wait_for(http.post("/v1/chat/completions", json=later), GUARD_S)
        said = again.json()["choices"][0]["message"]["content"]
        assert "write_file waits for approval" in said and "Still waiting" in said
        await approve_the_card(http)


async def test_a_stream_queued_behind_a_waiting_one_gets_its_headers_and_keepalives(
    make_v1, fake_openai: FakeOpenAIServer
):
    """A second stream of a conversation whose turn waits for a decision got no byte, not
    even its headers, until the first request ended (a decision's wait, 300 s): a proxy
    cut it after 60 s of silence (found by review on 2026-12-06)."""
    v1 = await writing_with_a_card(make_v1, fake_openai)
    first = two_tabs("write")
    second = two_tabs("is it done?")
    async with v1.http() as http, v1.http() as other:
        async with http.stream("POST", "/v1/chat/completions", json=first) as raw:
            told = raw.aiter_lines()  # kept: a loop broken over a fresh one closes the stream
            async for line in told:
                if "waits for approval" in line:
                    break
            queued = other.build_request("POST", "/v1/chat/completions", json=second)
            waiting = await asyncio.wait_for(other.send(queued, stream=True), GUARD_S)
            try:
                assert waiting.status_code == 200  # while the first still waits
                lines = waiting.aiter_lines()
                first_line = await asyncio.wait_for(anext(lines), GUARD_S)
                assert first_line == ": keep-alive"
            finally:
                await waiting.aclose()  # it leaves the queue
        await approve_the_card(http)
        await until(lambda: answered(v1, "api:1"))
        fake_openai.reply_text("You're welcome.")
        thanks = two_tabs("thanks", stream=False)
        after = await asyncio.wait_for(http.post("/v1/chat/completions", json=thanks), GUARD_S)
    assert after.json()["choices"][0]["message"]["content"] == "You're welcome."  # not held


async def test_a_non_streaming_request_waits_for_the_decision_too(
    v1: V1Server, fake_openai: FakeOpenAIServer
):
    fake_openai.reply_tool_calls(WRITE)
    fake_openai.reply_text("Done writing.")
    async with v1.client() as client:
        asked = asyncio.create_task(
            client.chat.completions.create(
                model="main", messages=[{"role": "user", "content": "write it"}]
            )
        )
        async with v1.http() as http:

            async def approvals_listed() -> list:
                return (await http.get("/api/inbox")).json()["approvals"]

            approvals = await until(approvals_listed)
            assert not asked.done()
            await http.post(
                f"/api/inbox/approvals/{approvals[0]['tool_call_id']}/resolve",
                json={"action": "reject", "note": "not now"},
            )
        answer = await asyncio.wait_for(asked, GUARD_S)
    assert answer.choices[0].message.content.endswith("Done writing.")
    assert "Rejected by" in answer.choices[0].message.content


@pytest.mark.parametrize("next_request", ["a new message", "the same request again"])
async def test_a_request_that_meets_a_waiting_card_is_told_and_ends_after_the_wait(
    make_v1, fake_openai: FakeOpenAIServer, next_request: str
):
    """Only the request that saw the card knew it waited: the next message of the chat,
    or a client's retry of the first, got keep-alives until someone decided, however long
    that took, and held the conversation meanwhile (found by review)."""
    v1 = await make_v1(limits=ExchangeLimits(decision_wait_s=0.3, keepalive_s=0.05))
    fake_openai.reply_tool_calls(WRITE)
    fake_openai.reply_text("Written.")
    first = {"model": "main", "user": "patient", "messages": [{"role": "user", "content": "write"}]}
    later = first
    if next_request == "a new message":
        later = {**first, "messages": [{"role": "user", "content": "is it done?"}]}
    async with v1.http() as http:
        told = (await http.post("/v1/chat/completions", json=first)).json()
        assert "Still waiting" in told["choices"][0]["message"]["content"]
        again = await asyncio.wait_for(http.post("/v1/chat/completions", json=later), GUARD_S)
        said = again.json()["choices"][0]["message"]["content"]
        assert "write_file waits for approval" in said and "Still waiting" in said
        await approve_the_card(http)
    await until(lambda: answered(v1, "api:1"))


async def test_a_wait_for_a_decision_ends_after_the_limit_and_the_turn_goes_on(
    make_v1, fake_openai: FakeOpenAIServer
):
    v1 = await make_v1(limits=ExchangeLimits(decision_wait_s=0.2, keepalive_s=0.05))
    fake_openai.reply_tool_calls(WRITE)
    fake_openai.reply_text("Finally written.")
    async with v1.http() as http:
        async with http.stream(
            "POST",
            "/v1/chat/completions",
            json={
                "model": "main",
                "user": "patient",
                "stream": True,
                "messages": [{"role": "user", "content": "write"}],
            },
        ) as raw:
            lines = [line async for line in raw.aiter_lines() if line]
        assert ": keep-alive" in lines
        assert lines[-1] == "data: [DONE]"
        told = "".join(
            json.loads(line[6:])["choices"][0]["delta"].get("content") or ""
            for line in lines
            if line.startswith("data: {")
        )
        assert "Still waiting for a decision" in told
        approvals = (await http.get("/api/inbox")).json()["approvals"]
        assert len(approvals) == 1  # still waiting, as everywhere
        await http.post(
            f"/api/inbox/approvals/{approvals[0]['tool_call_id']}/resolve",
            json={"action": "approve"},
        )
    await until(lambda: answered(v1, "api:1"))
    assert await v1.api.last_answer("api:1") == "Finally written."  # in the conversation
    fake_openai.reply_text("Yes, it is written.")
    async with v1.client() as client:  # the next request carries on from it
        await client.chat.completions.create(
            model="main",
            user="patient",
            messages=[
                {"role": "user", "content": "write"},
                {"role": "assistant", "content": told},
                {"role": "user", "content": "is it written?"},
            ],
        )
    request = fake_openai.requests[-1]
    assert user_messages(request) == ["write", "is it written?"]
    assert "Finally written." in [m.get("content") for m in request["messages"]]


async def test_a_request_sent_again_adds_nothing_and_gets_the_answer(
    v1: V1Server, fake_openai: FakeOpenAIServer
):
    fake_openai.reply_text("Once.")
    history = [
        {"role": "user", "content": "first"},
    ]
    async with v1.client() as client:
        first = await client.chat.completions.create(model="main", messages=history)
        fake_openai.reply_text("Twice.")
        history += [
            {"role": "assistant", "content": first.choices[0].message.content},
            {"role": "user", "content": "second"},
        ]
        await client.chat.completions.create(model="main", messages=history)
        asked = len(fake_openai.requests)
        # the same request again (a client's retry after a dropped connection)
        again = await client.chat.completions.create(model="main", messages=history)
    assert len(fake_openai.requests) == asked  # nothing sent to the model twice
    assert again.choices[0].message.content == "Twice."


async def test_a_request_sent_again_after_its_turn_failed_runs_it_again(
    v1: V1Server, fake_openai: FakeOpenAIServer
):
    """The model failed the message's turn: the same request again is answered anew, not
    with the conversation's previous answer (it was: "Once." came back for "second")."""
    fake_openai.reply_text("Once.")
    history = [{"role": "user", "content": "first"}]
    async with v1.client() as client:
        first = await client.chat.completions.create(model="main", messages=history)
        history += [
            {"role": "assistant", "content": first.choices[0].message.content},
            {"role": "user", "content": "second"},
        ]
        fake_openai.reply_error(400, "the model refused")
        failed = await client.chat.completions.create(model="main", messages=history)
        assert "Once." not in failed.choices[0].message.content
        fake_openai.reply_text("Second, at last.")
        again = await client.chat.completions.create(model="main", messages=history)
    assert again.choices[0].message.content == "Second, at last."
    assert user_messages(fake_openai.requests[-1]) == ["first", "second"]
    async with v1.client() as client:  # and it is held as the answer: nothing runs a third time
        asked = len(fake_openai.requests)
        read_back = await client.chat.completions.create(model="main", messages=history)
    assert read_back.choices[0].message.content == "Second, at last."
    assert len(fake_openai.requests) == asked


async def test_the_sdks_own_retry_of_a_newest_message_only_request_runs_nothing_twice(
    v1: V1Server, fake_openai: FakeOpenAIServer
):
    """A client that names its conversation and sends only its newest message, through
    OpenAI's SDK, which sends a request again by itself after a timeout, marked
    ``X-Stainless-Retry-Count: 1``: the retry gets the answer of the turn the first
    attempt started, and the agent gets the message once (a second turn ran: tools twice).
    The same words sent again unmarked are a new message, as before."""
    fake_openai.reply_text("First answer.")
    fake_openai.reply_text("Second answer.", delay_s=0.3)
    named = {"model": "main", "user": "bob"}
    two = {**named, "messages": [{"role": "user", "content": "two"}]}
    async with v1.http() as http:
        await http.post(
            "/v1/chat/completions", json={**named, "messages": [{"role": "user", "content": "one"}]}
        )
        first = asyncio.create_task(http.post("/v1/chat/completions", json=two))

        async def asked_twice() -> bool:
            return len(fake_openai.requests) == 2

        await until(asked_twice)  # the first attempt's turn asks the model
        again = await http.post(
            "/v1/chat/completions", json=two, headers={"x-stainless-retry-count": "1"}
        )
        await first
        assert again.json()["choices"][0]["message"]["content"] == "Second answer."
        assert len(fake_openai.requests) == 2  # "two" reached the model once
        fake_openai.reply_text("Once more.")
        anew = await http.post("/v1/chat/completions", json=two)
    assert anew.json()["choices"][0]["message"]["content"] == "Once more."
    assert user_messages(fake_openai.requests[-1]) == ["one", "two", "two"]


async def test_a_client_that_goes_away_does_not_stop_the_turn(
    v1: V1Server, fake_openai: FakeOpenAIServer
):
    fake_openai.reply_text("A long answer " * 50, delay_s=0.3)
    async with (
        v1.http() as http,
        http.stream(
            "POST",
            "/v1/chat/completions",
            json={
                "model": "main",
                "user": "leaver",
                "stream": True,
                "messages": [{"role": "user", "content": "tell me"}],
            },
        ) as raw,
    ):
        async for line in raw.aiter_lines():
            if line.startswith("data: "):
                break  # the first chunk, then gone
    source = "api:1"
    await until(lambda: answered(v1, source))
    session = await v1.hub.current_session(source)
    assert session is not None
    answer = await v1.api.last_answer(source)
    assert answer.startswith("A long answer")
    asked = len(fake_openai.requests)
    async with v1.client() as client:  # its retry reads the answer back, never runs it again
        again = await client.chat.completions.create(
            model="main", user="leaver", messages=[{"role": "user", "content": "tell me"}]
        )
    assert again.choices[0].message.content == answer
    assert len(fake_openai.requests) == asked


WRITE = ("w1", "write_file", {"path": "note.txt", "content": "hi\n"})


async def approvals(http: httpx.AsyncClient) -> list[dict[str, Any]]:
    return (await http.get("/api/inbox")).json()["approvals"]


async def stream(http: httpx.AsyncClient, messages: list[Any], stop_at: str = "") -> str:
    """The text a streamed answer shows, until ``stop_at`` appears (Stop) if given."""
    shown = ""
    body = {"model": "main", "stream": True, "messages": messages}
    async with http.stream("POST", "/v1/chat/completions", json=body) as raw:
        async for line in raw.aiter_lines():
            if line.startswith("data: {"):
                shown += json.loads(line[6:])["choices"][0]["delta"].get("content") or ""
            if stop_at and stop_at in shown:
                break
    return shown


async def test_a_stream_stopped_mid_answer_is_held_as_the_client_shows_it(
    v1: V1Server, fake_openai: FakeOpenAIServer
):
    """Open WebUI's Stop keeps the answer shown so far and sends it back with the next
    message: it was never held, so that history matched nothing and the chat went on in a
    conversation of its own, away from the session whose turn went on (found by review)."""
    fake_openai.reply_tool_calls(WRITE)
    fake_openai.reply_text("Written.")
    fake_openai.reply_text("Yes.")
    asked = {"role": "user", "content": "write note.txt"}
    async with v1.http() as http:
        shown = await stream(http, [asked], stop_at="waits for approval")  # Stop
        [card] = await until(lambda: approvals(http))
        await http.post(
            f"/api/inbox/approvals/{card['tool_call_id']}/resolve", json={"action": "approve"}
        )
        await until(lambda: answered(v1, "api:1"))
        go_on = [asked, {"role": "assistant", "content": shown}, {"role": "user", "content": "ok?"}]
        second = await http.post("/v1/chat/completions", json={"model": "main", "messages": go_on})
    assert second.json()["chathub"]["conversation"] == "api:1"
    assert user_messages(fake_openai.requests[-1]) == ["write note.txt", "ok?"]


async def test_stop_then_regenerate_while_the_turn_runs_keeps_the_conversation(
    v1: V1Server, fake_openai: FakeOpenAIServer
):
    """The stopped stream's text was held, so the regenerated answer, following the same
    turn, was not: the next message, carrying it, began a new conversation (review)."""
    for reply in ("A1.", WRITE, "Written.", "Yes."):
        if isinstance(reply, str):
            fake_openai.reply_text(reply)
        else:
            fake_openai.reply_tool_calls(reply)
    hello, write = {"role": "user", "content": "hello"}, {"role": "user", "content": "write"}
    async with v1.http() as http:
        history = [hello, {"role": "assistant", "content": await stream(http, [hello])}, write]
        await stream(http, history, stop_at="waits for approval")  # Stop
        regenerate = asyncio.create_task(stream(http, history))  # while the turn runs
        [card] = await until(lambda: approvals(http))
        await http.post(
            f"/api/inbox/approvals/{card['tool_call_id']}/resolve", json={"action": "approve"}
        )
        regenerated = await asyncio.wait_for(regenerate, GUARD_S)
        go_on = [
            *history,
            {"role": "assistant", "content": regenerated},
            {"role": "user", "content": "ok?"},
        ]
        third = await http.post("/v1/chat/completions", json={"model": "main", "messages": go_on})
    assert "Written." in regenerated
    assert third.json()["chathub"]["conversation"] == "api:1"


async def test_a_whole_answer_whose_client_left_lets_the_next_request_in(
    make_v1, fake_openai: FakeOpenAIServer
):
    """A request not streamed held its conversation until its turn ended, though nobody
    would read the answer: the next request got nothing, headers neither, for as long as
    an approval may wait (300 s by default; found by review)."""
    v1 = await make_v1(limits=ExchangeLimits(decision_wait_s=60, keepalive_s=15))
    fake_openai.reply_tool_calls(WRITE)
    named = {"model": "main", "user": "script"}
    async with v1.http() as http:
        first = asyncio.create_task(
            http.post(
                "/v1/chat/completions",
                json={**named, "messages": [{"role": "user", "content": "write"}]},
            )
        )
        await until(lambda: approvals(http))
        first.cancel()  # Ctrl-C: the connection closes
        with pytest.raises(asyncio.CancelledError):
            await first
    async with (
        v1.http() as http,
        http.stream(
            "POST",
            "/v1/chat/completions",
            json={**named, "stream": True, "messages": [{"role": "user", "content": "done?"}]},
        ) as raw,
    ):
        assert raw.status_code == 200  # at once, with what the turn waits for
        async for line in raw.aiter_lines():
            if "waits for approval" in line:
                break


async def test_a_hundred_conversations_at_once(v1: V1Server, fake_openai: FakeOpenAIServer):
    fake_openai.echo = True
    async with v1.client() as client:

        async def talk(number: int) -> str:
            answer = await client.chat.completions.create(
                model="main",
                user=f"person-{number}",
                messages=[{"role": "user", "content": f"number {number}"}],
            )
            return answer.choices[0].message.content or ""

        answers = await asyncio.wait_for(
            asyncio.gather(*(talk(n) for n in range(100))), 4 * GUARD_S
        )
    assert answers == [f"echo: number {n}" for n in range(100)]


async def test_usage_is_the_final_model_calls_tokens(v1: V1Server, fake_openai: FakeOpenAIServer):
    fake_openai.reply_text("Counted.", usage=(120, 7))
    fake_openai.reply_text("Counted again.", usage=(130, 9))
    async with v1.client() as client:
        whole = await client.chat.completions.create(
            model="main", user="counter", messages=[{"role": "user", "content": "count"}]
        )
        stream = await client.chat.completions.create(
            model="main",
            user="counter",
            stream=True,
            stream_options={"include_usage": True},
            messages=[{"role": "user", "content": "again"}],
        )
        chunks = [piece async for piece in stream]
    assert (whole.usage.prompt_tokens, whole.usage.completion_tokens) == (120, 7)
    assert whole.usage.total_tokens == 127
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 9
    assert chunks[-2].choices[0].finish_reason == "stop"


async def test_a_request_while_an_earlier_turn_still_runs_gets_its_own_answer(
    v1: V1Server, fake_openai: FakeOpenAIServer
):
    fake_openai.reply_text("The first, slow answer.", delay_s=0.5)
    fake_openai.reply_text("The second answer.")
    body = {"model": "main", "user": "hasty", "stream": True}
    async with v1.http() as http:
        async with http.stream(
            "POST", "/v1/chat/completions", json={**body, "messages": [HI_FIRST]}
        ) as raw:
            async for line in raw.aiter_lines():
                if line.startswith("data: "):
                    break  # gone before the first answer

        async def first_asked() -> bool:
            return len(fake_openai.requests) == 1

        await until(first_asked)  # the model is answering the first (a message before
        # that is taken into the same round, and that round's answer is the answer to both)
        async with v1.client() as client:
            second = await client.chat.completions.create(
                model="main", user="hasty", messages=[{"role": "user", "content": "second"}]
            )
    assert second.choices[0].message.content == "The second answer."
    assert await v1.api.last_answer("api:1") == "The second answer."


HI_FIRST = {"role": "user", "content": "first"}


async def test_a_request_whose_turn_fails_before_it_begins_ends_with_a_sentence(
    make_v1: Any, fake_openai: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The message's turn fails before its user row is stored (the database away for a
    moment): the request ends with one plain sentence (it sent keep-alives forever and
    held its conversation's lock)."""
    from engine.session.handler import ChatSessionHandler

    v1 = await make_v1(limits=ExchangeLimits(keepalive_s=0.05))
    real = ChatSessionHandler._turn_context
    failed = []

    async def fails_once(self: Any, frame: Any, *rest: Any) -> Any:
        if not failed:
            failed.append(frame)
            raise RuntimeError("the database connection was lost")
        return await real(self, frame, *rest)

    monkeypatch.setattr(ChatSessionHandler, "_turn_context", fails_once)
    fake_openai.reply_text("fine")
    body = {"model": "main", "user": "u", "messages": [{"role": "user", "content": "hi"}]}
    async with v1.http() as http:
        answer = await asyncio.wait_for(http.post("/v1/chat/completions", json=body), 10)
    text = answer.json()["choices"][0]["message"]["content"]
    assert "was not answered" in text and "RuntimeError" not in text and "database" not in text
    async with v1.http() as http:  # "Send it again." does what it says
        again = await asyncio.wait_for(http.post("/v1/chat/completions", json=body), 10)
    assert again.json()["choices"][0]["message"]["content"] == "fine"


@pytest.mark.parametrize("stream", [True, False])
async def test_an_answer_cut_by_the_service_stopping_is_no_answer(
    v1: V1Server, fake_openai: FakeOpenAIServer, stream: bool
):
    """chathub stopping mid-answer ended the request with "stop" (and [DONE]) after "The
    answer is", and the conversation held that as the answer (found by review): the
    client gets an error, as OpenAI ends a failed stream, and nothing is held."""
    fake_openai.reply_hang(partial="The answer is")
    body = {"model": "main", "user": "u", "stream": stream, "messages": [HI_FIRST]}
    async with v1.http() as http:
        if stream:
            lines: list[str] = []
            async with http.stream("POST", "/v1/chat/completions", json=body) as raw:
                async for line in raw.aiter_lines():
                    lines.append(line)
                    if '"is"' in line:  # the last word the model sent: chathub stops
                        closing = asyncio.create_task(v1.hub.close())
            last = json.loads([line for line in lines if line.startswith("data: ")][-1][6:])
            assert last["error"]["code"] == "service_unavailable"
            assert "data: [DONE]" not in lines and '"finish_reason": "stop"' not in str(lines)
        else:
            asked = asyncio.create_task(http.post("/v1/chat/completions", json=body))
            await until(lambda: _asked_model(fake_openai))
            closing = asyncio.create_task(v1.hub.close())
            answer = await asked
            assert answer.status_code == 503
            assert answer.json()["error"]["code"] == "service_unavailable"
    fake_openai.reset()
    await closing
    held = await v1.engine.store.db.run(
        lambda conn: conn.execute(sa.select(api_conversations.c.length)).scalar()
    )
    assert held == 1  # the message, not the cut text as its answer


async def _asked_model(fake_openai: FakeOpenAIServer) -> bool:
    return bool(fake_openai.requests)


async def test_an_answer_cut_at_the_models_token_limit_ends_with_length(
    v1: V1Server, fake_openai: FakeOpenAIServer
):
    """OpenAI's contract, for clients that continue or warn on a cut answer: it said
    "stop" (found by review)."""
    for _ in range(2):
        fake_openai.reply_text("The three reasons are: first, the", finish_reason="length")
    async with v1.client() as client:
        whole = await client.chat.completions.create(model="main", user="a", messages=[HI_FIRST])
        stream = await client.chat.completions.create(
            model="main", user="b", stream=True, messages=[HI_FIRST]
        )
        chunks = [c async for c in stream]
    assert whole.choices[0].message.content.startswith("The three reasons")
    assert whole.choices[0].finish_reason == "length"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"


async def test_an_answer_read_back_for_a_retry_is_the_one_the_conversation_goes_on_from(
    v1: V1Server, fake_openai: FakeOpenAIServer
):
    """The conversation held the first answer as sent (its progress lines in it); the
    retry of a client that never got it read back the final text alone, and the client's
    next whole-history request matched nothing: a new conversation (found by review)."""
    fake_openai.reply_tool_calls(("l1", "list_files", {"path": "."}))
    fake_openai.reply_text("The folder is empty.")
    first = [{"role": "user", "content": "what is in my folder?"}]
    async with v1.http() as http:
        asked = asyncio.create_task(
            http.post("/v1/chat/completions", json={"model": "main", "messages": first})
        )

        async def approvals() -> list:
            return (await http.get("/api/inbox")).json()["approvals"]

        call = (await until(approvals))[0]
        await http.post(
            f"/api/inbox/approvals/{call['tool_call_id']}/resolve", json={"action": "approve"}
        )
        lost = (await asyncio.wait_for(asked, GUARD_S)).json()  # it never reached the client
        assert "list_files" in lost["choices"][0]["message"]["content"]
        again = await http.post(
            "/v1/chat/completions",
            json={"model": "main", "messages": first},
            headers={"x-stainless-retry-count": "1"},
        )
        got = again.json()["choices"][0]["message"]["content"]
        fake_openai.reply_text("Shall I make one?")
        follow = await http.post(
            "/v1/chat/completions",
            json={
                "model": "main",
                "messages": [
                    *first,
                    {"role": "assistant", "content": got},
                    {"role": "user", "content": "make a file then"},
                ],
            },
        )
    assert got == "The folder is empty."
    assert follow.json()["chathub"]["conversation"] == "api:1"
    assert user_messages(fake_openai.requests[-1]) == ["what is in my folder?", "make a file then"]


USER_PICKS = {"role": "user", "content": "pick one"}
#: A question whose emoji a token cut in half: its JSON holds a lone surrogate.
HALF_EMOJI_QUESTION = ("q1", "ask_user_clarification", '{"question": "Which one \\ud83d?"}')


async def test_a_streamed_question_with_half_an_emoji_is_told_not_an_internal_error(
    v1: V1Server, fake_openai: FakeOpenAIServer
) -> None:
    """Its line failed the stream's UTF-8: the client read "An internal error" (found by
    review)."""
    fake_openai.reply_tool_calls(HALF_EMOJI_QUESTION)
    body = {"model": "main", "stream": True, "user": "half", "messages": [USER_PICKS]}
    data: dict[str, Any] = {}
    async with v1.http() as http, http.stream("POST", "/v1/chat/completions", json=body) as raw:
        async for line in raw.aiter_lines():
            if line.startswith("data: {"):
                data = json.loads(line.removeprefix("data: "))
                told = [c["delta"].get("content") or "" for c in data.get("choices", [])]
                if "error" in data or any("Which one" in t for t in told):
                    break
    assert "error" not in data, data
    assert "Which one \ufffd?" in data["choices"][0]["delta"]["content"]


async def test_a_whole_answer_with_half_an_emoji_can_be_sent_back_with_the_next_message(
    make_v1: Any, fake_openai: FakeOpenAIServer
) -> None:
    """The whole answer carried the lone surrogate, escaped; a client sending its history
    back escaped it too, and ``/v1`` refused every later request of the conversation with a
    400 (found by review)."""
    v1 = await make_v1(limits=ExchangeLimits(decision_wait_s=0.3, keepalive_s=0.05))
    fake_openai.reply_tool_calls(HALF_EMOJI_QUESTION)
    async with v1.http() as http:
        answer = await http.post(
            "/v1/chat/completions", json={"model": "main", "messages": [USER_PICKS]}
        )
        assert answer.status_code == 200, answer.text
        said = answer.json()["choices"][0]["message"]["content"]
        assert "Which one \ufffd?" in said
        fake_openai.reply_text("ok")
        history = [
            USER_PICKS,
            {"role": "assistant", "content": said},
            {"role": "user", "content": "the first one"},
        ]
        raw = json.dumps({"model": "main", "messages": history}).encode()  # escaped, as sent
        again = await http.post(
            "/v1/chat/completions", content=raw, headers={"content-type": "application/json"}
        )
    assert again.status_code == 200, again.text


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
async def test_a_queued_request_whose_client_left_sends_nothing(
    make_v1: Any, fake_openai: FakeOpenAIServer, stream: bool
) -> None:
    """A request waiting for its conversation's turn, whose client gives up (a timeout,
    Ctrl-C): its message is never sent. A whole one (``stream: false``, the SDK's default)
    stayed queued, nobody watching its socket, and its message went to the agent once the
    turn came: a turn for nobody (found by review)."""
    v1 = await writing_with_a_card(make_v1, fake_openai)
    first = two_tabs("write")
    second = two_tabs("never mind", stream=stream)
    async with v1.http() as http:
        async with http.stream("POST", "/v1/chat/completions", json=first) as raw:
            told = raw.aiter_lines()
            async for line in told:
                if "waits for approval" in line:
                    break
            async with v1.http() as impatient:
                asking = asyncio.create_task(impatient.post("/v1/chat/completions", json=second))

                async def queued() -> bool:
                    return v1.api.waiting == 1

                await until(queued)
                asking.cancel()  # the client gives up: its connection closes
                await asyncio.gather(asking, return_exceptions=True)

            async def let_go() -> bool:
                return v1.api.waiting == 0

            await until(let_go)
            await approve_the_card(http)
            async for _ in told:
                pass
        fake_openai.reply_text("You're welcome.")
        thanks = two_tabs("thanks", stream=False)
        after = await asyncio.wait_for(http.post("/v1/chat/completions", json=thanks), GUARD_S)
    assert after.json()["choices"][0]["message"]["content"] == "You're welcome."
    said = [m for request in fake_openai.requests for m in user_messages(request)]
    assert "never mind" not in said


async def writing_with_a_card(make_v1: Any, fake_openai: FakeOpenAIServer) -> V1Server:
    """``/v1`` whose agent's next turn writes a file (a card waits) and says "Written."."""
    v1 = await make_v1(limits=ExchangeLimits(decision_wait_s=60, keepalive_s=0.05))
    fake_openai.reply_tool_calls(WRITE)
    fake_openai.reply_text("Written.")
    return v1


def two_tabs(text: str, *, stream: bool = True) -> dict[str, Any]:
    """A request of the conversation two tabs share."""
    return {
        "model": "main",
        "user": "two-tabs",
        "stream": stream,
        "messages": [{"role": "user", "content": text}],
    }


async def test_an_empty_conversation_header_leaves_the_user_field_to_name_it(
    v1: V1Server, fake_openai: FakeOpenAIServer
):
    """A proxy template whose variable was unset sent the header empty: it hid ``user``,
    and each request began a conversation anew (found by review on 2026-12-07)."""
    fake_openai.reply_text("one")
    fake_openai.reply_text("two")
    async with v1.http() as http:
        for word in ("first", "second"):
            answer = await http.post(
                "/v1/chat/completions",
                json={
                    "model": "main",
                    "user": "me",
                    "messages": [{"role": "user", "content": word}],
                },
                headers={"x-chathub-conversation": ""},
            )
            assert answer.status_code == 200, answer.text
    assert user_messages(fake_openai.requests[-1]) == ["first", "second"]
