"""Long-term memory's variables."""

from __future__ import annotations

from typing import Any

from pydantic import Field
from pydantic_settings import BaseSettings

from engine.config import SETTINGS_CONFIG
from memory.embeddings import EmbeddingConfig

__all__ = ["MemorySettings", "embedding_config"]


class MemorySettings(BaseSettings):
    """Field names are the variable names, lower-cased."""

    model_config = SETTINGS_CONFIG

    #: Off: past conversations are not indexed and ``search_sessions`` is not offered.
    memory_enabled: bool = True
    #: Off: no facts are derived from conversations (the tools may still save some).
    memory_derive_facts: bool = True
    #: The model the fact deriver asks (a configured model's name); unset: the main model.
    memory_model: str | None = None
    #: The profile a turn sees is at most this many characters (its heading takes 202:
    #: at 200 no fact was ever shown).
    memory_profile_chars: int = Field(2_000, ge=400, le=20_000)
    #: One fact is at most this many characters.
    memory_fact_chars: int = Field(500, ge=50, le=5_000)
    #: An OpenAI-compatible embeddings model (``/v1/embeddings``): search also finds
    #: conversations by meaning. Unset: full text only.
    embedding_model: str | None = None
    #: Its server; unset or empty: ``LLM_BASE_URL``.
    embedding_base_url: str | None = None
    #: Its key; unset or empty: ``LLM_API_KEY``.
    embedding_api_key: str | None = None
    embedding_timeout_seconds: float = Field(30.0, gt=0, le=600)
    #: Documents embedded per request.
    embedding_batch: int = Field(32, ge=1, le=512)
    #: A document less similar (cosine) to the query is not a hit by meaning.
    embedding_min_similarity: float = Field(0.3, ge=-1.0, le=1.0)


def embedding_config(settings: Any) -> EmbeddingConfig | None:
    """The embeddings endpoint of the service's settings (``MemorySettings`` with the
    engine's ``LLM_BASE_URL``/``LLM_API_KEY`` as defaults), or ``None`` when unset."""
    model = (settings.embedding_model or "").strip()
    if not model:
        return None
    return EmbeddingConfig(
        model=model,
        base_url=settings.embedding_base_url or settings.llm_base_url,
        # Empty counts as unset, as a copied .env.example writes it.
        api_key=settings.embedding_api_key or settings.llm_api_key,
        timeout_s=settings.embedding_timeout_seconds,
    )
