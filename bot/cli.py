"""The ``chathub`` command: ``serve``, ``chat``, ``rules``, ``providers``, ``setup``,
``doctor``, ``run``.

``run`` is ``make run``'s: with no model configured and a person at a terminal it runs
the setup wizard first, then serves; without a terminal (Docker, CI, systemd) it stops
with the configuration error and the command that fixes it, as ``serve`` does. ``serve``
itself never asks anything: a service must not wait on a question nobody sees.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import sys

from bot.checks.model import DEFAULT_TIMEOUT_S
from bot.providers_cli import add_providers_parser, run_providers_command
from bot.rules_cli import add_rules_parser, run_rules_command
from bot.settings import load_config, load_settings
from bot.setup.arguments import add_setup_parser
from engine.config import AppConfig, ConfigError


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="chathub", description="A self-hosted LLM agent.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO to stderr")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser(
        "serve", help="run the service: HTTP app, Telegram (or the terminal chat), hub"
    )
    commands.add_parser("chat", help="talk to the agent in this terminal")
    add_rules_parser(commands)
    add_providers_parser(commands)
    add_setup_parser(
        commands.add_parser("setup", help="interactive first-run setup: model, Telegram, .env")
    )
    doctor = commands.add_parser("doctor", help="check every part of the setup, one line each")
    doctor.add_argument(
        "--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="seconds per network check"
    )
    add_setup_parser(
        commands.add_parser(
            "run", help="serve; in a terminal with no model configured, run setup first"
        ),
        env_file=False,  # serve reads ./.env: setup must write that one
    )
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    # matrix-nio logs every room event it sees at INFO: -v would be Matrix's event log
    logging.getLogger("nio").setLevel(logging.WARNING)
    if args.command in ("rules", "providers"):
        try:
            settings = load_settings()
        except ConfigError as exc:
            raise SystemExit(f"chathub: configuration error: {exc}") from None
        run = run_rules_command if args.command == "rules" else run_providers_command
        try:
            status = asyncio.run(run(args, settings.database_url))
        except ConfigError as exc:  # the database cannot be opened
            raise SystemExit(f"chathub: configuration error: {exc}") from None
        raise SystemExit(status)
    if args.command == "setup":
        if not interactive():  # questions nobody sees would wait forever, or read a pipe
            raise SystemExit(
                "chathub setup asks questions: run it in a terminal, or write .env by hand "
                "(every variable is described in .env.example)"
            )
        from bot.setup.cli import run_setup, setup_options

        raise SystemExit(run_setup(setup_options(args), then=NEXT_COMMAND))
    if args.command == "doctor":
        from bot.doctor import run_doctor

        raise SystemExit(run_doctor(load_config, args.timeout))
    if args.command == "run" and needs_setup() and interactive():
        from bot.setup.cli import run_setup, setup_options

        status = run_setup(setup_options(args), then="Starting chathub…")
        if status:
            raise SystemExit(status)
    try:
        config = load_config()
        require_model(config)
    except ConfigError as exc:
        raise SystemExit(f"chathub: configuration error: {exc}{_fix_hint(exc)}") from None
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_chat(config) if args.command == "chat" else _serve(config))


NEXT_COMMAND = "Next: `make run` (or `.venv/bin/chathub serve`); `chathub doctor` checks it all."
_NO_MODEL = "LLM_MODEL: not set"


def _fix_hint(exc: ConfigError) -> str:
    """The command that fixes a missing model, on a line of its own."""
    if str(exc).startswith(_NO_MODEL):
        return (
            "\nTo fix it: run `chathub setup` in a terminal (in a clone: "
            "`.venv/bin/chathub setup`, or `make run`), or set LLM_MODEL and LLM_BASE_URL "
            "in .env or the environment."
        )
    return ""


def needs_setup() -> bool:
    """No model configured, and nothing else wrong (another mistake is reported as it is)."""
    try:
        return not load_config().models
    except ConfigError:
        return False


def interactive() -> bool:
    return sys.stdin.isatty() and sys.stdout.isatty()


def require_model(config: AppConfig) -> None:
    if not config.models:
        raise ConfigError(f"{_NO_MODEL}; name the model to use (and LLM_BASE_URL for its endpoint)")


async def _serve(config: AppConfig) -> None:
    from bot.checks.exposure import ApiExposureError
    from bot.fleet.bot_identity import OtherBot
    from bot.fleet.settings import FleetNeedsPostgres
    from bot.fleet.single_sqlite import SqliteInUse
    from bot.serve import serve

    try:
        await serve(config)
    except (ApiExposureError, FleetNeedsPostgres, ConfigError) as exc:
        # A setting refused as the service starts (a Slack without its secret, a
        # workspace that is a file, a database that cannot be opened): one sentence, as
        # one refused as it is read (until 2026-12-07 a traceback; found by review).
        raise SystemExit(f"chathub: configuration error: {exc}") from None
    except (SqliteInUse, OtherBot) as exc:  # a sentence each, naming no secret
        raise SystemExit(f"chathub: {exc}") from None


async def _chat(config: AppConfig) -> None:
    from bot.fleet.single_sqlite import SqliteInUse, hold_console_lock
    from bot.serve import open_engine, open_memory
    from bot.terminal import SOURCE, TerminalChat, console_interrupted, log_to_file
    from engine.hub import ChatHub

    try:
        lock = hold_console_lock(config.settings.database_url)
    except SqliteInUse as exc:
        raise SystemExit(f"chathub: {exc}") from None
    except ConfigError as exc:
        raise SystemExit(f"chathub: configuration error: {exc}") from None
    print(f"chathub: the log is in {log_to_file()}", file=sys.stderr, flush=True)
    try:
        engine = await open_engine(config)
    except ConfigError as exc:
        if lock is not None:
            lock.close()
        raise SystemExit(f"chathub: configuration error: {exc}") from None
    hub = ChatHub(engine, config.hub, recover_prefix=SOURCE)
    events = hub.events(SOURCE)  # before the hub resumes an interrupted turn
    memory = None
    try:
        # Its memory, full text alone (until 2026-12-07 none: /memory said it was switched
        # off, and /forget_me deleted nothing; found by review).
        if config.settings.memory_enabled:
            memory = await open_memory(engine, hub, config.settings)
        resuming = await console_interrupted(engine)
        await hub.start()
        await TerminalChat(hub, events, resuming=resuming, memory=memory).run()
    finally:
        await hub.close()
        if memory is not None:
            await memory.close()
        await engine.close()
        if lock is not None:
            lock.close()


if __name__ == "__main__":
    main()
