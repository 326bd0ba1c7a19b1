"""The provider registry over the JSON API: the bodies and answers (``bot/http/api.py``
routes them). Keys go in, never come out: every answer shows them masked."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from providers import SERVICES, Provider

__all__ = ["ProviderIn", "ProviderItem", "ProviderList", "ProviderRemoved", "ProviderTested"]

Service = Literal["chat", "embeddings", "transcription", "speech"]
ModelName = Annotated[str, Field(min_length=1, max_length=200, pattern=r"\S")]
_PORT = r"(?:6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[0-9]{1,4})"
_H = "[0-9A-Fa-f]{1,4}"
#: An IPv6 address in brackets, written in full or shortened, nothing a parser refuses.
_IPV6 = (
    rf"\[(?:(?:{_H}:){{7}}{_H}|(?:{_H}:){{1,7}}:|(?:{_H}:){{1,6}}:{_H}"
    rf"|(?:{_H}:){{1,5}}(?::{_H}){{1,2}}|(?:{_H}:){{1,4}}(?::{_H}){{1,3}}"
    rf"|(?:{_H}:){{1,3}}(?::{_H}){{1,4}}|(?:{_H}:){{1,2}}(?::{_H}){{1,5}}"
    rf"|{_H}:(?::{_H}){{1,6}}|:(?:(?::{_H}){{1,7}}|:))\]"
)
_BASE_URL = (
    rf"^https?://(?:[A-Za-z0-9._~%!$&'()*+,;=-]+|{_IPV6})"
    rf"(?::{_PORT}?)?(?:/[!\x22$->@-~]*)?$"  # a path, no query or fragment (http_url)
)


class ProviderIn(BaseModel):
    """``POST /api/providers``: a provider to add (its key stored, never shown back)."""

    model_config = ConfigDict(extra="forbid", strict=True, regex_engine="python-re")

    #: Stored in lower case, as the CLI and the page store it (``Groq`` is ``groq``: the
    #: API alone refused it until 2026-12-07).
    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
    #: What ``Provider.checked`` takes: printable ASCII, a host (a name, IPv4 or IPv6), no
    #: user or password, a port up to 65535.
    base_url: str = Field(min_length=8, max_length=2000, pattern=_BASE_URL)
    #: Printable ASCII without spaces (what a bearer token is).
    api_key: str = Field(default="", max_length=4000, pattern=r"^[!-~]*$")
    serves: list[Service] = Field(min_length=1, max_length=len(SERVICES))
    models: list[ModelName] = Field(default_factory=list, max_length=50)


class ProviderItem(BaseModel):
    name: str
    base_url: str
    key: str = Field(description="masked: its first and last characters at most")
    serves: list[str]
    models: list[str]

    @classmethod
    def of(cls, provider: Provider) -> ProviderItem:
        return cls.model_validate(provider.shown())


class ProviderList(BaseModel):
    items: list[ProviderItem]


class ProviderRemoved(BaseModel):
    name: str
    removed: bool


class ProviderTested(BaseModel):
    name: str
    ok: bool
    said: str
