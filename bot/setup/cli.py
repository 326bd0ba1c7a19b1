"""The arguments of ``chathub setup`` (and ``chathub run``, which may run it) and the
runner that gives the wizard its terminal and HTTP client."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from bot.checks.discovery import DEFAULT_SERVERS, LocalServer
from bot.checks.model import normalize_base_url
from bot.checks.result import Problem
from bot.setup.terminal import Cancelled, Terminal
from bot.setup.wizard import Network, SetupOptions, Wizard

__all__ = ["run_setup", "setup_options"]

log = logging.getLogger(__name__)


def setup_options(args: argparse.Namespace) -> SetupOptions:
    servers = DEFAULT_SERVERS
    if args.probe:
        try:
            servers = tuple(_server(text) for text in args.probe)
        except Problem as problem:
            raise SystemExit(f"chathub: --probe: {problem}") from None
    return SetupOptions(
        env_file=getattr(args, "env_file", Path(".env")),
        servers=servers,
        probe_timeout_s=args.probe_timeout,
        timeout_s=args.timeout,
        telegram_api_url=args.telegram_api_url,
        owner_wait_s=args.owner_wait,
        discord_api_url=args.discord_api_url,
        slack_api_url=args.slack_api_url,
    )


def _server(text: str) -> LocalServer:
    name, _, url = text.partition("=") if "=" in text.split("://")[0] else ("", "", text)
    return LocalServer(name or "model server", normalize_base_url(url))


def run_setup(options: SetupOptions, *, then: str) -> int:
    """The wizard on this terminal; ``then`` is printed after a successful write."""

    net = Network()
    try:
        status = Wizard(Terminal(), net, options).run()
    except (Cancelled, KeyboardInterrupt):
        print("\nSetup cancelled; nothing was written.", flush=True)
        return 130
    finally:
        net.close()
    if status == 0:
        print(then, flush=True)
    return status
