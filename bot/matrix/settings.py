"""Matrix's variables: the homeserver, the bot's account, who may talk to it."""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, NoDecode

from engine.config import SETTINGS_CONFIG, ConfigError, http_url, split_csv

__all__ = ["MatrixSettings", "matrix_user_id"]

#: ``@localpart:server`` (the server part may carry a port); the spec's historical
#: localparts allow more than lower-case letters, so only the shape is checked.
_USER_ID = re.compile(r"^@[^:\s]{1,255}:[A-Za-z0-9.\-\[\]:]{1,255}$")


def matrix_user_id(value: Any) -> str:
    """A Matrix user id as written (a ValueError says what is wrong)."""
    text = str(value).strip()
    if not _USER_ID.match(text):
        raise ValueError(f"{text!r} is not a Matrix user id (like @alice:example.org)")
    return text


def _optional(value: Any) -> str | None:
    if value is None or str(value).strip() == "":
        return None
    return str(value).strip()


class MatrixSettings(BaseSettings):
    """Field names are the variable names, lower-cased (DESIGN §8; docs/matrix.md)."""

    model_config = SETTINGS_CONFIG

    #: The homeserver's client-server API base (``https://matrix.example.org``): set,
    #: chathub serves Matrix.
    matrix_homeserver: str | None = None
    #: The bot's account (``@chathub:example.org``).
    matrix_user_id: str | None = None
    #: The bot's access token; or ``MATRIX_PASSWORD``, logged in with once (the token kept
    #: in the database, the password never stored).
    matrix_access_token: str | None = None
    matrix_password: str | None = None
    matrix_owner_id: str | None = None
    matrix_allowed_user_ids: Annotated[list[str], NoDecode] = Field(default_factory=list)
    #: Outbound pacing: messages a room may get at once, then a rate; the whole account at
    #: most so many a second (Synapse's default ``rc_message`` is 0.2/s, burst 10, per
    #: user: raise it for the bot, docs/matrix.md).
    matrix_room_burst: int = Field(default=5, ge=1, le=1000)
    matrix_room_per_second: float = Field(default=1.0, gt=0, allow_inf_nan=False)
    matrix_global_per_second: float = Field(default=10.0, gt=0, allow_inf_nan=False)

    @field_validator("matrix_homeserver", mode="before")
    @classmethod
    def _matrix_homeserver(cls, value: Any) -> str | None:
        text = _optional(value)
        return None if text is None else http_url(text)

    @field_validator("matrix_user_id", "matrix_owner_id", mode="before")
    @classmethod
    def _matrix_user(cls, value: Any) -> str | None:
        text = _optional(value)
        return None if text is None else matrix_user_id(text)

    @field_validator("matrix_access_token", "matrix_password", mode="before")
    @classmethod
    def _matrix_secret(cls, value: Any) -> str | None:
        return _optional(value)

    @field_validator("matrix_allowed_user_ids", mode="before")
    @classmethod
    def _matrix_users(cls, value: Any) -> list[str]:
        return [matrix_user_id(part) for part in split_csv(value)]

    def check_matrix_account(self) -> None:
        """Refuse, naming the variable, a Matrix the bot could not sign in to."""
        if not self.matrix_homeserver:
            return
        if not self.matrix_user_id:
            raise ConfigError("MATRIX_USER_ID: required with MATRIX_HOMESERVER (@bot:server)")
        if not self.matrix_access_token and not self.matrix_password:
            raise ConfigError(
                "MATRIX_ACCESS_TOKEN: required with MATRIX_HOMESERVER (or MATRIX_PASSWORD, "
                "logged in with once)"
            )
