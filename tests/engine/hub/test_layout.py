"""The hub's files import each other one way (``hub.py`` on top, the collaborators below),
and nothing in the hub reaches up into a platform or the scheduler."""

from __future__ import annotations

from pathlib import Path

import engine.hub
from tests.imports import imports_of

HUB = Path(engine.hub.__file__).parent
ABOVE = ("bot", "scheduler")


def hub_modules() -> dict[str, Path]:
    """Every module of the hub, its groups' (``fleet/``, ``turns/``, ``background/``) too."""
    return {
        "engine.hub." + ".".join(p.relative_to(HUB).with_suffix("").parts): p
        for p in HUB.rglob("*.py")
        if p.stem != "__init__"
    }


def hub_graph() -> dict[str, set[str]]:
    modules = hub_modules()
    return {name: imports_of(path) & modules.keys() for name, path in modules.items()}


def test_the_hub_files_import_each_other_one_way() -> None:
    graph = hub_graph()
    order: list[str] = []
    visiting: set[str] = set()
    cycles: list[str] = []

    def visit(module: str) -> None:
        if module in order:
            return
        if module in visiting:
            cycles.append(module)
            return
        visiting.add(module)
        for target in sorted(graph[module]):
            visit(target)
        visiting.discard(module)
        order.append(module)

    for module in sorted(graph):
        visit(module)
    assert len(graph) > 20  # the groups' modules are read too
    assert cycles == []
    assert not any("engine.hub.hub" in targets for targets in graph.values())


def test_the_hub_imports_no_platform_and_no_scheduler() -> None:
    offending = {
        f"{path.name} -> {module}"
        for path in hub_modules().values()
        for module in imports_of(path)
        if module.startswith(ABOVE)
    }
    assert offending == set()
