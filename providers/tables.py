"""The API providers an owner registered: OpenAI-compatible servers and what they serve.

Created by ``providers/migrations/`` (0023); queried by ``providers/store.py``. A key is
kept as given (it must be sent), like ``LLM_API_KEY`` in ``.env``: the database is the
operator's; it is never shown back in full, logged, or given to the agent.
"""

from __future__ import annotations

from sqlalchemy import JSON, Column, String, Table, Text

from engine.store import UtcDateTime, metadata

__all__ = ["api_providers"]

api_providers = Table(
    "api_providers",
    metadata,
    Column("name", String(64), primary_key=True),
    Column("base_url", Text, nullable=False),
    Column("api_key", Text, nullable=False, server_default=""),
    #: What it serves: a list of ``chat``, ``embeddings``, ``transcription``, ``speech``.
    Column("serves", JSON, nullable=False),
    #: The models it is asked with (the first is the default of what it serves).
    Column("models", JSON, nullable=False),
    Column("created_at", UtcDateTime, nullable=False),
)
