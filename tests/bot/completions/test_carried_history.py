"""History a client carried that the conversation never held (a chat switched to ``main``
midway, an answer edited in Open WebUI) is the agent's for the rest of the conversation:
given with the turn that carried it, then with every later one. It was given to that turn
only, and the next request, which chathub matched as held, left the agent without it
(found by review on 2026-12-07)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.bot.completions.conftest import V1Server
from tests.fakes.openai_server import FakeOpenAIServer


def said(role: str, text: str) -> dict[str, str]:
    return {"role": role, "content": text}


def sent(fake_openai: FakeOpenAIServer, index: int = -1) -> str:
    """Everything one model request carried, as one text."""
    return json.dumps(fake_openai.requests[index]["messages"])


def conversation_of(answer: Any) -> str:
    return answer.model_extra["chathub"]["conversation"]


#: Turns the client had with another model before it switched the chat to ``main``.
ELSEWHERE = [
    said("user", "my name is Zoe"),
    said("assistant", "Hello Zoe."),
    said("user", "I live in Lyon"),
    said("assistant", "A fine city."),
]


@pytest.mark.parametrize("name", [None, "alice"], ids=["by-history", "named"])
async def test_a_history_carried_into_a_conversation_stays_with_it(
    v1: V1Server, fake_openai: FakeOpenAIServer, name: str | None
):
    for answer in ("You are Zoe.", "In Lyon.", "Zoe from Lyon."):
        fake_openai.reply_text(answer)
    named = {} if name is None else {"user": name}
    history = [*ELSEWHERE, said("user", "what is my name?")]
    answers = []
    async with v1.client() as client:
        for question in ("where do I live?", "who am I, and where?"):
            answer = await client.chat.completions.create(model="main", messages=history, **named)
            answers.append(answer)
            history += [
                said("assistant", answer.choices[0].message.content),
                said("user", question),
            ]
        answers.append(
            await client.chat.completions.create(model="main", messages=history, **named)
        )
    # One conversation throughout: the second and third turns are its own, not a new
    # conversation built again from what they carry.
    assert len({conversation_of(answer) for answer in answers}) == 1
    assert len(fake_openai.requests) == 3
    for index in range(3):
        text = sent(fake_openai, index)
        assert "my name is Zoe" in text and "I live in Lyon" in text, index
        assert text.count("my name is Zoe") == 1, index  # once, never again as new
    assert "You are Zoe." in sent(fake_openai, 1)  # and the conversation's own turns


async def test_an_edited_answer_stays_with_the_conversation(
    v1: V1Server, fake_openai: FakeOpenAIServer
):
    """Open WebUI lets its user edit an answer, then go on: the edited answer is history
    the conversation never held, carried by the next request only."""
    for answer in ("The code is 1234.", "Noted.", "It is 4711."):
        fake_openai.reply_text(answer)
    one = said("user", "make up a code")
    edited = said("assistant", "The code is 4711.")
    async with v1.client() as client:
        first = await client.chat.completions.create(model="main", user="alice", messages=[one])
        history = [one, edited, said("user", "remember it")]
        second = await client.chat.completions.create(model="main", user="alice", messages=history)
        history += [
            said("assistant", second.choices[0].message.content),
            said("user", "code?"),
        ]
        third = await client.chat.completions.create(model="main", user="alice", messages=history)
    assert conversation_of(first) == conversation_of(second) == conversation_of(third)
    assert "The code is 4711." in sent(fake_openai, 1)
    assert "The code is 4711." in sent(fake_openai, 2)  # the turn after the one carrying it


async def test_a_failed_turn_run_again_keeps_the_history_its_message_carried(
    v1: V1Server, fake_openai: FakeOpenAIServer
):
    """The same request sent again after its turn failed runs the message again: with
    the history it carried the first time, and the turns after it too."""
    fake_openai.reply_error(400, "the model refused")
    fake_openai.reply_text("You are Zoe.")
    fake_openai.reply_text("In Lyon.")
    history = [*ELSEWHERE, said("user", "what is my name?")]
    async with v1.client() as client:
        failed = await client.chat.completions.create(model="main", messages=history)
        again = await client.chat.completions.create(model="main", messages=history)
        history += [said("assistant", again.choices[0].message.content)]
        history += [said("user", "where do I live?")]
        after = await client.chat.completions.create(model="main", messages=history)
    assert "refused" in failed.choices[0].message.content
    assert again.choices[0].message.content == "You are Zoe."
    assert conversation_of(failed) == conversation_of(again) == conversation_of(after)
    assert "my name is Zoe" in sent(fake_openai, 1)  # the message run again
    assert "my name is Zoe" in sent(fake_openai, 2)  # and the next turn
