"""Issue 21's bar, read from the code: who owns which tables and settings. Prints one line
per rule; exits 1 when one fails.

Line counts are no rule (issue 33 retired the 300 lines per class on the message path and
the 200 of the Telegram adapter): a module is one concept and its name says which, never
a file split to fit a number.

    .venv/bin/python bench/layers.py

The same rules are asserted by tests/test_layers.py (a structure, not a timing).
"""

from __future__ import annotations

import ast
import functools
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: Each outer layer's tables (their ``tables.py``) and settings (``settings.py``).
LAYER_PACKAGES = {
    "telegram": "bot/telegram",
    "delivery": "bot/delivery",
    "platform": "bot/platform",
    "scheduler": "scheduler",
    "http": "bot/http",
    "webchat": "bot/webchat",
    "memory": "memory",
}


@dataclass(frozen=True, slots=True)
class Finding:
    rule: str
    ok: bool
    detail: str


def python_files(folder: str) -> Iterator[Path]:
    yield from sorted((ROOT / folder).rglob("*.py"))


def relative(path: Path) -> str:
    return str(path.relative_to(ROOT))


@functools.cache
def tree(path: Path) -> ast.Module:
    """``path`` parsed, once per run: every rule reads the same files."""
    return ast.parse(path.read_text())


@functools.cache
def nodes(path: Path) -> tuple[ast.AST, ...]:
    """Every node of ``path``, walked once."""
    return tuple(ast.walk(tree(path)))


def layer_tables() -> dict[str, set[str]]:
    """Table names per outer layer: the ``sa.Table("name", ...)`` of its ``tables.py``."""
    found: dict[str, set[str]] = {}
    for layer, folder in LAYER_PACKAGES.items():
        found[layer] = set()
        tables = ROOT / folder / "tables.py"
        if not tables.exists():
            continue
        for node in nodes(tables):
            if (
                isinstance(node, ast.Call)
                and getattr(node.func, "attr", getattr(node.func, "id", "")) == "Table"
                and node.args
                and isinstance(node.args[0], ast.Constant)
            ):
                found[layer].add(str(node.args[0].value))
    return found


def layer_settings() -> dict[str, set[str]]:
    """Setting names per outer layer: the annotated fields of its ``settings.py`` classes."""
    found: dict[str, set[str]] = {}
    for layer, folder in LAYER_PACKAGES.items():
        found[layer] = set()
        settings = ROOT / folder / "settings.py"
        if not settings.exists():
            continue
        for node in nodes(settings):
            if isinstance(node, ast.ClassDef):
                for item in node.body:
                    if (
                        isinstance(item, ast.AnnAssign)
                        and isinstance(item.target, ast.Name)
                        and item.target.id != "model_config"
                    ):
                        found[layer].add(item.target.id)
    return found


def names_in(path: Path) -> set[str]:
    """String constants and identifiers of ``path`` (what it could name a table or field by)."""
    names: set[str] = set()
    for node in nodes(path):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            names.add(node.value)
        elif isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Attribute):
            names.add(node.attr)
        elif isinstance(node, ast.alias):
            names.add(node.name.rsplit(".", 1)[-1])
            if node.asname:
                names.add(node.asname)
    return names


def imports_of(path: Path) -> Iterator[tuple[str, str]]:
    """``(module, name)`` of each ``from module import name`` in ``path``."""
    for node in nodes(path):
        if isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                yield node.module, alias.name


#: The layers outside the engine (and the benchmarks, which drive it from outside).
OUTER = ("bot", "scheduler", "memory", "bench")


def engine_packages() -> set[str]:
    return {p.name for p in (ROOT / "engine").iterdir() if (p / "__init__.py").exists()}


def face_names(package: str) -> set[str]:
    """What ``engine.<package>``'s face gives: the names in its ``__all__``."""
    for node in tree(ROOT / "engine" / package / "__init__.py").body:
        if (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)
            and isinstance(node.value, ast.List | ast.Tuple)
        ):
            return {str(e.value) for e in node.value.elts if isinstance(e, ast.Constant)}
    return set()


def below_faces() -> list[str]:
    """Imports from outside engine/ that reach past a package's face: a module below it
    (``engine.store.schema``), or a name its face does not give."""
    packages = engine_packages()
    faces = {package: face_names(package) for package in packages}
    found = []
    for path in (p for folder in OUTER for p in python_files(folder)):
        for node in nodes(path):
            if isinstance(node, ast.ImportFrom) and node.module:
                parts = node.module.split(".")
                if parts[0] != "engine" or len(parts) < 2 or parts[1] not in packages:
                    continue
                if len(parts) > 2:
                    found.append(f"{relative(path)}:{node.lineno}: {node.module}")
                    continue
                for alias in node.names:
                    if alias.name not in faces[parts[1]]:
                        found.append(f"{relative(path)}:{node.lineno}: {node.module}.{alias.name}")
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    parts = alias.name.split(".")
                    if parts[0] == "engine" and len(parts) > 2 and parts[1] in packages:
                        found.append(f"{relative(path)}:{node.lineno}: {alias.name}")
    return found


def import_circles() -> list[list[str]]:
    """Groups of the project's modules that import each other round in a circle (any
    import: at the top, in a function, for type checking), each sorted."""
    modules: dict[str, Path] = {}
    for folder in ("bot", "scheduler", "memory", "engine"):
        for path in python_files(folder):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            modules[name.removesuffix(".__init__")] = path
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for node in nodes(path):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                continue
            graph[name] |= {target for target in targets if target in modules}
    return _strongly_connected(graph)


def _strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative; only the groups of more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            step = next(edges, None)
            if step is not None:
                if step not in index:
                    index[step] = low[step] = len(index)
                    stack.append(step)
                    on_stack.add(step)
                    work.append((step, iter(sorted(graph[step]))))
                elif step in on_stack:
                    low[node] = min(low[node], index[step])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    groups.append(sorted(group))
    return groups


#: Modules whose job is to gather others' names: the one migration sequence.
GATHERERS = ("bot/schema.py",)


def re_exports() -> list[str]:
    """Modules (not a package's face) that list in ``__all__`` a name they import: a shim
    an earlier split left, which keeps two homes for one name."""
    found = []
    for path in (
        p for folder in ("bot", "scheduler", "memory", "engine") for p in python_files(folder)
    ):
        if path.name == "__init__.py" or relative(path) in GATHERERS:
            continue
        imported: set[str] = set()
        listed: list[str] = []
        for node in tree(path).body:
            if isinstance(node, ast.ImportFrom):
                imported |= {alias.asname or alias.name for alias in node.names}
            elif (
                isinstance(node, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)
                and isinstance(node.value, ast.List | ast.Tuple)
            ):
                listed = [str(e.value) for e in node.value.elts if isinstance(e, ast.Constant)]
        shimmed = [name for name in listed if name in imported]
        if shimmed:
            found.append(f"{relative(path)}: {', '.join(shimmed)}")
    return found


def through_the_hub() -> list[str]:
    """Places outside engine/ that reach the engine through the hub (``hub.engine``,
    ``self._hub.engine``, ...) instead of the hub's own face (issue 34: one door)."""
    found = []
    for path in (p for folder in ("bot", "scheduler", "memory") for p in python_files(folder)):
        for node in nodes(path):
            if not (isinstance(node, ast.Attribute) and node.attr == "engine"):
                continue
            owner = node.value
            name = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", "")
            if name.lstrip("_").endswith("hub"):
                found.append(f"{relative(path)}:{node.lineno}")
    return found


def hub_door() -> Finding:
    reached = through_the_hub()
    return Finding(
        "places outside engine/ that reach the engine through the hub (hub.engine): 0",
        not reached,
        "; ".join(reached) or "none",
    )


def no_shims() -> Finding:
    shims = re_exports()
    return Finding(
        "modules re-exporting what they import (a package's face apart): 0",
        not shims,
        "; ".join(shims) or "none",
    )


def no_circles() -> Finding:
    circles = import_circles()
    return Finding(
        "import circles among the modules of bot/, scheduler/, memory/, engine/: 0",
        not circles,
        "; ".join(" ⇄ ".join(group) for group in circles) or "none",
    )


def faces_held() -> Finding:
    below = below_faces()
    more = f" (+{len(below) - 10} more)" if len(below) > 10 else ""
    return Finding(
        "imports from outside engine/ past an engine package's face: 0",
        not below,
        "; ".join(below[:10]) + more if below else "none",
    )


def own_tables_imported() -> Finding:
    tables = layer_tables()
    foreign_imports = []
    scanned = [*python_files("bot"), *python_files("engine"), *python_files("scheduler")]
    for path in [*scanned, *python_files("memory")]:
        for module, name in imports_of(path):
            if module in ("engine.store", "engine.store.schema") and any(
                name in t for t in tables.values()
            ):
                foreign_imports.append(f"{relative(path)}: {name}")
    return Finding(
        "imports from engine.store.schema of another layer's table: 0",
        not foreign_imports,
        ", ".join(foreign_imports) or "none",
    )


def engine_names_no_layer() -> Finding:
    outer_names = set().union(*layer_tables().values(), *layer_settings().values())
    engine_hits = []
    for path in python_files("engine"):
        named = names_in(path) & outer_names
        if named:
            engine_hits.append(f"{relative(path)}: {', '.join(sorted(named))}")
    return Finding(
        "modules under engine/ naming a platform, scheduler or HTTP table or setting: 0",
        not engine_hits,
        "; ".join(engine_hits) or "none",
    )


def owners() -> Finding:
    tables, settings = layer_tables(), layer_settings()
    counts = ", ".join(
        f"{layer} {len(tables[layer])} tables / {len(settings[layer])} settings"
        for layer in LAYER_PACKAGES
    )
    return Finding("each outer layer owns its tables and settings", True, counts)


#: The rules, each read from the code when called (tests/test_layers.py runs one a test).
CHECKS = (
    hub_door,
    no_shims,
    no_circles,
    faces_held,
    own_tables_imported,
    engine_names_no_layer,
    owners,
)


def findings() -> list[Finding]:
    return [check() for check in CHECKS]


def main() -> int:
    results = findings()
    for finding in results:
        print(f"{'met ' if finding.ok else 'MISS'}  {finding.rule}: {finding.detail}")
    return 0 if all(f.ok for f in results) else 1


if __name__ == "__main__":
    sys.exit(main())
