"""Versioned schema migrations, applied at start-up.

Each module ``vNNNN_<name>.py`` defines ``upgrade(op: alembic.operations.Operations)``.
A migration is history: never edit one that has shipped; add the next number instead
and change ``engine/store/schema.py`` to match.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass

from alembic.operations import Operations


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    upgrade: Callable[[Operations], None]


def all_migrations() -> list[Migration]:
    found = []
    for info in pkgutil.iter_modules(__path__):
        if not info.name.startswith("v"):
            continue
        number, _, name = info.name[1:].partition("_")
        module = importlib.import_module(f"{__name__}.{info.name}")
        found.append(Migration(int(number), name, module.upgrade))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if versions != list(range(1, len(found) + 1)):
        raise RuntimeError(f"migration numbers must be 1..n without gaps, got {versions}")
    return found
