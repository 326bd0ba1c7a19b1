"""Long-term memory's variables."""

from __future__ import annotations

from pydantic_settings import BaseSettings

from engine.config import SETTINGS_CONFIG

__all__ = ["MemorySettings"]


class MemorySettings(BaseSettings):
    """Field names are the variable names, lower-cased."""

    model_config = SETTINGS_CONFIG

    #: Off: past conversations are not indexed and ``search_sessions`` is not offered.
    memory_enabled: bool = True
