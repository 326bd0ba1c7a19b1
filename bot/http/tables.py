"""The HTTP app's table, on the one shared ``MetaData`` (``engine.store.schema``).

Created by ``bot/http/migrations/v0011_web_signins.py``; used by ``bot/http/signins.py``.
"""

from __future__ import annotations

from sqlalchemy import Column, String, Table

from engine.store import UtcDateTime, metadata

__all__ = ["web_signins"]

web_signins = Table(
    "web_signins",
    metadata,
    Column("id_hash", String(64), primary_key=True),  # sha256 of the cookie's id, never the id
    Column("token_fingerprint", String(64), nullable=False),
    Column("created_at", UtcDateTime, nullable=False),
    Column("last_seen_at", UtcDateTime, nullable=False),
    Column("address", String(64)),
    Column("user_agent", String(255)),
)
