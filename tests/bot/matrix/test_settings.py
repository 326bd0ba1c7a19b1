"""Matrix's variables: a wrong one stops start-up naming it."""

from __future__ import annotations

import pytest

from bot.settings import load_settings
from engine.config import ConfigError


def settings(**values):
    return load_settings(_env_file=None, **values)


def test_a_full_account_reads():
    s = settings(
        matrix_homeserver="https://matrix.example.org/",
        matrix_user_id=" @bot:example.org ",
        matrix_access_token="syt_x",
        matrix_allowed_user_ids="@a:example.org, @b:example.org:8448",
    )
    s.check_matrix_account()
    assert s.matrix_homeserver == "https://matrix.example.org"
    assert s.matrix_user_id == "@bot:example.org"
    assert s.matrix_allowed_user_ids == ["@a:example.org", "@b:example.org:8448"]


@pytest.mark.parametrize(
    ("values", "named"),
    [
        ({"matrix_homeserver": "matrix.example.org"}, "matrix_homeserver"),
        ({"matrix_user_id": "bot:example.org"}, "matrix_user_id"),
        ({"matrix_owner_id": "@owner"}, "matrix_owner_id"),
        ({"matrix_allowed_user_ids": "@a:b, alice"}, "matrix_allowed_user_ids"),
        ({"matrix_room_per_second": 0}, "matrix_room_per_second"),
    ],
)
def test_a_wrong_value_is_named(values, named):
    with pytest.raises(ConfigError) as refused:
        settings(**values)
    assert named.upper() in str(refused.value)


def test_a_homeserver_needs_an_account_and_a_secret():
    with pytest.raises(ConfigError, match="MATRIX_USER_ID"):
        settings(matrix_homeserver="https://m.example.org").check_matrix_account()
    lonely = settings(matrix_homeserver="https://m.example.org", matrix_user_id="@b:m.example.org")
    with pytest.raises(ConfigError, match="MATRIX_ACCESS_TOKEN"):
        lonely.check_matrix_account()
    with_password = settings(
        matrix_homeserver="https://m.example.org",
        matrix_user_id="@b:m.example.org",
        matrix_password="pw",
    )
    with_password.check_matrix_account()
