"""Telegram, /voice on: a turn fails, and its notice ("Sorry, your message could not be
processed (error 3fa2b1). Please try again.") is prepared like an answer
(``Outbox.failure_unit`` -> ``RowSender.prepare``): read aloud, with no text. The error
id is there to be quoted to the owner (bot/platform/failures.py: "they can quote it, and
the log line with the traceback is found by it"); heard once, it is neither readable nor
copyable, and the chat shows only a voice message where the failure should be."""

from __future__ import annotations

import re

from tests.bot.telegram_contract.conftest import ALICE, eventually, texts
from tests.bot.telegram_contract.test_message_kinds import private
from tests.fakes.openai_server import FakeOpenAIServer

ERROR_ID = re.compile(r"\(error ([0-9a-f]{6})\)")


async def test_a_failed_turns_notice_comes_as_text_in_a_voice_chat(
    start_service, telegram, model, fake_openai: FakeOpenAIServer
):
    await start_service(speech_model="tts-1", speech_base_url=fake_openai.base_url)
    private(telegram, text="/voice on")
    await eventually(lambda: any("now come as voice messages" in t for t in texts(telegram, ALICE)))

    def broken(_messages):
        raise RuntimeError("a bug nobody should hear")

    model.add(broken)
    private(telegram, text="do something")

    def told() -> bool:
        spoken = [r["input"] for r in fake_openai.speech_requests]
        return any(ERROR_ID.search(t) for t in texts(telegram, ALICE) + spoken)

    await eventually(told, within_s=10.0)
    spoken = [r["input"] for r in fake_openai.speech_requests if ERROR_ID.search(r["input"])]
    written = [t for t in texts(telegram, ALICE) if ERROR_ID.search(t)]
    assert written, (
        f"the failure notice came only as a voice message (spoken: {spoken}); "
        "its error id is nowhere to read"
    )
