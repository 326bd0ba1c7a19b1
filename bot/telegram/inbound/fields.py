"""Reading untrusted Bot API JSON field by field: what is wrong is noted, never raised.

``Drops`` reads an update's fields with their types checked; a malformed optional field is
dropped and named, so the rest of the update is still handled (``updates``, ``media``).
"""

from __future__ import annotations

import math
from typing import Any

from bot.telegram.sending.api import Json
from engine.text import clean_text

__all__ = [
    "DB_ID_MAX",
    "DB_ID_MIN",
    "Drops",
    "as_int",
    "as_number",
    "file_id_of",
    "fits_db_id",
    "size_of",
    "unique_id_of",
]

# Ids are stored in signed 64-bit columns: a bigger one cannot name anything we stored.
DB_ID_MIN, DB_ID_MAX = -(2**63), 2**63 - 1


def fits_db_id(value: int) -> bool:
    """Whether ``value`` fits the signed 64-bit id columns (bigger ones overflow SQLite)."""
    return DB_ID_MIN <= value <= DB_ID_MAX


class Drops:
    """The malformed fields of one update: read through it, what is wrong is noted."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.dropped: list[str] = []

    def at(self, key: str) -> Drops:
        """The same record, for a nested object's fields (``message.chat.type``)."""
        nested = Drops(f"{self.path}.{key}")
        nested.dropped = self.dropped
        return nested

    def drop(self, key: str, why: str) -> None:
        self.dropped.append(f"{self.path}.{key} ({why})")

    def id(self, obj: Json, key: str) -> int | None:
        """An integer id that fits the database, or ``None`` (absent or dropped)."""
        value = obj.get(key)
        if value is None:
            return None
        number = as_int(value)
        if number is None:
            self.drop(key, "not an integer")
        elif not fits_db_id(number):
            self.drop(key, "out of range")
            return None
        return number

    def text(self, obj: Json, key: str) -> str | None:
        """A string field, repaired (``clean_text``), or ``None`` (absent or dropped)."""
        value = obj.get(key)
        if value is None:
            return None
        if not isinstance(value, str):
            self.drop(key, "not a string")
            return None
        return clean_text(value)

    def object(self, obj: Json, key: str) -> Json | None:
        value = obj.get(key)
        if value is None:
            return None
        if not isinstance(value, dict):
            self.drop(key, "not an object")
            return None
        return value

    def array(self, obj: Json, key: str) -> list[Any]:
        value = obj.get(key)
        if value is None:
            return []
        if not isinstance(value, list):
            self.drop(key, "not a list")
            return []
        return value

    def flag(self, obj: Json, key: str) -> bool:
        value = obj.get(key)
        if value is None:
            return False
        if not isinstance(value, bool):
            self.drop(key, "not a boolean")
            return False
        return value


def as_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def as_number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:  # an int too big for a float
        return None
    return number if math.isfinite(number) else None


def file_id_of(obj: Any) -> str | None:
    if not isinstance(obj, dict):
        return None
    file_id = obj.get("file_id")
    return clean_text(file_id) if isinstance(file_id, str) and file_id else None


def unique_id_of(obj: Json, file_id: str) -> str:
    unique = obj.get("file_unique_id")
    return clean_text(unique) if isinstance(unique, str) and unique else file_id


def size_of(obj: Json) -> int | None:
    size = as_int(obj.get("file_size"))
    return size if size is not None and size >= 0 else None
