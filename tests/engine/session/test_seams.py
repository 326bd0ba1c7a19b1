"""The session owns its seams (issue 21 item 5): it imports no package that plugs into it,
and its own files import each other one way only."""

from __future__ import annotations

from pathlib import Path

import engine.session
from tests.imports import imports_of

SESSION = Path(engine.session.__file__).parent
#: Packages that implement the session's protocols or sit above it; the session imports none.
ABOVE = ("engine.approval", "engine.hub", "engine.core", "bot", "scheduler")


def session_graph() -> dict[str, set[str]]:
    modules = {f"engine.session.{p.stem}": p for p in SESSION.glob("*.py")}
    return {name: imports_of(path) & modules.keys() for name, path in modules.items()}


def test_the_session_imports_nothing_that_plugs_into_it() -> None:
    offending = {
        f"{path.name} -> {module}"
        for path in SESSION.glob("*.py")
        for module in imports_of(path)
        if module.startswith(ABOVE)
    }
    assert offending == set()


def test_the_session_files_import_each_other_one_way() -> None:
    graph = session_graph()
    visiting: list[str] = []
    done: set[str] = set()
    cycles: list[list[str]] = []

    def visit(module: str) -> None:
        if module in done:
            return
        if module in visiting:
            cycles.append([*visiting[visiting.index(module) :], module])
            return
        visiting.append(module)
        for target in sorted(graph[module]):
            visit(target)
        visiting.pop()
        done.add(module)

    for module in sorted(graph):
        visit(module)
    assert cycles == []
