"""The suite's own arrangements (tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import SLOW_FIRST

ROOT = Path(__file__).resolve().parents[1]


def test_every_file_started_first_exists() -> None:
    """A renamed or removed file would leave the order silently stale."""
    assert [path for path in SLOW_FIRST if not (ROOT / path).is_file()] == []
    assert len(set(SLOW_FIRST)) == len(SLOW_FIRST)
