"""``chathub setup`` (and ``chathub run``) against the fakes.

The main flows run the real command through a pseudo-terminal (keys typed, Ctrl-C sent
as a terminal sends it); the variants of bad input drive the same ``Wizard`` in-process
with scripted answers (its terminal is a parameter), which is ten times faster. The probe
list is always given, so no test ever reaches a real server on this machine's usual ports.
"""

from __future__ import annotations

import io
import os
import re
import socket
import stat
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.applications import Starlette
from starlette.responses import HTMLResponse
from starlette.routing import Route

from bot.checks.discovery import LocalServer
from bot.setup.envfile import EnvFile, EnvFileError
from bot.setup.terminal import Terminal
from bot.setup.wizard import Network, SetupOptions, Wizard
from tests.bot.process import free_port
from tests.fakes.background import BackgroundServer
from tests.fakes.discord_server import FakeDiscordServer
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.slack_server import FakeSlackServer
from tests.fakes.telegram_server import FakeTelegramServer, Webhook
from tests.fakes.terminal import PtySession

TOKEN = "123456789:AAHk3mQx9vT2Lw8ZpR5nY7cB4dF6gJ0sE1u"
DISCORD_TOKEN = "MTEwMDAwMDAwMDAwMDAwMDAwMQ.GxYz12.discord-setup-test-token"
TOOL_CALL = ("call_1", "get_time", '{"timezone": "Europe/Rome"}')


@pytest.fixture
def fake(fake_openai: FakeOpenAIServer) -> FakeOpenAIServer:
    fake_openai.models = ["qwen3:14b", "llama3.1:8b"]
    return fake_openai


@pytest.fixture(scope="module")
def _telegram() -> Iterator[FakeTelegramServer]:
    with FakeTelegramServer() as server:
        yield server


@pytest.fixture
def telegram(_telegram: FakeTelegramServer) -> FakeTelegramServer:
    _telegram.reset()
    return _telegram


@pytest.fixture(scope="module")
def _discord() -> Iterator[FakeDiscordServer]:
    with FakeDiscordServer(token=DISCORD_TOKEN, bot_username="chathub-bot") as server:
        yield server


@pytest.fixture
def discord(_discord: FakeDiscordServer) -> FakeDiscordServer:
    _discord.reset()
    return _discord


@pytest.fixture(scope="module")
def html_site() -> Iterator[str]:
    """A web server that answers every path with a page, not the API."""
    page = HTMLResponse("<html><body><h1>Welcome to nginx!</h1></body></html>")
    app = Starlette(routes=[Route("/{path:path}", lambda _r: page)])
    server = BackgroundServer(app, "html-site")
    server.start()
    yield f"http://127.0.0.1:{server.port}/v1"
    server.stop()


@pytest.fixture
def black_hole() -> Iterator[str]:
    """A port that accepts connections (the kernel's backlog) and never answers."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/v1"


def closed_url() -> str:
    return f"http://127.0.0.1:{free_port()}/v1"


def env_for(home: Path) -> dict[str, str]:
    """No LLM_* or TELEGRAM_* from the test's own environment."""
    return {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "PYTHONIOENCODING": "utf-8",
        "DATABASE_URL": f"sqlite+aiosqlite:///{home / 'chathub.db'}",
        "CHATHUB_WORKSPACE": str(home / "workspace"),
        "CHATHUB_TIMEZONE": "UTC",
    }


def setup(home: Path, *probes: str, extra: tuple[str, ...] = ()) -> PtySession:
    argv = [sys.executable, "-m", "bot.cli", "setup", "--timeout", "3", "--probe-timeout", "1"]
    for probe in probes or (closed_url(),):
        argv += ["--probe", probe]
    return PtySession([*argv, *extra], cwd=home, env=env_for(home))


def skip_telegram(term: PtySession) -> None:
    term.expect(r"Bot token \(Enter to skip\): ")
    term.send("")


def skip_discord(term: PtySession) -> None:
    term.expect(r"Discord bot token \(Enter to skip\): ")
    term.send("")


def skip_slack(term: PtySession) -> None:
    term.expect(r"Slack bot token \(Enter to skip\): ")
    term.send("")


def skip_matrix(term: PtySession) -> None:
    term.expect(r"Matrix homeserver URL \(Enter to skip\): ")
    term.send("")


def dotenv(home: Path) -> dict[str, str]:
    return EnvFile(home / ".env").values()


def test_local_server_found_and_chosen_keeps_other_lines_and_backs_up(
    tmp_path: Path, fake: FakeOpenAIServer
) -> None:
    old = "# my settings\nHTTP_PORT=9090\nLLM_MODEL=old-model\nLLM_MODEL=older\n"
    (tmp_path / ".env").write_text(old)
    fake.reply_tool_calls(TOOL_CALL)
    with setup(tmp_path, f"Ollama={fake.base_url}", closed_url()) as term:
        term.expect(r"names the model older at the default endpoint\. Keep it\? \[Y/n\]")
        term.send("n")
        term.expect(r"✓ Ollama at http://127\.0\.0\.1:\d+/v1 \(2 models\)")
        term.expect(r"· model server at \S+: nothing there")
        term.expect(r"Use Ollama at \S+\? \[Y/n\]")
        term.send("")
        term.expect(r"2\) llama3\.1:8b")
        term.expect(r"Model \(number or name\) \[1\]: ")
        term.send("2")
        term.expect("✓ Tool calling works.")
        skip_telegram(term)
        skip_discord(term)
        skip_slack(term)
        skip_matrix(term)
        term.expect(r"✓ Wrote .*\.env \(mode 0600\)")
        term.expect(r"previous one is kept as (\S+)\.")
        term.expect("Next: `make run`")
        assert term.wait() == 0
    env = tmp_path / ".env"
    assert stat.S_IMODE(env.stat().st_mode) == 0o600
    text = env.read_text()
    assert text.startswith("# my settings\nHTTP_PORT=9090\nLLM_MODEL=llama3.1:8b\n")
    assert text.count("LLM_MODEL=") == 1  # the repeat would have overridden the new value
    assert dotenv(tmp_path)["LLM_BASE_URL"] == fake.base_url
    backups = list(tmp_path.glob(".env.bak-*"))
    assert [b.read_text() for b in backups] == [old]
    assert stat.S_IMODE(backups[0].stat().st_mode) == 0o600
    assert not list(tmp_path.glob(".env.*.tmp"))
    request = fake.requests[0]
    assert request["model"] == "llama3.1:8b"
    assert request["tools"][0]["function"]["name"] == "get_time"


def test_custom_url_typed_after_a_url_without_a_scheme(
    tmp_path: Path, fake: FakeOpenAIServer
) -> None:
    fake.reply_tool_calls(TOOL_CALL)
    with setup(tmp_path) as term:
        term.expect("No local model server answered.")
        term.expect("Base URL of an OpenAI-compatible endpoint")
        term.send(fake.base_url.removeprefix("http://"))
        term.expect(r"✗ '127\.0\.0\.1:\d+/v1' is not a URL: it must start with http://")
        term.expect("Base URL of an OpenAI-compatible endpoint")
        # A mistyped port ended setup with a traceback (found by review): asked again.
        term.send(fake.base_url.replace("/v1", "x/v1"))
        term.expect(r"✗ 'http://127\.0\.0\.1:\d+x/v1' is not a URL: Port could not be cast")
        term.expect("Base URL of an OpenAI-compatible endpoint")
        term.send(fake.base_url.removesuffix("/v1"))  # no path: /v1 is added
        term.expect(r"API key \(Enter if it needs none\): ")
        term.send("")
        term.expect(r"lists 2 models")
        term.expect(r"Model \(number or name\)")
        term.send("qwen3:14b")
        term.expect("✓ Tool calling works.")
        skip_telegram(term)
        skip_discord(term)
        skip_slack(term)
        skip_matrix(term)
        assert term.wait() == 0
    values = dotenv(tmp_path)
    assert values["LLM_BASE_URL"] == fake.base_url
    assert values["LLM_MODEL"] == "qwen3:14b"
    assert values["LLM_API_KEY"] == ""
    assert not list(tmp_path.glob(".env.bak-*"))  # there was nothing to back up


def test_bad_key_is_asked_again(tmp_path: Path, fake: FakeOpenAIServer) -> None:
    fake.api_key = "sk-right"
    fake.reply_tool_calls(TOOL_CALL)
    with setup(tmp_path, fake.base_url) as term:
        term.expect(r"✓ model server at \S+ \(needs an API key\)")
        term.expect(r"\[Y/n\]")
        term.send("y")
        term.expect(r"✗ \S+ needs an API key \(HTTP 401\)")
        term.expect(r"API key \(Enter to choose another endpoint\): ")
        term.send("sk-wrong")
        term.expect(r"✗ \S+ refused the API key \(HTTP 401\)")
        term.expect(r"API key \(Enter to choose another endpoint\): ")
        term.send("sk-right")
        term.expect("lists 2 models")
        term.expect(r"Model \(number or name\)")
        term.send("1")
        term.expect("✓ Tool calling works.")
        skip_telegram(term)
        skip_discord(term)
        skip_slack(term)
        skip_matrix(term)
        assert term.wait() == 0
    assert "sk-wrong" not in term.output  # secrets are typed without echo
    assert dotenv(tmp_path)["LLM_API_KEY"] == "sk-right"
    assert fake.headers[0]["authorization"] == "Bearer sk-right"


def test_model_without_tool_calling_is_warned_about(tmp_path: Path, fake: FakeOpenAIServer) -> None:
    fake.reply_text("It is ten o'clock in Rome.", model="qwen3:14b")
    fake.reply_tool_calls(TOOL_CALL, model="llama3.1:8b")
    with setup(tmp_path, fake.base_url) as term:
        term.expect(r"\[Y/n\]")
        term.send("")
        term.expect(r"Model \(number or name\)")
        term.send("1")
        term.expect(
            "⚠ qwen3:14b answered in text instead of calling the tool it was offered: "
            "chathub's tools"
        )
        term.expect(r"Use qwen3:14b anyway\? \[y/N\]")
        term.send("")
        term.expect(r"Model \(number or name\)")
        term.send("2")
        term.expect("✓ Tool calling works.")
        skip_telegram(term)
        skip_discord(term)
        skip_slack(term)
        skip_matrix(term)
        assert term.wait() == 0
    assert dotenv(tmp_path)["LLM_MODEL"] == "llama3.1:8b"


def test_telegram_token_checked_and_owner_read_from_start(
    tmp_path: Path, fake: FakeOpenAIServer, telegram: FakeTelegramServer
) -> None:
    fake.reply_tool_calls(TOOL_CALL)
    telegram.user_message(chat_id=555, user_id=555, text="/start", username="mallory")
    telegram.fail_next("getMe", status=401, description="Unauthorized")
    extra = ("--telegram-api-url", telegram.base_url, "--owner-wait", "1")
    with setup(tmp_path, fake.base_url, extra=extra) as term:
        term.expect(r"\[Y/n\]")
        term.send("")
        term.expect(r"Model \(number or name\)")
        term.send("1")
        term.expect(r"Bot token \(Enter to skip\): ")
        term.send("not-a-token")
        term.expect(r"✗ that is not a bot token: @BotFather's look like 123456789:AAH")
        term.expect(r"Bot token \(Enter to skip\): ")
        term.send(TOKEN)
        term.expect(r"✗ Telegram does not accept this token \(revoked, or mistyped\)")
        term.expect(r"Bot token \(Enter to skip\): ")
        term.send(TOKEN)
        term.expect("✓ This is @chathub_test_bot.")
        term.expect(r"Now send /start to @chathub_test_bot")
        term.expect("Press Enter once you have sent it")
        term.send("")  # nothing new yet: mallory's /start came before
        term.expect("No /start has arrived yet.")
        telegram.user_message(chat_id=777, user_id=777, text="/start", first_name="Olga")
        term.expect("Press Enter once you have sent it")
        term.send("")
        term.expect(r"Is Olga \(@alice\) \(id 777\) you\? \[Y/n\]")
        term.send("y")
        skip_discord(term)
        skip_slack(term)
        skip_matrix(term)
        term.expect(r"✓ Wrote")
        assert term.wait() == 0
    assert TOKEN not in term.output
    values = dotenv(tmp_path)
    assert values["TELEGRAM_BOT_TOKEN"] == TOKEN
    assert values["TELEGRAM_OWNER_ID"] == "777"
    assert values["TELEGRAM_API_URL"] == telegram.base_url
    assert len(telegram.pending_updates()) == 2  # left for the service: nothing confirmed


def test_discord_token_checked_and_owner_typed(
    tmp_path: Path, fake: FakeOpenAIServer, discord: FakeDiscordServer
) -> None:
    fake.reply_tool_calls(TOOL_CALL)
    extra = ("--discord-api-url", discord.base_url)
    with setup(tmp_path, fake.base_url, extra=extra) as term:
        term.expect(r"\[Y/n\]")
        term.send("")
        term.expect(r"Model \(number or name\)")
        term.send("1")
        skip_telegram(term)
        term.expect(r"Discord bot token \(Enter to skip\): ")
        term.send("Bot " + DISCORD_TOKEN)
        term.expect(r"✗ that is not a Discord bot token: copy it from the developer portal")
        term.expect(r"Discord bot token \(Enter to skip\): ")
        term.send("MTEx.wrong.token")
        term.expect(r"✗ Discord does not accept this bot token \(reset, or mistyped\)\.")
        term.expect(r"Discord bot token \(Enter to skip\): ")
        term.send(DISCORD_TOKEN)
        term.expect("✓ This is chathub-bot.")
        term.expect(
            r"https://discord\.com/oauth2/authorize\?client_id=1100000000000000001"
            r"&scope=bot\+applications\.commands&permissions=70677981924352"
        )
        term.expect(r"Your Discord user id \(Enter to skip\): ")
        term.send("@me")
        term.expect("✗ A Discord user id is a long number")
        term.expect(r"Your Discord user id \(Enter to skip\): ")
        term.send("200000000000000009")
        skip_slack(term)
        skip_matrix(term)
        term.expect(r"✓ Wrote")
        assert term.wait() == 0
    assert DISCORD_TOKEN not in term.output
    values = dotenv(tmp_path)
    assert values["DISCORD_BOT_TOKEN"] == DISCORD_TOKEN
    assert values["DISCORD_OWNER_ID"] == "200000000000000009"
    assert values["DISCORD_API_URL"] == discord.base_url
    assert "TELEGRAM_BOT_TOKEN" not in values
    calls = discord.calls_to("GET /users/@me")
    assert [(c.status, c.authorized) for c in calls] == [(401, False), (200, True)]


def test_ctrl_c_in_the_middle_writes_nothing(tmp_path: Path, fake: FakeOpenAIServer) -> None:
    old = "LLM_MODEL=kept\n"
    (tmp_path / ".env").write_text(old)
    fake.reply_tool_calls(TOOL_CALL)
    with setup(tmp_path, fake.base_url) as term:
        term.expect(r"Keep it\? \[Y/n\]")
        term.send("n")
        term.expect(r"Use model server at \S+\? \[Y/n\]")
        term.send("")
        term.expect(r"Model \(number or name\)")
        term.send("1")
        term.expect(r"Bot token \(Enter to skip\): ")
        term.ctrl_c()
        term.expect("Setup cancelled; nothing was written.")
        assert term.wait() == 130
    assert "Traceback" not in term.output
    assert (tmp_path / ".env").read_text() == old
    assert sorted(p.name for p in tmp_path.iterdir()) == [".env"]


def test_ctrl_c_during_a_network_call_writes_nothing(
    tmp_path: Path, fake: FakeOpenAIServer
) -> None:
    fake.reply_hang()
    with setup(tmp_path, fake.base_url) as term:
        term.expect(r"\[Y/n\]")
        term.send("")
        term.expect(r"Model \(number or name\)")
        term.send("1")
        term.expect("Asking qwen3:14b one question")
        term.ctrl_c()
        term.expect("Setup cancelled; nothing was written.")
        assert term.wait() == 130
    assert "Traceback" not in term.output
    assert not (tmp_path / ".env").exists()


def test_a_read_only_env_is_left_alone(tmp_path: Path) -> None:
    env = tmp_path / ".env"
    env.write_text("LLM_MODEL=mine\n")
    env.chmod(0o444)
    with setup(tmp_path) as term:
        term.expect(r"✗ \S*\.env is read-only; make it writable \(chmod u\+w \S+\)")
        assert term.wait() == 1
    assert "Base URL" not in term.output  # refused before any question
    assert env.read_text() == "LLM_MODEL=mine\n"


def test_envfile_write_failure_is_one_sentence(tmp_path: Path, monkeypatch) -> None:
    from bot.setup import envfile

    def refuse(*_args: object, **_kwargs: object) -> None:
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(envfile.os, "replace", refuse)
    target = EnvFile(tmp_path / ".env")
    with pytest.raises(envfile.EnvFileError, match=r"cannot write .*: Read-only file system$"):
        target.write({"LLM_MODEL": "x"})
    assert list(tmp_path.iterdir()) == []  # the temporary file is gone too


def test_envfile_quotes_what_needs_it(tmp_path: Path) -> None:
    target = EnvFile(tmp_path / ".env")
    target.write({"LLM_API_KEY": 'a b"c\\d', "LLM_MODEL": "qwen3:14b"})
    assert target.values() == {"LLM_API_KEY": 'a b"c\\d', "LLM_MODEL": "qwen3:14b"}
    from bot.settings import Settings

    settings = Settings(_env_file=tmp_path / ".env")  # dotenv reads what we wrote
    assert settings.llm_api_key == 'a b"c\\d'


def test_envfile_reads_and_writes_as_the_service_does(tmp_path: Path) -> None:
    """A quoted value with a comment after it kept its quotes here (setup then probed
    '"https://…"' and wrote it back quoted twice), and a secret holding "${…}" was
    written where the service expands it, in any quotes (found by review)."""
    env = tmp_path / ".env"
    env.write_text('DISCORD_API_URL="https://proxy.example/api/v10"  # through the proxy\n')
    target = EnvFile(env)
    assert target.values()["DISCORD_API_URL"] == "https://proxy.example/api/v10"
    with pytest.raises(EnvFileError, match=r"LLM_API_KEY: its value holds '\$\{'"):
        target.write({"LLM_API_KEY": "pa${HOME}ss"})  # .env would expand it: not written
    target.write({"LLM_API_KEY": "pa$HOME ss", "LLM_BASE_URL": "http://127.0.0.1:9/v1"})
    from bot.settings import Settings

    settings = Settings(_env_file=env)
    assert settings.llm_api_key == "pa$HOME ss"
    assert settings.discord_api_url == "https://proxy.example/api/v10"
    assert target.values()["LLM_API_KEY"] == "pa$HOME ss"


def test_run_without_a_terminal_prints_the_fix(tmp_path: Path) -> None:
    import subprocess

    done = subprocess.run(
        [sys.executable, "-m", "bot.cli", "run"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env_for(tmp_path),
        timeout=30,
    )
    assert done.returncode == 1
    assert "chathub: configuration error: LLM_MODEL: not set" in done.stderr
    assert "To fix it: run `chathub setup` in a terminal" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / ".env").exists()


def test_run_in_a_terminal_sets_up_then_starts_and_talks(
    tmp_path: Path, fake: FakeOpenAIServer
) -> None:
    """From nothing to talking to the agent: ``make run``'s path in a terminal."""
    fake.reply_tool_calls(TOOL_CALL)  # the wizard's check
    fake.reply_text("Hello! How can I help?")  # the first turn
    env = {**env_for(tmp_path), "HTTP_PORT": str(free_port())}
    argv = [sys.executable, "-m", "bot.cli", "run", "--timeout", "3", "--probe", fake.base_url]
    with PtySession(argv, cwd=tmp_path, env=env, timeout_s=30) as term:
        term.expect(r"\[Y/n\]")
        term.send("")
        term.expect(r"Model \(number or name\)")
        term.send("1")
        skip_telegram(term)
        skip_discord(term)
        skip_slack(term)
        skip_matrix(term)
        term.expect("Starting chathub…")
        term.expect("› ")
        term.send("hi")
        term.expect("Hello! How can I help?")
        term.expect("› ")
        term.send("/quit")
        assert term.wait() == 0
    assert dotenv(tmp_path)["LLM_MODEL"] == "qwen3:14b"
    # Every request: after the turn, the memory's fact deriver (on by default) may ask too.
    said = [m["content"] for r in fake.requests for m in r["messages"] if m["role"] == "user"]
    assert any(text.startswith("hi") for text in said), said


def test_run_with_a_model_configured_asks_nothing(tmp_path: Path, fake: FakeOpenAIServer) -> None:
    (tmp_path / ".env").write_text(f"LLM_BASE_URL={fake.base_url}\nLLM_MODEL=qwen3:14b\n")
    env = {**env_for(tmp_path), "HTTP_PORT": str(free_port())}
    with PtySession([sys.executable, "-m", "bot.cli", "run"], cwd=tmp_path, env=env) as term:
        term.expect("› ")
        term.send("/quit")
        assert term.wait() == 0
    assert "chathub setup" not in term.output


def test_an_env_that_is_not_text_is_left_alone(tmp_path: Path) -> None:
    (tmp_path / ".env").write_bytes(b"LLM_MODEL=\xff\xfe\n")
    with setup(tmp_path) as term:
        term.expect(r"✗ \S*\.env is not UTF-8 text; fix or move it first")
        assert term.wait() == 1
    assert "Traceback" not in term.output


def test_setup_without_a_terminal_says_so(tmp_path: Path) -> None:
    import subprocess

    done = subprocess.run(
        [sys.executable, "-m", "bot.cli", "setup"],
        input="http://127.0.0.1:1/v1\n",
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env_for(tmp_path),
        timeout=30,
    )
    assert done.returncode == 1
    assert done.stderr.strip() == (
        "chathub setup asks questions: run it in a terminal, or write .env by hand "
        "(every variable is described in .env.example)"
    )
    assert not (tmp_path / ".env").exists()


# -- in-process: the same wizard with scripted answers (its terminal is a parameter) ----------


class Scripted:
    """Answers in order, each checked against the question it answers."""

    def __init__(self, *steps: tuple[str, str]) -> None:
        self.steps = list(steps)
        self.out = io.StringIO()
        self.terminal = Terminal(read=self._read, read_secret=self._read, out=self.out)

    def _read(self, prompt: str) -> str:
        self.out.write(prompt)
        assert self.steps, f"an unexpected question: {prompt!r}\n{self.out.getvalue()}"
        pattern, answer = self.steps.pop(0)
        assert re.search(pattern, prompt), f"{pattern!r} ≠ {prompt!r}\n{self.out.getvalue()}"
        self.out.write(answer + "\n")
        return answer


def run_wizard(
    home: Path, script: Scripted, *servers: str, environ: dict[str, str] | None = None, **options
) -> str:
    net = Network()
    try:
        status = Wizard(
            script.terminal,
            net,
            SetupOptions(
                env_file=home / ".env",
                servers=tuple(LocalServer(name, url) for name, url in servers),
                timeout_s=options.pop("timeout_s", 3.0),
                probe_timeout_s=options.pop("probe_timeout_s", 1.0),
                **options,
            ),
            environ=environ or {},
        ).run()
    finally:
        net.close()
    transcript = script.out.getvalue()
    assert status == 0, transcript
    assert not script.steps, f"questions not asked: {script.steps}\n{transcript}"
    assert "Traceback" not in transcript
    return transcript


USE_IT = (r"Use model server at \S+\? \[Y/n\]", "")
FIRST_MODEL = (r"Model \(number or name\)", "1")
NO_TELEGRAM = (r"Bot token \(Enter to skip\)", "")
NO_DISCORD = (r"Discord bot token \(Enter to skip\)", "")
NO_SLACK = (r"Slack bot token \(Enter to skip\)", "")
NO_MATRIX = (r"Matrix homeserver URL \(Enter to skip\)", "")


def test_model_without_tool_calling_kept_when_the_person_insists(
    tmp_path: Path, fake: FakeOpenAIServer
) -> None:
    fake.reply_text("No tools here.")
    script = Scripted(
        USE_IT,
        FIRST_MODEL,
        (r"Use qwen3:14b anyway\? \[y/N\]", "y"),
        NO_TELEGRAM,
        NO_DISCORD,
        NO_SLACK,
        NO_MATRIX,
    )
    out = run_wizard(tmp_path, script, ("model server", fake.base_url))
    assert "⚠ qwen3:14b may not call tools; `chathub doctor` checks again." in out
    assert dotenv(tmp_path)["LLM_MODEL"] == "qwen3:14b"


def test_an_endpoint_answering_html_is_refused(
    tmp_path: Path, fake: FakeOpenAIServer, html_site: str
) -> None:
    fake.reply_tool_calls(TOOL_CALL)
    script = Scripted(
        ("Base URL", html_site),
        ("API key", ""),
        ("Base URL", fake.base_url),
        ("API key", ""),
        FIRST_MODEL,
        NO_TELEGRAM,
        NO_DISCORD,
        NO_SLACK,
        NO_MATRIX,
    )
    out = run_wizard(tmp_path, script, ("model server", html_site))
    assert re.search(r"· model server at \S+: something else answers there", out)
    assert re.search(r"✗ \S+ answers with a web page, not the OpenAI API", out)
    assert dotenv(tmp_path)["LLM_BASE_URL"] == fake.base_url


def test_an_endpoint_that_never_answers_times_out(
    tmp_path: Path, fake: FakeOpenAIServer, black_hole: str
) -> None:
    fake.reply_tool_calls(TOOL_CALL)
    script = Scripted(
        ("Base URL", black_hole),
        ("API key", ""),
        ("Base URL", fake.base_url),
        ("API key", ""),
        FIRST_MODEL,
        NO_TELEGRAM,
        NO_DISCORD,
        NO_SLACK,
        NO_MATRIX,
    )
    server = ("model server", black_hole)
    out = run_wizard(tmp_path, script, server, timeout_s=0.5, probe_timeout_s=0.3)
    assert re.search(r"· model server at \S+: nothing there", out)
    assert re.search(r"✗ \S+ did not answer within 0\.5 s", out)


def test_owner_id_typed(
    tmp_path: Path, fake: FakeOpenAIServer, telegram: FakeTelegramServer
) -> None:
    fake.reply_tool_calls(TOOL_CALL)
    script = Scripted(
        USE_IT,
        FIRST_MODEL,
        (r"Bot token", TOKEN),
        ("Press Enter once you have sent it, or type your numeric Telegram id", "@me"),
        ("Press Enter once you have sent it", "4242"),
        NO_DISCORD,
        NO_SLACK,
        NO_MATRIX,
    )
    out = run_wizard(
        tmp_path, script, ("model server", fake.base_url), telegram_api_url=telegram.base_url
    )
    assert "✗ A Telegram user id is a positive number" in out
    assert dotenv(tmp_path)["TELEGRAM_OWNER_ID"] == "4242"


def test_owner_typed_when_a_webhook_blocks_get_updates(
    tmp_path: Path, fake: FakeOpenAIServer, telegram: FakeTelegramServer
) -> None:
    fake.reply_tool_calls(TOOL_CALL)
    telegram.webhook = Webhook(url="https://elsewhere.example.org/hook")
    script = Scripted(
        USE_IT,
        FIRST_MODEL,
        (r"Bot token", TOKEN),
        (r"Your numeric Telegram user id \(Enter to skip\)", "99"),
        NO_DISCORD,
        NO_SLACK,
        NO_MATRIX,
    )
    out = run_wizard(
        tmp_path, script, ("model server", fake.base_url), telegram_api_url=telegram.base_url
    )
    assert "✗ Cannot read the bot's messages (Telegram refused getUpdates: Conflict" in out
    assert dotenv(tmp_path)["TELEGRAM_OWNER_ID"] == "99"


def test_a_variable_in_the_environment_is_pointed_out(
    tmp_path: Path, fake: FakeOpenAIServer
) -> None:
    fake.reply_tool_calls(TOOL_CALL)
    script = Scripted(USE_IT, FIRST_MODEL, NO_TELEGRAM, NO_DISCORD, NO_SLACK, NO_MATRIX)
    out = run_wizard(
        tmp_path, script, ("model server", fake.base_url), environ={"LLM_MODEL": "stale"}
    )
    assert "⚠ LLM_MODEL is also set in the environment, which wins over .env: unset it." in out


def test_several_local_servers_are_offered_by_number(
    tmp_path: Path, fake: FakeOpenAIServer
) -> None:
    fake.reply_tool_calls(TOOL_CALL)
    script = Scripted(
        (r"Which one \[1\]", "7"),
        (r"Which one \[1\]", "2"),
        (r"Model \(number or name\)", "nemo"),
        (r"'nemo' is not in the listing. Use it anyway\? \[y/N\]", "n"),
        FIRST_MODEL,
        NO_TELEGRAM,
        NO_DISCORD,
        NO_SLACK,
        NO_MATRIX,
    )
    out = run_wizard(tmp_path, script, ("Ollama", fake.base_url), ("vLLM", fake.base_url))
    assert re.search(r"1\) Ollama at \S+\n  2\) vLLM at \S+\n  0\) another endpoint", out)
    assert "Please type a number from 0 to 2." in out
    assert dotenv(tmp_path)["LLM_MODEL"] == "qwen3:14b"


def test_a_second_run_keeps_what_env_has(tmp_path: Path, telegram: FakeTelegramServer) -> None:
    old = (
        f"LLM_BASE_URL=http://gpu-box:8000/v1\nLLM_MODEL=qwen3\nTELEGRAM_BOT_TOKEN={TOKEN}\n"
        f"DISCORD_BOT_TOKEN={DISCORD_TOKEN}\n"
    )
    (tmp_path / ".env").write_text(old)
    script = Scripted(
        (r"names the model qwen3 at http://gpu-box:8000/v1\. Keep it\? \[Y/n\]", ""),
        (r"has a Telegram bot token\. Keep it\? \[Y/n\]", "y"),
        (r"has a Discord bot token\. Keep it\? \[Y/n\]", ""),
        NO_SLACK,
        NO_MATRIX,
    )
    out = run_wizard(tmp_path, script)
    assert "Nothing changed; " in out
    assert (tmp_path / ".env").read_text() == old
    assert not list(tmp_path.glob(".env.bak-*"))


def test_a_second_run_changes_only_telegram(tmp_path: Path, telegram: FakeTelegramServer) -> None:
    (tmp_path / ".env").write_text("LLM_MODEL=qwen3\n")
    script = Scripted(
        (r"Keep it\?", "y"),
        (r"Bot token", TOKEN),
        ("Press Enter once you have sent it", "42"),
        NO_DISCORD,
        NO_SLACK,
        NO_MATRIX,
    )
    run_wizard(tmp_path, script, telegram_api_url=telegram.base_url)
    assert dotenv(tmp_path) == {
        "LLM_MODEL": "qwen3",
        "TELEGRAM_BOT_TOKEN": TOKEN,
        "TELEGRAM_OWNER_ID": "42",
        "TELEGRAM_API_URL": telegram.base_url,
    }


def test_a_model_server_on_chathubs_port_moves_chathub(
    tmp_path: Path, fake: FakeOpenAIServer
) -> None:
    """llama.cpp's server and chathub both default to 8080: chathub gets another port."""
    fake.reply_tool_calls(TOOL_CALL)
    taken = fake.base_url.split(":")[2].split("/")[0]
    script = Scripted(USE_IT, FIRST_MODEL, NO_TELEGRAM, NO_DISCORD, NO_SLACK, NO_MATRIX)
    out = run_wizard(
        tmp_path, script, ("model server", fake.base_url), environ={"HTTP_PORT": taken}
    )
    assert f"The model server uses port {taken}, chathub's HTTP port: chathub gets " in out
    moved = dotenv(tmp_path)["HTTP_PORT"]
    assert moved.isdigit() and moved != taken


def test_an_endpoint_without_models_asks_for_a_name(tmp_path: Path, fake: FakeOpenAIServer) -> None:
    fake.models = []
    fake.reply_tool_calls(TOOL_CALL)
    script = Scripted(
        USE_IT,
        ("Model name", ""),
        ("Model name", "qwen3"),
        NO_TELEGRAM,
        NO_DISCORD,
        NO_SLACK,
        NO_MATRIX,
    )
    out = run_wizard(tmp_path, script, ("model server", fake.base_url))
    assert "lists no models (Ollama: `ollama pull qwen3` gets one)" in out
    assert dotenv(tmp_path)["LLM_MODEL"] == "qwen3"


def test_discord_unreachable_is_said_and_may_be_skipped(
    tmp_path: Path, fake: FakeOpenAIServer
) -> None:
    fake.reply_tool_calls(TOOL_CALL)
    script = Scripted(
        USE_IT,
        FIRST_MODEL,
        NO_TELEGRAM,
        (r"Discord bot token", DISCORD_TOKEN),
        NO_DISCORD,
        NO_SLACK,
        NO_MATRIX,
    )
    down = f"http://127.0.0.1:{free_port()}/api/v10"
    out = run_wizard(tmp_path, script, ("model server", fake.base_url), discord_api_url=down)
    assert "✗ Discord cannot be reached from here." in out
    assert "Skipped Discord." in out
    assert "DISCORD_BOT_TOKEN" not in dotenv(tmp_path)


def test_a_second_run_adds_discord_only(tmp_path: Path, discord: FakeDiscordServer) -> None:
    (tmp_path / ".env").write_text("LLM_MODEL=qwen3\n")
    script = Scripted(
        (r"Keep it\?", "y"),
        NO_TELEGRAM,
        (r"Discord bot token", DISCORD_TOKEN),
        (r"Your Discord user id", ""),
        NO_SLACK,
        NO_MATRIX,
    )
    out = run_wizard(tmp_path, script, discord_api_url=discord.base_url)
    assert "✓ This is chathub-bot." in out
    assert dotenv(tmp_path) == {
        "LLM_MODEL": "qwen3",
        "DISCORD_BOT_TOKEN": DISCORD_TOKEN,
        "DISCORD_API_URL": discord.base_url,
    }


def test_slack_tokens_checked_socket_mode_chosen_and_owner_typed(
    tmp_path: Path, fake: FakeOpenAIServer
) -> None:
    fake.reply_tool_calls(TOOL_CALL)
    with FakeSlackServer() as slack:
        extra = ("--slack-api-url", slack.api_url)
        with setup(tmp_path, fake.base_url, extra=extra) as term:
            term.expect(r"\[Y/n\]")
            term.send("")
            term.expect(r"Model \(number or name\)")
            term.send("1")
            skip_telegram(term)
            skip_discord(term)
            term.expect(r"Slack bot token \(Enter to skip\): ")
            term.send(slack.app_token)
            term.expect(r"✗ that is the app-level token \(xapp-\)")
            term.expect(r"Slack bot token \(Enter to skip\): ")
            term.send("xoxb-revoked")
            term.expect(
                r"✗ Slack does not accept this bot token \(invalid_auth\) — reinstall the app to "
                r"the workspace"
            )
            term.expect(r"Slack bot token \(Enter to skip\): ")
            term.send(slack.bot_token)
            term.expect("✓ This is chathub in Fake Team.")
            term.expect(r"Slack app-level token \(Enter for the HTTP Events API\): ")
            term.send("xapp-1-not-the-apps")
            term.expect(r"✗ Slack does not accept this app-level token")
            term.expect(r"Slack app-level token \(Enter for the HTTP Events API\): ")
            term.send(slack.app_token)
            term.expect("✓ Socket Mode answers.")
            term.expect(r"Your Slack member id \(Enter to skip\): ")
            term.send("alice")
            term.expect("✗ A Slack member id looks like U0123ABCD.")
            term.expect(r"Your Slack member id \(Enter to skip\): ")
            term.send("U0OWNER001")
            skip_matrix(term)
            term.expect(r"✓ Wrote")
            assert term.wait() == 0
        assert slack.bot_token not in term.output and slack.app_token not in term.output
        values = dotenv(tmp_path)
        assert values["SLACK_BOT_TOKEN"] == slack.bot_token
        assert values["SLACK_APP_TOKEN"] == slack.app_token
        assert values["SLACK_OWNER_ID"] == "U0OWNER001"
        assert values["SLACK_API_URL"] == slack.api_url
        assert "SLACK_SIGNING_SECRET" not in values


def test_slack_without_socket_mode_asks_for_the_signing_secret(
    tmp_path: Path, fake: FakeOpenAIServer
) -> None:
    fake.reply_tool_calls(TOOL_CALL)
    with FakeSlackServer() as slack:
        extra = ("--slack-api-url", slack.api_url)
        with setup(tmp_path, fake.base_url, extra=extra) as term:
            term.expect(r"\[Y/n\]")
            term.send("")
            term.expect(r"Model \(number or name\)")
            term.send("1")
            skip_telegram(term)
            skip_discord(term)
            term.expect(r"Slack bot token \(Enter to skip\): ")
            term.send(slack.bot_token)
            term.expect(r"Slack app-level token \(Enter for the HTTP Events API\): ")
            term.send("")
            term.expect(r"set the app's Request URL .* to <your public URL>/slack/events")
            term.expect(r"Slack signing secret")
            term.send("")
            term.expect("✗ Without Socket Mode the signing secret is needed")
            term.expect(r"Slack signing secret")
            term.send("s3cret-value")
            term.expect(r"Your Slack member id \(Enter to skip\): ")
            term.send("")
            skip_matrix(term)
            term.expect(r"✓ Wrote")
            assert term.wait() == 0
        values = dotenv(tmp_path)
        assert values["SLACK_SIGNING_SECRET"] == "s3cret-value"
        assert "SLACK_APP_TOKEN" not in values and "SLACK_OWNER_ID" not in values


# -- Slack, in-process -------------------------------------------------------------------


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


KEEP_MODEL = (r"Keep it\?", "y")


def test_a_second_run_adds_slack_in_http_mode(tmp_path: Path, slack: FakeSlackServer) -> None:
    """Socket Mode off: said with its fix; Enter then takes the HTTP Events API."""
    slack.socket_mode_enabled = False
    (tmp_path / ".env").write_text("LLM_MODEL=qwen3\n")
    script = Scripted(
        KEEP_MODEL,
        NO_TELEGRAM,
        NO_DISCORD,
        (r"Slack bot token", "xoxp-a-user-token"),
        (r"Slack bot token", slack.bot_token),
        (r"Slack app-level token", slack.bot_token),
        (r"Slack app-level token", slack.app_token),
        (r"Slack app-level token", ""),
        (r"Slack signing secret", " s3cret "),
        (r"Your Slack member id", "U0OWNER001"),
        NO_MATRIX,
    )
    out = run_wizard(tmp_path, script, slack_api_url=slack.api_url)
    assert "✗ that is not a Slack bot token: it starts with xoxb-" in out
    assert "✓ This is chathub in Fake Team." in out
    assert "✗ that is the bot token (xoxb-): the app-level token starts with xapp-." in out
    assert (
        "✗ Slack refused Socket Mode (socket_mode_disabled): is it turned on for this app? — "
        "turn on Socket Mode in the app settings (Socket Mode → Enable Socket Mode)" in out
    )
    assert "<your public URL>/slack/events" in out
    assert "Keep it unchecked" not in out  # Slack answered: its refusal stands
    assert dotenv(tmp_path) == {
        "LLM_MODEL": "qwen3",
        "SLACK_BOT_TOKEN": slack.bot_token,
        "SLACK_SIGNING_SECRET": "s3cret",
        "SLACK_OWNER_ID": "U0OWNER001",
        "SLACK_API_URL": slack.api_url,
    }
    assert not re.search(r"Error\b|Exception|httpx", out), out


def test_slack_refusals_are_asked_again_with_their_fix(
    tmp_path: Path, slack: FakeSlackServer
) -> None:
    (tmp_path / ".env").write_text("LLM_MODEL=qwen3\n")
    slack.fail_next("auth.test", "account_inactive")
    slack.fail_next("apps.connections.open", "missing_scope")
    script = Scripted(
        KEEP_MODEL,
        NO_TELEGRAM,
        NO_DISCORD,
        (r"Slack bot token", slack.bot_token),
        (r"Slack bot token", slack.bot_token),
        (r"Slack app-level token", slack.app_token),
        (r"Slack app-level token", slack.app_token),
        (r"Your Slack member id", ""),
        NO_MATRIX,
    )
    out = run_wizard(tmp_path, script, slack_api_url=slack.api_url)
    assert (
        "✗ Slack does not accept this bot token (account_inactive) — reinstall the app to the "
        "workspace (the app's Install App page) and copy its Bot User OAuth Token (xoxb-) into "
        "SLACK_BOT_TOKEN" in out
    )
    assert (
        "✗ the app-level token lacks the connections:write scope Socket Mode needs — create an "
        "app-level token with the connections:write scope" in out
    )
    assert "✓ Socket Mode answers." in out
    values = dotenv(tmp_path)
    assert values["SLACK_APP_TOKEN"] == slack.app_token
    assert "SLACK_SIGNING_SECRET" not in values and "SLACK_OWNER_ID" not in values


def test_slack_unreachable_may_be_skipped(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text("LLM_MODEL=qwen3\n")
    script = Scripted(
        KEEP_MODEL,
        NO_TELEGRAM,
        NO_DISCORD,
        (r"Slack bot token", "xoxb-1-2-abc"),
        (r"Slack could not check this bot token\. Keep it unchecked .*\[y/N\]", ""),
        NO_SLACK,
        NO_MATRIX,
    )
    down = f"http://127.0.0.1:{free_port()}/api/"
    out = run_wizard(tmp_path, script, slack_api_url=down)
    assert "✗ Slack cannot be reached from here — check the network and SLACK_API_URL" in out
    assert "Skipped Slack." in out
    assert "Nothing changed; " in out


def test_slack_offline_keeps_the_tokens_unchecked(tmp_path: Path) -> None:
    """No network now (a laptop on a train): the tokens are kept when the person says so,
    and the doctor checks them later."""
    (tmp_path / ".env").write_text("LLM_MODEL=qwen3\n")
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        api_url = f"http://127.0.0.1:{silent.getsockname()[1]}/api/"
        script = Scripted(
            KEEP_MODEL,
            NO_TELEGRAM,
            NO_DISCORD,
            (r"Slack bot token", "xoxb-1-2-abc"),
            (r"Slack could not check this bot token\. Keep it unchecked", "y"),
            (r"Slack app-level token", "xapp-1-A1-2-abc"),
            (r"Slack could not check this app-level token\. Keep it unchecked", "y"),
            (r"Your Slack member id", "U0OWNER001"),
            NO_MATRIX,
        )
        out = run_wizard(tmp_path, script, slack_api_url=api_url, timeout_s=0.5)
    assert out.count("✗ Slack did not answer within 0.5 s — check the network") == 2
    assert dotenv(tmp_path) == {
        "LLM_MODEL": "qwen3",
        "SLACK_BOT_TOKEN": "xoxb-1-2-abc",
        "SLACK_APP_TOKEN": "xapp-1-A1-2-abc",
        "SLACK_OWNER_ID": "U0OWNER001",
        "SLACK_API_URL": api_url,
    }


def test_slack_rate_limited_may_be_kept_unchecked(tmp_path: Path, slack: FakeSlackServer) -> None:
    (tmp_path / ".env").write_text("LLM_MODEL=qwen3\n")
    slack.rate_limit_next("auth.test", retry_after=20)
    script = Scripted(
        KEEP_MODEL,
        NO_TELEGRAM,
        NO_DISCORD,
        (r"Slack bot token", slack.bot_token),
        (r"Keep it unchecked", "n"),
        (r"Slack bot token", slack.bot_token),
        (r"Slack app-level token", slack.app_token),
        (r"Your Slack member id", ""),
        NO_MATRIX,
    )
    out = run_wizard(tmp_path, script, slack_api_url=slack.api_url)
    assert "✗ Slack asks to slow down (HTTP 429) — try again in 20 s" in out
    assert dotenv(tmp_path)["SLACK_BOT_TOKEN"] == slack.bot_token


def test_a_second_run_keeps_slack(tmp_path: Path) -> None:
    old = "LLM_MODEL=qwen3\nSLACK_BOT_TOKEN=xoxb-1-2-abc\nSLACK_APP_TOKEN=xapp-1-A1-2-abc\n"
    (tmp_path / ".env").write_text(old)
    script = Scripted(
        KEEP_MODEL,
        NO_TELEGRAM,
        NO_DISCORD,
        (r"has a Slack bot token\. Keep it\? \[Y/n\]", ""),
        NO_MATRIX,
    )
    out = run_wizard(tmp_path, script)
    assert "Nothing changed; " in out
    assert (tmp_path / ".env").read_text() == old
