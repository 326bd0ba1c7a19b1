"""The one bearer-token check of every HTTP surface: what passes, and every way a header
can fail to."""

from __future__ import annotations

import pytest

from bot.checks.exposure import ApiExposureError, check_api_exposure
from bot.http.credentials import bearer_token, has_token
from bot.settings import load_settings

TOKEN = b"s3cret-token"
HERE = "127.0.0.1"


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
    assert not has_token(headers, TOKEN, peer=HERE)


def test_the_right_token_passes_and_without_a_configured_token_this_machine_does() -> None:
    assert has_token({"authorization": "Bearer s3cret-token"}, TOKEN, peer="203.0.113.7")
    assert has_token({"host": "127.0.0.1:8080"}, None, peer=HERE)
    assert has_token({"host": "localhost", "authorization": "Bearer anything"}, None, peer=HERE)
    assert has_token({"host": "[::1]:8080", "origin": "http://localhost:8080"}, None, peer="::1")
    assert has_token({"host": "localhost"}, None, peer="::ffff:127.0.0.1")
    assert has_token({"host": "localhost"}, None, peer="127.0.0.2")


@pytest.mark.parametrize(
    ("peer", "headers"),
    [
        ("203.0.113.7", {}),  # another machine naming this one's Host
        ("10.0.0.5", {}),
        (None, {}),  # the server does not say who it is
        ("testclient", {}),
        ("", {}),
        # A proxy on this machine passing another client's request on (with its Host):
        (HERE, {"x-forwarded-for": "203.0.113.7"}),
        (HERE, {"x-real-ip": "203.0.113.7"}),
        (HERE, {"forwarded": "for=203.0.113.7;proto=https"}),
        (HERE, {"x-forwarded-for": "127.0.0.1"}),  # what a proxy says is not looked into
    ],
)
def test_without_a_configured_token_only_this_machine_itself_passes(
    peer: str | None, headers: dict[str, str]
) -> None:
    """Until 2026-12-07 a loopback Host was enough: behind a TLS proxy that passes the
    client's Host on, anyone sending ``Host: localhost`` was the operator."""
    assert not has_token({"host": "localhost:8080", **headers}, None, peer=peer)


@pytest.mark.parametrize(
    "headers",
    [
        {},  # no Host at all
        {"host": "evil.example:8080"},  # a DNS rebinding: the page's own host name
        {"host": "127.0.0.1.evil.example"},
        {"host": "127.0.0.1:8080", "origin": "https://evil.example"},  # any web page
        {"host": "127.0.0.1:8080", "origin": "null"},  # a sandboxed frame, a file
        {"host": "127.0.0.1:8080", "origin": "ftp://127.0.0.1"},
        {"host": "127.0.0.1:notaport"},
        {"host": "[::1"},
    ],
)
def test_without_a_configured_token_a_browser_page_of_another_site_does_not_pass(
    headers: dict[str, str],
) -> None:
    """The owner's browser may visit any site, and any site can send a request to
    127.0.0.1: a text/plain POST approved a command with a bypass for everything."""
    assert not has_token(headers, None, peer=HERE)


@pytest.mark.parametrize(
    ("settings", "public"),
    [
        ({}, None),
        ({"telegram_webhook_url": "https://bot.example/hook"}, "TELEGRAM_WEBHOOK_URL"),
        (
            {"slack_bot_token": "xoxb-1", "slack_signing_secret": "s3cret"},
            "SLACK_SIGNING_SECRET (Slack's Events API over HTTP)",
        ),
        ({"slack_bot_token": "xoxb-1", "slack_app_token": "xapp-1"}, None),  # Socket Mode
    ],
)
def test_a_service_the_world_reaches_needs_a_token(settings: dict, public: str | None) -> None:
    """Reached through a proxy on this machine, every request comes from loopback: without
    a token each was the operator (until 2026-12-07; found by review)."""
    loaded = load_settings(_env_file=None, **settings)
    assert loaded.reached_from_outside() == public
    check_api_exposure("127.0.0.1", "t0ken", public=public)
    if public is None:
        check_api_exposure("127.0.0.1", None, public=public)
    else:
        with pytest.raises(
            ApiExposureError, match=f"CHATHUB_API_TOKEN: required with {public.split()[0]}"
        ):
            check_api_exposure("127.0.0.1", None, public=public)
