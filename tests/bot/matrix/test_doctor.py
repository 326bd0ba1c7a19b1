"""``chathub doctor`` with Matrix: the homeserver, the bot's token and the owner, checked
against the real Synapse."""

from __future__ import annotations

import uuid

import pytest

from tests.bot.matrix.homeserver import Homeserver
from tests.bot.process import free_port
from tests.bot.test_doctor import Setup, _telegram, healthy  # noqa: F401 (fixtures)


@pytest.fixture
def with_matrix(healthy: Setup, homeserver: Homeserver) -> Setup:  # noqa: F811
    bot = homeserver.register(f"doctorbot{uuid.uuid4().hex[:8]}")
    healthy.env.update(
        MATRIX_HOMESERVER=homeserver.url,
        MATRIX_USER_ID=bot.user_id,
        MATRIX_ACCESS_TOKEN=bot.token,
        MATRIX_OWNER_ID="@owner:localhost",
    )
    return healthy


def test_a_healthy_matrix_setup_passes(with_matrix: Setup, capsys, homeserver) -> None:
    status, lines = with_matrix.doctor(capsys)
    assert status == 0, "\n".join(lines)
    user = with_matrix.env["MATRIX_USER_ID"]
    assert f"✓ Matrix bot {user} signs in" in lines, "\n".join(lines)
    assert any(line.startswith(f"✓ {homeserver.url} answers (Matrix v1.") for line in lines)
    assert "✓ Matrix owner @owner:localhost" in lines


def test_a_revoked_token_is_one_line_with_its_fix(with_matrix: Setup, capsys) -> None:
    with_matrix.env["MATRIX_ACCESS_TOKEN"] = "syt_not_a_token"
    status, lines = with_matrix.doctor(capsys)
    assert status == 1
    line = next(line for line in lines if "MATRIX_ACCESS_TOKEN" in line)
    assert line.startswith("✗ the homeserver does not accept MATRIX_ACCESS_TOKEN (M_UNKNOWN_TOKEN)")
    assert "Access Token" in line


def test_another_accounts_token_is_named(with_matrix: Setup, capsys) -> None:
    with_matrix.env["MATRIX_USER_ID"] = "@someone:localhost"
    status, lines = with_matrix.doctor(capsys)
    assert status == 1
    assert any("is @doctorbot" in line and "not MATRIX_USER_ID @someone" in line for line in lines)


def test_a_homeserver_that_does_not_answer(with_matrix: Setup, capsys) -> None:
    with_matrix.env["MATRIX_HOMESERVER"] = f"http://127.0.0.1:{free_port()}"
    status, lines = with_matrix.doctor(capsys)
    assert status == 1
    line = next(line for line in lines if "cannot be reached" in line)
    assert "check MATRIX_HOMESERVER" in line and "Error" not in line
