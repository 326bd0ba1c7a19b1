"""``chathub setup``'s Matrix step against the real Synapse: every answer checked."""

from __future__ import annotations

import uuid
from pathlib import Path

from tests.bot.matrix.homeserver import Homeserver
from tests.bot.process import free_port
from tests.bot.test_setup import (
    KEEP_MODEL,
    NO_DISCORD,
    NO_MATRIX,
    NO_SLACK,
    NO_TELEGRAM,
    Scripted,
    dotenv,
    run_wizard,
)


def test_the_homeserver_the_account_and_its_token_are_checked(
    tmp_path: Path, homeserver: Homeserver
) -> None:
    tag = uuid.uuid4().hex[:8]
    bot, other = homeserver.register(f"setupbot{tag}"), homeserver.register(f"other{tag}")
    (tmp_path / ".env").write_text("LLM_MODEL=qwen3\n")
    script = Scripted(
        KEEP_MODEL,
        NO_TELEGRAM,
        NO_DISCORD,
        NO_SLACK,
        (r"Matrix homeserver URL", "matrix.example.org"),
        (r"Matrix homeserver URL", homeserver.url + "/"),
        (r"The bot's user id", "chathub"),
        (r"The bot's user id", bot.user_id),
        (r"access token", "syt_revoked"),
        (r"access token", other.token),
        (r"access token", bot.token),
        (r"Your own Matrix user id", "@owner:localhost"),
    )
    out = run_wizard(tmp_path, script)
    assert "✗ The homeserver's URL starts with https://" in out
    assert "✓ The homeserver answers." in out
    assert "✗ A Matrix user id looks like @chathub:example.org." in out
    assert "✗ the homeserver does not accept MATRIX_ACCESS_TOKEN (M_UNKNOWN_TOKEN) — make a" in out
    assert f"✗ That token is {other.user_id}'s, not {bot.user_id}'s." in out
    assert f"✓ This is {bot.user_id}." in out
    assert dotenv(tmp_path) == {
        "LLM_MODEL": "qwen3",
        "MATRIX_HOMESERVER": homeserver.url,
        "MATRIX_USER_ID": bot.user_id,
        "MATRIX_ACCESS_TOKEN": bot.token,
        "MATRIX_OWNER_ID": "@owner:localhost",
    }


def test_an_unreachable_homeserver_may_be_skipped(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text("LLM_MODEL=qwen3\n")
    down = f"http://127.0.0.1:{free_port()}"
    script = Scripted(
        KEEP_MODEL,
        NO_TELEGRAM,
        NO_DISCORD,
        NO_SLACK,
        (r"Matrix homeserver URL", down),
        (r"could not check the homeserver\. Keep it unchecked .*\[y/N\]", ""),
        NO_MATRIX,
    )
    out = run_wizard(tmp_path, script)
    assert f"✗ {down} cannot be reached — check MATRIX_HOMESERVER and the network" in out
    assert "Nothing changed; " in out


def test_a_second_run_keeps_matrix(tmp_path: Path) -> None:
    old = "LLM_MODEL=qwen3\nMATRIX_HOMESERVER=https://m.example.org\n"
    (tmp_path / ".env").write_text(old)
    script = Scripted(
        KEEP_MODEL,
        NO_TELEGRAM,
        NO_DISCORD,
        NO_SLACK,
        (r"has a Matrix account\. Keep it\? \[Y/n\]", ""),
    )
    out = run_wizard(tmp_path, script)
    assert "Nothing changed; " in out
    assert (tmp_path / ".env").read_text() == old
