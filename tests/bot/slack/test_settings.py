"""Slack's variables: tokens and member ids checked at start, each mistake naming its
variable; HTTP mode refused without its signing secret."""

from __future__ import annotations

import pytest

from bot.settings import load_settings
from engine.config import ConfigError


def settings(**values: str):
    return load_settings(_env_file=None, **values)


def test_the_defaults_and_a_well_formed_set() -> None:
    loaded = settings(
        slack_bot_token=" xoxb-1-2 ",
        slack_app_token="xapp-1-A-3",
        slack_owner_id=" U0123ABCD ",
        slack_api_url="http://127.0.0.1:9/api",
    )
    assert loaded.slack_bot_token == "xoxb-1-2" and loaded.slack_socket_mode
    assert loaded.slack_owner_id == "U0123ABCD"
    assert loaded.slack_api_url == "http://127.0.0.1:9/api/"  # slack-sdk joins methods to it
    assert settings().slack_api_url == "https://slack.com/api/"
    assert settings().slack_bot_token is None


def test_allowed_users_are_a_comma_separated_list(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLACK_ALLOWED_USER_IDS", "U0AAAA1, W0BBBB2,,")
    assert settings().slack_allowed_user_ids == ["U0AAAA1", "W0BBBB2"]


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("slack_bot_token", "xapp-1-the-app-token"),
        ("slack_bot_token", "not-a-token"),
        ("slack_app_token", "xoxb-the-bot-token"),
        ("slack_owner_id", "alice"),
        ("slack_owner_id", "C0CHANNEL1"),
        ("slack_owner_id", "u0lower"),
        ("slack_api_url", "slack.com/api/"),
        ("slack_channel_burst", "0"),
        ("slack_channel_per_second", "nan"),
        ("slack_global_per_second", "-1"),
    ],
)
def test_a_wrong_value_names_its_variable(variable: str, value: str) -> None:
    with pytest.raises(ConfigError) as caught:
        settings(**{variable: value})
    assert variable.upper() in str(caught.value)
    assert "Traceback" not in str(caught.value)


def test_a_wrong_member_id_in_the_list_names_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SLACK_ALLOWED_USER_IDS", "U0AAAA1,alice")
    with pytest.raises(ConfigError, match="SLACK_ALLOWED_USER_IDS"):
        settings()


def test_http_mode_needs_the_signing_secret() -> None:
    with pytest.raises(ConfigError, match="SLACK_SIGNING_SECRET"):
        settings(slack_bot_token="xoxb-1").check_slack_events()
    settings(slack_bot_token="xoxb-1", slack_signing_secret="s").check_slack_events()
    settings(slack_bot_token="xoxb-1", slack_app_token="xapp-1").check_slack_events()
    settings().check_slack_events()  # no Slack: nothing to check


def test_the_discord_and_slack_validators_do_not_shadow_each_other(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SLACK_ALLOWED_USER_IDS", "U0AAAA1")
    monkeypatch.setenv("DISCORD_ALLOWED_USER_IDS", "123")
    loaded = settings(slack_owner_id="U0OWNER1", discord_owner_id="456")
    assert loaded.slack_allowed_user_ids == ["U0AAAA1"]
    assert loaded.discord_allowed_user_ids == ["123"]
    assert (loaded.slack_owner_id, loaded.discord_owner_id) == ("U0OWNER1", "456")
