"""A package face's names that load on first use (PEP 562).

A face (``engine/<package>/__init__.py``) is what the other layers import. What it gives
beyond its core is named in a map of name to home module and loaded when first asked
for, so importing the face costs nothing more and no import cycle runs through it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_attributes"]


def lazy_attributes(package: str, homes: Mapping[str, str]) -> Callable[[str], Any]:
    """The face's module ``__getattr__``: ``homes`` maps each lazy name to its module."""

    def attribute(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(home), name)

    return attribute
