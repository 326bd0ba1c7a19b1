"""The workspace: writable, and ``secrets/`` out of the agent's reach.

The file tools refuse ``<workspace>/secrets`` by path (``engine/tools/workspace.py``), so
what can still expose it is the tree itself: a ``secrets`` that is a symlink (the agent
reads the target under its other name) or a file instead of a directory.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from bot.checks.result import Check
from engine.tools import SECRETS_DIR

__all__ = ["check_workspace"]


def check_workspace(root: Path) -> list[Check]:
    root = Path(root).expanduser()
    return [_writable(root), _secrets(root)]


def _writable(root: Path) -> Check:
    if not root.exists():
        parent = root.parent
        while not parent.exists() and parent != parent.parent:
            parent = parent.parent
        if parent.is_dir() and os.access(parent, os.W_OK):
            return Check("workspace", True, f"workspace {root} will be created at the first start")
        return Check(
            "workspace",
            False,
            f"workspace {root} does not exist and cannot be created",
            "set CHATHUB_WORKSPACE to a writable directory",
        )
    if not root.is_dir():
        return Check(
            "workspace",
            False,
            f"workspace {root} is not a directory",
            "set CHATHUB_WORKSPACE to a directory",
        )
    try:  # a real write: access() says yes to root on a read-only mount
        with tempfile.NamedTemporaryFile(dir=root, prefix=".chathub-doctor-"):
            pass
    except OSError:
        return Check(
            "workspace",
            False,
            f"workspace {root} is not writable",
            "make it writable by the user running chathub, or set CHATHUB_WORKSPACE",
        )
    return Check("workspace", True, f"workspace {root} is writable")


def _secrets(root: Path) -> Check:
    secrets = root / SECRETS_DIR
    fix = f"make {secrets} a plain directory (not a link) or remove it"
    if secrets.is_symlink():
        target = os.path.realpath(secrets)
        return Check(
            "workspace.secrets",
            False,
            f"{secrets} is a link to {target}: the agent can read it under that name",
            fix,
        )
    if secrets.exists() and not secrets.is_dir():
        return Check("workspace.secrets", False, f"{secrets} is not a directory", fix)
    return Check("workspace.secrets", True, "secrets/ is out of the agent's reach")
