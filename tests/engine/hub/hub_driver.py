"""A tiny ChatHub process for crash tests: ``python -m tests.engine.hub.hub_driver``.

Configured by the environment like the bot (``DATABASE_URL``, ``LLM_BASE_URL``,
``LLM_MODEL``, ``CHATHUB_WORKSPACE``, ...; see ``engine.config.load_config``). Tools never
ask for approval (``AllowAll``).

Protocol, one line each, flushed at once:

* stdin: ``<source>\\t<text>``; the message is sent with ``ChatHub.send_message``.
* stdout: ``QUEUED <queued_id>`` once ``send_message`` returned (the message is durable),
  ``DONE <source> <content>`` and ``ERROR <source> <message>`` for every ``Done`` and
  ``Error`` event of any source, ``LAGGED <n>`` if the printer fell behind the bus, and
  ``READY`` once ``hub.start()`` returned (recovery has been scheduled). Newlines inside a
  content or message are written as ``\\n``.

On stdin EOF the driver keeps running until it is killed, so the test decides when it
ends (turns in flight keep going). With ``HUB_DRIVER_EXIT_ON_EOF=1`` it closes the hub
and the engine at EOF instead and exits 0 (turns still in flight are left to be resumed
at the next start).
"""

from __future__ import annotations

import asyncio
import os
import sys

from engine.bus.broadcast import Lagged
from engine.config import load_config
from engine.core import Engine
from engine.hub import ChatHub, HubError, SourceEvents
from engine.session.events import Done, Error
from engine.session.turn.gate import AllowAll


def _say(line: str) -> None:
    sys.stdout.write(line.replace("\n", "\\n") + "\n")
    sys.stdout.flush()


async def _print_events(events: SourceEvents) -> None:
    async for item in events:
        if isinstance(item, Lagged):
            _say(f"LAGGED {item.missed}")
        elif isinstance(item.event, Done):
            _say(f"DONE {item.source} {item.event.content}")
        elif isinstance(item.event, Error):
            _say(f"ERROR {item.source} {item.event.message}")


async def main() -> None:
    config = load_config()
    engine = await Engine.open(config, policy=AllowAll())
    hub = ChatHub(engine, config.hub)
    printer = asyncio.create_task(_print_events(hub.events()))  # before any turn runs
    await hub.start()
    _say("READY")
    loop = asyncio.get_running_loop()
    while line := await loop.run_in_executor(None, sys.stdin.readline):
        source, sep, text = line.rstrip("\n").partition("\t")
        if not sep:
            _say(f"ERROR - malformed input line {line!r}; expected '<source>\\t<text>'")
            continue
        try:
            queued_id = await hub.send_message(source, text)
        except HubError as exc:  # refused: nothing was stored
            _say(f"ERROR {source} {exc}")
            continue
        _say(f"QUEUED {queued_id}")
    if os.environ.get("HUB_DRIVER_EXIT_ON_EOF") == "1":
        await hub.close()
        printer.cancel()
        await engine.close()
        return
    await asyncio.Event().wait()  # until killed


if __name__ == "__main__":
    asyncio.run(main())
