"""The ``chathub`` command: ``serve``, ``chat``, ``rules``."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import sys

from bot.rules_cli import add_rules_parser, run_rules_command
from engine.config import AppConfig, ConfigError, load_config, load_settings


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="chathub", description="A self-hosted LLM agent.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO to stderr")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser(
        "serve", help="run the service: HTTP app, Telegram (or the terminal chat), hub"
    )
    commands.add_parser("chat", help="talk to the agent in this terminal")
    add_rules_parser(commands)
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if args.command == "rules":
        try:
            settings = load_settings()
        except ConfigError as exc:
            raise SystemExit(f"chathub: configuration error: {exc}") from None
        raise SystemExit(asyncio.run(run_rules_command(args, settings.database_url)))
    try:
        config = load_config()
        require_model(config)
    except ConfigError as exc:
        raise SystemExit(f"chathub: configuration error: {exc}") from None
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(config) if args.command == "serve" else _chat(config))


def require_model(config: AppConfig) -> None:
    if not config.models:
        raise ConfigError(
            "LLM_MODEL: not set; name the model to use (and LLM_BASE_URL for its endpoint)"
        )


async def _serve(config: AppConfig) -> None:
    from bot.http.app import ApiExposureError
    from bot.serve import serve

    try:
        await serve(config)
    except ApiExposureError as exc:
        raise SystemExit(f"chathub: configuration error: {exc}") from None


async def _chat(config: AppConfig) -> None:
    from bot.terminal import TerminalChat
    from engine.core import Engine

    engine = await Engine.open(config)
    try:
        await TerminalChat(engine).run()
    finally:
        await engine.close()


if __name__ == "__main__":
    main()
