"""Voice end to end on Telegram: what hearing a voice note adds over a text message, and
how soon a provider added while the service runs transcribes.

The service runs here (python-telegram-bot binding, unpaced, a zero-latency echo model)
against the fake Bot API and the fake OpenAI-compatible server (real HTTP on 127.0.0.1;
its transcription answers at once), SQLite in a temporary directory.

- text: a message pushed → its answer's ``sendMessage`` (the fake's clock);
- voice: a voice note (6 KB of OGG) pushed → its answer's ``sendMessage`` (after
  ``getFile``, the download, the upload to ``/v1/audio/transcriptions``, the 🎤 line);
- the difference at p50 and p99 is what the voice path adds;
- a provider added while the service runs: by ``chathub providers add`` (another
  process's change, noticed by the registry's watch, every 2 s by default) and through
  ``POST /api/providers`` (this process: announced on the bus at once) → the first
  transcription request that reaches it.

    .venv/bin/python -P bench/voice_e2e.py [--messages 100]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bot.delivery import Pacing  # noqa: E402
from bot.serve import Service, freeze_startup_objects  # noqa: E402
from bot.telegram.bindings.factory import make_bot_api  # noqa: E402
from engine.llm import ModelRegistry  # noqa: E402
from providers import Provider, ProviderStore  # noqa: E402
from tests.bot.telegram_contract.conftest import ALICE, TOKEN, app_config  # noqa: E402
from tests.engine.hub.conftest import EchoModel  # noqa: E402
from tests.fakes.openai_server import FakeOpenAIServer  # noqa: E402
from tests.fakes.telegram_server import FakeTelegramServer  # noqa: E402
from tests.pg import migrated_sqlite  # noqa: E402

OGG = b"OggS" + bytes(6000)
_IDS = itertools.count(1000)


def push(telegram: FakeTelegramServer, **content: Any) -> float:
    message = {
        "message_id": next(_IDS),
        "from": {"id": ALICE, "is_bot": False, "first_name": "Alice"},
        "chat": {"id": ALICE, "type": "private", "first_name": "Alice"},
        "date": int(time.time()),
        **content,
    }
    started = time.monotonic()
    telegram.push_update({"message": message})
    return started


async def answered(telegram: FakeTelegramServer, since: float, start: str) -> float:
    """When the first ``sendMessage`` starting with ``start`` reached the fake."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for call in telegram.calls_to("sendMessage"):
            if call.time >= since and str(call.params.get("text", "")).startswith(start):
                return call.time
        await asyncio.sleep(0.001)
    raise AssertionError(f"no answer starting {start!r}")


async def latencies(telegram, fake_openai, n: int) -> tuple[list[float], list[float]]:
    text_ms, voice_ms = [], []
    for i in range(n):
        started = push(telegram, text=f"text {i}")
        text_ms.append((await answered(telegram, started, f"echo: text {i}") - started) * 1000)
        file_id = f"v{i}"
        telegram.add_file(file_id, OGG)
        fake_openai.transcribe(f"voice {i}")
        note = {"file_id": file_id, "file_unique_id": f"{file_id}u", "duration": 2}
        started = push(telegram, voice=note)
        voice_ms.append((await answered(telegram, started, f"echo: voice {i}") - started) * 1000)
    return text_ms, voice_ms


async def first_use(telegram, fake_openai, add: Any, name: str) -> float:
    """Seconds from ``add()`` to the first transcription request that reaches it."""
    before = len(fake_openai.transcription_requests)
    added = time.monotonic()
    await add()
    while len(fake_openai.transcription_requests) == before:
        file_id = f"p{next(_IDS)}"
        telegram.add_file(file_id, OGG)
        push(telegram, voice={"file_id": file_id, "file_unique_id": f"{file_id}u"})
        await asyncio.sleep(0.05)
    return time.monotonic() - added


def summary(name: str, values: list[float]) -> str:
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return f"{name:24} p50 {statistics.median(ordered):7.2f} ms  p99 {p99:7.2f} ms"


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=100)
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory() as tmp,
        FakeTelegramServer() as telegram,
        FakeOpenAIServer() as fake_openai,
    ):
        url = migrated_sqlite(Path(tmp) / "bench.db")
        common = {
            "telegram_bot_token": TOKEN,
            "telegram_api_url": telegram.base_url,
            "telegram_allowed_user_ids": str(ALICE),
            "memory_enabled": False,
        }
        config = app_config(
            url,
            Path(tmp) / "ws",
            transcribe_model="whisper-1",
            transcribe_base_url=fake_openai.base_url,
            **common,
        )
        service = Service(
            config,
            models=ModelRegistry([EchoModel(name="zero")]),
            api=make_bot_api("ptb", TOKEN, telegram.base_url),
            pacing=Pacing.unpaced(),
            http=False,
        )
        await service.start()
        freeze_startup_objects()
        await latencies(telegram, fake_openai, 5)  # warm-up
        text_ms, voice_ms = await latencies(telegram, fake_openai, args.messages)
        await service.stop()

        # A provider added while a service without transcription runs.
        config = app_config(url, Path(tmp) / "ws", **common)
        service = Service(
            config,
            models=ModelRegistry([EchoModel(name="zero")]),
            api=make_bot_api("ptb", TOKEN, telegram.base_url),
            pacing=Pacing.unpaced(),
            http=False,
        )
        await service.start()
        assert service.providers is not None
        assert service.engine is not None
        shell = ProviderStore(service.engine.store.db)  # its own store, as the CLI's

        def provider(name: str) -> Provider:
            return Provider.checked(name, fake_openai.base_url, "", "transcription", "whisper-1")

        async def by_shell() -> None:  # as `chathub providers add` writes it
            await shell.add(provider("shell"))

        async def by_api() -> None:  # as POST /api/providers does
            await service.providers.add(provider("api"))

        from_shell = await first_use(telegram, fake_openai, by_shell, "shell")
        await service.providers.remove("shell")
        from_api = await first_use(telegram, fake_openai, by_api, "api")
        await service.stop()

    print(f"Telegram, {args.messages} messages each, zero-latency fakes (ptb, unpaced)")
    print(summary("text -> answer", text_ms))
    print(summary("voice note -> answer", voice_ms))
    added = [v - t for v, t in zip(sorted(voice_ms), sorted(text_ms), strict=True)]
    print(summary("added by the voice path", added))
    print("provider added while running -> its first transcription:")
    print(f"  chathub providers add (watched every 2 s)  {from_shell:6.2f} s")
    print(f"  POST /api/providers (on the bus at once)   {from_api:6.2f} s")


if __name__ == "__main__":
    asyncio.run(main())
