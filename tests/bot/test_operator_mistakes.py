"""An operator's mistakes as ``chathub`` commands meet them: one plain sentence naming what
is wrong (and a status other than 0), never a traceback or an exception's class. Each
case ended in a traceback until 2026-12-07 (found by review), where the doctor (or
``setup``) already said it plainly."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.bot.process import free_port, service_env

ROOT = Path(__file__).resolve().parents[2]
DEAD_MODEL = "http://127.0.0.1:9/v1"  # nothing listens: start-up never gets that far


def chathub(tmp_path: Path, *argv: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``chathub <argv>`` in ``tmp_path`` (no terminal), with the service environment."""
    return subprocess.run(
        [sys.executable, "-m", "bot.cli", *argv],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=service_env(tmp_path, DEAD_MODEL, HTTP_PORT=str(free_port()), **env),
        timeout=90,
    )


def assert_one_plain_sentence(result: subprocess.CompletedProcess[str], naming: str) -> None:
    out = result.stdout + result.stderr
    assert "Traceback" not in out, out[-2000:]
    assert not re.search(
        r"\b(ConfigError|ValueError|UnicodeDecodeError|OSError|"
        r"FileExistsError|ConnectionRefusedError)\b",
        out,
    ), out[-2000:]
    assert naming in out, out[-2000:]
    assert result.returncode != 0, out[-2000:]


# A Slack (or Matrix) configuration that ``Service.start`` refuses with a ConfigError
#    ends ``chathub serve`` with a traceback: bot/cli.py ``_serve`` does not catch it.
@pytest.mark.parametrize(
    ("env", "naming"),
    [
        ({"SLACK_BOT_TOKEN": "xoxb-1"}, "SLACK_SIGNING_SECRET"),
        ({"MATRIX_HOMESERVER": "http://127.0.0.1:9"}, "MATRIX_USER_ID"),
        (
            {"MATRIX_HOMESERVER": "http://127.0.0.1:9", "MATRIX_USER_ID": "@bot:example.org"},
            "MATRIX_ACCESS_TOKEN",
        ),
    ],
)
def test_serve_refuses_an_incomplete_slack_or_matrix_setup_in_one_sentence(
    tmp_path: Path, env: dict[str, str], naming: str
) -> None:
    result = chathub(tmp_path, "serve", **env)
    assert_one_plain_sentence(result, naming)
    assert "configuration error" in result.stderr


# TELEGRAM_WEBHOOK_URL without TELEGRAM_WEBHOOK_SECRET (.env.example: "secret is
#    required") is not checked by the settings; TelegramWebhook raises a bare ValueError
#    in Service.start and ``chathub serve`` ends with a traceback.
def test_serve_refuses_a_webhook_without_its_secret_in_one_sentence(tmp_path: Path) -> None:
    result = chathub(
        tmp_path,
        "serve",
        TELEGRAM_BOT_TOKEN="123456:TEST",
        TELEGRAM_API_URL="http://127.0.0.1:9",
        TELEGRAM_WEBHOOK_URL="https://bot.example.org/telegram/webhook",
        CHATHUB_API_TOKEN="a-long-enough-api-token-0123456789",
    )
    assert_one_plain_sentence(result, "TELEGRAM_WEBHOOK_SECRET")


# docs/configuration.md's TOML example, copied as it is, does not load: the two engine
#    limits it lists after [hub]'s keys are inside [hub] for TOML.
def test_the_documented_toml_example_loads(tmp_path: Path, monkeypatch) -> None:
    from bot.settings import load_config, load_settings

    text = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    block = re.search(r"```toml\n(.*?)```", text, re.S)
    assert block is not None
    path = tmp_path / "chathub.toml"
    path.write_text(block.group(1), encoding="utf-8")
    monkeypatch.chdir(tmp_path)  # no .env of anyone's
    settings = load_settings(
        llm_model="anthropic/claude-sonnet-4", chathub_config=path, chathub_timezone="UTC"
    )
    config = load_config(settings)  # ConfigError: [hub] has unknown keys [...]
    assert config.engine.max_agent_depth == 3
    assert config.engine.max_parallel_subagents == 4


# A .env that is not UTF-8 (a Latin-1 password, a file saved by an old editor) ends
#    serve, doctor and run with a UnicodeDecodeError traceback (setup alone says it in a
#    sentence): engine/config.py read_settings catches only ValidationError.
@pytest.mark.parametrize("argv", [("doctor", "--timeout", "1"), ("serve",), ("run",)])
def test_a_dotenv_that_is_not_utf8_is_one_sentence(tmp_path: Path, argv: tuple[str, ...]) -> None:
    (tmp_path / ".env").write_bytes(b"LLM_API_KEY=caf\xe9\n")
    result = chathub(tmp_path, *argv)
    assert_one_plain_sentence(result, ".env")


# A DATABASE_URL that cannot be opened (an unreachable PostgreSQL, an SQLite path
#    under a file) ends ``rules``/``providers``/``serve`` with a traceback:
#    bot/cli.py runs open_database with no handling of OSError/SQLAlchemy errors.
@pytest.mark.parametrize("argv", [("rules", "list"), ("providers", "list"), ("serve",)])
def test_an_unreachable_postgres_is_one_sentence(tmp_path: Path, argv: tuple[str, ...]) -> None:
    port = free_port()  # nothing listens there
    result = chathub(
        tmp_path, *argv, DATABASE_URL=f"postgresql+asyncpg://chathub@127.0.0.1:{port}/chathub"
    )
    assert_one_plain_sentence(result, "DATABASE_URL")


@pytest.mark.parametrize("argv", [("rules", "list"), ("serve",)])
def test_an_sqlite_path_under_a_file_is_one_sentence(tmp_path: Path, argv: tuple[str, ...]) -> None:
    (tmp_path / "data").write_text("not a directory")
    result = chathub(
        tmp_path, *argv, DATABASE_URL=f"sqlite+aiosqlite:///{tmp_path / 'data' / 'chathub.db'}"
    )
    assert_one_plain_sentence(result, "DATABASE_URL")


# CHATHUB_WORKSPACE naming a file: the doctor says "is not a directory — set
#    CHATHUB_WORKSPACE to a directory", but serve and chat end with a FileExistsError
#    traceback from engine/tools/workspace.py (root.mkdir) via Engine.open.
@pytest.mark.parametrize("argv", [("serve",), ("chat",)])
def test_a_workspace_that_is_a_file_is_one_sentence(tmp_path: Path, argv: tuple[str, ...]) -> None:
    (tmp_path / "ws").write_text("a file")
    result = chathub(
        tmp_path, *argv, CHATHUB_WORKSPACE=str(tmp_path / "ws"), XDG_STATE_HOME=str(tmp_path)
    )
    assert_one_plain_sentence(result, "CHATHUB_WORKSPACE")
