"""Discord's variables: ids checked at start, each mistake naming its variable."""

from __future__ import annotations

import pytest

from bot.settings import load_settings
from engine.config import ConfigError


def settings(**values: str):
    return load_settings(_env_file=None, **values)


def test_ids_are_read_as_canonical_snowflakes() -> None:
    loaded = settings(
        discord_owner_id=" 123 ",
        discord_allowed_user_ids="1, 2,,3",
        discord_guild_ids="44",
        discord_thread_channel_ids="55,66",
    )
    assert loaded.discord_owner_id == "123"
    assert loaded.discord_allowed_user_ids == ["1", "2", "3"]
    assert loaded.discord_guild_ids == ["44"]
    assert loaded.discord_thread_channel_ids == ["55", "66"]
    assert not loaded.discord_reads_content
    assert settings(discord_open_channel_ids="7").discord_reads_content


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("discord_owner_id", "alice"),
        ("discord_owner_id", "-5"),
        ("discord_allowed_user_ids", "1,two"),
        ("discord_guild_ids", "１２"),  # full-width digits
        ("discord_guild_ids", "0"),
        ("discord_open_channel_ids", str(2**64)),
        ("discord_api_url", "discord.com/api/v10"),
        ("discord_channel_burst", "0"),
        ("discord_global_per_second", "nan"),
    ],
)
def test_a_bad_value_stops_start_up_naming_its_variable(variable: str, value: str) -> None:
    with pytest.raises(ConfigError) as refused:
        settings(**{variable: value})
    assert variable.upper() in str(refused.value)


def test_an_empty_token_is_no_discord() -> None:
    assert settings(discord_bot_token="  ").discord_bot_token is None
