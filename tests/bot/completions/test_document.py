"""``/v1``'s real answers are what the OpenAPI document says they are."""

from __future__ import annotations

import jsonschema

from bot.http.api import openapi_document
from tests.bot.completions.conftest import V1Server
from tests.fakes.openai_server import FakeOpenAIServer


def _check(path: str, method: str, status: int, answer: object) -> None:
    document = openapi_document()
    declared = document["paths"][path][method]["responses"][str(status)]
    schema = declared["content"]["application/json"]["schema"]
    jsonschema.validate(answer, {"components": document["components"], **schema})


async def test_answers_and_refusals_match_the_document(v1: V1Server, fake_openai: FakeOpenAIServer):
    fake_openai.reply_text("Documented.")
    async with v1.http() as http:
        models = await http.get("/v1/models")
        answer = await http.post(
            "/v1/chat/completions",
            json={"model": "main", "messages": [{"role": "user", "content": "hi"}]},
        )
        bad = await http.post("/v1/chat/completions", json={"model": "main", "messages": []})
        missing = await http.post(
            "/v1/chat/completions",
            json={"model": "nobody", "messages": [{"role": "user", "content": "hi"}]},
        )
    _check("/v1/models", "get", 200, models.json())
    _check("/v1/chat/completions", "post", 200, answer.json())
    _check("/v1/chat/completions", "post", 400, bad.json())
    _check("/v1/chat/completions", "post", 404, missing.json())
    assert answer.json()["choices"][0]["message"]["content"] == "Documented."
