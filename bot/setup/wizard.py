"""``chathub setup``: find what it can, ask only what it must, check every answer for real.

1. the model: the usual local servers probed (``discovery``), else a base URL and key;
   the endpoint's models listed; the chosen one asked one real question with a tool;
2. Telegram, optional: the token checked with ``getMe``; the owner's id read from the
   ``/start`` they send the bot (or typed);
3. Discord, optional: the token checked with ``GET /users/@me`` (the doctor's probe); the
   owner's id typed;
4. Slack, optional: the bot token checked with ``auth.test``, the app-level token with
   ``apps.connections.open`` (Socket Mode; Enter instead: the HTTP Events API and its
   signing secret); the owner's member id typed. When Slack does not answer (offline, or
   rate limited) a token may be kept unchecked: ``chathub doctor`` checks it later;
5. Matrix, optional: the homeserver checked with ``/versions``, the bot's user id typed,
   its access token checked with ``whoami`` (it must be that account's); the owner's user
   id typed. An unreachable homeserver may be kept unchecked, as for Slack;
6. ``.env`` written once, at the end (``EnvFile``): Ctrl-C before then writes nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Coroutine, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

import httpx

from bot.checks.discord import DEFAULT_API_URL as DISCORD_API_URL
from bot.checks.discord import DiscordProbe, invite_url
from bot.checks.discord import token_problem as discord_token_problem
from bot.checks.discovery import DEFAULT_SERVERS, Found, LocalServer, discover
from bot.checks.matrix import MatrixProbe
from bot.checks.model import (
    DEFAULT_TIMEOUT_S,
    Endpoint,
    check_tool_calling,
    list_models,
    normalize_base_url,
)
from bot.checks.port import free_port
from bot.checks.result import Problem
from bot.checks.slack import DEFAULT_API_URL as SLACK_API_URL
from bot.checks.slack import SlackProbe, app_token_problem
from bot.checks.slack import token_problem as slack_token_problem
from bot.checks.telegram import BotIdentity, TelegramProbe, token_problem
from bot.discord.settings import snowflake
from bot.matrix.settings import matrix_user_id
from bot.setup.envfile import EnvFile, EnvFileError
from bot.setup.terminal import Terminal
from bot.slack.settings import slack_user_id
from engine.config import ModelConfig

__all__ = [
    "DiscordChoice",
    "MatrixChoice",
    "ModelChoice",
    "Network",
    "SetupOptions",
    "SlackChoice",
    "TelegramChoice",
    "Wizard",
]

log = logging.getLogger(__name__)

T = TypeVar("T")

TELEGRAM_API_URL = "https://api.telegram.org"
#: Models shown in the numbered list; a longer listing still accepts any typed name.
SHOWN_MODELS = 30
#: Problem kinds meaning Slack gave no verdict on a token (no answer, or "later").
_NO_ANSWER = frozenset({"unreachable", "timeout", "rate_limited"})


@dataclass(frozen=True, slots=True)
class SetupOptions:
    env_file: Path = Path(".env")
    servers: Sequence[LocalServer] = DEFAULT_SERVERS
    #: A local port either answers at once or is not there.
    probe_timeout_s: float = 1.5
    timeout_s: float = DEFAULT_TIMEOUT_S
    #: ``None``: ``TELEGRAM_API_URL`` from ``.env``, else Telegram's.
    telegram_api_url: str | None = None
    #: Each look for the owner's ``/start`` long-polls this long.
    owner_wait_s: int = 5
    #: ``None``: ``DISCORD_API_URL`` from ``.env``, else Discord's.
    discord_api_url: str | None = None
    #: ``None``: ``SLACK_API_URL`` from ``.env``, else Slack's.
    slack_api_url: str | None = None


@dataclass(frozen=True, slots=True)
class ModelChoice:
    base_url: str
    api_key: str
    model: str
    tools_work: bool
    #: Kept from ``.env`` as it was: not checked again, not rewritten.
    kept: bool = False


@dataclass(frozen=True, slots=True)
class TelegramChoice:
    token: str
    username: str
    owner_id: int | None


@dataclass(frozen=True, slots=True)
class DiscordChoice:
    token: str
    username: str
    owner_id: str | None


@dataclass(frozen=True, slots=True)
class SlackChoice:
    token: str
    #: Socket Mode's app-level token; ``None``: the HTTP Events API, with the secret.
    app_token: str | None
    signing_secret: str | None
    owner_id: str | None


@dataclass(frozen=True, slots=True)
class MatrixChoice:
    homeserver: str
    user_id: str
    access_token: str
    owner_id: str | None


class Network:
    """The wizard's network calls, each run to completion on one event loop.

    The questions are asked outside that loop, on purpose: inside ``asyncio.run`` Ctrl-C
    only cancels the running task, which a blocking ``input()`` never yields to, so the
    wizard would sit there until Enter. Here asyncio's handler is installed only while a
    call runs (Ctrl-C cancels the call and raises ``KeyboardInterrupt``); during a
    question Ctrl-C raises ``KeyboardInterrupt`` at once, as in any program.
    """

    def __init__(self) -> None:
        self._runner = asyncio.Runner()
        self.http = httpx.AsyncClient()

    def __call__(self, call: Coroutine[Any, Any, T]) -> T:
        try:
            return self._runner.run(call)
        except asyncio.CancelledError:
            # Only Ctrl-C cancels the call. asyncio turns that cancellation into
            # KeyboardInterrupt only when the task's cancel count ends at zero, which a
            # timeout inside the call (cancelling and uncancelling) can upset.
            raise KeyboardInterrupt from None

    def close(self) -> None:
        with contextlib.suppress(BaseException):  # closing after Ctrl-C must not raise anew
            self._runner.run(self.http.aclose())
        self._runner.close()


class Wizard:
    def __init__(
        self,
        terminal: Terminal,
        net: Network,
        options: SetupOptions,
        *,
        environ: Mapping[str, str] = os.environ,
    ) -> None:
        self.t = terminal
        self.net = net
        self.options = options
        self.env = EnvFile(options.env_file)
        self.environ = environ

    def run(self) -> int:
        """The whole conversation; the exit status (``Cancelled`` propagates)."""
        problem = self.env.problem()
        if problem:  # before any question: typing everything in for nothing is worse
            self.t.say(f"✗ {problem}")
            return 1
        self.t.say(f"chathub setup: a few questions, then {self.env.path} is written.")
        self.t.say("Ctrl-C at any point leaves everything as it was.")
        self.t.say()
        current = self.env.values()
        model = self.keep_model(current) or self.choose_model()
        self.t.say()
        telegram = None if self.keep_telegram(current) else self.choose_telegram()
        self.t.say()
        discord = None if self.keep_discord(current) else self.choose_discord()
        self.t.say()
        slack = None if self.keep_slack(current) else self.choose_slack()
        self.t.say()
        matrix = None if self.keep_matrix(current) else self.choose_matrix()
        return self.write(model, telegram, discord, slack, matrix)

    # -- a second run: what .env already has may stay ------------------------------------

    def keep_model(self, current: Mapping[str, str]) -> ModelChoice | None:
        name = current.get("LLM_MODEL")
        if not name:
            return None
        where = current.get("LLM_BASE_URL") or "the default endpoint"
        if not self.t.yes(
            f"{self.env.path} names the model {name} at {where}. Keep it?", default=True
        ):
            return None
        return ModelChoice(where, current.get("LLM_API_KEY", ""), name, tools_work=True, kept=True)

    def keep_telegram(self, current: Mapping[str, str]) -> bool:
        if not current.get("TELEGRAM_BOT_TOKEN"):
            return False
        return self.t.yes(f"{self.env.path} has a Telegram bot token. Keep it?", default=True)

    def keep_discord(self, current: Mapping[str, str]) -> bool:
        if not current.get("DISCORD_BOT_TOKEN"):
            return False
        return self.t.yes(f"{self.env.path} has a Discord bot token. Keep it?", default=True)

    def keep_slack(self, current: Mapping[str, str]) -> bool:
        if not current.get("SLACK_BOT_TOKEN"):
            return False
        return self.t.yes(f"{self.env.path} has a Slack bot token. Keep it?", default=True)

    def keep_matrix(self, current: Mapping[str, str]) -> bool:
        if not current.get("MATRIX_HOMESERVER"):
            return False
        return self.t.yes(f"{self.env.path} has a Matrix account. Keep it?", default=True)

    # -- the model ---------------------------------------------------------------------

    def choose_model(self) -> ModelChoice:
        endpoint, listing = self.choose_endpoint()
        while True:
            name = self.choose_model_name(listing)
            config = ModelConfig(name=name, base_url=endpoint.base_url, api_key=endpoint.api_key)
            self.t.say(f"Asking {name} one question with a tool, to see whether it calls it…")
            try:
                verdict = self.net(
                    check_tool_calling(self.net.http, config, self.options.timeout_s)
                )
            except Problem as problem:
                self.t.say(f"✗ Tool calling could not be checked: {problem}.")
                if self.t.yes(f"Use {name} anyway?", default=False):
                    return ModelChoice(endpoint.base_url, endpoint.api_key, name, False)
                continue
            if verdict.works:
                self.t.say("✓ Tool calling works.")
                return ModelChoice(endpoint.base_url, endpoint.api_key, name, True)
            self.t.say(f"⚠ {verdict.sentence}.")
            if self.t.yes(f"Use {name} anyway?", default=False):
                return ModelChoice(endpoint.base_url, endpoint.api_key, name, False)

    def choose_endpoint(self) -> tuple[Endpoint, list[str]]:
        self.t.say("Looking for a model server on this machine…")
        found = self.net(
            discover(self.net.http, self.options.servers, self.options.probe_timeout_s)
        )
        for seen in found:
            where = seen.server.base_url
            if seen.usable:
                said = "needs an API key" if seen.needs_key else f"{len(seen.models)} models"
                self.t.say(f"  ✓ {seen.server.name} at {where} ({said})")
            else:
                self.t.say(f"  · {seen.server.name} at {where}: {seen.problem}")
        usable = [seen for seen in found if seen.usable]
        picked = self._pick_local(usable)
        if picked is not None:
            chosen = self._with_key(Endpoint(picked.server.base_url), picked)
            if chosen is not None:
                return chosen
        return self.ask_endpoint()

    def _pick_local(self, usable: list[Found]) -> Found | None:
        if not usable:
            self.t.say("No local model server answered.")
            return None
        if len(usable) == 1:
            only = usable[0]
            if self.t.yes(f"Use {only.server.name} at {only.server.base_url}?", default=True):
                return only
            return None
        labels = [f"{seen.server.name} at {seen.server.base_url}" for seen in usable]
        index = self.t.choose("Which one", labels, other="another endpoint (type its URL)")
        return usable[index] if index >= 0 else None

    def _with_key(
        self, endpoint: Endpoint, found: Found | None = None
    ) -> tuple[Endpoint, list[str]] | None:
        """The listing, asking for the key while the endpoint refuses it; ``None`` when
        the endpoint fails otherwise (or the person gives up on the key)."""
        if found is not None and not found.needs_key:
            return endpoint, list(found.models)
        while True:
            try:
                listing = self.net(list_models(self.net.http, endpoint, self.options.timeout_s))
            except Problem as problem:
                self.t.say(f"✗ {problem}.")
                if problem.kind != "auth":
                    return None
                key = self.t.secret("API key (Enter to choose another endpoint)")
                if not key:
                    return None
                endpoint = Endpoint(endpoint.base_url, key)
                continue
            self.t.say(f"✓ {endpoint.base_url} lists {len(listing)} models.")
            return endpoint, listing

    def ask_endpoint(self) -> tuple[Endpoint, list[str]]:
        while True:
            text = self.t.ask(
                "Base URL of an OpenAI-compatible endpoint (e.g. https://openrouter.ai/api/v1)"
            )
            try:
                url = normalize_base_url(text)
            except Problem as problem:
                self.t.say(f"✗ {problem}.")
                continue
            key = self.t.secret("API key (Enter if it needs none)")
            chosen = self._with_key(Endpoint(url, key))
            if chosen is not None:
                return chosen

    def choose_model_name(self, listing: list[str]) -> str:
        if not listing:
            self.t.say("The endpoint lists no models (Ollama: `ollama pull qwen3` gets one).")
            while True:
                name = self.t.ask("Model name")
                if name:
                    return name
        shown = listing[:SHOWN_MODELS]
        self.t.say("Models:")
        for number, name in enumerate(shown, 1):
            self.t.say(f"  {number}) {name}")
        if len(listing) > len(shown):
            self.t.say(f"  … and {len(listing) - len(shown)} more (type a name)")
        while True:
            answer = self.t.ask("Model (number or name)", "1")
            if answer.isdigit() and 1 <= int(answer) <= len(shown):
                return shown[int(answer) - 1]
            if answer in listing:
                return answer
            if self.t.yes(f"{answer!r} is not in the listing. Use it anyway?", default=False):
                return answer

    # -- Telegram ----------------------------------------------------------------------

    def choose_telegram(self) -> TelegramChoice | None:
        self.t.say("Telegram (optional): talk to the agent from your phone.")
        self.t.say("Create a bot with @BotFather (/newbot) and paste its token here.")
        api_url = self._telegram_api_url()
        while True:
            token = self.t.secret("Bot token (Enter to skip)")
            if not token:
                self.t.say("Skipped: the terminal chat and the web inbox work without it.")
                return None
            shape = token_problem(token)
            if shape is not None:
                self.t.say(f"✗ {shape}.")
                continue
            probe = TelegramProbe(self.net.http, api_url, token, timeout_s=self.options.timeout_s)
            try:
                me = self.net(probe.get_me())
            except Problem as problem:
                self.t.say(f"✗ {problem}.")
                continue
            self.t.say(f"✓ This is @{me.username}.")
            owner = self.find_owner(probe, me)
            return TelegramChoice(token, me.username, owner)

    def find_owner(self, probe: TelegramProbe, me: BotIdentity) -> int | None:
        """The owner's user id: from the ``/start`` they send now, or typed."""
        try:
            baseline: int | None = self.net(probe.last_update_id())
        except Problem as problem:
            self.t.say(f"✗ Cannot read the bot's messages ({problem}); type your id instead.")
            baseline = None
        if baseline is not None:
            self.t.say(f"Now send /start to @{me.username} (https://t.me/{me.username}).")
        while True:
            prompt = (
                "Press Enter once you have sent it, or type your numeric Telegram id"
                if baseline is not None
                else "Your numeric Telegram user id (Enter to skip)"
            )
            answer = self.t.ask(prompt)
            if answer:
                if answer.isdigit() and int(answer) > 0:
                    return int(answer)
                self.t.say("✗ A Telegram user id is a positive number, like 123456789.")
                continue
            if baseline is None:
                return None
            try:
                senders = self.net(probe.start_senders(baseline, self.options.owner_wait_s))
            except Problem as problem:
                self.t.say(f"✗ {problem}; type your id instead.")
                baseline = None
                continue
            if not senders:
                self.t.say("No /start has arrived yet.")
                continue
            sender = senders[-1]
            if self.t.yes(f"Is {sender.name} (id {sender.user_id}) you?", default=True):
                return sender.user_id
            baseline = sender.update_id  # someone else: wait for a newer /start

    # -- Discord -----------------------------------------------------------------------

    def choose_discord(self) -> DiscordChoice | None:
        self.t.say("Discord (optional): talk to the agent in DMs and in your servers.")
        self.t.say(
            "Create an application at https://discord.com/developers/applications, then "
            "Bot → Reset Token, and paste the token here (docs/discord.md)."
        )
        api_url = self._discord_api_url()
        while True:
            token = self.t.secret("Discord bot token (Enter to skip)")
            if not token:
                self.t.say("Skipped Discord.")
                return None
            shape = discord_token_problem(token)
            if shape is not None:
                self.t.say(f"✗ {shape}.")
                continue
            probe = DiscordProbe(self.net.http, api_url, token, timeout_s=self.options.timeout_s)
            try:
                me = self.net(probe.get_me())
            except Problem as problem:
                self.t.say(f"✗ {problem}.")
                continue
            self.t.say(f"✓ This is {me.username}.")
            self.t.say(f"Add it to a server (DMs need one you share with it): {invite_url(me.id)}")
            return DiscordChoice(token, me.username, self.ask_discord_owner())

    def ask_discord_owner(self) -> str | None:
        """The owner's Discord user id, typed: the wizard does not connect to the gateway."""
        self.t.say(
            "Your Discord user id: switch on Developer Mode (User Settings → Advanced), then "
            "right-click your name and Copy User ID."
        )
        while True:
            answer = self.t.ask("Your Discord user id (Enter to skip)")
            if not answer:
                return None
            try:
                return snowflake(answer, "user")
            except ValueError:
                self.t.say("✗ A Discord user id is a long number, like 123456789012345678.")

    def _discord_api_url(self) -> str:
        if self.options.discord_api_url:
            return self.options.discord_api_url
        return self.env.values().get("DISCORD_API_URL") or DISCORD_API_URL

    # -- Slack -------------------------------------------------------------------------

    def choose_slack(self) -> SlackChoice | None:
        self.t.say("Slack (optional): talk to the agent in DMs and in your channels' threads.")
        self.t.say(
            "Create the app from the manifest in docs/slack.md at https://api.slack.com/apps, "
            "install it, and paste its Bot User OAuth Token (xoxb-) here."
        )
        while True:
            token = self.t.secret("Slack bot token (Enter to skip)")
            if not token:
                self.t.say("Skipped Slack.")
                return None
            shape = slack_token_problem(token)
            if shape is not None:
                self.t.say(f"✗ {shape}.")
                continue
            probe = SlackProbe(
                self.net.http, self._slack_api_url(), token, timeout_s=self.options.timeout_s
            )
            try:
                me = self.net(probe.auth_test())
            except Problem as problem:
                self.t.say(_failed(problem))
                if not self._keep_unchecked(problem, "this bot token"):
                    continue
            else:
                self.t.say(f"✓ This is {me.user}" + (f" in {me.team}." if me.team else "."))
            app_token, secret = self.ask_slack_events(probe)
            return SlackChoice(token.strip(), app_token, secret, self.ask_slack_owner())

    def ask_slack_events(self, probe: SlackProbe) -> tuple[str | None, str | None]:
        """Socket Mode's app-level token (checked); Enter: the HTTP Events API's secret."""
        self.t.say(
            "Socket Mode needs no public URL: Basic Information → App-Level Tokens → "
            "Generate (scope connections:write), paste the xapp- token."
        )
        while True:
            app_token = self.t.secret("Slack app-level token (Enter for the HTTP Events API)")
            if not app_token:
                break
            shape = app_token_problem(app_token)
            if shape is not None:
                self.t.say(f"✗ {shape}.")
                continue
            try:
                self.net(probe.apps_connections_open(app_token))
            except Problem as problem:
                self.t.say(_failed(problem))
                if not self._keep_unchecked(problem, "this app-level token"):
                    continue
            else:
                self.t.say("✓ Socket Mode answers.")
            return app_token.strip(), None
        self.t.say(
            "Events will come over HTTP: set the app's Request URL (Event Subscriptions and "
            "Interactivity) to <your public URL>/slack/events (docs/slack.md)."
        )
        while True:
            secret = self.t.secret("Slack signing secret (Basic Information → App Credentials)")
            if secret.strip():
                return None, secret.strip()
            self.t.say("✗ Without Socket Mode the signing secret is needed to verify Slack.")

    def _keep_unchecked(self, problem: Problem, what: str, platform: str = "Slack") -> bool:
        """Only when the platform did not answer (a refusal is an answer): the machine may
        be offline for now, and `chathub doctor` checks again later."""
        if problem.kind not in _NO_ANSWER:
            return False
        return self.t.yes(
            f"{platform} could not check {what}. Keep it unchecked (`chathub doctor` checks "
            "it later)?",
            default=False,
        )

    def ask_slack_owner(self) -> str | None:
        """The owner's member id, typed."""
        self.t.say("Your Slack member id: your profile → ⋮ → Copy member ID.")
        while True:
            answer = self.t.ask("Your Slack member id (Enter to skip)")
            if not answer:
                return None
            try:
                return slack_user_id(answer)
            except ValueError:
                self.t.say("✗ A Slack member id looks like U0123ABCD.")

    # -- Matrix ------------------------------------------------------------------------

    def choose_matrix(self) -> MatrixChoice | None:
        """The homeserver, the bot's account and its token, each checked; Enter skips."""
        self.t.say(
            "Matrix, optional: make an account for the bot on your homeserver first "
            "(docs/matrix.md)."
        )
        probe = self.ask_homeserver()
        if probe is None:
            return None
        homeserver, checked = probe
        user = self.ask_matrix_user("The bot's user id (like @chathub:example.org)")
        assert user is not None
        while True:
            token = self.t.secret("The bot's access token (Element: Settings → Help & About)")
            if not token.strip():
                self.t.say("✗ The bot needs its access token.")
                continue
            try:
                whose = self.net(checked.whoami(token.strip()))
            except Problem as problem:
                self.t.say(_failed(problem))
                if self._keep_unchecked(problem, "this token", "The homeserver"):
                    break
                continue
            if whose != user:
                self.t.say(f"✗ That token is {whose}'s, not {user}'s.")
                continue
            self.t.say(f"✓ This is {user}.")
            break
        owner = self.ask_matrix_user("Your own Matrix user id (Enter to skip)", optional=True)
        return MatrixChoice(homeserver, user, token.strip(), owner)

    def ask_homeserver(self) -> tuple[str, MatrixProbe] | None:
        while True:
            url = self.t.ask("Matrix homeserver URL (Enter to skip)").strip().rstrip("/")
            if not url:
                return None
            if not url.startswith(("http://", "https://")):
                self.t.say("✗ The homeserver's URL starts with https:// (or http://).")
                continue
            probe = MatrixProbe(self.net.http, url, timeout_s=self.options.timeout_s)
            try:
                self.net(probe.versions())
            except Problem as problem:
                self.t.say(_failed(problem))
                if not self._keep_unchecked(problem, "the homeserver", "chathub"):
                    continue
            else:
                self.t.say("✓ The homeserver answers.")
            return url, probe

    def ask_matrix_user(self, question: str, *, optional: bool = False) -> str | None:
        while True:
            answer = self.t.ask(question).strip()
            if not answer and optional:
                return None
            try:
                return matrix_user_id(answer)
            except ValueError:
                self.t.say("✗ A Matrix user id looks like @chathub:example.org.")

    def _slack_api_url(self) -> str:
        if self.options.slack_api_url:
            return self.options.slack_api_url
        return self.env.values().get("SLACK_API_URL") or SLACK_API_URL

    def _port_clash(self, base_url: str) -> int | None:
        """A free ``HTTP_PORT`` when the model server holds chathub's own on this machine
        (llama.cpp's server and chathub both default to 8080); ``None`` when they differ."""
        parts = urlsplit(base_url)
        if parts.hostname not in ("127.0.0.1", "localhost", "::1"):
            return None
        current = self.environ.get("HTTP_PORT") or self.env.values().get("HTTP_PORT") or "8080"
        if not current.isdigit() or parts.port != int(current):
            return None
        port = free_port(int(current) + 1)
        self.t.say(
            f"The model server uses port {current}, chathub's HTTP port: chathub gets {port} "
            "(HTTP_PORT)."
        )
        return port

    def _telegram_api_url(self) -> str:
        if self.options.telegram_api_url:
            return self.options.telegram_api_url
        return self.env.values().get("TELEGRAM_API_URL") or TELEGRAM_API_URL

    # -- .env --------------------------------------------------------------------------

    def write(
        self,
        model: ModelChoice,
        telegram: TelegramChoice | None,
        discord: DiscordChoice | None = None,
        slack: SlackChoice | None = None,
        matrix: MatrixChoice | None = None,
    ) -> int:
        updates = {}
        if not model.kept:
            updates.update(
                LLM_BASE_URL=model.base_url, LLM_API_KEY=model.api_key, LLM_MODEL=model.model
            )
            port = self._port_clash(model.base_url)
            if port is not None:
                updates["HTTP_PORT"] = str(port)
        if telegram is not None:
            updates["TELEGRAM_BOT_TOKEN"] = telegram.token
            if telegram.owner_id is not None:
                updates["TELEGRAM_OWNER_ID"] = str(telegram.owner_id)
            api_url = self._telegram_api_url()
            if api_url != TELEGRAM_API_URL:
                updates["TELEGRAM_API_URL"] = api_url
        if discord is not None:
            updates["DISCORD_BOT_TOKEN"] = discord.token
            if discord.owner_id is not None:
                updates["DISCORD_OWNER_ID"] = discord.owner_id
            api_url = self._discord_api_url()
            if api_url != DISCORD_API_URL:
                updates["DISCORD_API_URL"] = api_url
        if slack is not None:
            updates["SLACK_BOT_TOKEN"] = slack.token
            if slack.app_token is not None:
                updates["SLACK_APP_TOKEN"] = slack.app_token
            if slack.signing_secret is not None:
                updates["SLACK_SIGNING_SECRET"] = slack.signing_secret
            if slack.owner_id is not None:
                updates["SLACK_OWNER_ID"] = slack.owner_id
            api_url = self._slack_api_url()
            if api_url != SLACK_API_URL:
                updates["SLACK_API_URL"] = api_url
        if matrix is not None:
            updates["MATRIX_HOMESERVER"] = matrix.homeserver
            updates["MATRIX_USER_ID"] = matrix.user_id
            updates["MATRIX_ACCESS_TOKEN"] = matrix.access_token
            if matrix.owner_id is not None:
                updates["MATRIX_OWNER_ID"] = matrix.owner_id
        if not updates:
            self.t.say(f"Nothing changed; {self.env.path} is as it was.")
            return 0
        try:
            backup = self.env.write(updates)
        except EnvFileError as exc:
            self.t.say(f"✗ {exc}")
            return 1
        self.t.say()
        self.t.say(f"✓ Wrote {self.env.path} (mode 0600).")
        if backup is not None:
            self.t.say(f"  The previous one is kept as {backup}.")
        if not model.tools_work:
            self.t.say(f"⚠ {model.model} may not call tools; `chathub doctor` checks again.")
        for name, value in updates.items():
            # The environment wins over .env: a stale variable would undo this setup.
            if self.environ.get(name) and self.environ[name] != value:
                self.t.say(
                    f"⚠ {name} is also set in the environment, which wins over .env: unset it."
                )
        return 0


def _failed(problem: Problem) -> str:
    """``✗ sentence — fix``: Slack's refusals say little without the fix."""
    return f"✗ {problem} — {problem.fix}" if problem.fix else f"✗ {problem}."
