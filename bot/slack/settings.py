"""Slack's variables: the app's tokens, where its Web API is, who may talk to it."""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, NoDecode

from engine.config import SETTINGS_CONFIG, ConfigError, http_url, split_csv

__all__ = ["DEFAULT_API_URL", "SlackSettings", "slack_user_id"]

DEFAULT_API_URL = "https://slack.com/api/"
#: A user's id: ``U…`` (or ``W…`` on Enterprise Grid), upper-case letters and digits.
_USER_ID = re.compile(r"^[UW][A-Z0-9]{2,20}$")


def slack_user_id(value: Any) -> str:
    """A Slack user id as Slack spells it (a ValueError says what is wrong)."""
    text = str(value).strip()
    if not _USER_ID.match(text):
        raise ValueError(
            f"{text!r} is not a Slack user id (like U0123ABCD: profile → ⋮ → Copy member ID)"
        )
    return text


def _token(value: Any, prefix: str, where: str) -> str | None:
    if value is None or str(value).strip() == "":
        return None
    text = str(value).strip()
    if not text.startswith(prefix):
        raise ValueError(f"must start with {prefix}: copy it from the app's {where}")
    return text


class SlackSettings(BaseSettings):
    """Field names are the variable names, lower-cased (DESIGN §8; docs/slack.md)."""

    model_config = SETTINGS_CONFIG

    #: The bot token (``xoxb-``): set, chathub serves Slack.
    slack_bot_token: str | None = None
    #: The app-level token (``xapp-``, scope ``connections:write``): set, Socket Mode;
    #: unset, the HTTP Events API at ``POST /slack/events``.
    slack_app_token: str | None = None
    #: Verifies every request of the HTTP Events API (needed without an app token).
    slack_signing_secret: str | None = None
    #: The Web API base (tests and proxies point it elsewhere).
    slack_api_url: str = DEFAULT_API_URL
    slack_owner_id: str | None = None
    slack_allowed_user_ids: Annotated[list[str], NoDecode] = Field(default_factory=list)
    #: Outbound pacing: per channel a burst, then a rate (Slack: about one message a
    #: second per channel, short bursts allowed); the whole app at most so many calls a
    #: second, for the whole fleet.
    slack_channel_burst: int = Field(default=5, ge=1, le=1000)
    slack_channel_per_second: float = Field(default=1.0, gt=0, allow_inf_nan=False)
    slack_global_per_second: float = Field(default=20.0, gt=0, allow_inf_nan=False)

    @field_validator("slack_bot_token", mode="before")
    @classmethod
    def _slack_bot_token(cls, value: Any) -> str | None:
        return _token(value, "xoxb-", "Install App page (Bot User OAuth Token)")

    @field_validator("slack_app_token", mode="before")
    @classmethod
    def _slack_app_token(cls, value: Any) -> str | None:
        return _token(value, "xapp-", "Basic Information → App-Level Tokens")

    @field_validator("slack_signing_secret", mode="before")
    @classmethod
    def _slack_secret(cls, value: Any) -> str | None:
        if value is None or str(value).strip() == "":
            return None
        return str(value).strip()

    @field_validator("slack_owner_id", mode="before")
    @classmethod
    def _slack_owner(cls, value: Any) -> str | None:
        if value is None or str(value).strip() == "":
            return None
        return slack_user_id(value)

    @field_validator("slack_allowed_user_ids", mode="before")
    @classmethod
    def _slack_users(cls, value: Any) -> list[str]:
        return [slack_user_id(part) for part in split_csv(value)]

    @field_validator("slack_api_url")
    @classmethod
    def _slack_api_url(cls, value: str) -> str:
        url = http_url(value)
        return url if url.endswith("/") else url + "/"

    @property
    def slack_socket_mode(self) -> bool:
        return self.slack_app_token is not None

    def check_slack_events(self) -> None:
        """Refuse, naming the variable, a Slack that could take no event safely."""
        if self.slack_bot_token and not self.slack_app_token and not self.slack_signing_secret:
            raise ConfigError(
                "SLACK_SIGNING_SECRET: required without SLACK_APP_TOKEN (the HTTP Events "
                "API verifies every request with it); or set SLACK_APP_TOKEN for Socket Mode"
            )
