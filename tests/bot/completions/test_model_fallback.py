"""A model that fails mid-answer and the next one that answers (``LLM_FALLBACK_MODELS``):
the answer is told once, streamed or whole."""

from __future__ import annotations

import pytest

from tests.bot.completions.conftest import V1Server
from tests.fakes.openai_server import FakeOpenAIServer, delta_chunk

ASKED = [{"role": "user", "content": "capital of France?"}]
ANSWER = "The capital of France is Paris."


@pytest.fixture
def fallback_models() -> list[str]:
    return ["backup-model"]


def _first_model_fails_after_some_words(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.reply_chunks(
        delta_chunk({"role": "assistant", "content": ""}),
        delta_chunk({"content": "The capital "}),
        delta_chunk({"content": "of France "}),
        {"error": {"message": "overloaded", "code": 503}},  # in-band: the next model answers
        model="fake-model",
    )
    fake_openai.reply_text(ANSWER, model="backup-model")


async def test_a_streamed_answer_says_the_model_changed_and_gives_the_answer_once(
    v1: V1Server, fake_openai: FakeOpenAIServer
):
    """The failed model's words and the next one's ran together, and the answer came twice:
    "The capital of France The capital of France is Paris.\\n\\nThe capital of France is
    Paris." (found by review)."""
    _first_model_fails_after_some_words(fake_openai)
    async with v1.client() as client:
        stream = await client.chat.completions.create(
            model="main", user="fb", stream=True, messages=ASKED
        )
        said = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    assert said.count("Paris") == 1
    assert said.endswith(f"backup-model answers instead.\n\n{ANSWER}")


async def test_a_whole_answer_is_the_next_models_answer_alone(
    v1: V1Server, fake_openai: FakeOpenAIServer
):
    _first_model_fails_after_some_words(fake_openai)
    async with v1.client() as client:
        answer = await client.chat.completions.create(model="main", user="fb", messages=ASKED)
    assert answer.choices[0].message.content == ANSWER
