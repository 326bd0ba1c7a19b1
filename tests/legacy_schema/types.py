"""The column types the migrations of ``main`` before the layer split used, copied from its
``engine/store/schema.py`` so the copy does not change when the current code does."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import BigInteger, DateTime, Integer, TypeDecorator
from sqlalchemy.engine import Dialect


class UtcDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC in Python; naive UTC on disk so SQLite and PostgreSQL agree."""

    impl = DateTime(timezone=False)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTC column")
        return value.astimezone(UTC).replace(tzinfo=None)

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC)


# Primary keys are BIGINT on PostgreSQL and INTEGER (rowid alias) on SQLite.
Id = BigInteger().with_variant(Integer(), "sqlite")
