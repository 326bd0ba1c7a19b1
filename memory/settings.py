"""Long-term memory's variables."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings

from engine.config import SETTINGS_CONFIG

__all__ = ["MemorySettings"]


class MemorySettings(BaseSettings):
    """Field names are the variable names, lower-cased."""

    model_config = SETTINGS_CONFIG

    #: Off: past conversations are not indexed and ``search_sessions`` is not offered.
    memory_enabled: bool = True
    #: Off: no facts are derived from conversations (the tools may still save some).
    memory_derive_facts: bool = True
    #: The model the fact deriver asks (a configured model's name); unset: the main model.
    memory_model: str | None = None
    #: The profile a turn sees is at most this many characters.
    memory_profile_chars: int = Field(2_000, ge=200, le=20_000)
    #: One fact is at most this many characters.
    memory_fact_chars: int = Field(500, ge=50, le=5_000)
