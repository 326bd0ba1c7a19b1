"""The files ``make test`` hands out first (tests/conftest.py) are files of the suite: a
renamed one would quietly go back to xdist's order and lengthen the run."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import HEAVY_FIRST

ROOT = Path(__file__).resolve().parents[1]


def test_every_heavy_file_named_first_exists_once() -> None:
    assert len(set(HEAVY_FIRST)) == len(HEAVY_FIRST)
    assert [path for path in HEAVY_FIRST if not (ROOT / path).is_file()] == []
