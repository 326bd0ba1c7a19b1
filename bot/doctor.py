"""``chathub doctor``: every part of a setup checked for real, one line each.

The same ``Doctor`` serves ``GET /api/health/details`` (``bot/http/health_details.py``).
It changes nothing: it reads, probes and rolls back. The order is the order a newcomer
fixes things in: configuration, database, models, Telegram, Discord, Slack, Matrix, MCP, workspace,
port.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TextIO

import httpx

from bot.checks.database import check_database
from bot.checks.discord import DiscordProbe
from bot.checks.discord import token_problem as discord_token_problem
from bot.checks.exposure import ApiExposureError, check_api_exposure
from bot.checks.matrix import MatrixProbe
from bot.checks.mcp import check_mcp_servers
from bot.checks.model import DEFAULT_TIMEOUT_S, Endpoint, check_tool_calling, list_models
from bot.checks.port import check_port
from bot.checks.result import Check, Problem
from bot.checks.shell import check_shell_gate
from bot.checks.slack import SlackProbe, app_token_problem
from bot.checks.slack import token_problem as slack_token_problem
from bot.checks.telegram import TelegramProbe, token_problem
from bot.checks.workspace import check_workspace
from bot.settings import Settings, service_settings
from engine.config import AppConfig, ConfigError, ModelConfig

__all__ = ["Doctor", "config_checks", "render", "run_doctor"]

log = logging.getLogger(__name__)

_TOOLS_FIX = (
    "choose a model that supports tool calling (for Ollama: qwen3, llama3.1, mistral-nemo…), "
    "or start the server with tool calling on (vLLM: --enable-auto-tool-choice; llama.cpp: --jinja)"
)


def config_checks(load: Callable[[], AppConfig]) -> tuple[AppConfig | None, list[Check]]:
    """Parse the configuration; without a usable one the other checks cannot run."""
    try:
        config = load()
        settings = service_settings(config)
        check_api_exposure(
            settings.http_host, settings.chathub_api_token, public=settings.reached_from_outside()
        )
    except (ConfigError, ApiExposureError) as exc:
        return None, [Check("config", False, f"configuration: {exc}", _config_fix(str(exc)))]
    checks = [Check("config", True, "configuration parses")]
    if not config.models:
        checks.append(
            Check(
                "config.model",
                False,
                "no model is configured (LLM_MODEL is not set)",
                "run `chathub setup`, or set LLM_MODEL and LLM_BASE_URL in .env",
            )
        )
    return config, checks


def _config_fix(message: str) -> str:
    """The message starts with the variable's name (``ConfigError``'s contract)."""
    name = message.split(":", 1)[0]
    if name == "CHATHUB_CONFIG":
        return "correct the TOML file CHATHUB_CONFIG names (docs/configuration.md)"
    if name.isupper():
        return f"correct {name} in .env (or the environment)"
    return "correct .env (every variable is described in .env.example)"


@dataclass
class Doctor:
    """Runs the checks for one configuration over one ``httpx`` client."""

    config: AppConfig
    http: httpx.AsyncClient
    timeout_s: float = DEFAULT_TIMEOUT_S

    async def run(self) -> list[Check]:
        settings = service_settings(self.config)
        checks: list[Check] = []
        checks += await check_database(settings.database_url, timeout_s=self.timeout_s)
        checks += await self.models()
        checks += await self.telegram()
        checks += await self.discord()
        checks += await self.slack()
        checks += await self.matrix()
        checks += await check_mcp_servers(self.config.mcp_servers)
        checks += check_workspace(settings.chathub_workspace)
        checks.append(await check_shell_gate(settings.database_url))
        checks.append(
            await check_port(
                settings.http_host, settings.http_port, self.http, timeout_s=self.timeout_s
            )
        )
        return checks

    async def models(self) -> list[Check]:
        checks: list[Check] = []
        listings: dict[tuple[str, str], list[str] | None] = {}
        for position, model in enumerate(self.config.models):
            role = "model" if position == 0 else "fallback model"
            key = (model.base_url, model.api_key)
            if key not in listings:
                endpoint_check, listing = await self._endpoint(model)
                checks.append(endpoint_check)
                listings[key] = listing
            listing = listings[key]
            if listing is None:
                continue  # the endpoint's line says why; nothing more can be learnt
            checks += await self._model(model, role, listing)
        return checks

    async def _endpoint(self, model: ModelConfig) -> tuple[Check, list[str] | None]:
        try:
            listing = await list_models(
                self.http, Endpoint(model.base_url, model.api_key), self.timeout_s
            )
        except Problem as problem:
            fix = problem.fix or "start the model server, or correct LLM_BASE_URL"
            return Check("model.endpoint", False, f"model endpoint: {problem}", fix), None
        return (
            Check(
                "model.endpoint",
                True,
                f"model endpoint {model.base_url} lists {len(listing)} models",
            ),
            listing,
        )

    async def _model(self, model: ModelConfig, role: str, listing: Sequence[str]) -> list[Check]:
        name = model.name
        if name not in listing:
            offer = ", ".join(listing[:8]) + ("…" if len(listing) > 8 else "")
            variable = "LLM_MODEL" if role == "model" else "LLM_FALLBACK_MODELS"
            return [
                Check(
                    f"model.exists.{name}",
                    False,
                    f"{role} {name} is not among the models of {model.base_url}",
                    f"set {variable} to one it lists ({offer or 'it lists none'})",
                )
            ]
        checks = [Check(f"model.exists.{name}", True, f"{role} {name} exists")]
        try:
            verdict = await check_tool_calling(self.http, model, self.timeout_s)
        except Problem as problem:
            checks.append(
                Check(
                    f"model.tools.{name}",
                    False,
                    f"{role} {name}: tool calling could not be checked: {problem}",
                    problem.fix or "check that the model server is up and the model loads",
                )
            )
            return checks
        checks.append(
            Check(
                f"model.tools.{name}",
                verdict.works,
                verdict.sentence,
                "" if verdict.works else _TOOLS_FIX,
            )
        )
        return checks

    async def telegram(self) -> list[Check]:
        settings = service_settings(self.config)
        token = settings.telegram_bot_token
        if not token:
            return [
                Check(
                    "telegram",
                    True,
                    "Telegram is not configured (the terminal chat and the web inbox only)",
                )
            ]
        shape = token_problem(token)
        if shape is not None:
            return [
                Check(
                    "telegram.token",
                    False,
                    f"TELEGRAM_BOT_TOKEN: {shape}",
                    "copy the token from @BotFather again",
                )
            ]
        probe = TelegramProbe(self.http, settings.telegram_api_url, token, timeout_s=self.timeout_s)
        try:
            me = await probe.get_me()
            info = await probe.webhook_info()
        except Problem as problem:
            fix = problem.fix or "check the network and TELEGRAM_API_URL"
            return [Check("telegram.token", False, str(problem), fix), _owner(settings)]
        return [
            Check("telegram.token", True, f"Telegram bot @{me.username} answers"),
            _webhook(settings, info),
            _owner(settings),
        ]

    async def discord(self) -> list[Check]:
        """Only when ``DISCORD_BOT_TOKEN`` is set: Discord is an addition, not a default."""
        settings = service_settings(self.config)
        token = settings.discord_bot_token
        if not token:
            return []
        shape = discord_token_problem(token)
        if shape is not None:
            fix = "copy the token from the Discord developer portal again (Bot → Reset Token)"
            return [
                Check("discord.token", False, f"DISCORD_BOT_TOKEN: {shape}", fix),
                _discord_owner(settings),
            ]
        probe = DiscordProbe(self.http, settings.discord_api_url, token, timeout_s=self.timeout_s)
        try:
            me = await probe.get_me()
        except Problem as problem:
            fix = problem.fix or "check the network and DISCORD_API_URL"
            return [Check("discord.token", False, str(problem), fix), _discord_owner(settings)]
        return [
            Check("discord.token", True, f"Discord bot {me.username} answers"),
            _discord_owner(settings),
        ]

    async def slack(self) -> list[Check]:
        """Only when ``SLACK_BOT_TOKEN`` is set: the token, how events arrive, the owner."""
        settings = service_settings(self.config)
        token = settings.slack_bot_token
        if not token:
            return []
        probe = SlackProbe(self.http, settings.slack_api_url, token, timeout_s=self.timeout_s)
        token_check, reachable = await _slack_token(probe, token)
        checks = [token_check]
        if reachable or settings.slack_app_token is None:
            # Socket Mode's probe would meet the same network and say the same again;
            # the HTTP Events API's check needs no network.
            checks.append(await _slack_mode(settings, probe))
        checks.append(_slack_owner(settings))
        return checks

    async def matrix(self) -> list[Check]:
        """Only when ``MATRIX_HOMESERVER`` is set: the homeserver, the bot's token, the owner."""
        settings = service_settings(self.config)
        homeserver = settings.matrix_homeserver
        if not homeserver:
            return []
        probe = MatrixProbe(self.http, homeserver, timeout_s=self.timeout_s)
        try:
            versions = await probe.versions()
        except Problem as problem:
            fix = problem.fix or "check MATRIX_HOMESERVER"
            return [Check("matrix.homeserver", False, str(problem), fix)]
        checks = [Check("matrix.homeserver", True, f"{homeserver} answers (Matrix {versions[-1]})")]
        checks.append(await _matrix_token(settings, probe))
        if settings.matrix_owner_id:
            owner = Check("matrix.owner", True, f"Matrix owner {settings.matrix_owner_id}")
        else:
            owner = Check(
                "matrix.owner",
                False,
                "MATRIX_OWNER_ID is not set: nobody on Matrix is told of pairing codes",
                "set MATRIX_OWNER_ID to your user id (@you:server)",
            )
        checks.append(owner)
        return checks


async def _matrix_token(settings: Settings, probe: MatrixProbe) -> Check:
    """``whoami`` for the access token: the bot's own account; a password is tried by
    ``chathub serve`` (a login makes a device, which a check should not)."""
    token, user = settings.matrix_access_token, settings.matrix_user_id
    if not user:
        return Check("matrix.token", False, "MATRIX_USER_ID is not set", "set it (@bot:server)")
    if not token:
        if settings.matrix_password:
            return Check("matrix.token", True, f"{user} logs in with MATRIX_PASSWORD at start")
        return Check(
            "matrix.token",
            False,
            "neither MATRIX_ACCESS_TOKEN nor MATRIX_PASSWORD is set",
            "set MATRIX_ACCESS_TOKEN (or MATRIX_PASSWORD)",
        )
    try:
        whose = await probe.whoami(token)
    except Problem as problem:
        return Check("matrix.token", False, str(problem), problem.fix or "check the token")
    if whose != user:
        return Check(
            "matrix.token",
            False,
            f"MATRIX_ACCESS_TOKEN is {whose}'s, not MATRIX_USER_ID {user}",
            "set the bot's own token, or MATRIX_USER_ID to its account",
        )
    return Check("matrix.token", True, f"Matrix bot {user} signs in")


async def _slack_token(probe: SlackProbe, token: str) -> tuple[Check, bool]:
    """``slack.token`` and whether Slack answered at all (a refusal is an answer)."""
    shape = slack_token_problem(token)
    if shape is not None:
        fix = "copy the Bot User OAuth Token again (the app's Install App page)"
        return Check("slack.token", False, f"SLACK_BOT_TOKEN: {shape}", fix), True
    try:
        me = await probe.auth_test()
    except Problem as problem:
        fix = problem.fix or "check the network and SLACK_API_URL"
        answered = problem.kind in ("auth", "refused")
        return Check("slack.token", False, str(problem), fix), answered
    where = f" in {me.team}" if me.team else ""
    return Check("slack.token", True, f"Slack bot {me.user}{where} answers"), True


async def _slack_mode(settings: Settings, probe: SlackProbe) -> Check:
    """Socket Mode answers for the app token; or HTTP mode has its signing secret."""
    app_token = settings.slack_app_token
    if app_token is None:
        if not settings.slack_signing_secret:
            return Check(
                "slack.mode",
                False,
                "SLACK_SIGNING_SECRET is not set and neither is SLACK_APP_TOKEN: events sent "
                "to /slack/events cannot be verified, so `chathub serve` will not start",
                "set SLACK_SIGNING_SECRET (Basic Information → App Credentials → Signing "
                "Secret) and make the app's Request URL <your public URL>/slack/events; or "
                "set SLACK_APP_TOKEN for Socket Mode, which needs no public URL",
            )
        return Check(
            "slack.mode",
            True,
            "HTTP Events API: the app's Request URL is <your public URL>/slack/events "
            "(Event Subscriptions and Interactivity), verified with SLACK_SIGNING_SECRET",
        )
    shape = app_token_problem(app_token)
    if shape is not None:
        fix = "copy the app-level token again (Basic Information → App-Level Tokens)"
        return Check("slack.mode", False, f"SLACK_APP_TOKEN: {shape}", fix)
    try:
        await probe.apps_connections_open(app_token)
    except Problem as problem:
        return Check("slack.mode", False, str(problem), problem.fix or "check SLACK_APP_TOKEN")
    return Check("slack.mode", True, "Socket Mode answers for SLACK_APP_TOKEN")


def _slack_owner(settings: Settings) -> Check:
    if settings.slack_owner_id:
        return Check("slack.owner", True, f"Slack owner id {settings.slack_owner_id}")
    return Check(
        "slack.owner",
        False,
        "SLACK_OWNER_ID is not set: nobody on Slack is told of pairing codes",
        "set SLACK_OWNER_ID to your member id (your profile → ⋮ → Copy member ID), or run "
        "`chathub setup`",
    )


def _webhook(settings: Settings, info: dict[str, object]) -> Check:
    current = str(info.get("url") or "")
    wanted = settings.telegram_webhook_url
    if not wanted:
        if not current:
            return Check("telegram.webhook", True, "long polling; no webhook is set")
        return Check(
            "telegram.webhook",
            False,
            f"Telegram has a webhook set ({current}) but chathub is set for long polling",
            "`chathub serve` removes it at start; if another deployment set it, give each "
            "deployment its own bot, or set TELEGRAM_WEBHOOK_URL to use the webhook",
        )
    if not settings.telegram_webhook_secret:
        return Check(
            "telegram.webhook",
            False,
            "TELEGRAM_WEBHOOK_URL is set without TELEGRAM_WEBHOOK_SECRET",
            "set TELEGRAM_WEBHOOK_SECRET (1-256 of A-Z, a-z, 0-9, _ and -)",
        )
    if current != wanted:
        return Check(
            "telegram.webhook",
            False,
            f"Telegram's webhook is {current or 'not set'}, chathub's is {wanted}",
            "start (or restart) `chathub serve`: it sets the webhook at start",
        )
    error = info.get("last_error_message")
    if error:
        return Check(
            "telegram.webhook",
            False,
            f"Telegram cannot deliver to {wanted}: {error}",
            "make that URL reach this service over HTTPS from the internet",
        )
    return Check("telegram.webhook", True, f"webhook {wanted} is set")


def _owner(settings: Settings) -> Check:
    if settings.telegram_owner_id:
        return Check("telegram.owner", True, f"owner id {settings.telegram_owner_id}")
    return Check(
        "telegram.owner",
        False,
        "TELEGRAM_OWNER_ID is not set: nobody can approve pairing codes",
        "run `chathub setup` (it reads your id when you send /start), or set TELEGRAM_OWNER_ID",
    )


def _discord_owner(settings: Settings) -> Check:
    if settings.discord_owner_id:
        return Check("discord.owner", True, f"Discord owner id {settings.discord_owner_id}")
    return Check(
        "discord.owner",
        False,
        "DISCORD_OWNER_ID is not set: nobody on Discord is told of pairing codes",
        "set DISCORD_OWNER_ID to your Discord user id (Developer Mode, then Copy User ID on "
        "your name), or run `chathub setup`",
    )


def render(checks: Sequence[Check], out: TextIO) -> int:
    """Print one line per check; the exit status: 0 only when every check passed."""
    for check in checks:
        print(check.line(), file=out)
    failed = sum(not c.ok for c in checks)
    if failed:
        print(f"{failed} of {len(checks)} checks failed.", file=out)
    else:
        print(f"All {len(checks)} checks passed.", file=out)
    return 1 if failed else 0


def run_doctor(load: Callable[[], AppConfig], timeout_s: float, out: TextIO | None = None) -> int:
    """``chathub doctor``: every check, one line each; the exit status (0: all passed)."""

    async def checks() -> list[Check]:
        config, found = config_checks(load)
        if config is not None:  # without a configuration nothing else can be checked
            async with httpx.AsyncClient() as http:
                found += await Doctor(config, http, timeout_s=timeout_s).run()
        return found

    try:
        found = asyncio.run(checks())
    except KeyboardInterrupt:
        return 130
    return render(found, out or sys.stdout)
