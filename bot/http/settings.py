"""The HTTP app's variables: where it listens, the API token, how long a sign-in lasts,
how long an OpenAI-compatible request waits for a decision."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings

from engine.config import SETTINGS_CONFIG

__all__ = ["HttpSettings"]


class HttpSettings(BaseSettings):
    """Field names are the variable names, lower-cased (DESIGN §8)."""

    model_config = SETTINGS_CONFIG

    chathub_api_token: str | None = None
    http_host: str = "127.0.0.1"
    http_port: int = Field(default=8080, ge=1, le=65535)
    #: A web inbox sign-in ends this long after its last request (bot/http/signins.py),
    web_session_idle_hours: int = Field(default=12, ge=1, le=24 * 366)
    #: and this long after it began, however much it is used.
    web_session_max_days: int = Field(default=7, ge=1, le=366)
    #: An OpenAI-compatible request (``/v1``) waits this long for a human's decision on a
    #: call before its answer ends (the turn goes on; docs/openai-api.md).
    openai_api_decision_wait_seconds: float = Field(default=300.0, ge=1, le=24 * 3600)
