"""The arguments of ``chathub setup`` and ``chathub run`` (the parser every ``chathub``
command builds, so it imports nothing the wizard needs: bot/setup/cli.py runs it)."""

from __future__ import annotations

import argparse
from pathlib import Path

from bot.checks.model import DEFAULT_TIMEOUT_S

__all__ = ["add_setup_parser"]


def add_setup_parser(parser: argparse.ArgumentParser, *, env_file: bool = True) -> None:
    if env_file:
        parser.add_argument("--env-file", type=Path, default=Path(".env"), help="default: ./.env")
    parser.add_argument(
        "--probe",
        action="append",
        metavar="URL",
        help="a model server to look for, URL or NAME=URL (repeatable; replaces the "
        "default list: Ollama :11434, LM Studio :1234, vLLM :8000, llama.cpp :8080)",
    )
    parser.add_argument("--probe-timeout", type=float, default=1.5, help="seconds per local probe")
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        help="seconds for each model, Telegram, Discord and Slack call",
    )
    parser.add_argument("--telegram-api-url", help="Bot API root (default: TELEGRAM_API_URL)")
    parser.add_argument(
        "--discord-api-url", help="Discord REST root with its version (default: DISCORD_API_URL)"
    )
    parser.add_argument("--slack-api-url", help="Slack Web API base (default: SLACK_API_URL)")
    parser.add_argument(
        "--owner-wait", type=int, default=5, help="seconds each look for /start waits"
    )
