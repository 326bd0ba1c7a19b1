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

FINDINGS = layers.findings()


@pytest.mark.parametrize("finding", FINDINGS, ids=[f.rule for f in FINDINGS])
def test_the_structure_holds(finding) -> None:
    assert finding.ok, finding.detail


def test_every_outer_layer_has_its_tables() -> None:
    assert all(layers.layer_tables().values())
    assert layers.layer_settings()["telegram"] and layers.layer_settings()["scheduler"]
