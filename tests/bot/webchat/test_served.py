"""The web chat in ``chathub serve`` as it runs: a process, its HTTP port, a real socket.

Also a ``kill -9`` in the middle of a turn: after the restart a new socket finds the turn
running again with its card, approves it, and the turn finishes once.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from typing import Any

import httpx
from websockets.asyncio.client import connect

from tests.bot.process import free_port, until_up
from tests.fakes.ogg import opus_silence
from tests.fakes.openai_server import FakeOpenAIServer

TOKEN = "served-webchat-token-0123456789"
BEARER = {"Authorization": f"Bearer {TOKEN}"}
GUARD_S = 30.0  # against a hang, never a timing assertion


async def _until(connection: Any, kind: str) -> list[dict[str, Any]]:
    frames = []
    while True:
        frame = json.loads(await asyncio.wait_for(connection.recv(), GUARD_S))
        frames.append(frame)
        if frame["type"] == kind:
            return frames


async def test_a_conversation_through_the_served_app_survives_kill_9(
    serve, fake_openai: FakeOpenAIServer, tmp_path
):
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = {"HTTP_PORT": str(port), "CHATHUB_API_TOKEN": TOKEN}
    child = serve(**env)
    await asyncio.wait_for(until_up(base, child), GUARD_S)
    async with httpx.AsyncClient(base_url=base, headers=BEARER) as http:
        created = (await http.post("/chat/conversations", json={"title": "served"})).json()
        # The served chat's 405 names every method of its path, as the rest of the app's
        # (until 2026-12-07 this one said "GET, HEAD"; found by review).
        refused = await http.put("/chat/conversations")
        assert refused.status_code == 405
        assert set(refused.headers["allow"].split(", ")) == {"GET", "HEAD", "POST"}
    url = f"ws://127.0.0.1:{port}/ws/chat?conversation={created['id']}"

    fake_openai.reply_text("Hello over the socket.")
    fake_openai.reply_tool_calls(("w1", "write_file", {"path": "once.txt", "content": "1\n"}))
    fake_openai.reply_text("Wrote it once.")
    async with connect(url, additional_headers=BEARER) as ws:
        await _until(ws, "turn_running")
        await ws.send(json.dumps({"type": "message", "text": "hi"}))
        assert (await _until(ws, "done"))[-1]["content"] == "Hello over the socket."
        await ws.send(json.dumps({"type": "message", "text": "write once.txt"}))
        await _until(ws, "approval_required")
    os.kill(child.pid, signal.SIGKILL)
    child.wait(timeout=GUARD_S)

    child = serve(**env)  # the hub resumes the interrupted turn: the card is asked again
    await asyncio.wait_for(until_up(base, child), GUARD_S)
    async with connect(url, additional_headers=BEARER) as ws:
        frames = await _until(ws, "turn_running")
        await ws.send(json.dumps({"type": "resume"}))  # what the page sends: harmless here
        card = (
            next((f for f in frames if f["type"] == "approval_required"), None)
            or (await _until(ws, "approval_required"))[-1]
        )
        await ws.send(json.dumps({"type": "approve_tool", "tool_call_id": card["tool_call_id"]}))
        done = await _until(ws, "done")
    assert done[-1]["content"] == "Wrote it once."
    assert (tmp_path / "workspace" / "once.txt").read_text() == "1\n"
    async with httpx.AsyncClient(base_url=base, headers=BEARER) as http:
        history = (await http.get(f"/chat/conversations/{created['id']}/messages")).json()
    answers = [m["text"] for m in history["messages"] if m["role"] == "assistant" and m["text"]]
    assert answers == ["Hello over the socket.", "Wrote it once."]


async def test_an_attachment_through_the_served_app(serve, fake_openai: FakeOpenAIServer, tmp_path):
    """The upload route and the socket as ``chathub serve`` wires them: the file lands in
    the service's workspace and the model is told its path."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    child = serve(HTTP_PORT=str(port), CHATHUB_API_TOKEN=TOKEN)
    await asyncio.wait_for(until_up(base, child), GUARD_S)
    async with httpx.AsyncClient(base_url=base, headers=BEARER) as http:
        created = (await http.post("/chat/conversations", json={})).json()
        uploaded = await http.post(
            f"/chat/conversations/{created['id']}/files",
            params={"name": "../plan.md"},
            content=b"# plan\n",
            headers={"content-type": "application/octet-stream"},
        )
    assert uploaded.status_code == 201, uploaded.text
    path = f"uploads/web/{created['id']}/{uploaded.json()['id']}"
    assert (tmp_path / "workspace" / path).read_bytes() == b"# plan\n"
    fake_openai.reply_text("Read the plan.")
    url = f"ws://127.0.0.1:{port}/ws/chat?conversation={created['id']}"
    async with connect(url, additional_headers=BEARER) as ws:
        hello = (await _until(ws, "hello"))[-1]
        assert hello["limits"]["max_upload_bytes"] == 20 * 1024 * 1024
        await _until(ws, "turn_running")
        frame = {"type": "message", "text": "", "attachments": [uploaded.json()["id"]]}
        await ws.send(json.dumps(frame))
        frames = await _until(ws, "done")
    shown = next(f for f in frames if f["type"] == "user_message")
    assert [a["path"] for a in shown["attachments"]] == [path]
    asked = [m for m in fake_openai.requests[-1]["messages"] if m["role"] == "user"][-1]
    assert f"- {path} (" in asked["content"] and ", 7)" in asked["content"]


async def test_a_voice_note_through_the_served_app_is_heard(
    serve, fake_openai: FakeOpenAIServer, tmp_path
):
    """``chathub serve`` gives the web chat the platforms' voice notes: with
    ``TRANSCRIBE_MODEL`` set the page's recording is heard and answered."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    child = serve(HTTP_PORT=str(port), CHATHUB_API_TOKEN=TOKEN, TRANSCRIBE_MODEL="whisper-1")
    await asyncio.wait_for(until_up(base, child), GUARD_S)
    async with httpx.AsyncClient(base_url=base, headers=BEARER) as http:
        created = (await http.post("/chat/conversations", json={})).json()
        uploaded = await http.post(
            f"/chat/conversations/{created['id']}/files",
            params={"name": "voice.ogg", "voice": "1", "seconds": "0.5"},
            content=opus_silence(),
            headers={"content-type": "application/octet-stream"},
        )
    assert uploaded.status_code == 201, uploaded.text
    fake_openai.transcribe("what is the weather")
    fake_openai.reply_text("Sunny.")
    url = f"ws://127.0.0.1:{port}/ws/chat?conversation={created['id']}"
    async with connect(url, additional_headers=BEARER) as ws:
        await _until(ws, "turn_running")
        frame = {"type": "message", "text": "", "attachments": [uploaded.json()["id"]]}
        await ws.send(json.dumps(frame))
        frames = await _until(ws, "done")
    assert any("what is the weather" in f.get("text", "") for f in frames if f["type"] == "notice")
    assert frames[-1]["content"] == "Sunny."
    asked = [m for m in fake_openai.requests[-1]["messages"] if m["role"] == "user"][-1]
    assert "what is the weather" in json.dumps(asked)
