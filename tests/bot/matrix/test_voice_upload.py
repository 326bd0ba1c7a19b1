"""Matrix, /voice on: the homeserver drops the connection once while the voice reply's
audio is uploaded (a restart, a proxy reset). A text reply in the same moment is retried
(``call`` turns aiohttp's error into ``MatrixUnavailable``); the voice reply's upload is
awaited outside ``call``, so aiohttp's ``ClientConnectionError`` escapes ``client.send``,
``Outbound._attempt`` takes it for "a payload no client can send (a bug)" and fails the
row for good: neither the voice message nor its text ever arrives."""

from __future__ import annotations

import aiohttp

from tests.bot.delivery.fakes import outbox_rows
from tests.bot.matrix.conftest import bodies, direct_room, joined, until
from tests.fakes.openai_server import FakeOpenAIServer


async def test_a_voice_reply_whose_upload_meets_a_dropped_connection_still_arrives(
    make_service, accounts, fake_openai: FakeOpenAIServer
):
    service = await make_service(speech_model="tts-1", speech_base_url=fake_openai.base_url)
    adapter = service.matrix.adapter  # type: ignore[union-attr]
    room = direct_room(accounts)
    await until(lambda: joined(accounts.alice, room, accounts.bot.user_id))
    accounts.alice.say(room, "/voice on")
    await until(
        lambda: any(
            "voice messages" in b for b in bodies(accounts.alice, room, accounts.bot.user_id)
        )
    )

    nio = adapter.nio
    real_upload, dropped = nio.upload, []

    async def upload_once_dropped(*args, **kwargs):
        if not dropped:  # matrix-nio with max_timeouts=0 raises it as it is
            dropped.append(True)
            raise aiohttp.ServerDisconnectedError()
        return await real_upload(*args, **kwargs)

    nio.upload = upload_once_dropped
    accounts.alice.say(room, "hello aloud")

    def the_reply_arrived() -> bool:
        for event in accounts.alice.messages(room):
            content = event.get("content") or {}
            if event.get("sender") != accounts.bot.user_id:
                continue
            if content.get("msgtype") == "m.audio" or "echo: hello aloud" in content.get(
                "body", ""
            ):
                return True
        return False

    try:
        await until(the_reply_arrived, within_s=12.0)
    except AssertionError:
        rows = await outbox_rows(service.engine.store, "matrix")
        voice_rows = [(r["status"], r["error"]) for r in rows if r["payload"].get("voice")]
        raise AssertionError(
            f"the voice reply never arrived, as voice or text; its outbox row: {voice_rows}"
        ) from None


async def test_a_dropped_upload_is_the_delivery_layers_outage_not_a_bug() -> None:
    """The same, at the client: what ``Outbound`` retries is ``MatrixUnavailable``
    (``call`` turns aiohttp's errors into it); the voice upload raises aiohttp's own."""
    from bot.matrix.sending import MatrixClient, MatrixUnavailable, Rooms
    from bot.platform.voice_out import VOICE

    class Homeserver:
        access_token = "token"

        async def upload(self, *args, **kwargs):
            raise aiohttp.ServerDisconnectedError()

        async def room_send(self, *args, **kwargs):
            raise AssertionError("not reached: the upload failed first")

    async def speak(_text: str) -> bytes:
        return b"OggS" + bytes(64)

    client = MatrixClient(Homeserver(), Rooms(), speak)  # type: ignore[arg-type]
    payload = {
        "content": {"msgtype": "m.text", "body": "echo: hello aloud"},
        "txn": "chathub.t.0",
        VOICE: "echo: hello aloud",
    }
    try:
        await client.send("!room:hs", payload)
    except MatrixUnavailable:
        return  # retried, then postponed: the reply arrives once the homeserver is back
    except Exception as exc:
        raise AssertionError(
            f"the voice reply's upload raised {type(exc).__name__}, which Outbound fails "
            "for good as an unsendable payload (no voice, no text)"
        ) from None
