"""Nothing is imported before it is needed (issue 20): ``import bot.serve`` in a fresh
interpreter loads neither the MCP SDK, nor a Telegram binding, nor the page templates, nor
the HTTP server; each comes with its first use."""

from __future__ import annotations

import json
import subprocess
import sys

NOT_AT_IMPORT = ("mcp", "telegram", "aiogram", "jinja2", "uvicorn")


def loaded_after(code: str) -> set[str]:
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    return set(json.loads(out.splitlines()[-1]))


def test_importing_the_service_loads_only_what_every_start_needs() -> None:
    loaded = loaded_after("import bot.serve")
    assert "bot.serve" in loaded
    assert not {name for name in NOT_AT_IMPORT if name in loaded}


def test_a_binding_brings_only_its_own_library() -> None:
    loaded = loaded_after(
        "from bot.telegram.bindings.factory import make_bot_api\n"
        "make_bot_api('aiogram', '1:x', 'http://127.0.0.1:9')"
    )
    assert "aiogram" in loaded and "telegram" not in loaded and "mcp" not in loaded
