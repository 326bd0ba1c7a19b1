"""``bot/checks/slack.py`` against the fake Slack Web API over real HTTP on 127.0.0.1:
every answer Slack may give ``auth.test`` and ``apps.connections.open`` is one sentence
and a fix, and no Python exception's name ever reaches either."""

from __future__ import annotations

import re
import socket
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
from starlette.applications import Starlette
from starlette.responses import HTMLResponse, JSONResponse
from starlette.routing import Route

from bot.checks.result import Problem
from bot.checks.slack import (
    DEFAULT_API_URL,
    SlackIdentity,
    SlackProbe,
    app_token_problem,
    token_problem,
)
from bot.slack.settings import SlackSettings
from tests.bot.process import free_port
from tests.fakes.background import BackgroundServer
from tests.fakes.slack_server import (
    BOT_ID,
    BOT_USER_ID,
    SOCKET_MODE_DISABLED_ERROR,
    TEAM_ID,
    FakeSlackServer,
)

#: What a Python exception would leave in a sentence: its class name, a repr, the library.
PYTHON = re.compile(r"Error\b|Exception|Traceback|httpx|\w+\(\w*=|<\w")
REINSTALL = (
    "reinstall the app to the workspace (the app's Install App page) and copy its Bot User "
    "OAuth Token (xoxb-) into SLACK_BOT_TOKEN"
)
APP_TOKEN = (
    "create an app-level token with the connections:write scope (Basic Information → "
    "App-Level Tokens → Generate) and set SLACK_APP_TOKEN to it (xapp-)"
)
SOCKET_MODE_ON = (
    "turn on Socket Mode in the app settings (Socket Mode → Enable Socket Mode), or unset "
    "SLACK_APP_TOKEN and use the HTTP Events API with SLACK_SIGNING_SECRET"
)
API_URL = "set SLACK_API_URL to https://slack.com/api/ (or remove it)"


@pytest.fixture(scope="module")
def _slack() -> Iterator[FakeSlackServer]:
    with FakeSlackServer() as server:
        yield server


@pytest.fixture
def slack(_slack: FakeSlackServer) -> Iterator[FakeSlackServer]:
    _slack.clear_faults()
    _slack.socket_mode_enabled = True
    yield _slack
    _slack.clear_faults()
    _slack.socket_mode_enabled = True


@pytest.fixture(scope="module")
def not_slack() -> Iterator[str]:
    """A web server that answers every path with 200 and something other than Slack's
    JSON: a page, or JSON that is not an object."""

    async def answer(request) -> HTMLResponse | JSONResponse:
        if request.path_params["path"].startswith("list/"):
            return JSONResponse(["ok"])
        return HTMLResponse("<html><body><h1>Welcome to nginx!</h1></body></html>")

    app = Starlette(routes=[Route("/{path:path}", answer, methods=["POST"])])
    server = BackgroundServer(app, "not-slack")
    server.start()
    yield f"http://127.0.0.1:{server.port}/"
    server.stop()


@pytest.fixture
def silent() -> Iterator[str]:
    """A port that accepts connections (the kernel's backlog) and never answers."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/api/"


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient() as client:
        yield client


async def problem_of(call) -> Problem:
    with pytest.raises(Problem) as raised:
        await call
    problem = raised.value
    said = f"{problem} — {problem.fix}"
    assert not PYTHON.search(said), said
    # A traceback, were one ever printed, would show no httpx exception under it.
    assert problem.__cause__ is None
    assert problem.__context__ is None or problem.__suppress_context__
    return problem


# -- auth.test ---------------------------------------------------------------------------


async def test_auth_test_names_the_bot_and_sends_the_bot_token(
    http: httpx.AsyncClient, slack: FakeSlackServer
) -> None:
    before = len(slack.calls)
    probe = SlackProbe(http, slack.api_url, f" {slack.bot_token} ", timeout_s=2)
    assert await probe.auth_test() == SlackIdentity(
        user_id=BOT_USER_ID, user="chathub", team="Fake Team", team_id=TEAM_ID, bot_id=BOT_ID
    )
    (call,) = slack.calls[before:]
    assert (call.method, call.http_method, call.token) == ("auth.test", "POST", slack.bot_token)


async def test_an_api_url_without_its_slash_still_works(
    http: httpx.AsyncClient, slack: FakeSlackServer
) -> None:
    probe = SlackProbe(http, slack.api_url.rstrip("/"), slack.bot_token, timeout_s=2)
    assert (await probe.auth_test()).user == "chathub"


@pytest.mark.parametrize(
    "error", ["invalid_auth", "not_authed", "account_inactive", "token_revoked", "token_expired"]
)
async def test_a_dead_bot_token_says_reinstall(
    http: httpx.AsyncClient, slack: FakeSlackServer, error: str
) -> None:
    slack.fail_next("auth.test", error)
    probe = SlackProbe(http, slack.api_url, slack.bot_token, timeout_s=2)
    problem = await problem_of(probe.auth_test())
    assert str(problem) == f"Slack does not accept this bot token ({error})"
    assert (problem.kind, problem.fix) == ("auth", REINSTALL)


async def test_a_wrong_bot_token_is_refused_by_slack_itself(
    http: httpx.AsyncClient, slack: FakeSlackServer
) -> None:
    probe = SlackProbe(http, slack.api_url, "xoxb-not-this-one", timeout_s=2)
    problem = await problem_of(probe.auth_test())
    assert str(problem) == "Slack does not accept this bot token (invalid_auth)"


async def test_the_app_token_where_the_bot_token_belongs(
    http: httpx.AsyncClient, slack: FakeSlackServer
) -> None:
    probe = SlackProbe(http, slack.api_url, slack.app_token, timeout_s=2)
    problem = await problem_of(probe.auth_test())
    assert str(problem) == (
        "Slack does not take this token as a bot token (an app-level xapp- token where the "
        "xoxb- one belongs?)"
    )
    assert (problem.kind, problem.fix) == ("auth", REINSTALL)


async def test_another_refusal_names_slacks_error(
    http: httpx.AsyncClient, slack: FakeSlackServer
) -> None:
    slack.fail_next("auth.test", "team_access_not_granted")
    probe = SlackProbe(http, slack.api_url, slack.bot_token, timeout_s=2)
    problem = await problem_of(probe.auth_test())
    assert str(problem) == "Slack refused auth.test (team_access_not_granted)"
    assert (problem.kind, problem.fix) == ("refused", REINSTALL)


async def test_a_wrong_api_url_is_a_404(http: httpx.AsyncClient, slack: FakeSlackServer) -> None:
    url = slack.api_url + "v2/"
    probe = SlackProbe(http, url, slack.bot_token, timeout_s=2)
    problem = await problem_of(probe.auth_test())
    assert str(problem) == f"the Slack API answered 404 at {url}auth.test: SLACK_API_URL is wrong"
    assert (problem.kind, problem.fix) == ("protocol", API_URL)


@pytest.mark.parametrize("path", ["", "list/"])
async def test_something_that_is_not_slack_is_said_so(
    http: httpx.AsyncClient, not_slack: str, path: str
) -> None:
    probe = SlackProbe(http, not_slack + path, "xoxb-1", timeout_s=2)
    problem = await problem_of(probe.auth_test())
    assert str(problem) == (
        "the Slack API answered HTTP 200 with something that is not Slack's JSON "
        "(is SLACK_API_URL right?)"
    )
    assert (problem.kind, problem.fix) == ("protocol", API_URL)


async def test_a_rate_limit_says_when_to_try_again(
    http: httpx.AsyncClient, slack: FakeSlackServer
) -> None:
    slack.rate_limit_next("auth.test", retry_after=30)
    probe = SlackProbe(http, slack.api_url, slack.bot_token, timeout_s=2)
    problem = await problem_of(probe.auth_test())
    assert str(problem) == "Slack asks to slow down (HTTP 429)"
    assert (problem.kind, problem.fix) == ("rate_limited", "try again in 30 s")


@pytest.mark.parametrize(("status", "error"), [(500, "internal_error"), (503, "fatal_error")])
async def test_slack_down_is_a_5xx(
    http: httpx.AsyncClient, slack: FakeSlackServer, status: int, error: str
) -> None:
    slack.fail_next("auth.test", error, status=status)
    probe = SlackProbe(http, slack.api_url, slack.bot_token, timeout_s=2)
    problem = await problem_of(probe.auth_test())
    assert str(problem) == f"Slack cannot be reached from here (HTTP {status})"
    assert problem.kind == "unreachable"
    assert problem.fix == (
        "try again in a minute; https://slack-status.com says whether Slack is down"
    )


async def test_nothing_listening_is_unreachable(http: httpx.AsyncClient) -> None:
    probe = SlackProbe(http, f"http://127.0.0.1:{free_port()}/api/", "xoxb-1", timeout_s=2)
    problem = await problem_of(probe.auth_test())
    assert str(problem) == "Slack cannot be reached from here"
    assert (problem.kind, problem.fix) == ("unreachable", "check the network and SLACK_API_URL")


async def test_a_silent_server_times_out(http: httpx.AsyncClient, silent: str) -> None:
    probe = SlackProbe(http, silent, "xoxb-1", timeout_s=0.5)
    problem = await problem_of(probe.auth_test())
    assert str(problem) == "Slack did not answer within 0.5 s"
    assert (problem.kind, problem.fix) == ("timeout", "check the network and SLACK_API_URL")


async def test_an_answer_without_a_bot_is_said_so(http: httpx.AsyncClient) -> None:
    async def answer(_request) -> JSONResponse:
        return JSONResponse({"ok": True, "team": "Somewhere"})

    app = Starlette(routes=[Route("/api/auth.test", answer, methods=["POST"])])
    server = BackgroundServer(app, "no-bot")
    server.start()
    try:
        probe = SlackProbe(http, f"http://127.0.0.1:{server.port}/api/", "xoxb-1", timeout_s=2)
        problem = await problem_of(probe.auth_test())
    finally:
        server.stop()
    assert str(problem) == "Slack's auth.test answer names no bot (is SLACK_API_URL right?)"
    assert problem.kind == "protocol"


# -- apps.connections.open (Socket Mode) -------------------------------------------------


async def test_socket_mode_answers_for_the_app_token_and_is_not_connected(
    http: httpx.AsyncClient, slack: FakeSlackServer
) -> None:
    before = len(slack.calls)
    probe = SlackProbe(http, slack.api_url, slack.bot_token, timeout_s=2)
    assert await probe.apps_connections_open(f"{slack.app_token}\n") is None
    (call,) = slack.calls[before:]
    assert (call.method, call.http_method, call.token) == (
        "apps.connections.open",
        "POST",
        slack.app_token,
    )
    assert slack.connections == []


async def test_a_wrong_app_token_is_refused(
    http: httpx.AsyncClient, slack: FakeSlackServer
) -> None:
    probe = SlackProbe(http, slack.api_url, slack.bot_token, timeout_s=2)
    problem = await problem_of(probe.apps_connections_open("xapp-1-not-the-apps"))
    assert str(problem) == "Slack does not accept this app-level token (invalid_auth)"
    assert (problem.kind, problem.fix) == ("auth", APP_TOKEN)


async def test_the_bot_token_where_the_app_token_belongs(
    http: httpx.AsyncClient, slack: FakeSlackServer
) -> None:
    probe = SlackProbe(http, slack.api_url, slack.bot_token, timeout_s=2)
    problem = await problem_of(probe.apps_connections_open(slack.bot_token))
    assert str(problem) == (
        "Slack does not take this token for Socket Mode (the bot's xoxb- token where the "
        "app-level xapp- one belongs?)"
    )
    assert (problem.kind, problem.fix) == ("auth", APP_TOKEN)


async def test_an_app_token_without_connections_write(
    http: httpx.AsyncClient, slack: FakeSlackServer
) -> None:
    slack.fail_next("apps.connections.open", "missing_scope")
    probe = SlackProbe(http, slack.api_url, slack.bot_token, timeout_s=2)
    problem = await problem_of(probe.apps_connections_open(slack.app_token))
    assert str(problem) == (
        "the app-level token lacks the connections:write scope Socket Mode needs"
    )
    assert (problem.kind, problem.fix) == ("auth", APP_TOKEN)


async def test_socket_mode_off_says_turn_it_on(
    http: httpx.AsyncClient, slack: FakeSlackServer
) -> None:
    slack.socket_mode_enabled = False
    probe = SlackProbe(http, slack.api_url, slack.bot_token, timeout_s=2)
    problem = await problem_of(probe.apps_connections_open(slack.app_token))
    assert str(problem) == (
        f"Slack refused Socket Mode ({SOCKET_MODE_DISABLED_ERROR}): is it turned on for this app?"
    )
    assert (problem.kind, problem.fix) == ("refused", SOCKET_MODE_ON)


async def test_socket_mode_rate_limited_and_down(
    http: httpx.AsyncClient, slack: FakeSlackServer
) -> None:
    probe = SlackProbe(http, slack.api_url, slack.bot_token, timeout_s=2)
    slack.rate_limit_next("apps.connections.open", retry_after=3)
    limited = await problem_of(probe.apps_connections_open(slack.app_token))
    assert (str(limited), limited.fix) == ("Slack asks to slow down (HTTP 429)", "try again in 3 s")
    slack.fail_next("apps.connections.open", "internal_error", status=500)
    down = await problem_of(probe.apps_connections_open(slack.app_token))
    assert str(down) == "Slack cannot be reached from here (HTTP 500)"


# -- the tokens' shapes ------------------------------------------------------------------


def test_a_bot_token_starts_with_xoxb() -> None:
    assert token_problem("xoxb-1-2-abc") is None
    assert token_problem("  xoxb-1-2-abc\n") is None
    assert token_problem("xapp-1-A1-2-abc") == (
        "that is the app-level token (xapp-): the bot token starts with xoxb-"
    )
    for wrong in ("", "xoxp-1-2-abc", "Bearer xoxb-1", "xoxb-1 2", "xoxb-1-“quoted”"):
        assert token_problem(wrong) == (
            "that is not a Slack bot token: it starts with xoxb- (the app's Install App page "
            "→ Bot User OAuth Token)"
        ), wrong


def test_an_app_token_starts_with_xapp() -> None:
    assert app_token_problem("xapp-1-A1-2-abc") is None
    assert app_token_problem("xoxb-1-2-abc") == (
        "that is the bot token (xoxb-): the app-level token starts with xapp-"
    )
    for wrong in ("", "xoxa-1", "xapp-1 2"):
        assert app_token_problem(wrong) == (
            "that is not a Slack app-level token: it starts with xapp- (Basic Information → "
            "App-Level Tokens)"
        ), wrong


def test_the_probes_default_is_the_settings_default() -> None:
    assert SlackSettings.model_fields["slack_api_url"].default == DEFAULT_API_URL


# -- .env.example ------------------------------------------------------------------------


def test_env_example_describes_every_slack_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each of Slack's variables in .env.example, after Discord's, under a comment line;
    copied as it is, it reads and switches nothing on."""
    example = Path(__file__).parents[2] / ".env.example"
    lines = example.read_text().splitlines()
    names = [name.upper() for name in SlackSettings.model_fields]
    at = {line.split("=", 1)[0]: number for number, line in enumerate(lines) if "=" in line}
    for name in names:
        assert name in at, f"{name} is not in .env.example"
        assert lines[at[name] - 1].startswith("# "), f"{name} has no comment above it"
    assert max(at[n] for n in at if n.startswith("DISCORD_")) < min(at[n] for n in names)
    for name in names:
        monkeypatch.delenv(name, raising=False)
    copied = tmp_path / ".env"
    copied.write_text("\n".join(lines[at[n]] for n in names) + "\n")
    settings = SlackSettings(_env_file=copied)  # type: ignore[call-arg]
    assert settings.slack_bot_token is None
    assert settings.slack_api_url == DEFAULT_API_URL
