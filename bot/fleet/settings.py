"""The fleet's variables: several ``chathub serve`` processes on one PostgreSQL database."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings

from engine.config import SETTINGS_CONFIG

__all__ = ["FleetNeedsPostgres", "FleetSettings", "check_fleet_database"]


class FleetSettings(BaseSettings):
    """Field names are the variable names, lower-cased."""

    model_config = SETTINGS_CONFIG

    #: One of several processes on one PostgreSQL database (docs/scale-out.md).
    chathub_fleet: bool = False
    #: This process's id in the ``leases`` table; unset: ``host:pid:random``.
    chathub_process_id: str | None = Field(None, min_length=1, max_length=200)
    #: A dead process's chats wait at most this long before another process takes them.
    chathub_fleet_lease_seconds: float = Field(4.0, ge=2.0, le=300.0)


class FleetNeedsPostgres(Exception):
    """``CHATHUB_FLEET`` on a database that is not PostgreSQL; ``str()`` is the sentence."""


def check_fleet_database(database_url: str) -> None:
    if not database_url.startswith("postgresql"):
        raise FleetNeedsPostgres(
            "CHATHUB_FLEET=true needs a PostgreSQL DATABASE_URL (postgresql+asyncpg://...): "
            "processes share their work through it; SQLite serves one process"
        )
