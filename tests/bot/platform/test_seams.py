"""bot/platform is what every front end shares: it imports no front end."""

from __future__ import annotations

import ast
from pathlib import Path

PLATFORM = Path(__file__).resolve().parents[3] / "bot" / "platform"
FRONT_ENDS = ("bot.telegram", "bot.http", "bot.terminal", "bot.serve", "bot.cli")


def imported(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_the_platform_layer_imports_no_front_end() -> None:
    files = sorted(PLATFORM.glob("*.py"))
    assert len(files) > 5
    found = {
        f"{path.name}: {name}"
        for path in files
        for name in imported(path)
        if name.startswith(FRONT_ENDS)
    }
    assert not found
