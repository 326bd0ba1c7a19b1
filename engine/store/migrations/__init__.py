"""Versioned schema migrations, in layers: the engine's here, each outer layer's in its own
package (``bot/schema.py`` composes them into the one sequence ``chathub serve`` runs).

Each module ``vNNNN_<name>.py`` of a layer's package defines
``upgrade(op: alembic.operations.Operations)``. Version numbers form one sequence across
all layers (no number twice); pending migrations run in version order, whatever their layer.
A migration is history: never edit one that has shipped; add the next number instead and
change the layer's tables to match.

Finding the migrations reads module names only: a migration's module (and Alembic) is
imported when it has to run.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from alembic.operations import Operations

__all__ = ["ENGINE", "Layer", "Migration", "discover"]


@dataclass(frozen=True, slots=True)
class Layer:
    """One layer's migrations: the ``vNNNN_<name>`` modules of ``package``.

    ``name`` is recorded with every migration of the layer that is applied. ``tables``
    names the module that defines the layer's tables (on the shared ``MetaData``, as its
    migrations leave them): a new database gets them in one ``create_all``, then the rows
    its migrations insert from that module's ``seed_rows(conn)``, when it has one.
    """

    name: str
    package: str
    tables: str | None = None


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    upgrade: Callable[[Operations], None]
    layer: str = "engine"


#: The engine's own migrations (this package).
ENGINE = Layer("engine", __name__, "engine.store.schema")


def discover(layers: Sequence[Layer]) -> list[Migration]:
    """Every migration of ``layers``, in version order; a number used twice is an error."""
    found: dict[int, Migration] = {}
    for layer in layers:
        package = importlib.import_module(layer.package)
        for info in pkgutil.iter_modules(package.__path__):
            if not (info.name.startswith("v") and info.name[1:5].isdigit()):
                continue
            number, _, name = info.name[1:].partition("_")
            version = int(number)
            if version in found:
                other = found[version]
                raise RuntimeError(
                    f"migration {version:04d} is defined twice: {other.layer} {other.name!r} "
                    f"and {layer.name} {name!r}"
                )
            module = f"{layer.package}.{info.name}"
            found[version] = Migration(version, name, partial(_upgrade, module), layer.name)
    return [found[version] for version in sorted(found)]


def _upgrade(module: str, op: Operations) -> None:
    importlib.import_module(module).upgrade(op)
