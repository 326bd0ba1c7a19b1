"""Telegram, on both bindings: a recording the transcription server fails to hear leaves
nothing half-heard behind (no empty rejection reason, no unheard file to the model)."""

from __future__ import annotations

import json

from bot.telegram.rendering.cards import format_callback
from engine.llm.scripted import text, tool_call

# The service over the fake Bot API, as the contract tests run it (their conftest is not
# this folder's): imported fixtures are registered for this module.
from tests.bot.telegram_contract.conftest import (  # noqa: F401
    ALICE,
    eventually,
    find,
    library,
    make_config,
    model,
    start_service,
    texts,
)
from tests.bot.telegram_contract.test_message_kinds import private
from tests.bot.telegram_contract.test_voice import OGG, heard, reply_to, voice  # noqa: F401
from tests.fakes.openai_server import FakeOpenAIServer, ScriptedReply


async def test_a_voice_reason_that_cannot_be_transcribed_leaves_the_reject_window_open(
    heard,  # noqa: F811
    telegram,
    model,  # noqa: F811
    fake_openai: FakeOpenAIServer,
) -> None:
    """After ❌, a voice note as the reason that the server fails to hear (a 5xx) rejected
    the call at once with an empty reason, closing the card: the person could not give
    the reason again (found by review on 2026-12-07). Now the window stays open, and the
    reason typed next is the one the agent reads."""
    model.add(
        tool_call("execute_cmd", json.dumps({"command": "rm -rf data"}), "c1"), text("Understood.")
    )
    telegram.user_message(ALICE, ALICE, "clean up")
    card = await eventually(lambda: find(telegram, ALICE, "Approval needed"))
    call_id = int(card.reply_markup["inline_keyboard"][0][0]["callback_data"].split(":")[1])
    telegram.callback(ALICE, ALICE, card.message_id, format_callback(call_id, "reject"))
    await eventually(lambda: "reason" in (telegram.message(ALICE, card.message_id).text or ""))
    fake_openai.transcription_failures.append(
        ScriptedReply("error", status=500, body=b'{"error": "boom"}')
    )
    telegram.add_file("v1", OGG)
    private(telegram, voice=voice(), reply_to_message=reply_to(card.message_id))
    await eventually(lambda: any("I could not transcribe" in t for t in texts(telegram, ALICE)))

    private(telegram, text="keep the data", reply_to_message=reply_to(card.message_id))
    await eventually(lambda: "Understood." in texts(telegram, ALICE))
    rejected = [m for m in model.requests[-1][0] if m["role"] == "tool"][-1]["content"]
    assert "keep the data" in rejected, (rejected, texts(telegram, ALICE))


async def test_a_video_note_the_server_fails_to_hear_reaches_no_model(
    heard,  # noqa: F811
    telegram,
    model,  # noqa: F811
    fake_openai: FakeOpenAIServer,
) -> None:
    """A video note (recorded like a voice note) whose transcription failed went to the
    model anyway as an unheard file: a turn ran on nothing the person said, and they got
    the warning and an answer to an empty message (found by review on 2026-12-07)."""
    fake_openai.transcription_failures.append(
        ScriptedReply("error", status=503, body=b'{"error": "overloaded"}')
    )
    telegram.add_file("vn1", b"\x00\x00\x00\x18ftypmp42" + bytes(200))
    note = {"file_id": "vn1", "file_unique_id": "vn1u", "duration": 4, "length": 240}
    private(telegram, video_note=note)
    await eventually(lambda: any("I could not transcribe" in t for t in texts(telegram, ALICE)))
    private(telegram, text="ping")  # handled after the video note: its turn (if any) is seen
    await eventually(lambda: any("ping" in t for t in texts(telegram, ALICE)))
    asked = [m["content"] for request in model.requests for m in request[0] if m["role"] == "user"]
    assert asked == ["ping"], (asked, texts(telegram, ALICE))
