"""Debian's Chromium for the browser tests: where it is, how it runs here, where
screenshots go. Never a browser Playwright downloads."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

CHROMIUM = os.environ.get("CHATHUB_TEST_CHROMIUM", "/usr/bin/chromium")
ARTIFACTS = Path(
    os.environ.get("CHATHUB_TEST_ARTIFACTS", Path(__file__).parents[1] / "test-artifacts")
)

#: This machine has no internet: keep Chromium from trying to reach it.
OFFLINE = (
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)

#: Skips a test module where Chromium is missing.
needs_chromium = pytest.mark.skipif(
    shutil.which(CHROMIUM) is None,
    reason=f"{CHROMIUM} is missing (Debian packages chromium, chromium-driver; .ci/run installs them)",
)
