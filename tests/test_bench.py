"""``make bench`` runs every bench to the end from a fresh clone: a bench script is run by
its path, so its folder comes first on ``sys.path`` and a script named after one of the
project's packages would be imported in its place (``bench/memory.py`` hid the ``memory``
package and every bench died with ``No module named 'memory.layer'``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[1]
PACKAGES = {path.parent.name for path in ROOT.glob("*/__init__.py")}


def test_no_bench_script_is_named_after_a_package_of_the_project() -> None:
    assert {"engine", "bot", "scheduler", "memory"} <= PACKAGES
    shadowing = sorted(path.name for path in (ROOT / "bench").glob("*.py") if path.stem in PACKAGES)
    assert shadowing == []


def test_a_bench_script_run_by_its_path_imports_the_project() -> None:
    done = subprocess.run(
        [sys.executable, "bench/engine_overhead.py", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
