"""The one bearer-token check of every HTTP surface: what passes, and every way a header
can fail to."""

from __future__ import annotations

import pytest

from bot.http.credentials import bearer_token, has_token

TOKEN = b"s3cret-token"


@pytest.mark.parametrize(
    ("header", "token"),
    [
        ("Bearer s3cret-token", "s3cret-token"),
        ("bearer s3cret-token", "s3cret-token"),  # the scheme's case does not matter
        ("Bearer  s3cret-token ", "s3cret-token"),  # nor spaces around the token
        ("Bearer ", ""),
        ("Basic czNjcmV0", None),
        ("s3cret-token", None),  # no scheme
        ("", None),
    ],
)
def test_the_token_of_an_authorization_header(header: str, token: str | None) -> None:
    assert bearer_token({"authorization": header}) == token


def test_without_a_header_there_is_no_token() -> None:
    assert bearer_token({}) is None


@pytest.mark.parametrize(
    "header",
    [
        None,
        "",
        "Bearer",
        "Bearer ",
        "Bearer wrong",
        "Bearer s3cret-token-and-more",
        "Bearer s3cret",
        "Basic s3cret-token",
        "Bearer s3crét-token",  # not ASCII: compared as bytes, never an error
        "Bearer s3cret-token\x00",
    ],
)
def test_a_missing_or_wrong_token_does_not_pass(header: str | None) -> None:
    headers = {} if header is None else {"authorization": header}
    assert not has_token(headers, TOKEN)


def test_the_right_token_passes_and_without_a_configured_token_everyone_does() -> None:
    assert has_token({"authorization": "Bearer s3cret-token"}, TOKEN)
    assert has_token({}, None)
    assert has_token({"authorization": "Bearer anything"}, None)
