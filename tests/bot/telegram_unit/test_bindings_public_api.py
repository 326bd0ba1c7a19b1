"""The Telegram bindings use only the public API of python-telegram-bot and aiogram: a
minor release of either may change anything whose name starts with ``_``."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

BINDINGS = sorted((Path(__file__).parents[3] / "bot" / "telegram" / "bindings").glob("*.py"))


def private_names_of_others(source: str) -> list[str]:
    """``x._name`` where ``x`` is not ``self`` / ``cls`` (its own privates are its own)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Attribute)
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
            and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
        ):
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


@pytest.mark.parametrize("path", BINDINGS, ids=lambda p: p.name)
def test_a_binding_reaches_no_private_name_of_a_library(path: Path) -> None:
    assert private_names_of_others(path.read_text()) == []


def test_the_check_sees_a_private_call_through_an_attribute() -> None:
    assert private_names_of_others("async def f(self):\n    await self._bot._post('x')") == [
        "line 2: self._bot._post"
    ]
    assert private_names_of_others("def f(self):\n    return self._bot.do_api_request") == []
