"""Nothing is imported before it is needed (issue 20): ``import bot.serve`` in a fresh
interpreter loads neither the MCP SDK, nor a Telegram binding, nor the page templates, nor
the HTTP server; each comes with its first use."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.bot.process import service_env
from tests.pg import migrated_sqlite

ROOT = Path(__file__).resolve().parents[2]
NOT_AT_IMPORT = ("mcp", "telegram", "aiogram", "jinja2", "uvicorn")


def loaded_after(
    code: str, *, env: dict[str, str] | None = None, cwd: Path | None = None
) -> set[str]:
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    if env is not None:  # the project importable from anywhere, as it is from the root
        env = {**env, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        env=env,
        cwd=cwd,
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


def test_a_service_started_on_an_up_to_date_database_never_imports_alembic(
    tmp_path: Path,
) -> None:
    """Alembic (~75 ms, several MB) and the migration modules come only with a migration to
    run; SQLite needs no SQLAlchemy asyncio either (it runs on a thread of its own)."""
    database = migrated_sqlite(tmp_path / "chathub.db")
    start = (
        "import asyncio\n"
        "from bot.serve import Service\n"
        "from bot.settings import load_config\n"
        "async def main():\n"
        "    service = Service(load_config(), http=False)\n"
        "    await service.start()\n"
        "    await service.stop()\n"
        "asyncio.run(main())"
    )
    env = service_env(tmp_path, "http://127.0.0.1:9", DATABASE_URL=database)
    loaded = loaded_after(start, env=env, cwd=tmp_path)
    assert "bot.serve" in loaded
    assert not {name for name in loaded if name.split(".")[0] == "alembic"}
    assert not {name for name in loaded if ".migrations." in name}
    assert "sqlalchemy.ext.asyncio" not in loaded


def test_a_ptb_service_loads_no_library_it_never_uses() -> None:
    """Before the first getUpdates: no HTTP app (it loads in a thread once polling has
    begun), no httpx command-line client (click, rich, pygments), no Telegram Passport
    decryption (cryptography), no PostgreSQL dialect on SQLite."""
    loaded = loaded_after(
        "from bot.cli import main\n"
        "import bot.serve\n"
        "from bot.telegram.bindings.factory import make_bot_api\n"
        "make_bot_api('ptb', '1:x', 'http://127.0.0.1:9')"
    )
    assert "telegram" in loaded
    never = ("rich", "pygments", "click", "cryptography", "starlette", "bot.http.app")
    assert not {name for name in loaded if name in never or name.split(".")[0] in never}
    assert "sqlalchemy.dialects.postgresql" not in loaded


def test_the_http_app_loads_prometheus_client_with_the_first_scrape() -> None:
    loaded = loaded_after("import bot.http.serving")
    assert "prometheus_client" not in loaded
    # the web chat comes with its first request (bot.http.serving.LazyChat)
    assert not {name for name in loaded if name.startswith("bot.webchat.")} - {
        "bot.webchat.layer",
        "bot.webchat.limits",
    }
    assert "prometheus_client" in loaded_after(
        "from bot.http.metrics import MetricsSnapshot\n"
        "from bot.http.prometheus import render_text\n"
        "render_text(MetricsSnapshot())"
    )


def test_a_passport_free_ptb_still_lets_others_import_cryptography() -> None:
    loaded = loaded_after(
        "from bot.telegram.bindings.ptb_library import telegram\n"
        "import telegram._passport.credentials as passport\n"
        "assert not passport.CRYPTO_INSTALLED\n"
        "import cryptography.hazmat.backends"
    )
    assert "cryptography" in loaded


def test_pydantic_plugins_are_not_looked_up_unless_the_operator_asks(tmp_path: Path) -> None:
    probe = "import bot, os; print(os.environ['PYDANTIC_DISABLE_PLUGINS'])"
    run = [sys.executable, "-c", probe]
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}
    assert subprocess.run(run, capture_output=True, text=True, env=env).stdout.strip() == "__all__"
    mine = {**env, "PYDANTIC_DISABLE_PLUGINS": "logfire"}
    assert subprocess.run(run, capture_output=True, text=True, env=mine).stdout.strip() == "logfire"
