"""memory/ sits above the engine: it imports ``engine`` (and itself), never ``bot`` or
``scheduler``; nothing under engine/ or scheduler/ imports it."""

from __future__ import annotations

from pathlib import Path

from tests.imports import imports_of

ROOT = Path(__file__).resolve().parents[2]


def test_memory_imports_nothing_above_the_engine() -> None:
    bad = [
        f"{path.relative_to(ROOT)}: {module}"
        for path in sorted((ROOT / "memory").rglob("*.py"))
        for module in imports_of(path)
        if module.split(".")[0] in {"bot", "scheduler"}
    ]
    assert bad == []


def test_neither_the_engine_nor_the_scheduler_imports_memory() -> None:
    bad = [
        f"{path.relative_to(ROOT)}: {module}"
        for folder in ("engine", "scheduler")
        for path in sorted((ROOT / folder).rglob("*.py"))
        for module in imports_of(path)
        if module.split(".")[0] == "memory"
    ]
    assert bad == []
