"""What a source file imports, read from its syntax tree (for the layering tests)."""

from __future__ import annotations

import ast
from pathlib import Path

__all__ = ["imports_of"]


def imports_of(path: Path) -> set[str]:
    """Every module ``path`` imports absolutely, at the top or inside a function."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found
