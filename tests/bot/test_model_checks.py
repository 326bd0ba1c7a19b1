"""``check_tool_calling``: what setup and the doctor say when the model endpoint refuses."""

from __future__ import annotations

import httpx
import pytest

from bot.checks.model import check_tool_calling
from bot.checks.result import Problem
from engine.config import ModelConfig

MODEL = ModelConfig(name="gpt-x", base_url="http://llm.example/v1", api_key="sk-wrong")


@pytest.mark.parametrize(
    ("status", "kind", "said"),
    [
        (401, "auth", "refused the API key (HTTP 401)"),
        (403, "auth", "refused the API key (HTTP 403)"),
        (404, "not_found", "does not know the model 'gpt-x' (HTTP 404)"),
    ],
)
async def test_an_endpoint_refusing_the_key_or_the_model_is_said_so(
    status: int, kind: str, said: str
) -> None:
    """Since a 401/403/404 falls back to the next model (``LlmEndpointError``), the wizard
    must still know a wrong key or model for what it is: it asks for the key again only
    then (found by review on 2026-12-07)."""
    refusing = httpx.MockTransport(lambda _request: httpx.Response(status, json={"error": "no"}))
    async with httpx.AsyncClient(transport=refusing) as http:
        with pytest.raises(Problem) as problem:
            await check_tool_calling(http, MODEL, 5.0)
    assert problem.value.kind == kind and said in str(problem.value)
