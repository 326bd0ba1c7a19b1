"""``chathub doctor`` against a healthy setup (exit 0), then each part broken in turn.

The doctor runs in-process (``bot.cli.main``) in a temporary directory holding the
``.env``; the test's own environment is cleared of every chathub variable.
"""

from __future__ import annotations

import asyncio
import re
import socket
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

from bot.checks.database import check_database
from bot.checks.discord import DiscordProbe
from bot.checks.model import Endpoint, list_models
from bot.checks.result import Check, Problem
from bot.cli import main
from bot.http.health_details import PATH, HealthDetails, bearer, service_checks
from bot.schema import LAYERS
from bot.settings import Settings, load_config
from engine.approval.rules import RuleStore
from engine.store.db import open_database
from tests.bot.process import free_port, wait_for
from tests.fakes.background import BackgroundServer
from tests.fakes.discord_server import FakeDiscordServer
from tests.fakes.dripping_server import dripping_server
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.slack_server import SOCKET_MODE_DISABLED_ERROR, FakeSlackServer
from tests.fakes.telegram_server import FakeTelegramServer, Webhook
from tests.pg import fresh_postgres_database, requires_postgres

TOKEN = "123456789:AAHk3mQx9vT2Lw8ZpR5nY7cB4dF6gJ0sE1u"
TOOL_CALL = ("call_1", "get_time", '{"timezone": "UTC"}')
DISCORD_TOKEN = "MTEwMDAwMDAwMDAwMDAwMDAwMQ.GxYz12.discord-doctor-test-token"


@pytest.fixture(scope="module")
def _telegram() -> Iterator[FakeTelegramServer]:
    with FakeTelegramServer() as server:
        yield server


@dataclass
class Setup:
    home: Path
    model: FakeOpenAIServer
    telegram: FakeTelegramServer
    env: dict[str, str] = field(default_factory=dict)
    toml: str = ""
    cleanups: list[Callable[[], None]] = field(default_factory=list)
    _slack: FakeSlackServer | None = None

    @property
    def slack(self) -> FakeSlackServer:
        assert self._slack is not None, "the test needs the with_slack fixture"
        return self._slack

    def write(self) -> None:
        if self.toml:
            (self.home / "chathub.toml").write_text(self.toml)
            self.env["CHATHUB_CONFIG"] = str(self.home / "chathub.toml")
        lines = [f"{k}={v}" for k, v in self.env.items()]
        (self.home / ".env").write_text("\n".join(lines) + "\n")

    def doctor(
        self, capsys: pytest.CaptureFixture[str], timeout_s: float = 2
    ) -> tuple[int, list[str]]:
        self.write()
        capsys.readouterr()
        with pytest.raises(SystemExit) as done:
            main(["doctor", "--timeout", str(timeout_s)])
        out = capsys.readouterr().out
        return int(done.value.code or 0), out.splitlines()


@pytest.fixture
def healthy(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    fake_openai: FakeOpenAIServer,
    _telegram: FakeTelegramServer,
) -> Iterator[Setup]:
    for name in Settings.model_fields:
        monkeypatch.delenv(name.upper(), raising=False)
    monkeypatch.chdir(tmp_path)
    _telegram.reset()
    fake_openai.models = ["qwen3:14b", "llama3.1:8b"]
    fake_openai.reply_tool_calls(TOOL_CALL)
    database = f"sqlite+aiosqlite:///{tmp_path / 'chathub.db'}"
    asyncio.run(_migrated(database))
    (tmp_path / "workspace").mkdir()
    setup = Setup(
        tmp_path,
        fake_openai,
        _telegram,
        {
            "LLM_BASE_URL": fake_openai.base_url,
            "LLM_MODEL": "qwen3:14b",
            "TELEGRAM_BOT_TOKEN": TOKEN,
            "TELEGRAM_API_URL": _telegram.base_url,
            "TELEGRAM_OWNER_ID": "42",
            "DATABASE_URL": database,
            "CHATHUB_WORKSPACE": str(tmp_path / "workspace"),
            "CHATHUB_TIMEZONE": "UTC",
            "HTTP_PORT": str(free_port()),
        },
    )
    yield setup
    for cleanup in setup.cleanups:
        cleanup()


async def _migrated(url: str) -> None:
    db = await open_database(url, LAYERS)
    await db.close()


def test_a_healthy_setup_passes(healthy: Setup, capsys: pytest.CaptureFixture[str]) -> None:
    status, lines = healthy.doctor(capsys)
    assert status == 0, "\n".join(lines)
    assert lines[0] == "✓ configuration parses"
    assert any(line.startswith("✓ database ") and "schema current" in line for line in lines)
    assert f"✓ model endpoint {healthy.model.base_url} lists 2 models" in lines
    assert "✓ model qwen3:14b exists" in lines
    assert "✓ qwen3:14b calls tools" in lines
    assert "✓ Telegram bot @chathub_test_bot answers" in lines
    assert "✓ long polling; no webhook is set" in lines
    assert "✓ owner id 42" in lines
    assert "✓ secrets/ is out of the agent's reach" in lines
    assert "✓ the shell asks before it runs a command" in lines
    assert any(line.startswith("✓ workspace ") for line in lines)
    assert any(line.startswith("✓ HTTP port ") and "is free" in line for line in lines)
    assert lines[-1].startswith("All ") and lines[-1].endswith(" checks passed.")
    assert all(line.startswith("✓") for line in lines[:-1])


def _no_db_yet(s: Setup) -> None:
    s.env["DATABASE_URL"] = f"sqlite+aiosqlite:///{s.home / 'new' / 'c.db'}"


def test_a_fresh_setup_without_database_or_telegram_passes(
    healthy: Setup, capsys: pytest.CaptureFixture[str]
) -> None:
    _no_db_yet(healthy)
    for name in ("TELEGRAM_BOT_TOKEN", "TELEGRAM_OWNER_ID"):
        del healthy.env[name]
    status, lines = healthy.doctor(capsys)
    assert status == 0, "\n".join(lines)
    assert any("will be created at the first start" in line for line in lines)
    assert "✓ Telegram is not configured (the terminal chat and the web inbox only)" in lines
    assert not (healthy.home / "new").exists()  # the doctor creates nothing


def _occupy(s: Setup) -> None:
    """Another web server on the port: it answers, but not as chathub."""
    page = JSONResponse({"status": "up"})
    server = BackgroundServer(Starlette(routes=[Route("/healthz", lambda _r: page)]), "other")
    server.start()
    s.env["HTTP_PORT"] = str(server.port)
    s.cleanups.append(server.stop)


def _schema(version: int) -> Callable[[Setup], None]:
    def breaks(s: Setup) -> None:
        import sqlite3

        path = s.home / "old.db"
        with sqlite3.connect(path) as conn:
            conn.execute("CREATE TABLE schema_version (version INTEGER PRIMARY KEY, name TEXT)")
            conn.execute("INSERT INTO schema_version VALUES (?, 'x')", (version,))
        s.env["DATABASE_URL"] = f"sqlite+aiosqlite:///{path}"

    return breaks


def _set(**values: str) -> Callable[[Setup], None]:
    def breaks(s: Setup) -> None:
        s.env.update(values)

    return breaks


def _toml(text: str) -> Callable[[Setup], None]:
    def breaks(s: Setup) -> None:
        s.toml = text

    return breaks


def _unset(name: str) -> Callable[[Setup], None]:
    def breaks(s: Setup) -> None:
        del s.env[name]

    return breaks


def _wrong_key(s: Setup) -> None:
    s.model.api_key = "sk-right"
    s.env["LLM_API_KEY"] = "sk-wrong"


def _no_tools(s: Setup) -> None:
    s.model.reset()
    s.model.models = ["qwen3:14b"]
    s.model.reply_text("It is noon.")


def _fallback_without_tools(s: Setup) -> None:
    s.model.reset()
    s.model.models = ["qwen3:14b", "llama3.1:8b"]
    s.model.reply_tool_calls(TOOL_CALL, model="qwen3:14b")
    s.model.reply_text("It is noon.", model="llama3.1:8b")
    s.env["LLM_FALLBACK_MODELS"] = "llama3.1:8b"


def _revoked(s: Setup) -> None:
    s.telegram.fail_next("getMe", status=401, description="Unauthorized")


def _webhook_while_polling(s: Setup) -> None:
    s.telegram.webhook = Webhook(url="https://old.example.org/hook")


def _webhook_elsewhere(s: Setup) -> None:
    s.env["TELEGRAM_WEBHOOK_URL"] = "https://bot.example.org/telegram"
    s.env["TELEGRAM_WEBHOOK_SECRET"] = "s3cret"
    s.env["CHATHUB_API_TOKEN"] = "webhook-mode-token"


def _workspace_is_a_file(s: Setup) -> None:
    (s.home / "ws-file").write_text("")
    s.env["CHATHUB_WORKSPACE"] = str(s.home / "ws-file")


def _secrets_link(s: Setup) -> None:
    (s.home / "workspace" / "notes").mkdir()
    (s.home / "workspace" / "secrets").symlink_to(s.home / "workspace" / "notes")


def _shell_allowed(s: Setup, **scope: str) -> None:
    async def add() -> None:
        db = await open_database(s.env["DATABASE_URL"], LAYERS)
        try:
            store = RuleStore(db)
            await store.seed_defaults()
            await store.add_rule("execute_cmd", "allow", priority=10, note="trust me", **scope)
        finally:
            await db.close()

    asyncio.run(add())


def _shell_allowed_in_one_chat(s: Setup) -> None:
    """The usual way to trust one's own chat: it passed as "asks" until 2026-12-06, only a
    call of no chat and no agent was looked at (found by review)."""
    _shell_allowed(s, source="telegram:42")


def _shell_allowed_for_one_agent(s: Setup) -> None:
    _shell_allowed(s, agent_id="main")


def _mcp_broken(s: Setup) -> None:
    s.toml = (
        '[[mcp_servers]]\nname = "gone"\ncommand = ["/nonexistent/mcp-server"]\ntimeout_s = 5\n'
    )


BROKEN = {
    "configuration": (_set(HTTP_PORT="0"), r"✗ configuration: HTTP_PORT: Input should be"),
    "configuration file": (
        _toml("this is [not toml"),
        r"✗ configuration: CHATHUB_CONFIG: \S+ is not valid TOML.* — correct the TOML file",
    ),
    "API exposed without a token": (
        _set(HTTP_HOST="0.0.0.0"),
        r"✗ configuration: CHATHUB_API_TOKEN: required when HTTP_HOST is not 127\.0\.0\.1 — "
        r"correct CHATHUB_API_TOKEN",
    ),
    "no model": (_unset("LLM_MODEL"), r"✗ no model is configured .* — run `chathub setup`"),
    "database unreachable": (
        _set(DATABASE_URL="sqlite+aiosqlite:////"),
        r"✗ the database at .* cannot be reached or opened — check DATABASE_URL",
    ),
    "database behind": (_schema(1), r"✗ the database at .* has schema 1 of \d+ — restart"),
    "database ahead": (_schema(9999), r"✗ .* has schema 9999, newer than this chathub"),
    "endpoint down": (
        _set(LLM_BASE_URL=f"http://127.0.0.1:{free_port()}/v1"),
        r"✗ model endpoint: nothing answers at http://127\.0\.0\.1:\d+/v1 — start the model",
    ),
    "endpoint refuses the key": (
        _wrong_key,
        r"✗ model endpoint: \S+ refused the API key \(HTTP 401\) — set LLM_API_KEY",
    ),
    "model missing": (
        _set(LLM_MODEL="mistral:7b"),
        r"✗ model mistral:7b is not among the models of \S+ — set LLM_MODEL to one it lists "
        r"\(qwen3:14b, llama3\.1:8b\)",
    ),
    "no tool calling": (_no_tools, r"✗ qwen3:14b answered in text .* — choose a model"),
    "fallback without tool calling": (
        _fallback_without_tools,
        r"✗ llama3\.1:8b answered in text instead of calling the tool",
    ),
    "token shape": (
        _set(TELEGRAM_BOT_TOKEN="12345"),
        r"✗ TELEGRAM_BOT_TOKEN: that is not a bot token",
    ),
    "token revoked": (_revoked, r"✗ Telegram does not accept this token .* — get the current"),
    "webhook while polling": (
        _webhook_while_polling,
        r"✗ Telegram has a webhook set \(https://old\.example\.org/hook\) but chathub is set "
        r"for long polling",
    ),
    "webhook not where configured": (
        _webhook_elsewhere,
        r"✗ Telegram's webhook is not set, chathub's is https://bot\.example\.org/telegram",
    ),
    "webhook without secret": (
        _set(TELEGRAM_WEBHOOK_URL="https://bot.example.org/telegram", CHATHUB_API_TOKEN="t0ken"),
        r"✗ TELEGRAM_WEBHOOK_URL is set without TELEGRAM_WEBHOOK_SECRET",
    ),
    "webhook without a token": (  # until 2026-12-07 every request through it was the operator
        _set(TELEGRAM_WEBHOOK_URL="https://bot.example.org/telegram", TELEGRAM_WEBHOOK_SECRET="s"),
        r"✗ configuration: CHATHUB_API_TOKEN: required with TELEGRAM_WEBHOOK_URL",
    ),
    "no owner": (_unset("TELEGRAM_OWNER_ID"), r"✗ TELEGRAM_OWNER_ID is not set"),
    "workspace": (_workspace_is_a_file, r"✗ workspace \S+ is not a directory"),
    "secrets is a link": (_secrets_link, r"✗ \S+/secrets is a link to \S+/notes: the agent"),
    "shell runs unasked": (
        _shell_allowed,
        r"✗ rule \d+ lets execute_cmd run without asking: the agent's shell can read secrets/ "
        r"— remove it \(`chathub rules remove \d+`\)",
    ),
    "shell runs unasked in one chat": (
        _shell_allowed_in_one_chat,
        r"✗ rule \d+ lets execute_cmd run without asking: the agent's shell can read secrets/",
    ),
    "shell runs unasked for one agent": (
        _shell_allowed_for_one_agent,
        r"✗ rule \d+ lets execute_cmd run without asking: the agent's shell can read secrets/",
    ),
    "port taken": (_occupy, r"✗ HTTP port 127\.0\.0\.1:\d+ is taken by another program"),
    "mcp server": (_mcp_broken, r"✗ MCP server gone did not start or list its tools"),
}


@pytest.mark.parametrize("part", BROKEN)
def test_each_broken_part_fails_with_its_line(
    part: str, healthy: Setup, capsys: pytest.CaptureFixture[str]
) -> None:
    breaks, expected = BROKEN[part]
    breaks(healthy)
    status, lines = healthy.doctor(capsys)
    assert status == 1, "\n".join(lines)
    failed = [line for line in lines if line.startswith("✗")]
    assert any(re.search(expected, line) for line in failed), "\n".join(lines)
    assert lines[-1].endswith("checks failed.")
    assert not any("Error" in line or "Traceback" in line for line in lines), "\n".join(lines)


def test_the_port_held_by_chathub_passes(
    healthy: Setup, capsys: pytest.CaptureFixture[str]
) -> None:
    healthz = JSONResponse({"ok": True, "database": "ok"})
    server = BackgroundServer(Starlette(routes=[Route("/healthz", lambda _r: healthz)]), "hz")
    server.start()
    try:
        healthy.env["HTTP_PORT"] = str(server.port)
        status, lines = healthy.doctor(capsys)
    finally:
        server.stop()
    assert status == 0, "\n".join(lines)
    assert f"✓ HTTP port 127.0.0.1:{server.port} is held by chathub serve" in lines


def test_a_working_mcp_server_lists_its_tools(
    healthy: Setup, capsys: pytest.CaptureFixture[str]
) -> None:
    command = f'["{sys.executable}", "-m", "mcp_server_time", "--local-timezone", "UTC"]'
    healthy.toml = f'[[mcp_servers]]\nname = "time"\ncommand = {command}\n'
    status, lines = healthy.doctor(capsys)
    assert status == 0, "\n".join(lines)
    assert any(line.startswith("✓ MCP server time lists ") for line in lines)


def test_a_model_endpoint_that_hangs_times_out(
    healthy: Setup, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        healthy.env["LLM_BASE_URL"] = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
        status, lines = healthy.doctor(capsys, timeout_s=0.5)
    assert status == 1
    assert any(
        line.startswith("✗ model endpoint: ") and "did not answer within 0.5 s" in line
        for line in lines
    ), "\n".join(lines)


# -- Discord (only when DISCORD_BOT_TOKEN is set) ------------------------------------------


@pytest.fixture(scope="module")
def _discord() -> Iterator[FakeDiscordServer]:
    with FakeDiscordServer(token=DISCORD_TOKEN, bot_username="chathub-bot") as server:
        yield server


@pytest.fixture
def with_discord(healthy: Setup, _discord: FakeDiscordServer) -> Iterator[FakeDiscordServer]:
    _discord.reset()
    healthy.env.update(
        DISCORD_BOT_TOKEN=DISCORD_TOKEN,
        DISCORD_API_URL=_discord.base_url,
        DISCORD_OWNER_ID="200000000000000009",
    )
    yield _discord
    _discord.clear_faults()


def test_discord_is_checked_only_when_configured(
    healthy: Setup, capsys: pytest.CaptureFixture[str]
) -> None:
    status, lines = healthy.doctor(capsys)
    assert status == 0, "\n".join(lines)
    assert not any("Discord" in line for line in lines), "\n".join(lines)


def test_a_healthy_discord_setup_passes(
    healthy: Setup, with_discord: FakeDiscordServer, capsys: pytest.CaptureFixture[str]
) -> None:
    status, lines = healthy.doctor(capsys)
    assert status == 0, "\n".join(lines)
    assert "✓ Discord bot chathub-bot answers" in lines
    assert "✓ Discord owner id 200000000000000009" in lines
    assert [c.status for c in with_discord.calls_to("GET /users/@me")] == [200]


def _discord_down(s: Setup) -> None:
    s.env["DISCORD_API_URL"] = f"http://127.0.0.1:{free_port()}/api/v10"


DISCORD_BROKEN = {
    "token rejected": (
        _set(DISCORD_BOT_TOKEN="MTEx.reset.long-ago"),
        r"✗ Discord does not accept this bot token \(reset, or mistyped\) — reset the token in "
        r"the Discord developer portal \(Bot → Reset Token\) and set DISCORD_BOT_TOKEN",
    ),
    "token with Bot in front": (
        _set(DISCORD_BOT_TOKEN=f"'Bot {DISCORD_TOKEN}'"),
        r"✗ DISCORD_BOT_TOKEN: that is not a Discord bot token",
    ),
    "API URL wrong": (
        lambda s: s.env.update(DISCORD_API_URL=s.env["DISCORD_API_URL"] + "/v9"),
        r"✗ the Discord API answered 404 at \S+/users/@me: DISCORD_API_URL is wrong — set "
        r"DISCORD_API_URL to https://discord\.com/api/v10",
    ),
    "unreachable": (
        _discord_down,
        r"✗ Discord cannot be reached from here — check the network and DISCORD_API_URL",
    ),
    "no owner": (
        _unset("DISCORD_OWNER_ID"),
        r"✗ DISCORD_OWNER_ID is not set: .* — set DISCORD_OWNER_ID to your Discord user id",
    ),
}


@pytest.mark.parametrize("part", DISCORD_BROKEN)
def test_each_broken_discord_part_fails_with_its_line(
    part: str,
    healthy: Setup,
    with_discord: FakeDiscordServer,
    capsys: pytest.CaptureFixture[str],
) -> None:
    breaks, expected = DISCORD_BROKEN[part]
    breaks(healthy)
    status, lines = healthy.doctor(capsys)
    assert status == 1, "\n".join(lines)
    failed = [line for line in lines if line.startswith("✗")]
    assert len(failed) == 1, "\n".join(lines)
    assert re.search(expected, failed[0]), "\n".join(lines)
    assert not any("Error" in line or "Traceback" in line for line in lines), "\n".join(lines)


def test_discord_failing_with_5xx_is_unreachable(
    healthy: Setup, with_discord: FakeDiscordServer, capsys: pytest.CaptureFixture[str]
) -> None:
    with_discord.fail_next("GET /users/@me", status=502)
    status, lines = healthy.doctor(capsys)
    assert status == 1
    assert (
        "✗ Discord cannot be reached from here (HTTP 502) — try again in a minute; "
        in "\n".join(lines)
    )


async def _probe(handler: Callable[[httpx.Request], httpx.Response]) -> Problem | str:
    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as http:
        probe = DiscordProbe(http, "https://discord.test/api/v10/", " tok.en ", timeout_s=1)
        try:
            return (await probe.get_me()).username
        except Problem as problem:
            return problem


async def test_the_discord_probe_sends_the_bot_token_and_reads_the_name() -> None:
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"id": "42", "username": "old-bot", "discriminator": "7"})

    assert await _probe(answer) == "old-bot#7"
    assert str(seen[0].url) == "https://discord.test/api/v10/users/@me"
    assert seen[0].headers["authorization"] == "Bot tok.en"


@pytest.mark.parametrize(
    ("response", "kind", "sentence"),
    [
        (httpx.Response(401, json={"message": "401: Unauthorized", "code": 0}), "auth", "does not"),
        (httpx.Response(404, text="<html>Not Found</html>"), "protocol", "answered 404"),
        (httpx.Response(503, text="<html>upstream</html>"), "unreachable", "HTTP 503"),
        (httpx.Response(200, text="<html>a proxy</html>"), "protocol", "not Discord's JSON"),
        (httpx.Response(200, json={"message": "?"}), "protocol", "has no bot in it"),
        (
            httpx.Response(403, json={"message": "Missing Access", "code": 50001}),
            "refused",
            "Missing",
        ),
    ],
)
async def test_the_discord_probe_names_each_failure(
    response: httpx.Response, kind: str, sentence: str
) -> None:
    found = await _probe(lambda _request: response)
    assert isinstance(found, Problem), found
    assert found.kind == kind and sentence in str(found), str(found)


async def test_the_discord_probe_times_out_and_fails_to_connect() -> None:
    def slow(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("slow", request=request)

    def refused(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    timed_out = await _probe(slow)
    assert isinstance(timed_out, Problem) and timed_out.kind == "timeout"
    assert str(timed_out) == "Discord did not answer within 1 s"
    unreachable = await _probe(refused)
    assert isinstance(unreachable, Problem) and unreachable.kind == "unreachable"
    assert str(unreachable) == "Discord cannot be reached from here"


# -- GET /api/health/details ----------------------------------------------------------------


def _details_app(details: HealthDetails) -> httpx.AsyncClient:
    app = Starlette(routes=[details.route()])
    return httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://127.0.0.1")


async def test_health_details_needs_the_token_and_reports_every_check() -> None:
    runs: list[int] = []

    async def checks() -> list[Check]:
        runs.append(1)
        return [Check("a", True, "fine"), Check("b", False, "broken", "mend it")]

    details = HealthDetails(checks, bearer("t0ken"))
    async with _details_app(details) as client:
        assert (await client.get(PATH)).status_code == 401
        wrong = await client.get(PATH, headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401
        assert wrong.json() == {"error": "missing or wrong bearer token"}
        answer = await client.get(PATH, headers={"Authorization": "Bearer t0ken"})
        assert answer.status_code == 200  # a report, whatever it says
        body = answer.json()
        assert body["ok"] is False
        assert body["checks"] == [
            {"name": "a", "ok": True, "summary": "fine", "fix": ""},
            {"name": "b", "ok": False, "summary": "broken", "fix": "mend it"},
        ]
        assert body["checked_at"].endswith("+00:00")
        # A reload within max_age_s reuses the report: each run asks every model.
        await client.get(PATH, headers={"Authorization": "Bearer t0ken"})
        assert len(runs) == 1
        await client.get(PATH, params={"fresh": "1"}, headers={"Authorization": "Bearer t0ken"})
        assert len(runs) == 2


async def test_health_details_hides_a_crashing_check() -> None:
    async def checks() -> list[Check]:
        raise RuntimeError("secret internals")

    async with _details_app(HealthDetails(checks, bearer(None))) as client:
        answer = await client.get(PATH)
    assert answer.status_code == 500
    assert answer.json() == {"error": "the checks could not be run; see the log"}


async def test_health_details_runs_the_doctors_checks(healthy: Setup) -> None:
    healthy.write()
    config = load_config()
    async with httpx.AsyncClient() as http:
        details = HealthDetails(service_checks(config, http, timeout_s=2), bearer("t"))
        async with _details_app(details) as client:
            body = (await client.get(PATH, headers={"Authorization": "Bearer t"})).json()
    assert body["ok"] is True, body
    names = [c["name"] for c in body["checks"]]
    assert names[:3] == ["config", "database", "model.endpoint"]
    assert {"model.tools.qwen3:14b", "telegram.token", "workspace.secrets", "http.port"} <= set(
        names
    )


# -- PostgreSQL -------------------------------------------------------------------------------


@requires_postgres
async def test_postgres_is_checked_with_its_version() -> None:
    async with fresh_postgres_database(migrated=True) as url:
        checks = await check_database(url)
    assert [c.name for c in checks] == ["database", "database.postgres"]
    assert checks[0].ok and "schema current" in checks[0].summary, checks
    assert checks[1].ok and re.fullmatch(r"PostgreSQL \d+", checks[1].summary), checks


async def test_an_unreachable_postgres_is_one_line_without_the_password() -> None:
    url = f"postgresql+asyncpg://chathub:hunter2@127.0.0.1:{free_port()}/chathub"
    checks = await check_database(url, timeout_s=2)
    assert len(checks) == 1 and not checks[0].ok
    assert checks[0].summary == (
        "the database at postgresql+asyncpg://chathub:***@127.0.0.1:"
        f"{url.split(':')[3].split('/')[0]}/chathub cannot be reached or opened"
    )
    assert "hunter2" not in checks[0].line()


def test_chathub_serve_answers_health_details(serve, fake_openai: FakeOpenAIServer) -> None:
    fake_openai.models = ["fake-model"]
    fake_openai.reply_tool_calls(TOOL_CALL)
    port = free_port()
    serve(HTTP_PORT=str(port), CHATHUB_API_TOKEN="inbox-token")
    url = f"http://127.0.0.1:{port}{PATH}"

    def answer() -> httpx.Response | None:
        try:
            return httpx.get(url, headers={"Authorization": "Bearer inbox-token"}, timeout=10)
        except httpx.HTTPError:
            return None  # not listening yet

    body = wait_for(answer).json()
    checks = {c["name"]: c for c in body["checks"]}
    assert checks["model.tools.fake-model"]["ok"], checks
    assert checks["http.port"]["summary"] == f"HTTP port 127.0.0.1:{port} is held by chathub serve"
    assert checks["telegram.token"]["ok"] is False  # the fixture's token has the wrong shape
    assert httpx.get(url, timeout=10).status_code == 401


# -- Slack (only when SLACK_BOT_TOKEN is set) --------------------------------------------


@pytest.fixture(scope="module")
def _slack() -> Iterator[FakeSlackServer]:
    with FakeSlackServer() as server:
        yield server


@pytest.fixture
def with_slack(healthy: Setup, _slack: FakeSlackServer) -> Iterator[FakeSlackServer]:
    _slack.clear_faults()
    _slack.socket_mode_enabled = True
    healthy._slack = _slack
    healthy.env.update(
        SLACK_BOT_TOKEN=_slack.bot_token,
        SLACK_APP_TOKEN=_slack.app_token,
        SLACK_API_URL=_slack.api_url,
        SLACK_OWNER_ID="U0OWNER001",
    )
    yield _slack
    _slack.clear_faults()
    _slack.socket_mode_enabled = True


def test_slack_is_checked_only_when_configured(
    healthy: Setup,
    capsys: pytest.CaptureFixture[str],
) -> None:
    status, lines = healthy.doctor(capsys)
    assert status == 0, "\n".join(lines)
    assert not any("Slack" in line for line in lines), "\n".join(lines)


def test_a_healthy_slack_setup_passes(
    healthy: Setup,
    with_slack: FakeSlackServer,
    capsys: pytest.CaptureFixture[str],
) -> None:
    status, lines = healthy.doctor(capsys)
    assert status == 0, "\n".join(lines)
    assert "✓ Slack bot chathub in Fake Team answers" in lines, "\n".join(lines)
    assert "✓ Socket Mode answers for SLACK_APP_TOKEN" in lines
    assert "✓ Slack owner id U0OWNER001" in lines


def test_http_mode_with_its_secret_passes(
    healthy: Setup,
    with_slack: FakeSlackServer,
    capsys: pytest.CaptureFixture[str],
) -> None:
    del healthy.env["SLACK_APP_TOKEN"]
    healthy.env["SLACK_SIGNING_SECRET"] = "s3cret"
    healthy.env["CHATHUB_API_TOKEN"] = "events-over-http-token"
    status, lines = healthy.doctor(capsys)
    assert status == 0, "\n".join(lines)
    assert any("/slack/events" in line and line.startswith("✓") for line in lines)


def _slack_down(s: Setup) -> None:
    s.env["SLACK_API_URL"] = f"http://127.0.0.1:{free_port()}/api/"


def _slack_token_revoked(s: Setup) -> None:
    s.env["SLACK_BOT_TOKEN"] = "xoxb-revoked-long-ago"


def _slack_silent(s: Setup) -> None:
    """SLACK_API_URL at a port that accepts connections and never answers."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    s.cleanups.append(silent.close)
    s.env["SLACK_API_URL"] = f"http://127.0.0.1:{silent.getsockname()[1]}/api/"


def _slack_http_mode(s: Setup) -> None:
    del s.env["SLACK_APP_TOKEN"]
    s.env["SLACK_SIGNING_SECRET"] = "s3cret"


def _slack_fault(method: str, error: str, status: int = 200) -> Callable[[Setup], None]:
    def arm(s: Setup) -> None:
        s.slack.fail_next(method, error, status=status)

    return arm


SLACK_BROKEN: dict[str, tuple[Callable[[Setup], None], str]] = {
    "token rejected": (
        _slack_token_revoked,
        r"✗ Slack does not accept this bot token \(invalid_auth\) — reinstall the app to the "
        r"workspace \(the app's Install App page\) and copy its Bot User OAuth Token \(xoxb-\) "
        r"into SLACK_BOT_TOKEN$",
    ),
    "token revoked": (
        _slack_fault("auth.test", "token_revoked"),
        r"✗ Slack does not accept this bot token \(token_revoked\) — reinstall the app",
    ),
    "account inactive": (
        _slack_fault("auth.test", "account_inactive"),
        r"✗ Slack does not accept this bot token \(account_inactive\) — reinstall the app",
    ),
    "app token in the bot token's place": (
        lambda s: s.env.update(SLACK_BOT_TOKEN=s.env["SLACK_APP_TOKEN"]),
        r"✗ configuration: SLACK_BOT_TOKEN: must start with xoxb-: copy it from the app's "
        r"Install App page",
    ),
    "a token Slack will not take as the bot's": (
        _slack_fault("auth.test", "not_allowed_token_type"),
        r"✗ Slack does not take this token as a bot token \(an app-level xapp- token where the "
        r"xoxb- one belongs\?\) — reinstall the app",
    ),
    "API URL wrong": (
        lambda s: s.env.update(SLACK_API_URL=s.env["SLACK_API_URL"] + "v2/"),
        r"✗ the Slack API answered 404 at \S+auth\.test: SLACK_API_URL is wrong — set "
        r"SLACK_API_URL to https://slack\.com/api/ \(or remove it\)$",
    ),
    "unreachable": (
        _slack_down,
        r"✗ Slack cannot be reached from here — check the network and SLACK_API_URL$",
    ),
    "silent": (
        _slack_silent,
        r"✗ Slack did not answer within 1 s — check the network and SLACK_API_URL$",
    ),
    "rate limited": (
        lambda s: s.slack.rate_limit_next("auth.test", retry_after=7),
        r"✗ Slack asks to slow down \(HTTP 429\) — try again in 7 s$",
    ),
    "down": (
        _slack_fault("auth.test", "service_unavailable", status=503),
        r"✗ Slack cannot be reached from here \(HTTP 503\) — try again in a minute; "
        r"https://slack-status\.com",
    ),
    "app token refused": (
        _set(SLACK_APP_TOKEN="xapp-1-not-the-apps"),
        r"✗ Slack does not accept this app-level token \(invalid_auth\) — create an "
        r"app-level token with the connections:write scope",
    ),
    "bot token where the app token belongs": (
        _slack_fault("apps.connections.open", "not_allowed_token_type"),
        r"✗ Slack does not take this token for Socket Mode \(the bot's xoxb- token where the "
        r"app-level xapp- one belongs\?\) — create an app-level token",
    ),
    "app token without connections:write": (
        _slack_fault("apps.connections.open", "missing_scope"),
        r"✗ the app-level token lacks the connections:write scope Socket Mode needs — create "
        r"an app-level token with the connections:write scope",
    ),
    "Socket Mode off": (
        lambda s: setattr(s.slack, "socket_mode_enabled", False),
        rf"✗ Slack refused Socket Mode \({SOCKET_MODE_DISABLED_ERROR}\): is it turned on for "
        r"this app\? — turn on Socket Mode in the app settings",
    ),
    "HTTP mode without a secret": (
        _unset("SLACK_APP_TOKEN"),
        r"✗ SLACK_SIGNING_SECRET is not set and neither is SLACK_APP_TOKEN: events sent to "
        r"/slack/events cannot be verified, so `chathub serve` will not start — set "
        r"SLACK_SIGNING_SECRET \(Basic Information → App Credentials → Signing Secret\) and "
        r"make the app's Request URL <your public URL>/slack/events; or set SLACK_APP_TOKEN",
    ),
    "no owner": (
        _unset("SLACK_OWNER_ID"),
        r"✗ SLACK_OWNER_ID is not set: .* — set SLACK_OWNER_ID to your member id",
    ),
}


@pytest.mark.parametrize("part", SLACK_BROKEN)
def test_each_broken_slack_part_fails_with_its_line(
    part: str,
    healthy: Setup,
    with_slack: FakeSlackServer,
    capsys: pytest.CaptureFixture[str],
) -> None:
    breaks, expected = SLACK_BROKEN[part]
    breaks(healthy)
    status, lines = healthy.doctor(capsys, timeout_s=1)
    assert status == 1, "\n".join(lines)
    failed = [line for line in lines if line.startswith("✗")]
    assert len(failed) == 1, "\n".join(lines)
    assert re.search(expected, failed[0]), "\n".join(lines)
    assert not _PYTHON.search("\n".join(lines)), "\n".join(lines)


#: What a Python exception would leave in a line: its class name, a traceback, a repr.
_PYTHON = re.compile(r"Error\b|Exception|Traceback|httpx|\w+\(\w*=")


def test_slack_unreachable_is_said_once_not_again_for_socket_mode(
    healthy: Setup, with_slack: FakeSlackServer, capsys: pytest.CaptureFixture[str]
) -> None:
    _slack_down(healthy)
    _, lines = healthy.doctor(capsys)
    slack = [line for line in lines if "Slack" in line or "SLACK" in line]
    assert slack == [
        "✗ Slack cannot be reached from here — check the network and SLACK_API_URL",
        "✓ Slack owner id U0OWNER001",
    ]


def test_a_refused_bot_token_still_checks_socket_mode(
    healthy: Setup, with_slack: FakeSlackServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two tokens, two verdicts: a refused bot token says nothing about the app token."""
    _slack_token_revoked(healthy)
    healthy.env["SLACK_APP_TOKEN"] = "xapp-1-not-the-apps"
    _, lines = healthy.doctor(capsys)
    failed = [line for line in lines if line.startswith("✗")]
    assert [line.split(" — ")[0] for line in failed] == [
        "✗ Slack does not accept this bot token (invalid_auth)",
        "✗ Slack does not accept this app-level token (invalid_auth)",
    ]
    assert [c.method for c in with_slack.calls[-2:]] == ["auth.test", "apps.connections.open"]


def test_http_mode_without_a_secret_is_said_even_when_slack_is_down(
    healthy: Setup, with_slack: FakeSlackServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """The signing secret's check needs no network: it is never skipped."""
    _slack_down(healthy)
    del healthy.env["SLACK_APP_TOKEN"]
    _, lines = healthy.doctor(capsys)
    failed = [line for line in lines if line.startswith("✗")]
    assert len(failed) == 2, "\n".join(lines)
    assert failed[1].startswith("✗ SLACK_SIGNING_SECRET is not set"), failed


def test_the_doctor_asks_slack_with_the_tokens_and_never_opens_the_socket(
    healthy: Setup, with_slack: FakeSlackServer, capsys: pytest.CaptureFixture[str]
) -> None:
    before = len(with_slack.calls)
    healthy.doctor(capsys)
    calls = with_slack.calls[before:]
    assert [(c.method, c.http_method, c.token) for c in calls] == [
        ("auth.test", "POST", with_slack.bot_token),
        ("apps.connections.open", "POST", with_slack.app_token),
    ]
    assert with_slack.connections == []  # the URL Slack gave is not connected to


def test_slack_checks_in_health_details(healthy: Setup, with_slack: FakeSlackServer) -> None:
    healthy.write()
    config = load_config()

    async def details() -> dict[str, object]:
        async with httpx.AsyncClient() as http:
            checks = await service_checks(config, http, timeout_s=2)()
        return {c.name: c.ok for c in checks}

    found = asyncio.run(details())
    assert {k: v for k, v in found.items() if k.startswith("slack.")} == {
        "slack.token": True,
        "slack.mode": True,
        "slack.owner": True,
    }


async def test_a_model_endpoint_that_drips_its_answer_is_a_timeout_in_time() -> None:
    """httpx bounds each read: an endpoint sending a byte now and then held setup and the
    doctor for as long as it dripped (found by review on 2026-12-06)."""
    async with dripping_server() as base, httpx.AsyncClient() as http:
        with pytest.raises(Problem) as refused:
            await asyncio.wait_for(list_models(http, Endpoint(f"{base}/v1"), 0.3), timeout=10)
    assert refused.value.kind == "timeout"
