"""A request sent again: each retry gets the answer to its own message, or runs that
message again when it got none; the conversation goes on as the client saw it.

Found by review (2026-12-05) of the first versions of these rules, each a scenario here:
a failure's sentence sent back by a whole-history client, a turn that failed after a tool
round, a retry whose message waited behind another turn, the same words said twice, and
clocks of two processes apart. Messages carry their position in the conversation, so what
answered which needs no clock."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import httpx

from bot.completions.routes import CompletionsApi
from engine.store import utcnow
from tests.bot.completions.conftest import V1Server, until, user_messages
from tests.fakes.openai_server import FakeOpenAIServer

RETRY = {"x-stainless-retry-count": "1"}  # how OpenAI's SDKs mark their own retries


def said(answer: httpx.Response) -> str:
    return answer.json()["choices"][0]["message"]["content"]


async def asked(fake_openai: FakeOpenAIServer, count: int) -> None:
    async def reached() -> bool:
        return len(fake_openai.requests) >= count

    await until(reached)


async def gone_after_the_first_chunk(http: httpx.AsyncClient, body: dict[str, Any]) -> None:
    async with http.stream("POST", "/v1/chat/completions", json={**body, "stream": True}) as raw:
        async for line in raw.aiter_lines():
            if line.startswith("data: "):
                break


async def test_the_next_message_after_a_failed_turn_continues_the_conversation(
    v1: V1Server, fake_openai: FakeOpenAIServer
):
    """A whole-history client sends the failure's sentence back as the assistant's
    message (what it was shown): the same conversation, not a fresh one."""
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
        fake_openai.reply_text("Third.")
        history += [
            {"role": "assistant", "content": failed.choices[0].message.content},
            {"role": "user", "content": "third"},
        ]
        third = await client.chat.completions.create(model="main", messages=history)
    conversation = failed.model_extra["chathub"]["conversation"]  # type: ignore[index]
    assert third.model_extra["chathub"]["conversation"] == conversation  # type: ignore[index]
    assert user_messages(fake_openai.requests[-1])[0] == "first"


async def test_a_turn_that_failed_after_a_tool_round_runs_again(
    v1: V1Server, fake_openai: FakeOpenAIServer
):
    """The tool round's words are no answer: sent again, the message runs again."""
    fake_openai.reply_text("Once.")
    history = [{"role": "user", "content": "first"}]
    async with v1.client() as client:
        first = await client.chat.completions.create(model="main", messages=history)
        history += [
            {"role": "assistant", "content": first.choices[0].message.content},
            {"role": "user", "content": "what time is it in Rome?"},
        ]
        clock = ("c1", "get_time", {"timezone": "Europe/Rome"})
        fake_openai.reply_tool_calls(clock, content="Let me check the clock.")
        fake_openai.reply_error(400, "the model refused")
        await client.chat.completions.create(model="main", messages=history)
        fake_openai.reply_text("It is noon in Rome.")
        again = await client.chat.completions.create(model="main", messages=history)
    assert again.choices[0].message.content == "It is noon in Rome."


async def test_a_retry_of_a_failed_message_never_gets_the_previous_answer(
    v1: V1Server, fake_openai: FakeOpenAIServer
):
    """ "one" is answered after "two" was taken (its client had gone), "two"'s own turn
    fails: the retry of "two" runs it again."""
    fake_openai.reply_text("Answer to one.", delay_s=0.5)
    fake_openai.reply_error(400, "the model refused")
    named = {"model": "main", "user": "bob"}
    two = {**named, "messages": [{"role": "user", "content": "two"}]}
    async with v1.http() as http:
        await gone_after_the_first_chunk(
            http, {**named, "messages": [{"role": "user", "content": "one"}]}
        )
        await asked(fake_openai, 1)
        failed = await http.post("/v1/chat/completions", json=two)
        assert "refused" in said(failed)
        fake_openai.reply_text("Answer to two.")
        again = await http.post("/v1/chat/completions", json=two, headers=RETRY)
    assert said(again) == "Answer to two."


async def test_a_retry_of_a_message_waiting_behind_another_turn_gets_its_own_answer(
    v1: V1Server, fake_openai: FakeOpenAIServer
):
    fake_openai.reply_text("Answer to one.", delay_s=0.5)
    fake_openai.reply_text("Answer to two.")
    named = {"model": "main", "user": "bob"}
    two = {**named, "messages": [{"role": "user", "content": "two"}]}
    async with v1.http() as http:
        await gone_after_the_first_chunk(
            http, {**named, "messages": [{"role": "user", "content": "one"}]}
        )
        await asked(fake_openai, 1)
        await gone_after_the_first_chunk(http, two)  # the SDK's timeout
        again = await http.post("/v1/chat/completions", json=two, headers=RETRY)
    assert said(again) == "Answer to two."
    assert user_messages(fake_openai.requests[-1]) == ["one", "two"]


async def test_the_same_words_again_in_a_whole_history_are_a_new_message(
    v1: V1Server, fake_openai: FakeOpenAIServer
):
    """ "go on" after the answer to "go on", retried by the SDK whose first try never
    arrived: the history the request carries says it is new."""
    for extra in ({}, {"user": "reader"}):
        fake_openai.reply_text("Chapter one.")
        history = [{"role": "user", "content": "go on"}]
        async with v1.http() as http:
            body = {"model": "main", **extra}
            first = await http.post("/v1/chat/completions", json={**body, "messages": history})
            history += [
                {"role": "assistant", "content": said(first)},
                {"role": "user", "content": "go on"},
            ]
            fake_openai.reply_text("Chapter two.")
            retry = await http.post(
                "/v1/chat/completions", json={**body, "messages": history}, headers=RETRY
            )
        assert said(retry) == "Chapter two."


async def test_what_answered_a_message_is_told_by_no_clock(
    v1: V1Server, fake_openai: FakeOpenAIServer
):
    """The process taking requests 2 s ahead of the one running turns (two hosts): a
    client gone mid-answer retries after the answer was written; it is read back."""
    v1.api._conversations._clock = lambda: utcnow() + timedelta(seconds=2)  # type: ignore[attr-defined]
    fake_openai.reply_text("A long answer " * 50, delay_s=0.3)
    body = {"model": "main", "user": "leaver", "messages": [{"role": "user", "content": "tell me"}]}
    async with v1.http() as http:
        await gone_after_the_first_chunk(http, body)

        async def answered() -> bool:
            source = "api:1"
            return bool(await v1.api.last_answer(source)) and not await v1.hub.is_busy(source)

        await until(answered)
        count = len(fake_openai.requests)
        again = await http.post("/v1/chat/completions", json=body)
    assert said(again).startswith("A long answer")
    assert len(fake_openai.requests) == count


async def test_a_read_back_retry_leaves_the_conversation_as_the_client_sees_it(
    v1: V1Server, fake_openai: FakeOpenAIServer
):
    """The answer read back is not held a second time: the client's next request goes on
    in the same conversation."""
    fake_openai.reply_text("Once.")
    history = [{"role": "user", "content": "first"}]
    async with v1.client() as client:
        first = await client.chat.completions.create(model="main", messages=history)
        fake_openai.reply_text("Twice.")
        history += [
            {"role": "assistant", "content": first.choices[0].message.content},
            {"role": "user", "content": "second"},
        ]
        second = await client.chat.completions.create(model="main", messages=history)
        again = await client.chat.completions.create(model="main", messages=history)
        assert again.choices[0].message.content == "Twice."
        fake_openai.reply_text("Thrice.")
        history += [
            {"role": "assistant", "content": second.choices[0].message.content},
            {"role": "user", "content": "third"},
        ]
        await client.chat.completions.create(model="main", messages=history)
    assert user_messages(fake_openai.requests[-1]) == ["first", "second", "third"]


async def test_the_sdks_retry_of_a_first_message_continues_the_conversation_it_began(
    v1: V1Server, fake_openai: FakeOpenAIServer
):
    """No name, one message: the SDK gave up on the first try while its turn ran, and
    retries (marked). It gets that turn's answer and the model is asked once (the retry
    began a second conversation and ran the turn again: its tools twice). Read back after
    the answer too; the same first words unmarked are a conversation of their own."""
    fake_openai.reply_text("The only answer.", delay_s=0.3)
    body = {"model": "main", "messages": [{"role": "user", "content": "book me a table"}]}
    async with v1.http() as http:
        await gone_after_the_first_chunk(http, body)  # the SDK's timeout
        await asked(fake_openai, 1)
        again = await http.post("/v1/chat/completions", json=body, headers=RETRY)
        assert said(again) == "The only answer."
        later = await http.post("/v1/chat/completions", json=body, headers=RETRY)
        assert said(later) == "The only answer."
        assert len(fake_openai.requests) == 1
        assert again.json()["chathub"] == later.json()["chathub"] == {"conversation": "api:1"}

        fake_openai.reply_text("A new chat.")
        anew = await http.post("/v1/chat/completions", json=body)
    assert said(anew) == "A new chat."
    assert anew.json()["chathub"] == {"conversation": "api:2"}


async def test_a_marked_first_message_long_after_the_same_one_begins_its_own_conversation(
    v1: V1Server, fake_openai: FakeOpenAIServer
):
    """A daily script's same first words, its first try lost on the way (the service was
    restarting): yesterday's answer is not read back."""
    fake_openai.reply_text("Yesterday's news.")
    body = {"model": "main", "messages": [{"role": "user", "content": "the news, please"}]}
    async with v1.http() as http:
        await http.post("/v1/chat/completions", json=body)
        v1.api._conversations._clock = lambda: utcnow() + timedelta(days=1)  # type: ignore[attr-defined]
        fake_openai.reply_text("Today's news.")
        today = await http.post("/v1/chat/completions", json=body, headers=RETRY)
    assert said(today) == "Today's news."


async def test_the_sdks_second_retry_of_a_slow_first_message_continues_its_conversation(
    v1: V1Server, fake_openai: FakeOpenAIServer
):
    """openai-python times out at 10 minutes and retries twice: a slow first turn (a card
    waiting in the inbox) is tried again at 10 and at 20 minutes. Both continue the
    conversation it began (the second began a second conversation and ran the turn again:
    the window was 15 minutes from its start; found by review)."""
    fake_openai.reply_text("Booked for 8 pm.", delay_s=0.3)
    body = {"model": "main", "messages": [{"role": "user", "content": "book me a table"}]}
    conversations = v1.api._conversations  # type: ignore[attr-defined]
    async with v1.http() as http:
        await gone_after_the_first_chunk(http, body)  # the SDK's timeout
        await asked(fake_openai, 1)
        for retry, minutes in ((1, 10), (2, 20)):
            conversations._clock = lambda m=minutes: utcnow() + timedelta(minutes=m, seconds=1)
            again = await http.post(
                "/v1/chat/completions", json=body, headers={"x-stainless-retry-count": str(retry)}
            )
            assert again.json()["chathub"] == {"conversation": "api:1"}
    assert said(again) == "Booked for 8 pm."
    assert len(fake_openai.requests) == 1


async def test_a_marked_first_message_with_other_instructions_begins_its_own_conversation(
    v1: V1Server, fake_openai: FakeOpenAIServer
):
    """A script puts each document in the system message and asks the same question;
    document B's first try never arrived, and the SDK retries it, marked. It is no retry
    of document A's request (it got A's summary; found by review)."""
    question = {"role": "user", "content": "Summarize the document in one line."}

    def about(document: str) -> dict:
        return {"model": "main", "messages": [{"role": "system", "content": document}, question]}

    fake_openai.reply_text("The cat sat on the mat.")
    async with v1.http() as http:
        first = await http.post("/v1/chat/completions", json=about("the cat sat on the mat"))
        fake_openai.reply_text("Stocks fell 3%.")
        other = await http.post(
            "/v1/chat/completions", json=about("stocks fell 3% today"), headers=RETRY
        )
        again = await http.post(
            "/v1/chat/completions", json=about("the cat sat on the mat"), headers=RETRY
        )
    assert said(other) == "Stocks fell 3%."
    assert other.json()["chathub"] != first.json()["chathub"]
    assert again.json()["chathub"] == first.json()["chathub"]  # a retry of A's is A's
    assert len(fake_openai.requests) == 2


ANSWER = "Alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu."


async def stopped_mid_answer(http: httpx.AsyncClient, words: int) -> dict[str, Any]:
    """A conversation whose second answer (``ANSWER``, paused after ``words`` words) the
    client stopped after those words (Open WebUI's Stop); the body to send it again."""
    hello = {"role": "user", "content": "hello"}
    ask = {"role": "user", "content": "say the greek letters"}
    first = await http.post("/v1/chat/completions", json={"model": "main", "messages": [hello]})
    history = [hello, {"role": "assistant", "content": said(first)}, ask]
    body = {"model": "main", "messages": history, "stream": True}
    async with http.stream("POST", "/v1/chat/completions", json=body) as raw:
        seen = 0
        async for line in raw.aiter_lines():
            if line.startswith("data: {"):
                seen += bool(json.loads(line[6:])["choices"][0]["delta"].get("content"))
                if seen == words:
                    break
    return body


async def test_a_request_sent_again_mid_answer_gets_the_answer_once(
    v1: V1Server, fake_openai: FakeOpenAIServer
):
    """Open WebUI's Stop, then Regenerate, while the agent writes its answer: the second
    request joined the round in its middle, was sent its tail, then the whole answer
    again (found by review on 2026-12-07)."""
    fake_openai.reply_text("Hi.")
    fake_openai.reply_text(ANSWER, pause_after=3)
    async with v1.http() as http:
        body = await stopped_mid_answer(http, 3)
        text = ""
        async with http.stream("POST", "/v1/chat/completions", json=body) as raw:  # again
            fake_openai.go_on()  # the answer goes on: this request follows it from here
            async for line in raw.aiter_lines():
                if line.startswith("data: {"):
                    text += json.loads(line[6:])["choices"][0]["delta"].get("content") or ""
    assert len(fake_openai.requests) == 2  # the turn ran once: the request followed it
    assert text == ANSWER


async def test_a_request_sent_again_as_its_turn_ends_never_runs_it_again(
    v1: V1Server, fake_openai: FakeOpenAIServer, monkeypatch: Any
):
    """What became of the message was read (no answer yet), then whether anything still
    worked on the chat (nothing: the turn had ended between the two): the message ran a
    second time, its tools too (found by review on 2026-12-07)."""
    fake_openai.reply_text("Hi.")
    fake_openai.reply_text(ANSWER, pause_after=2)
    fake_openai.reply_text("A SECOND RUN.")
    read = CompletionsApi._answer_to

    async def read_just_before_the_end(api: Any, *args: Any) -> Any:
        state = await read(api, *args)  # no answer yet: the turn runs

        async def idle() -> bool:
            return not v1.hub.has_work("api:1") and not await v1.hub.is_busy("api:1")

        fake_openai.go_on()
        await until(idle)  # ... and ends right after the look
        return state

    async with v1.http() as http:
        body = await stopped_mid_answer(http, 2)
        monkeypatch.setattr(CompletionsApi, "_answer_to", read_just_before_the_end)
        again = await http.post("/v1/chat/completions", json={**body, "stream": False})
    assert len(fake_openai.requests) == 2  # the message ran once
    assert said(again) == ANSWER


async def test_a_retry_read_back_keeps_finish_reason_and_usage(
    v1: V1Server, fake_openai: FakeOpenAIServer
):
    """An answer cut at the model's token limit, read back for a request sent again, came
    with ``finish_reason: "stop"`` and no tokens: the client was told it was whole and
    cost nothing (found by review on 2026-12-07)."""
    fake_openai.reply_text("Hello.")
    fake_openai.reply_text(
        "The three reasons are: first, the", finish_reason="length", usage=(120, 7)
    )
    history = [{"role": "user", "content": "hi"}]
    async with v1.client() as client:
        hello = await client.chat.completions.create(model="main", messages=history)
        history += [
            {"role": "assistant", "content": hello.choices[0].message.content},
            {"role": "user", "content": "give me three reasons"},
        ]
        first = await client.chat.completions.create(model="main", messages=history)
        asked = len(fake_openai.requests)
        again = await client.chat.completions.create(model="main", messages=history)
    assert len(fake_openai.requests) == asked  # read back, not run again
    assert again.choices[0].message.content == first.choices[0].message.content
    assert first.choices[0].finish_reason == "length"
    assert again.choices[0].finish_reason == "length"
    assert (again.usage.prompt_tokens, again.usage.completion_tokens) == (120, 7)
