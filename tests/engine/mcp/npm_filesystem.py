"""The real ``@modelcontextprotocol/server-filesystem`` (npm), installed once into a cache.

``python3 tests/engine/mcp/npm_filesystem.py`` installs it (``.ci/run`` does, before the
tests); a test calls ``server_script()``, which installs it if needed and returns the
script, or None with the reason (no node/npm, the registry cannot be reached). Stdlib only:
``.ci/run`` runs this before the virtualenv exists.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from pathlib import Path

PACKAGE = "@modelcontextprotocol/server-filesystem"
VERSION = "2026.8.31"
_INSTALL_TIMEOUT_S = 180


def cache_dir() -> Path:
    """``$CHATHUB_TEST_CACHE/npm`` (default ``~/.cache/chathub-tests/npm``)."""
    base = os.environ.get("CHATHUB_TEST_CACHE") or Path.home() / ".cache" / "chathub-tests"
    return Path(base) / "npm"


def _script(prefix: Path) -> Path:
    return prefix / "node_modules" / PACKAGE / "dist" / "index.js"


def _installed(prefix: Path) -> bool:
    manifest = prefix / "node_modules" / PACKAGE / "package.json"
    try:
        return f'"version": "{VERSION}"' in manifest.read_text() and _script(prefix).is_file()
    except OSError:
        return False


def server_script() -> tuple[Path | None, str]:
    """The server's entry script (run it with ``node``), or None and why it is missing."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        return None, "node and npm are not installed"
    prefix = cache_dir()
    if _installed(prefix):
        return _script(prefix), ""
    prefix.mkdir(parents=True, exist_ok=True)
    # Test runs in parallel (other checkouts, CI) must not install into one prefix at once.
    with (prefix / ".install.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not _installed(prefix):
            try:
                done = subprocess.run(
                    [
                        "npm",
                        "install",
                        "--prefix",
                        str(prefix),
                        "--no-audit",
                        "--no-fund",
                        "--ignore-scripts",
                        f"{PACKAGE}@{VERSION}",
                    ],
                    capture_output=True,
                    text=True,
                    timeout=_INSTALL_TIMEOUT_S,
                    check=False,
                )
            except subprocess.TimeoutExpired:
                return None, f"npm install {PACKAGE} took over {_INSTALL_TIMEOUT_S} s"
            if done.returncode != 0 or not _installed(prefix):
                lines = [
                    line.removeprefix("npm error").strip()
                    for line in done.stderr.splitlines()
                    if line.strip() and "complete log" not in line
                ]
                why = "; ".join(lines[:2]) or f"exit status {done.returncode}"
                return None, f"npm install {PACKAGE}@{VERSION} failed: {why}"
    return _script(prefix), ""


if __name__ == "__main__":
    script, reason = server_script()
    print(script if script else f"not installed: {reason}", file=sys.stderr)
    sys.exit(0 if script else 1)
