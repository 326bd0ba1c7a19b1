"""Issue 21's structure, held: each layer owns its tables and settings, and nothing under
engine/ names another layer's table or setting (bench/layers.py prints the same). No rule
counts lines: issue 33 retired them."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("bench_layers", ROOT / "bench" / "layers.py")
assert spec is not None and spec.loader is not None
layers = importlib.util.module_from_spec(spec)
sys.modules.setdefault("bench_layers", layers)  # its dataclasses look their module up
spec.loader.exec_module(layers)


# Each rule is read from the code when its test runs, not while the suite is collected
# (every pytest worker collects: 3.5 s each when the rules ran at import).
@pytest.mark.parametrize("check", layers.CHECKS, ids=[c.__name__ for c in layers.CHECKS])
def test_the_structure_holds(check) -> None:
    finding = check()
    assert finding.ok, f"{finding.rule}: {finding.detail}"


def test_every_outer_layer_has_its_tables() -> None:
    assert all(layers.layer_tables().values())
    assert layers.layer_settings()["telegram"] and layers.layer_settings()["scheduler"]
