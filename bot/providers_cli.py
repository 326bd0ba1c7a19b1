"""``chathub providers add|list|remove|test``: the API provider registry from the shell.

A change made here is in the database at once; a running ``chathub serve`` notices it
within seconds (``ProviderRegistry.watch``) and its consumers reload without a restart.
A key is read from ``--key-env`` (the name of a variable holding it) or typed at a
prompt that does not echo, never from the command line, where the shell's history and
``ps`` would keep it.
"""

from __future__ import annotations

import argparse
import getpass
import os
import sys
from typing import Any, TextIO

import httpx

from bot.schema import LAYERS
from engine.store import open_database
from providers import SERVICES, Provider, ProviderError, ProviderStore, probe

__all__ = ["add_providers_parser", "run_providers_command"]


def add_providers_parser(subparsers: Any) -> argparse.ArgumentParser:
    providers = subparsers.add_parser(
        "providers", help="add, list, remove or test API providers (docs/voice.md)"
    )
    actions = providers.add_subparsers(dest="providers_command", required=True)
    actions.add_parser("list", help="the providers (keys masked)")
    add = actions.add_parser("add", help="add a provider")
    add.add_argument("name", help="its name, e.g. groq")
    add.add_argument("--base-url", required=True, help="OpenAI-compatible, up to /v1")
    add.add_argument("--serves", required=True, help=f"comma-separated: {', '.join(SERVICES)}")
    add.add_argument("--models", default="", help="comma-separated model names")
    add.add_argument("--key-env", help="a variable holding its key (else asked; Enter: none)")
    remove = actions.add_parser("remove", help="remove a provider")
    remove.add_argument("name")
    test = actions.add_parser("test", help="ask a provider for its models")
    test.add_argument("name")
    return providers


def _shown(provider: Provider) -> str:
    shown = provider.shown()
    models = ", ".join(provider.models) or "-"
    return (
        f"{provider.name}  {provider.base_url}  serves {', '.join(provider.serves)}  "
        f"models {models}  key {shown['key']}"
    )


async def run_providers_command(
    args: argparse.Namespace,
    database_url: str,
    *,
    out: TextIO | None = None,
    err: TextIO | None = None,
    read_key: Any = None,
) -> int:
    """One sub-command; 0 on success, 1 when a test fails, 2 for refused input."""
    out, err = out or sys.stdout, err or sys.stderr
    command = args.providers_command
    db = await open_database(database_url, LAYERS)
    try:
        store = ProviderStore(db)
        if command == "list":
            listed = await store.all()
            print("\n".join(_shown(p) for p in listed) or "No providers.", file=out)
            return 0
        if command == "add":
            if args.key_env:
                key = os.environ.get(args.key_env)
                if key is None:
                    print(f"chathub: {args.key_env} is not set", file=err)
                    return 2
            else:
                try:
                    key = (read_key or getpass.getpass)("API key (Enter: none): ")
                except (EOFError, KeyboardInterrupt):  # Ctrl-D, Ctrl-C (a traceback before)
                    print("\ncancelled; nothing was added", file=err)
                    return 130
            try:
                provider = Provider.checked(args.name, args.base_url, key, args.serves, args.models)
                await store.add(provider)
            except ProviderError as exc:
                print(f"chathub: {exc}", file=err)
                return 2
            print(f"Added {_shown(provider)}", file=out)
            note = provider.unlisted_note()
            if note is not None:
                print(f"Note: {provider.name} {note}", file=out)
            return 0
        provider = await store.get(args.name)
        if provider is None:
            print(f"chathub: no provider named {args.name!r} (chathub providers list)", file=err)
            return 2
        if command == "remove":
            await store.remove(provider.name)
            print(f"Removed {provider.name}.", file=out)
            return 0
        async with httpx.AsyncClient() as http:
            try:
                print(await probe(http, provider), file=out)
            except ProviderError as exc:
                print(f"✗ {exc}", file=out)
                return 1
        return 0
    finally:
        await db.close()
